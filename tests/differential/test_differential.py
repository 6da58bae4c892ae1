"""The differential comparison itself (``scripts/differential.py``, issue 14): what it reports
as a difference, what its declared tolerances accept, its exit status and report, and that
``docs/emulation-fidelity.md`` lists exactly the tolerances of ``accepted.toml``."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "differential.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("differential", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["differential"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


differential = _load()


def condition(
    t: float, write: int, kind: str, status: str, reason: str, message: str = ""
) -> dict[str, Any]:
    return {
        "t": t,
        "write": write,
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
    }


def job_trace() -> dict[str, Any]:
    """One Job admitted on worker2: nominated, copied, admitted, the copy holding quota."""
    held = {
        "clusterQueue": "cluster-queue",
        "podSets": [
            {"name": "main", "count": 1, "flavors": {"cpu": "h100"}, "usage": {"cpu": "1"}}
        ],
    }
    return {
        "job": "j",
        "mode": "external",
        "workloads": 1,
        "workload": "job-j-abcde",
        "nominations": [
            {"t": 0.0, "write": 1, "value": []},
            {"t": 1.0, "write": 3, "value": ["worker2"]},
            {"t": 2.0, "write": 4, "value": []},
        ],
        "clusterName": [
            {"t": 0.0, "write": 1, "value": None},
            {"t": 2.0, "write": 4, "value": "worker2"},
        ],
        "conditions": [
            condition(0.5, 2, "QuotaReserved", "True", "QuotaReserved", "Quota reserved"),
            condition(2.2, 5, "Admitted", "True", "Admitted", "The workload is admitted"),
        ],
        "checks": [
            {"t": 0.5, "write": 2, "name": "multikueue", "state": "Pending", "message": ""},
            {"t": 2.0, "write": 4, "name": "multikueue", "state": "Ready", "message": "on w2"},
        ],
        "copies": {"worker2": [{"t": 1.2, "event": "appeared"}]},
        "copyConditions": {
            "worker2": [
                condition(1.5, 2, "QuotaReserved", "True", "QuotaReserved"),
                condition(1.5, 2, "Admitted", "True", "Admitted"),
            ]
        },
        "quota": {"worker2": [{"t": 1.5, "write": 2, "held": held}]},
        "remoteCopiesCreated": 1,
        "final": {
            "outcome": "admitted",
            "clusterName": "worker2",
            "conditions": {},
            "checks": {"multikueue": "Ready"},
            "nominated": [],
            "copies": ["worker2"],
        },
    }


def scenario(jobs: dict[str, list[dict[str, Any]]] | None = None, **meta: Any) -> dict[str, Any]:
    base = {
        "format": 1,
        "test": "tests/e2e/test_e2e_scenarios.py::test_sx",
        "backend": "sandbox",
        "commit": "abc",
        "dirty": False,
        "session": "2026-05-14T00:00:00+00:00",
        "outcome": "passed",
        "jobs": {"j": [job_trace()]} if jobs is None else jobs,
        "local": {},
    }
    return base | meta


TOLERANCES = differential.parse_tolerances(
    {
        "timing": {"absolute_seconds": 2.0, "relative": 0.5, "reason": "test window"},
        "messages": {"compared": False, "reason": "the dispatcher never reads them"},
        "race": [
            {"scenario": "race_*", "mode": "all-at-once", "reason": "the winner races"},
            {
                "scenario": "mix_*",
                "compare": ["final.outcome"],
                "timing": False,
                "reason": "placement is timing",
            },
            {
                "scenario": "preempt_*",
                "job": "j",
                "compare": ["final.*"],
                "anonymise": False,
                "timing": False,
                "reason": "the path after a preemption races",
            },
        ],
        "one_sided": [{"scenario": "only_here_*", "reason": "checks the sandbox itself"}],
        "accepted": [
            {
                "scenario": "*",
                "job": "*",
                "field": "conditions.PodsReady",
                "reason": "not modelled",
                "fix": "the emulation",
            },
            {
                "scenario": "*",
                "job": "*",
                "field": "conditions.Finished",
                "either": ["[]", '["True/OwnerNotFound"]'],
                "reason": "a race with the garbage collector",
            },
        ],
    }
)


def changed(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``job_trace()`` (or ``base``) with one value replaced: ``a.b.0.c`` walks dicts and
    lists."""
    out = copy.deepcopy(base or job_trace())
    *head, last = path.split(".")
    node: Any = out
    for part in head:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def podsready(base: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out["conditions"].append(
        {"t": 0.6, "write": 2, "type": "PodsReady", "status": "False", "reason": "WaitForStart"}
    )
    return out


def finished(base: dict[str, Any], reason: str) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out["conditions"].append(condition(5.0, 9, "Finished", "True", reason))
    return out


def race_trace(winner: str) -> dict[str, Any]:
    """All-at-once: copies on both workers, ``winner`` admits, the other copy is removed."""
    loser = "worker1" if winner == "worker2" else "worker2"
    out = job_trace()
    out["mode"] = "all-at-once"
    out["nominations"][1]["value"] = ["worker1", "worker2"]
    out["clusterName"][1]["value"] = winner
    out["copies"] = {
        winner: [{"t": 1.2, "event": "appeared"}],
        loser: [{"t": 1.2, "event": "appeared"}, {"t": 2.5, "event": "disappeared"}],
    }
    out["copyConditions"] = {winner: job_trace()["copyConditions"]["worker2"], loser: []}
    out["quota"] = {winner: job_trace()["quota"]["worker2"], loser: []}
    out["remoteCopiesCreated"] = 2
    out["final"] = out["final"] | {"clusterName": winner, "copies": [winner]}
    return out


@dataclass
class Case:
    left: dict[str, dict[str, Any]]
    right: dict[str, dict[str, Any]]
    unaccepted: list[tuple[str, str, str]] = field(default_factory=list)
    """(scenario, job, field) of every unaccepted difference."""
    accepted: list[tuple[str, str, str]] = field(default_factory=list)


CASES = [
    pytest.param(Case({"sx": scenario()}, {"sx": scenario()}), id="equal-traces"),
    pytest.param(
        Case(
            {"sx": scenario(), "sy": scenario()},
            {"sx": scenario()},
            unaccepted=[("sy", "", "scenario")],
        ),
        id="a-scenario-missing-on-the-right",
    ),
    pytest.param(
        Case(
            {"sx": scenario(), "only_here_kind": scenario()},
            {"sx": scenario()},
            accepted=[("only_here_kind", "", "scenario")],
        ),
        id="a-scenario-declared-for-one-backend-only",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario({"j": [changed("conditions.1.reason", "SomethingElse")]})},
            unaccepted=[("sx", "j", "conditions.Admitted")],
        ),
        id="a-condition-sequence-that-differs",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario({"j": [changed("clusterName.1.t", 3.9)]})},
        ),
        id="a-timing-difference-inside-the-window",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario({"j": [changed("clusterName.1.t", 9.0)]})},
            unaccepted=[("sx", "j", "clusterName[1].t")],
        ),
        id="a-timing-difference-outside-the-window",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario({"j": [podsready(job_trace())]})},
            accepted=[("sx", "j", "conditions.PodsReady")],
        ),
        id="an-accepted-difference",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario({"j": [finished(job_trace(), "OwnerNotFound")]})},
            accepted=[("sx", "j", "conditions.Finished")],
        ),
        id="an-accepted-difference-either-way-round",
    ),
    pytest.param(
        Case(
            {"sx": scenario({"j": [finished(job_trace(), "OwnerNotFound")]})},
            {"sx": scenario({"j": [finished(job_trace(), "Succeeded")]})},
            unaccepted=[("sx", "j", "conditions.Finished")],
        ),
        id="a-value-outside-the-accepted-ones",
    ),
    pytest.param(
        Case(
            {"preempt_s6": scenario()},
            {"preempt_s6": scenario({"j": [changed("nominations.1.value", ["worker1"])]})},
        ),
        id="a-race-leaves-the-path-out",
    ),
    pytest.param(
        Case(
            {"preempt_s6": scenario()},
            {"preempt_s6": scenario({"j": [changed("final.clusterName", "worker1")]})},
            unaccepted=[("preempt_s6", "j", "final.clusterName")],
        ),
        id="a-race-keeping-worker-names-compares-where-it-ends",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario({"j": [changed("conditions.1.message", "other words")]})},
        ),
        id="message-texts-are-not-compared",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario({"j": [job_trace(), job_trace()]})},
            unaccepted=[("sx", "j", "submissions")],
        ),
        id="a-job-submitted-once-more-on-one-side",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario(outcome="failed")},
            unaccepted=[("sx", "", "outcome")],
        ),
        id="the-test-failed-on-one-side",
    ),
    pytest.param(
        Case(
            {"race_s10": scenario({"j": [race_trace("worker1")]})},
            {"race_s10": scenario({"j": [race_trace("worker2")]})},
        ),
        id="all-at-once-race-another-winner",
    ),
    pytest.param(
        Case(
            {"race_s10": scenario({"j": [race_trace("worker1")]})},
            {
                "race_s10": scenario(
                    {"j": [changed("remoteCopiesCreated", 1, race_trace("worker2"))]}
                )
            },
            unaccepted=[("race_s10", "j", "remoteCopiesCreated")],
        ),
        id="all-at-once-race-still-counts-copies",
    ),
    pytest.param(
        Case(
            {"mix_1": scenario()},
            {"mix_1": scenario({"j": [changed("conditions.1.t", 60.0, race_trace("worker1"))]})},
        ),
        id="a-race-comparing-only-the-outcome",
    ),
    pytest.param(
        Case(
            {"mix_1": scenario()},
            {"mix_1": scenario({"j": [changed("final.outcome", "pending")]})},
            unaccepted=[("mix_1", "j", "final.outcome")],
        ),
        id="a-race-still-compares-the-outcome",
    ),
    pytest.param(
        Case(
            {"sx": scenario({"j": [race_trace("worker1")]})},
            {"sx": scenario({"j": [race_trace("worker2")]})},
            unaccepted=[
                ("sx", "j", "clusterName"),
                ("sx", "j", "copies.worker1"),
                ("sx", "j", "copies.worker2"),
                ("sx", "j", "copyConditions.worker1.Admitted"),
                ("sx", "j", "copyConditions.worker1.QuotaReserved"),
                ("sx", "j", "copyConditions.worker2.Admitted"),
                ("sx", "j", "copyConditions.worker2.QuotaReserved"),
                ("sx", "j", "final.clusterName"),
                ("sx", "j", "final.copies"),
                ("sx", "j", "quota.worker1"),
                ("sx", "j", "quota.worker2"),
            ],
        ),
        id="another-winner-outside-a-declared-race",
    ),
    pytest.param(
        Case(
            {"sx": scenario()},
            {"sx": scenario(commit="def")},
            unaccepted=[("(runs)", "", "commit")],
        ),
        id="traces-of-another-commit-are-stale",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_compare(case: Case) -> None:
    result = differential.compare(
        differential.side_of(Path("left"), case.left),
        differential.side_of(Path("right"), case.right),
        TOLERANCES,
    )
    assert [(d.scenario, d.job, d.field) for d in result.unaccepted] == case.unaccepted
    assert [(d.scenario, d.job, d.field) for d in result.accepted] == case.accepted
    assert result.ok == (not case.unaccepted)


def write_side(folder: Path, scenarios: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    for name, trace in scenarios.items():
        (folder / f"{name}.json").write_text(json.dumps(trace))
    return folder


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_the_command_passes_equal_runs_and_writes_the_report(tmp_path: Path) -> None:
    left = write_side(tmp_path / "sandbox-v0.19", {"sx": scenario()})
    right = write_side(tmp_path / "real-v0.19", {"sx": scenario(backend="real")})
    report = tmp_path / "out" / "report.md"
    done = run("--left", str(left), "--right", str(right), "--report", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scenarios compared             1" in done.stdout
    assert "unaccepted                     0" in done.stdout
    text = report.read_text()
    assert "| scenarios compared | 1 |" in text
    assert "| unaccepted | 0 |" in text
    assert "Verdict: **pass**" in text


def test_the_command_fails_naming_the_missing_scenario(tmp_path: Path) -> None:
    left = write_side(tmp_path / "l", {"sx": scenario(), "s_only_left": scenario()})
    right = write_side(tmp_path / "r", {"sx": scenario()})
    done = run("--left", str(left), "--right", str(right))
    assert done.returncode == 1
    assert "UNACCEPTED s_only_left - scenario [missing scenario]: present | missing" in done.stdout


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({}, "timing: expected a table", id="no-timing"),
        pytest.param(
            {
                "timing": {"absolute_seconds": 1, "relative": 0.1, "reason": "r"},
                "messages": {"compared": False, "reason": "r"},
                "accepted": [{"scenario": "*", "job": "*", "field": "x"}],
            },
            "accepted[0].reason: required",
            id="an-accepted-difference-without-a-reason",
        ),
        pytest.param(
            {
                "timing": {"absolute_seconds": "soon", "relative": 0.1, "reason": "r"},
                "messages": {"compared": False, "reason": "r"},
            },
            "timing.absolute_seconds: expected float, got 'soon'",
            id="a-window-that-is-not-a-number",
        ),
        pytest.param(
            {
                "timing": {"absolute_seconds": 1, "relative": 0.1, "reason": "r"},
                "messages": {"compared": False, "reason": "r", "loud": True},
            },
            "messages.loud: unknown key",
            id="an-unknown-key",
        ),
    ],
)
def test_bad_tolerances_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(differential.InputError, match=r"accepted\.toml: ") as caught:
        differential.parse_tolerances(data)
    assert message in str(caught.value)


def test_an_empty_folder_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = run("--left", str(tmp_path / "empty"), "--right", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert "no traces (*.json)" in done.stderr


def test_the_committed_tolerance_file_is_valid_and_every_entry_has_a_reason() -> None:
    tolerances = differential.load_tolerances()
    assert tolerances.timing.reason
    assert all(a.reason for a in tolerances.accepted)
    assert all(r.reason for r in tolerances.races)


def test_the_docs_list_the_declared_tolerances() -> None:
    done = run("--docs", "--check")
    assert done.returncode == 0, done.stdout
