# toolswap: `make demo` sets everything up and runs the demo; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench faults faults-libfiu clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/toolswap demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/run.py

# The bigger fault exploration (every operation, call, error kind and crash, six seeds,
# store-bound sessions included;
# every store request and database statement of every fleet operation with every fault;
# libfiu's 300 seeds when fiu-run is installed).
faults: $(STAMP)
	TOOLSWAP_FAULTS=full $(BIN)/python -m pytest -q tests/faults

# Every CLI operation under libfiu's POSIX preload, 300 seeds (apt-get install fiu-utils).
faults-libfiu: $(STAMP)
	TOOLSWAP_FAULTS=full $(BIN)/python -m pytest -q tests/faults/test_libfiu.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
