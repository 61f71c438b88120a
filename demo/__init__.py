"""The offline demo material: the labelled synthetic 3XCM corpus (`corpus.py`; real photos cannot be
shipped) and the tiny random-weight models of `--demo-model` and the tests (`models.py`), whose numbers mean
nothing.

Belongs here: what only the demo and the tests need in order to run offline. Not here: the demo builds' configs
(each benchmark's `demo()`, `flows/<benchmark>/config.py`), the placeholder inpainter and the other embedded default
backends (in each stage's own module), and the test fakes and servers (`tests/support/`). It may import `data/` and
the domain folders; only `flows/` imports it, apart from the evaluation's `--demo-model` (tests/test_layers.py's
`EXCEPTIONS`)."""
