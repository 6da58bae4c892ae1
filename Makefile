# Two commands for users (see README): `make sandbox` and `make test`.
# Both create a local virtual environment in .venv first.

PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PLUGIN_DIRS := $(wildcard plugins/*/pyproject.toml)
KUEUE_CRDS_DIR ?= $(abspath ../shared/kueue-v0.19.2/crds)
export KUEUE_CRDS_DIR

.PHONY: sandbox test lint typecheck imports unit audit venv clean bench

$(STAMP): pyproject.toml $(PLUGIN_DIRS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools
	$(BIN)/python -m pip install --quiet -e '.[sandbox,sim,test]' $(foreach p,$(PLUGIN_DIRS),-e $(dir $(p)))
	touch $(STAMP)

venv: $(STAMP)

## The main job on the embedded default: emulated manager and workers.
sandbox: $(STAMP)
	$(BIN)/multikueue-dispatcher sandbox $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

## Known vulnerabilities in the installed dependencies (pip-audit, with a fallback to the package
## index's advisories of the latest release when pip-audit's service cannot answer; editable
## installs, i.e. this project and plugins/*, are skipped). Fails on any known vulnerability;
## AUDIT_STRICT=1 also fails on dependencies nobody could answer for (see .ci/audit.py).
audit: $(STAMP)
	$(BIN)/python .ci/audit.py $(AUDIT_ARGS)

## The whole test suite: lint, types, layering contract, pytest, then the dependency audit.
test: lint typecheck imports unit audit

bench: $(STAMP)
	$(BIN)/python benchmarks/fake_apiserver.py
	$(BIN)/python benchmarks/decision_cost.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
