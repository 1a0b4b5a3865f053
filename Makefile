# toolswap: `make demo` sets everything up and runs the demo; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# One venv, two installs: the demo needs only the CLI and the MCP SDK (click, rich, mcp);
# tests, lint, type checks and benchmarks need the dev extra (every framework and tool).
DEMO_STAMP := $(VENV)/.installed-demo
DEV_STAMP := $(VENV)/.installed-dev
# The venv is made without pip (seeding it takes longer than the demo's whole install), and
# the interpreter's own pip installs into it; without a pip there, the venv gets one.
PIP = $$(test -x $(BIN)/pip && echo $(BIN)/python -m pip || echo $(PYTHON) -m pip --python $(BIN)/python) \
	install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test lint typecheck pytest bench faults faults-libfiu clean

$(BIN)/python:
	$(PYTHON) -m pip --version >/dev/null 2>&1 \
		&& $(PYTHON) -m venv --without-pip $(VENV) || $(PYTHON) -m venv $(VENV)

# --no-compile: Python caches the bytecode of what the demo imports when it first imports it,
# instead of pip compiling every module of every package up front.
$(DEMO_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) --no-compile -e '.[mcp]'
	touch $@

# The tests run pip (the documented install lines), so the dev venv has its own.
$(DEV_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e '.[dev]' pip
	touch $@ $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/toolswap demo

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(DEV_STAMP)
	$(BIN)/mypy --strict src

pytest: $(DEV_STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

bench: $(DEV_STAMP)
	$(BIN)/python bench/run.py

# The bigger fault exploration, about an hour: every operation, call, error kind and crash
# under six seeds, store-bound sessions included (about 45,000 states); every store request
# and database statement of every fleet operation with every fault (1,780 states); libfiu's
# 300 seeds when fiu-run is installed.
faults: $(DEV_STAMP)
	TOOLSWAP_FAULTS=full $(BIN)/python -m pytest -q tests/faults

# Every CLI operation under libfiu's POSIX preload, 300 seeds (apt-get install fiu-utils).
faults-libfiu: $(DEV_STAMP)
	TOOLSWAP_FAULTS=full $(BIN)/python -m pytest -q tests/faults/test_libfiu.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
