"""Deciding what is kept, and putting it together: concept and image dedup (exact, perceptual, embedding
and aligned tiers), tagging, the MixCuBe synthesis filters, the image catalog, the candidate rules, the assembly of
RQ2 triplets, RQ3 sextets and MixCuBe quintets, the validators, the rules audit and the reassembly of a 3XCM-format
file, and which images and rows a takedown removes.

Belongs here: decisions over tables and images, each written once for every caller (the assembler and the validator
share `rules.py`; the build's dedup and `perf/dedup_vs_imagededup` share one `decide`). Not here: fetching images
(`collectors/`), making new ones (`synthesis/`), asking people (`annotation/`), writing a release or a patch
(`data/publish/`, `data/takedown/` and each benchmark's `flows/<benchmark>/`), and scoring a model (`evaluation/`).
A domain folder: it imports `data/` and itself only, apart from `curation.reassemble`'s use of the shipped concept
and translation collectors (tests/test_layers.py's `EXCEPTIONS`)."""
