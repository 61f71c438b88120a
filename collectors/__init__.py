"""Getting things in: the concepts a build covers (and Gemini's drafts of new ones, with the operator's
review), their translations, image search (a local folder, DuckDuckGo), fetching the hits (the local importer, the
HTTP downloader with its SSRF guard and opt-out checks), the image check that names what is wrong with bad bytes,
MixCuBe's originals, the drafts a reference pack lacks for a build, and the images of a URL-only release
(`fetch-release`).

Belongs here: each collecting stage's per-item work and its backends, over plain inputs. Not here: deciding which
images are kept (dedup, tagging, assembly: `curation/`), the stage graph that runs them (`flows/<benchmark>/`), the
workspace, its blob store, the schemas and the reference packs themselves (`data/`), and the API clients and retry
policy (`data/clients/`). A domain folder: it imports `data/` and itself only (tests/test_layers.py)."""
