# Two commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

PARSER := tests/contracts/node_modules/@asyncapi/parser

.PHONY: serve test test-tools lint typecheck clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[server,dev]'
	touch $(STAMP)

.venv: $(STAMP)

serve: $(STAMP)
	$(BIN)/ustun serve

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

# What the suite needs beyond Python: the official AsyncAPI parser (npm) and Debian's
# chromium for the dashboard browser tests. Installed once, when missing.
$(PARSER): tests/contracts/package-lock.json
	npm ci --prefix tests/contracts --no-audit --no-fund

/usr/bin/chromium:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test-tools: $(PARSER) /usr/bin/chromium

# The suite on every core (at most 4); `make test PYTEST_ARGS=-n0` runs it in one process. Then
# the tests marked `alone`, one at a time: each holds a latency bound that other tests running
# beside it on two cores would break.
PYTEST_ARGS ?= -n auto --maxprocesses 4

test: lint typecheck test-tools
	$(BIN)/pytest $(PYTEST_ARGS) -m "not alone"
	$(BIN)/pytest -n0 -m alone

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
