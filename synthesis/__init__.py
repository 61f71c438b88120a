"""Making MixCuBe's images: face detection, masks from the face boxes, the inpainting prompts and seeds,
the inpainting itself (SDXL, or the demo's placeholder), and which (original, ethnicity) pairs get another attempt.

Belongs here: each synthesis stage's per-item work and its backends. Not here: the filters that judge a synthesis
(BRISQUE and CLIP: `curation/synthesis_filters.py`), the people's QA of it (`annotation/synthesis_qa.py`), the
quintets (`curation/quintets.py`) and the release (`flows/mixcube/`). A domain folder: it imports `data/` and itself
only (tests/test_layers.py)."""
