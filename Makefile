# The two README commands: `make demo` (offline 3XCM and MixCuBe builds on the embedded defaults, each evaluated
# with a tiny random model) and `make test`.
# Both create .venv and install the locked dependency set when needed; nothing is taken from the host
# besides a Python 3.11 interpreter.
# Bytecode: uv writes none at install, and where PYTHONDONTWRITEBYTECODE is set (as on the CI machines) every Python
# process, each test worker, CLI call, flow run, harness run and Label Studio start, would compile all it imports
# again (`import prefect, flows.xcm.build` took 28 s instead of 6 on 2 cores). So the commands this Makefile runs write
# the bytecode of what they import, once, into the venvs: compiling each venv whole at install (compileall) took
# 90-150 s for .venv alone, most of it modules that nothing here imports.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Label Studio pins conflict with Prefect's (python-json-logger, Django): it gets a virtual environment of its own.
LS_VENV ?= .venv-labelstudio
LS_STAMP := $(LS_VENV)/.installed-stamp
CHROMIUM ?= /usr/bin/chromium
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast docs lint lock venv clean label-studio browser harnesses

venv: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv>=0.4"
	$(BIN)/uv pip install --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --no-deps -e .
	touch $@

# The tests start a real Label Studio server from this venv.
label-studio: $(LS_STAMP)

$(LS_STAMP): requirements-labelstudio.lock
	test -x $(LS_VENV)/bin/python || $(PYTHON) -m venv $(LS_VENV)
	$(LS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "uv>=0.4"
	$(LS_VENV)/bin/uv pip install --python $(LS_VENV)/bin/python -r requirements-labelstudio.lock
	touch $@

# Each evaluation harness the tests run for real (lmms-eval, VLMEvalKit, MTEB, clip_benchmark) pins what clashes with
# ours, so each gets a virtual environment of its own, .venv-harness-NAME, built from requirements-harness-NAME.lock
# (compiled by `make lock` from harnesses/NAME.in). uv's cache shares the wheels (torch) between them.
HARNESS_LOCKS := $(wildcard requirements-harness-*.lock)
HARNESS_STAMPS := $(patsubst requirements-harness-%.lock,.venv-harness-%/.installed-stamp,$(HARNESS_LOCKS))

harnesses: $(HARNESS_STAMPS)

.venv-harness-%/.installed-stamp: requirements-harness-%.lock
	test -x .venv-harness-$*/bin/python || $(PYTHON) -m venv .venv-harness-$*
	.venv-harness-$*/bin/python -m pip install --quiet --disable-pip-version-check "uv>=0.4"
	.venv-harness-$*/bin/uv pip install --python .venv-harness-$*/bin/python -r $<
	touch $@

# Debian's Chromium for the labeling-interface screenshots (Playwright drives it; no browser download).
browser:
	@test -x $(CHROMIUM) || { export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }
	@test -x $(CHROMIUM) && echo "chromium: $(CHROMIUM)"

demo: $(STAMP)
	$(BIN)/culturebench build 3xcm --demo
	$(BIN)/culturebench build mixcube --demo
	$(BIN)/culturebench evaluate 3xcm releases/3xcm/0.1.0-demo --demo-model --task all
	$(BIN)/culturebench evaluate mixcube releases/mixcube/0.1.0-demo --demo-model
	$(BIN)/culturebench evaluate mixcube releases/mixcube/0.1.0-demo --demo-model --task audit

# pytest-xdist's workers for the two test targets: one per core, at most TEST_MAX_WORKERS (each imports torch and
# may start servers of its own). `make test TEST_WORKERS=0` runs the suite in one process.
TEST_WORKERS ?= auto
TEST_MAX_WORKERS ?= 4
PYTEST_WORKERS := -n $(TEST_WORKERS) $(if $(filter auto logical,$(TEST_WORKERS)),--maxprocesses $(TEST_MAX_WORKERS))
# What test-fast leaves out (the markers are in pyproject.toml).
FAST_MARKERS := not server and not harness and not browser and not dask and not slow

# The type checker ([tool.mypy] in pyproject.toml) first: CI runs this target.
test: $(STAMP) $(LS_STAMP) harnesses browser docs
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_WORKERS)

# The edit-test loop: no root, no server, no harness venv, no browser, no Dask cluster, no slow test (see the markers
# in pyproject.toml); a few minutes. `make test` still runs everything.
test-fast: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_WORKERS) -m "$(FAST_MARKERS)"

# The documentation site (mkdocs.yml, docs/) into .site/. Strict: a broken link or anchor, or a page missing from nav,
# fails the build. Quiet when it passes; its whole log when it fails (mkdocs' own --quiet would also hide the
# warnings that strict mode turns into errors). NO_MKDOCS_2_WARNING silences mkdocs-material's banner.
docs: $(STAMP)
	@log=$$(NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict 2>&1) || { echo "$$log"; echo "docs: mkdocs build --strict failed"; exit 1; }; \
		echo "docs: built into .site/"

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

# Re-resolve the pinned set after editing pyproject.toml.
lock:
	test -x $(BIN)/uv || { $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --quiet "uv>=0.4"; }
	$(BIN)/uv pip compile pyproject.toml --extra all --extra dev --python-version 3.11 \
		--no-header --output-file requirements.lock
	echo "label-studio==1.23.2" | $(BIN)/uv pip compile - --python-version 3.11 --no-header \
		--output-file requirements-labelstudio.lock
	for input in harnesses/*.in; do [ -e $$input ] || continue; name=$$(basename $$input .in); \
		$(BIN)/uv pip compile $$input --python-version 3.11 --no-header \
			--output-file requirements-harness-$$name.lock || exit 1; done

clean:
	rm -rf $(VENV) $(LS_VENV) .venv-harness-* workspace releases evaluations .prefect test-artifacts .site .mypy_cache
