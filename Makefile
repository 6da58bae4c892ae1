# Two commands for users (see README): `make sandbox` and `make test`.
# Both create a local virtual environment in .venv first.

PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PLUGIN_DIRS := $(wildcard plugins/*/pyproject.toml)
KUEUE_CRDS_DIR ?= $(abspath ../shared/kueue-v0.19.2/crds)
export KUEUE_CRDS_DIR
# The e2e tests' traces (sandbox/dispatcher_sandbox/harness/e2e/trace.py), one folder per backend and Kueue version, and
# the differential report (docs/emulation-fidelity.md). Each run target removes its own folder
# first, so that a folder only ever holds that run's traces and stale traces never pass.
TRACE_DIR ?= build/traces
MKD_TRACE_DIR := $(abspath $(TRACE_DIR))
export MKD_TRACE_DIR
DIFFERENTIAL_REPORT ?= build/differential/report.md
# What runs on real Kueue: the S-scenarios, the seeded mix, the leftover-copy scenario and the
# fidelity tests.
E2E_REAL_TESTS := tests/e2e/test_e2e_scenarios.py tests/e2e/test_e2e_mix.py tests/e2e/test_e2e_leftover_copy.py tests/e2e/test_e2e_copy_lost.py tests/e2e/test_e2e_placement.py tests/e2e/test_e2e_hints.py tests/e2e/test_e2e_disruption.py tests/e2e/test_e2e_predicted_start.py $(sort $(wildcard tests/e2e/test_fidelity_*.py))

.PHONY: sandbox test lint typecheck imports unit unit-e2e unit-scenarios unit-rest real audit venv clean bench real-binaries e2e-real e2e-v020 outage-real differential new-user-mix

$(STAMP): pyproject.toml sandbox/pyproject.toml $(PLUGIN_DIRS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools
	$(BIN)/python -m pip install --quiet -e '.[sim]' -e './sandbox[test]' $(foreach p,$(PLUGIN_DIRS),-e $(dir $(p)))
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

## The real control plane's binaries (etcd, kube-apiserver, kube-controller-manager, Kueue),
## built with the go command once per pinned version into ~/.cache/multikueue-dispatcher/bin
## (sandbox/dispatcher_sandbox/real_kueue/versions.toml). Without go, the real-Kueue tests skip and say why
## (CI sets REQUIRE_REAL_BACKEND=1, which makes that a failure).
real-binaries: $(STAMP)
	@if command -v go >/dev/null 2>&1; then \
		$(BIN)/python -m dispatcher_sandbox.real_kueue.build; \
	else \
		echo "go not found: the real-Kueue tests (tests/real, pytest tests/e2e --backend real) will skip"; \
	fi

## Everything on pytest's default paths but tests/real, in three pytest processes at once, their
## output kept apart: the e2e scenarios on the sandbox (tests/e2e, traces in
## $(TRACE_DIR)/sandbox-v0.19), the emulated clusters' other scenarios with the fault tests
## (tests/e2e_sandbox, tests/faults), and the rest. Each process mostly waits on the emulated
## Kueue's delays: measured at 88e6799 as two processes (tests/real in the second), the CPUs were
## 53 % busy over the 12 min 19 s, and tests/e2e took 420 s, tests/e2e_sandbox with tests/faults
## 433 s, the rest 356 s and tests/real 185 s (`make unit PYTEST_ARGS=--durations=0`). tests/real
## starts real control planes: it runs in `real`, which `make test` runs beside e2e-real, so that
## no real control plane runs beside these three. UNIT_GROUP=all: one process, tests/real
## included.
UNIT_GROUP ?= split
UNIT_E2E := tests/e2e
UNIT_SCENARIOS := tests/e2e_sandbox tests/faults
UNIT_REAL := tests/real
OUTAGE_REAL := tests/real/test_real_worker_outage.py

unit: $(STAMP) real-binaries
	rm -rf $(MKD_TRACE_DIR)/sandbox-v0.19
ifeq ($(UNIT_GROUP),all)
	$(BIN)/pytest $(PYTEST_ARGS)
else
	$(MAKE) --no-print-directory -j3 --output-sync=target unit-e2e unit-scenarios unit-rest
endif

unit-e2e: $(STAMP)
	$(BIN)/pytest $(UNIT_E2E) $(PYTEST_ARGS)

unit-scenarios: $(STAMP)
	$(BIN)/pytest $(UNIT_SCENARIOS) $(PYTEST_ARGS)

unit-rest: $(STAMP)
	$(BIN)/pytest $(foreach d,$(UNIT_E2E) $(UNIT_SCENARIOS) $(UNIT_REAL),--ignore=$(d)) $(PYTEST_ARGS)

## tests/real on real control planes: the CLI and the remedies on real Kueue, and issue 17's
## outage (a worker's API server killed mid-mix, with the unplaceable-release policy on and off
## and under Kueue's AllAtOnce, about 6 min). `make test` runs it beside e2e-real once e2e-v020
## is done, each in its own port range (MKD_REAL_PORTS). `outage-real`: the outage test alone.
real: $(STAMP) real-binaries
	MKD_REAL_PORTS=26000-31999 $(BIN)/pytest $(UNIT_REAL) $(PYTEST_ARGS)

outage-real: $(STAMP) real-binaries
	MKD_REAL_PORTS=26000-31999 $(BIN)/pytest $(OUTAGE_REAL) $(PYTEST_ARGS)

## The e2e scenarios, the seeded mix and the fidelity tests on real kube-apiserver, etcd and
## Kueue v0.19.2 processes (traces in $(TRACE_DIR)/real-v0.19).
e2e-real: $(STAMP) real-binaries
	rm -rf $(MKD_TRACE_DIR)/real-v0.19
	MKD_REAL_PORTS=20000-25999 $(BIN)/pytest $(E2E_REAL_TESTS) --backend real $(PYTEST_ARGS)

## The e2e scenarios on the sandbox with the emulation's Kueue v0.20 mode.
e2e-v020: $(STAMP)
	rm -rf $(MKD_TRACE_DIR)/sandbox-v0.20
	$(BIN)/pytest tests/e2e/test_e2e_scenarios.py --kueue-version v0.20 $(PYTEST_ARGS)

## The differential comparison of the sandbox's and real Kueue's traces (run `unit` and
## `e2e-real` first): fails on any difference beyond the tolerances of
## tests/differential/accepted.toml, on a scenario missing on one side and on stale traces.
differential: $(STAMP)
	$(BIN)/python scripts/differential.py --left $(MKD_TRACE_DIR)/sandbox-v0.19 \
		--right $(MKD_TRACE_DIR)/real-v0.19 --report $(DIFFERENTIAL_REPORT)

## Known vulnerabilities in the installed dependencies (pip-audit, with a fallback to the package
## index's advisories of the latest release when pip-audit's service cannot answer; editable
## installs, i.e. this project and plugins/*, are skipped). Fails on any known vulnerability;
## AUDIT_STRICT=1 also fails on dependencies nobody could answer for (see .ci/audit.py).
audit: $(STAMP)
	$(BIN)/python .ci/audit.py $(AUDIT_ARGS)

## The whole test suite: lint, types, layering contract, pytest (sandbox and real Kueue), the e2e
## scenarios on real Kueue and, at the same time (their output kept apart), on the emulated Kueue
## v0.20 and then tests/real, the differential comparison of the sandbox's and real
## Kueue's traces (any difference beyond tests/differential/accepted.toml fails the run), then
## the dependency audit.
test: lint typecheck imports unit
	$(MAKE) --no-print-directory -j2 --output-sync=target e2e-real e2e-v020 real
	$(MAKE) --no-print-directory differential
	$(MAKE) --no-print-directory audit

## Issue 14's new user's mix (tests/sandbox/data/new-user-mix.jsonl, 50 Jobs) through the demo on
## the sandbox and on real Kueue: every Job must end with clusterName set. Not in `make test`
## (about 4 minutes; the seeded mix of tests/e2e/test_e2e_mix.py runs there on both backends).
new-user-mix: $(STAMP) real-binaries
	$(BIN)/pytest -m mix tests/sandbox/test_new_user_mix.py tests/real/test_real_new_user_mix.py $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/fake_apiserver.py
	$(BIN)/python benchmarks/decision_cost.py
	$(BIN)/python benchmarks/client_overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
