"""The shared infrastructure every other package stands on: the table schemas, the workspace (parts, markers,
stats and the blob store), the stage contract (`stage.py`, `stage_stats.py`), reference packs (`reference*.py`; the
default pack in `data/reference/`), the API clients, retry policy, rate limits, secrets and devices
(`data/clients/`), the takedown records and patch machinery (`data/takedown/`), the generic publishing code
(`data/publish/`), and small shared helpers (output paths, text safety, figures, the process pool, the SSRF guard,
row errors).

Belongs here: what two or more packages need and that does no stage's work. It imports no other project package,
and `data/publish/` imports no benchmark's module and has none named after one (tests/test_layers.py). Not here: a
stage's work (the domain folders: `collectors/`, `curation/`, `synthesis/`, `annotation/`, `evaluation/`), running
stages (`flows/engine/`), and a benchmark's release content, its writer, card and Croissant facts
(`flows/<benchmark>/`)."""
