"""What is scored: the models an evaluation calls. `encoders/` holds the text and image encoders of
3XCM and of the bias audit (open_clip, transformers, sentence-transformers, precomputed embeddings); `vlm/` the
vision-language models asked MixCuBe's questions (an OpenAI-compatible endpoint, Gemini, transformers), with their
answer cache and HTTP limits; `embedding_cache.py` the per-model image-vector cache keyed by the sha256 of each
image's bytes; `vectors.py` what makes a vector scorable by cosine.

Belongs here: turning a release's images and texts into vectors or answers, and each backend's config. Not here:
what is done with them (the tasks and metrics: `evaluation/xcm/`, `evaluation/mixcube/`), the tiny random demo
models (`demo/models.py`), and the shared API clients, retries and weights checks (`data/clients/`)."""
