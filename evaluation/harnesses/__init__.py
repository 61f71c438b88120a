"""Other evaluation harnesses, both ways. `exports/` writes a release for lmms-eval,
VLMEvalKit, MTEB (MIEB) and clip_benchmark to run offline (`culturebench export RELEASE --harness NAME`), with a
README that names the exact command; `predictions/` reads a harness's prediction file back (VLMEvalKit's, lmms-eval's
samples log), streamed and refused at its first bad row, so that `culturebench evaluate mixcube --predictions`
scores it by our own rule.

Belongs here: the formats of other tools, in and out. Not here: the scoring (`evaluation/xcm/`,
`evaluation/mixcube/`), the models (`evaluation/models/`), and the harnesses' own environments and the test runs of
them (`make harnesses`, `tests/support/`)."""
