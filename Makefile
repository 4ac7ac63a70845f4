# One task runner: `make test` sets up .venv on a fresh machine (only Python needed), then runs what CI
# runs: ruff (lint and format), mypy --strict, and the tests, two processes per core.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NODE_CLIENT := tests/clients/node

.PHONY: run test pytest node-client chromium prometheus check lint typecheck fmt conformance bench dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Two markers in one venv: `make run` needs the runtime alone, and the test extra (polars, duckdb,
# pyarrow, matplotlib, schemathesis, ...) would make a fresh clone wait minutes for its first answer.
$(BIN)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# The test extra holds the runtime too, so it marks both.
$(BIN)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/.runtime $@

test: lint typecheck pytest

# Two test processes per core: most tests wait on servers, timers and child processes, and with one
# per core the cores sat half idle (load average ~1.7 of 2 through a whole run).
WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))

# Tests go out one at a time to whichever process is free (`--maxschedchunk 1`), slow ones first
# (tests/conftest.py): xdist's default hands each process a block of neighbours, so the slow tests
# sat in one process's block and ran one after another at the end of the run.
pytest: $(BIN)/.installed node-client chromium prometheus
	$(BIN)/pytest -n $(WORKERS) --maxschedchunk 1 $(PYTEST_ARGS)

# The TypeScript client's packages, from its package-lock.json, when Node.js is there (its test skips otherwise).
node-client:
	@if command -v npm >/dev/null && [ ! -d $(NODE_CLIENT)/node_modules ]; then \
		npm ci --prefix $(NODE_CLIENT) --no-audit --no-fund; fi

# The UI tests drive Debian's Chromium headless (Playwright downloads no browser): installed when
# missing, as root on Debian (their test skips elsewhere).
chromium:
	@if ! command -v chromium >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi

# The dashboard test runs the Grafana dashboard's queries against Debian's Prometheus (which also brings
# promtool, for the alert rules): installed when missing, as root on Debian (the test skips elsewhere).
prometheus:
	@if ! command -v prometheus >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; fi

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/mypy .

fmt: $(BIN)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

check: test

conformance: $(BIN)/.installed
	$(BIN)/python -m store.conformance

bench: $(BIN)/.installed
	$(BIN)/python -m bench

run: $(BIN)/.runtime
	$(BIN)/threadline dev --demo

dev: $(BIN)/.runtime
	$(BIN)/threadline dev

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
