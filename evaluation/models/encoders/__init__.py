"""The models a 3XCM evaluation scores: text and image embeddings for text-to-image retrieval (3XCM paper §3.2).

A backend turns the release's images and query texts into vectors; `evaluation.xcm.metrics` does the rest (it
normalises). Four backends, one file each, and one discriminated union of their configs (`EncoderConfig`):

- `open_clip` (`open_clip.py`): CLIP, the multilingual XLM-R CLIPs and SigLIP through open_clip (`encode_image` /
  `encode_text`).
- `transformers` (`transformers.py`): a Hugging Face dual encoder with `get_image_features` / `get_text_features`
  (CLIP, Chinese-CLIP).
- `sentence-transformers` (`sentence_transformers.py`): an image model and a text model with the same output space
  (clip-ViT-B-32 with clip-ViT-B-32-multilingual-v1).
- `embeddings` (`embeddings.py`): vectors computed elsewhere, read from two Parquet files; nothing runs. Files that
  name the model that made them (their `culturebench.model` metadata, as the mteb export's runner writes) give an
  identity naming that model (`vectors_from`).

The interface they implement and what they share is `base.py`. Callers never test a backend's name: a built
encoder declares what it needs (`runs_locally`: a model runs here and holds the `gpu` slot; `needs_image_bytes`:
it reads the images' bytes, so they are read from the release and its vectors are worth caching).

Rules shared with `curation/image_embeddings.py`, whose open_clip checks are reused: weights are explicit (never a
random fallback), a missing file fails at `build()` with the field named, `precision="fp16"` applies on CUDA only
(CPU falls back to fp32 with a logged warning) and `device="cuda"` without a GPU is an error. Vectors are float32
and are what the model's feature method returns (unnormalised). Images are decoded with PIL, turned upright by
their EXIF orientation and converted to RGB, as the `datasets` Image feature that the authors' evaluator loads the
benchmark with does.

Every encoder carries a `ModelIdentity`: the results card records it, and `embedding_cache` keys its folders by it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from data.clients.model_ids import MODEL_ID_PATTERN, folder_sha256, slug
from evaluation.models.encoders.base import (
    STAGE,
    ImageRef,
    ModelIdentity,
    TextImageEncoder,
    VectorsFrom,
    decode_image,
)
from evaluation.models.encoders.embeddings import (
    MAX_PARQUET_FOOTER_BYTES,
    MODEL_METADATA_KEY,
    PARQUET_MAGIC,
    EmbeddingsEncoder,
    EmbeddingsEncoderConfig,
)
from evaluation.models.encoders.open_clip import OpenClipEncoder, OpenClipEncoderConfig
from evaluation.models.encoders.sentence_transformers import (
    SentenceTransformersEncoder,
    SentenceTransformersEncoderConfig,
)
from evaluation.models.encoders.transformers import TransformersEncoder, TransformersEncoderConfig

EncoderConfig = Annotated[
    OpenClipEncoderConfig | TransformersEncoderConfig | SentenceTransformersEncoderConfig | EmbeddingsEncoderConfig,
    Field(discriminator="backend"),
]

__all__ = [
    "MAX_PARQUET_FOOTER_BYTES",
    "MODEL_ID_PATTERN",
    "MODEL_METADATA_KEY",
    "PARQUET_MAGIC",
    "STAGE",
    "EmbeddingsEncoder",
    "EmbeddingsEncoderConfig",
    "EncoderConfig",
    "ImageRef",
    "ModelIdentity",
    "OpenClipEncoder",
    "OpenClipEncoderConfig",
    "SentenceTransformersEncoder",
    "SentenceTransformersEncoderConfig",
    "TextImageEncoder",
    "TransformersEncoder",
    "TransformersEncoderConfig",
    "VectorsFrom",
    "decode_image",
    "folder_sha256",
    "slug",
]
