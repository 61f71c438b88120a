"""Publishing: the generic code that writes and reads immutable folders (releases, patches, evaluation results).

Nothing here knows a benchmark: each benchmark's release content (its writer, card, Croissant facts, deviations and
patch writer) sits with that benchmark, in `flows/<benchmark>/`, and calls these building blocks
(`tests/test_layers.py` checks that no module here imports a benchmark's).

- `format`: the names a release folder is read by (`MANIFEST`, `SEMVER`, `NAME`, `ReleaseReadError`);
- `folder`: the immutable folder (staging, an exclusive publish locally and on object stores, comparison with an
  existing folder, a manifest with every file's sha256), which releases and evaluation results both use;
- `tables`, `shards`, `release`: HF Parquet tables, image shards and WebDataset tars, and the dataset release
  (`ReleaseConfig`, `ReleaseWriter`) built from them on the immutable folder;
- `integrity`, `reader`, `images`: reading a folder someone handed us: its manifest strictly and its files against
  it, its tables by config, and its image bytes by key (`ReleasedImages`, for the evaluation and the takedowns);
- `card`, `sources`, `datasheet`, `croissant`, `rai`: the dataset card's primitives, its sources section, its
  datasheet, and the Croissant JSON-LD with the helpers its RAI texts share;
- `patch`, `changelog`: the generic takedown machinery (versions, the parent release, the takedown record, the
  denylist entries) and the CHANGELOG that ends a patch's card.
"""
