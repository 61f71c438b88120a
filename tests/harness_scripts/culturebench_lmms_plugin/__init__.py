"""An lmms-eval plugin package for tests/test_export_lmms_eval.py (found through LMMS_EVAL_PLUGINS)."""
