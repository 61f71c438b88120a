"""The human reviews: the Label Studio labeling configs, the tasks and the folder their images are served
from, the review backends (a Label Studio server, or files exchanged by hand), and how votes become decisions and
agreement, for the 3XCM near-duplicate review, MixCuBe's synthesis QA and the native-speaker review of a reference
pack's translations.

Belongs here: what people are asked, and how their answers are read, for any stage that waits on people. Not here:
when a build waits for a review and resumes (the engine, `flows/engine/`, through the protocol in `data/review.py`),
the `review` commands and the `sync-reviews` flow (`flows/`), the schemas of the tables a review writes
(`data/schemas.py`), and what a decision does to the images (`curation/`). A domain folder: it imports `data/` and
itself only (tests/test_layers.py)."""
