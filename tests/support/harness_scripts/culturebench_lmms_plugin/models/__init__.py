"""lmms-eval reads AVAILABLE_MODELS: model name -> class in `culturebench_lmms_plugin.models.<name>`."""

AVAILABLE_MODELS = {"culturebench_answers": "AnswerMap"}
