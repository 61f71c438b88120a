# The two README commands: `make demo` (offline 3XCM build on the embedded defaults) and `make test`.
# Both create .venv and install the locked dependency set when needed; nothing is taken from the host
# besides a Python 3.11 interpreter.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1

.PHONY: demo test lint lock venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv>=0.4"
	$(BIN)/uv pip install --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --no-deps -e .
	touch $@

demo: $(STAMP)
	$(BIN)/culturebench build 3xcm --demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# Re-resolve the pinned set after editing pyproject.toml.
lock:
	test -x $(BIN)/uv || { $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --quiet "uv>=0.4"; }
	$(BIN)/uv pip compile pyproject.toml --extra all --extra dev --python-version 3.11 \
		--no-header --output-file requirements.lock

clean:
	rm -rf $(VENV) workspace releases .prefect
