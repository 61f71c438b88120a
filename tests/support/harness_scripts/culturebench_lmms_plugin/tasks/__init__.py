"""Empty: lmms-eval looks for a `tasks` package in every plugin (the exported task comes by --include_path)."""
