"""Worker outages and the unplaceable-release policy (issue 17) in the simulator.

The sandbox's default topology (``worker-a100`` 8 GPUs, ``worker-h100`` 4, ``worker-cpu``; the
manager's ClusterQueue holds 12 GPUs): while ``worker-h100`` is down, H100-only workloads that
reserved manager quota keep it (Kueue releases quota only for a workload admitted on a lost
worker), so A100 work starves though ``worker-a100`` is idle; the policy releases that quota.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dispatcher.cli import main
from dispatcher.plugins import PluginHost
from dispatcher.sim.engine import (
    Latencies,
    ReleasePolicy,
    SimResult,
    parse_algorithms,
    simulate,
)
from dispatcher.sim.report import (
    OUTAGE_COLUMNS,
    STARVED_AFTER_S,
    render_table,
    report_document,
)
from dispatcher.sim.trace import (
    FaultEvent,
    Trace,
    TraceError,
    TraceWorkload,
    dump_trace,
    parse_trace_lines,
)
from dispatcher.sim.world import SimTopology, load_topology
from dispatcher_sandbox.harness.sim import A100, H100, trace, workload

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_TOPOLOGY = ROOT / "dispatcher" / "topology" / "topologies" / "default.yaml"
MIX = Path(__file__).parent / "data" / "issue17-mix.jsonl"
OURS = "gpu-type-affinity+capacity-first"
RELEASE = f"{OURS}@release"
JOB = '{"arrival": 0, "name": "a", "requests": {"cpu": "1"}, "runSeconds": 60}'

_HOST: list[PluginHost] = []


def host() -> PluginHost:
    """One plugin host for the module (loading entry points is the slow part)."""
    if not _HOST:
        _HOST.append(PluginHost.load())
    return _HOST[0]


def sandbox() -> SimTopology:
    return load_topology(SANDBOX_TOPOLOGY)


def runs(
    algorithms: str, the_trace: Trace, policy: ReleasePolicy | None = None
) -> dict[str, tuple[SimResult, dict[str, Any]]]:
    """Run on the sandbox topology; name → (raw result, metrics with the outage block)."""
    topology = sandbox()
    results = simulate(
        topology, the_trace, parse_algorithms(algorithms), host=host(), policy=policy
    )
    document = report_document(the_trace, topology, results, Latencies(), deterministic=True)
    return {r.algorithm: (r, document["algorithms"][r.algorithm]) for r in results}


def h100_jobs(count: int, at: float, gpus: int = 2) -> list[TraceWorkload]:
    return [workload(f"h100-{i}", at + i, gpus=gpus, gpu_type=H100, run=60) for i in range(count)]


def starving_trace(until: float = math.inf) -> Trace:
    """worker-h100 down from 10 s; six 2-GPU H100-only jobs take the manager's 12 GPUs; four
    A100 jobs and two CPU jobs come after them."""
    a100 = [workload(f"a100-{i}", 30 + i, gpus=2, gpu_type=A100, run=60) for i in range(4)]
    cpu = [workload(f"cpu-{i}", 35 + i, gpus=0, run=60) for i in range(2)]
    down = FaultEvent("worker-h100", 10.0, until, outage=True)
    return trace(*h100_jobs(6, 20.0), *a100, *cpu, faults=[down])


def admitted(result: SimResult, prefix: str) -> list[str]:
    return [
        o.key.split("/")[1]
        for o in result.outcomes
        if o.key.split("/")[1].startswith(prefix) and o.first_admitted is not None
    ]


# --- the trace format and the flags ---------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(
            '{"outage": "worker-h100", "at": 15, "until": 600}',
            ("worker-h100", 15.0, 600.0),
            id="with-until",
        ),
        pytest.param(
            '{"outage": "worker-h100", "at": 15}', ("worker-h100", 15.0, math.inf), id="permanent"
        ),
        pytest.param(
            '{"fault": "worker-down", "cluster": "worker-cpu", "start": 1, "end": 2}',
            ("worker-cpu", 1.0, 2.0),
            id="fault-line",
        ),
    ],
)
def test_outage_lines_load_and_dump_back(line: str, expected: tuple[str, float, float]) -> None:
    loaded = parse_trace_lines([line, JOB], source="t.jsonl")
    [fault] = loaded.faults
    assert (fault.cluster, fault.start, fault.end) == expected
    assert fault.where == "t.jsonl:1"
    assert fault.outage == ("outage" in line)
    again = parse_trace_lines(dump_trace(loaded).splitlines(), source="again")
    assert again.faults == loaded.faults
    assert [f.outage for f in again.faults] == [f.outage for f in loaded.faults]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param('{"outage": "", "at": 1}', ":2: outage: a worker name", id="no-worker"),
        pytest.param('{"outage": 3, "at": 1}', ":2: outage: a worker name", id="worker-number"),
        pytest.param('{"outage": "w"}', ":2: at: required", id="no-at"),
        pytest.param('{"outage": "w", "at": -1}', ":2: at: required", id="negative-at"),
        pytest.param('{"outage": "w", "at": true}', ":2: at: required", id="boolean-at"),
        pytest.param(
            '{"outage": "w", "at": 5, "until": 5}', ":2: until: must be after", id="empty"
        ),
        pytest.param(
            '{"outage": "w", "at": 1, "until": "x"}', ":2: until: must be", id="until-text"
        ),
        pytest.param(
            '{"outage": "w", "at": 1, "end": 9}', ":2: end: unknown field of an outage", id="extra"
        ),
        pytest.param(
            '{"outage": "worker-h100", "at": 20, "until": 40}\n{"outage": "worker-h100", "at": 30}',
            ":3: worker-h100: down from 30 while already down (t.jsonl:2, until 40)",
            id="overlap",
        ),
    ],
)
def test_outage_errors_name_the_line_and_field(line: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        parse_trace_lines([JOB, *line.splitlines()], source="t.jsonl")
    assert f"t.jsonl{message}" in str(caught.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--outage", "worker-h100"], "expected WORKER:AT[:UNTIL]", id="no-time"),
        pytest.param(["--outage", ":5"], "expected WORKER:AT[:UNTIL]", id="no-worker"),
        pytest.param(["--outage", "worker-h100:x"], "AT: not a number", id="at-text"),
        pytest.param(["--outage", "worker-h100:-5"], "AT: must be a number", id="at-negative"),
        pytest.param(["--outage", "worker-h100:9:3"], "the end must be after", id="backwards"),
        pytest.param(["--outage", "worker-x:1"], "unknown worker 'worker-x'", id="unknown"),
        pytest.param(
            ["--outage", "worker-h100:1:50", "--outage", "worker-h100:20"],
            "--outage worker-h100:20: worker-h100: down from 20 while already down",
            id="overlap",
        ),
        pytest.param(
            ["--algorithms", "all-at-once@release"], "Kueue's built-in all-at-once", id="builtin"
        ),
        pytest.param(
            ["--unplaceable-patience", "0"], "unplaceable_patience_seconds: must be > 0", id="zero"
        ),
    ],
)
def test_outage_and_policy_flag_errors_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["simulate", "--generate", "5", "--algorithms", "all-at-once", *args]) == 2
    assert message in capsys.readouterr().err


def test_algorithm_names_with_the_policy() -> None:
    choices = parse_algorithms(f"{OURS},{RELEASE},plugin:all-at-once@release,all-at-once")
    assert [(c.name, c.kind, c.release) for c in choices] == [
        (OURS, "pipeline", False),
        (RELEASE, "pipeline", True),
        ("plugin:all-at-once@release", "pipeline", True),
        ("all-at-once", "all-at-once", False),
    ]
    assert choices[1].pipeline == ("gpu-type-affinity", "capacity-first")


# --- starvation without the policy, and the policy ------------------------------------------


@pytest.mark.parametrize("algorithm", [OURS, "all-at-once"])
def test_without_the_policy_placeable_work_starves_behind_the_holders(algorithm: str) -> None:
    result, metrics = runs(algorithm, starving_trace())[algorithm]
    outage = metrics["outage"]
    # The six H100-only jobs hold all 12 manager GPUs for as long as the outage lasts: no A100
    # job is ever admitted, though worker-a100 is empty the whole time. CPU work still runs.
    assert admitted(result, "a100-") == []
    assert sorted(admitted(result, "cpu-")) == ["cpu-0", "cpu-1"]
    assert admitted(result, "h100-") == []
    assert (outage["held"], outage["placeable_never_admitted"]) == (6, 4)
    assert (outage["starved"], outage["starved_never_admitted"]) == (4, 4)
    assert outage["released"] == 0
    starved = {o.key.split("/")[1] for o in result.outcomes if o.starved_s >= STARVED_AFTER_S}
    assert starved == {f"a100-{i}" for i in range(4)}


def test_with_the_policy_every_placeable_workload_is_admitted() -> None:
    result, metrics = runs(RELEASE, starving_trace())[RELEASE]
    outage = metrics["outage"]
    assert sorted(admitted(result, "a100-")) == [f"a100-{i}" for i in range(4)]
    assert (outage["placeable_never_admitted"], outage["starved"]) == (0, 0)
    # They did wait the patience (60 s) for the holders to be released: starving, not starved.
    assert outage["starving"] == 4
    a100_ttas = [o.tta for o in result.outcomes if "a100-" in o.key and o.tta is not None]
    assert all(45.0 <= t < 60.0 for t in a100_ttas), a100_ttas
    # Each holder released once, after the patience, and never restored (the worker stays down).
    assert (outage["released"], outage["released_workloads"], outage["restored"]) == (6, 6, 0)
    for release in result.releases:
        assert release.at - release.unplaceable_since == pytest.approx(60.0)
        assert (release.eligible, release.reachable, release.restored_at) == (
            ("worker-h100",),
            (),
            None,
        )


def test_released_workloads_are_restored_oldest_first_and_admitted_on_the_worker_back() -> None:
    # Two long A100 jobs fill worker-a100 and 8 of the manager's 12 GPUs, so the manager has
    # room for one 4-GPU H100 job at a time: each is reserved, unplaceable, released in turn.
    # Names run against arrival order: a restore that lost the queue position (creation
    # time) would tie and admit "a-third" first.
    blockers = [workload(f"a100-{i}", 0.0, gpus=4, gpu_type=A100, run=5000) for i in range(2)]
    jobs = [
        workload(name, at, gpus=4, gpu_type=H100, run=60)
        for name, at in (("c-first", 20.0), ("b-second", 21.0), ("a-third", 22.0))
    ]
    down = FaultEvent("worker-h100", 10.0, 500.0, outage=True)
    result, metrics = runs(RELEASE, trace(*blockers, *jobs, faults=[down]))[RELEASE]
    assert [r.key.split("/")[1] for r in result.releases] == ["c-first", "b-second", "a-third"]
    assert {r.restored_at for r in result.releases} == {500.0}
    order = sorted(
        (o for o in result.outcomes if "a100-" not in o.key),
        key=lambda o: o.first_admitted or math.inf,
    )
    assert [o.key.split("/")[1] for o in order] == ["c-first", "b-second", "a-third"]
    assert {o.cluster for o in order} == {"worker-h100"}
    assert all((o.first_admitted or 0.0) >= 500.0 for o in order)
    assert metrics["outage"]["restored"] == 3


@pytest.mark.parametrize(
    ("job", "outages"),
    [
        pytest.param(
            workload("prefers-h100", 20, preferred=[H100, A100]),
            [("worker-h100", 10.0, 5000.0)],
            id="prefers-h100-a100-allowed",
        ),
        pytest.param(workload("any-gpu", 20), [("worker-h100", 10.0, 5000.0)], id="any-gpu"),
        pytest.param(workload("cpu", 20, gpus=0), [("worker-h100", 10.0, 5000.0)], id="cpu-only"),
        pytest.param(
            workload("h100-short", 20, gpu_type=H100),
            [("worker-h100", 10.0, 70.0)],
            id="unplaceable-for-less-than-the-patience",
        ),
        pytest.param(
            workload("h100-a100-down", 20, gpu_type=H100),
            [("worker-a100", 10.0, 5000.0), ("worker-cpu", 10.0, 5000.0)],
            id="its-only-worker-is-up",
        ),
    ],
)
def test_the_policy_never_releases_a_placeable_workload(
    job: TraceWorkload, outages: list[tuple[str, float, float]]
) -> None:
    # worker-h100 is busy with a 4-GPU H100 job until 1000 s, so the H100 workloads wait for
    # quota there (placeable but not admitted) while other workers are down.
    blocker = workload("blocker", 0.0, gpus=4, gpu_type=H100, run=1000)
    down_h100 = any(w == "worker-h100" for w, _, _ in outages)
    items = [job] if down_h100 else [blocker, job]
    faults = [FaultEvent(w, a, b, outage=True) for w, a, b in outages]
    result, metrics = runs(RELEASE, trace(*items, faults=faults))[RELEASE]
    assert metrics["outage"]["released"] == 0
    assert all(o.first_admitted is not None for o in result.outcomes)


def test_no_release_in_the_issue_mix_sees_a_reachable_eligible_worker() -> None:
    mix = parse_trace_lines(MIX.read_text().splitlines(), source="mix")
    result, metrics = runs(RELEASE, mix)[RELEASE]
    assert metrics["outage"]["released_while_reachable"] == 0
    assert result.releases
    assert {r.key for r in result.releases} <= {o.key for o in result.outcomes if o.held}
    for release in result.releases:
        assert release.eligible == ("worker-h100",)
        assert release.reachable == ()
        assert release.unplaceable_since >= 15.0
        assert release.at < 600.0
        assert release.restored_at == 600.0


def test_the_policy_never_flaps_the_wait_doubles_after_each_restore() -> None:
    # worker-h100 comes back for one second at a time, too short for the restored job to be
    # admitted: it is unplaceable again at once; each release waits twice the one before.
    windows = [(10.0, 300.0), (301.0, 1000.0), (1001.0, 3000.0), (3001.0, 10_000.0)]
    faults = [FaultEvent("worker-h100", a, b, outage=True) for a, b in windows]
    job = workload("h100", 20.0, gpu_type=H100)
    policy = ReleasePolicy(unplaceable_patience_seconds=60.0, unplaceable_backoff_max_seconds=400)
    result, metrics = runs(RELEASE, trace(job, faults=faults), policy)[RELEASE]
    waits = [round(r.at - r.unplaceable_since, 3) for r in result.releases]
    assert waits == [60.0, 120.0, 240.0, 400.0]  # doubling, capped at the maximum
    assert [r.restored_at for r in result.releases] == [300.0, 1000.0, 3000.0, 10_000.0]
    assert metrics["outage"]["max_releases_per_workload"] == 4
    [outcome] = result.outcomes
    assert outcome.cluster == "worker-h100"
    assert (outcome.first_admitted or 0.0) >= 10_000.0


# --- the report -----------------------------------------------------------------------------

OUTAGE_KEYS = {
    "admitted_during_outage",
    "gpu_hours_during_outage",
    "held",
    "held_admitted",
    "held_wait_mean_s",
    "last_admission_s",
    "last_placeable_admission_s",
    "max_releases_per_workload",
    "placeable",
    "placeable_never_admitted",
    "released",
    "released_while_reachable",
    "released_workloads",
    "restored",
    "starved",
    "starved_never_admitted",
    "starved_s",
    "starving",
    "vs_all_at_once",
}
VERSUS_KEYS = {
    "admitted_during_outage_ratio",
    "gpu_hours_during_outage_ratio",
    "held_compared",
    "held_extra_delay_mean_s",
    "last_admission_ratio",
    "last_placeable_admission_ratio",
    "starved_minus",
}


def test_the_report_puts_each_algorithm_beside_all_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.json"
    args = ["simulate", "--trace", str(MIX), "--topology", str(SANDBOX_TOPOLOGY)]
    args += ["--algorithms", f"{OURS},all-at-once", "--unplaceable-release", "--deterministic"]
    assert main([*args, "--json", str(out)]) == 0
    capsys.readouterr()
    document = json.loads(out.read_text())
    assert set(document["algorithms"]) == {OURS, RELEASE, "all-at-once"}
    for metrics in document["algorithms"].values():
        assert set(metrics["outage"]) == OUTAGE_KEYS
        assert set(metrics["outage"]["vs_all_at_once"]) == VERSUS_KEYS
    base = document["algorithms"]["all-at-once"]["outage"]["vs_all_at_once"]
    assert (base["held_extra_delay_mean_s"], base["starved_minus"]) == (0.0, 0)
    assert base["last_admission_ratio"] == 1.0
    ours = document["algorithms"][OURS]["outage"]
    released = document["algorithms"][RELEASE]["outage"]
    assert ours["released"] == 0 < released["released"] == released["restored"]
    assert released["starved"] < ours["starved"]
    assert document["trace"]["faults"] == [
        {"cluster": "worker-h100", "start_s": 15.0, "end_s": 600.0}
    ]
    # The plain table: the outage table's header under the main table, one row per algorithm.
    text = render_table(document, outage=True).splitlines()
    title = next(i for i, line in enumerate(text) if line.startswith("outages:"))
    assert text[title].startswith("outages: worker-h100 15–600 s;")
    header = text[title + 1]
    assert [h.strip() for h in header.split("  ") if h.strip()] == [h for _, h in OUTAGE_COLUMNS]
    assert [row.split()[0] for row in text[title + 2 :]] == ["all-at-once", OURS, RELEASE]
    # Same inputs, same bytes.
    again = tmp_path / "b.json"
    assert main([*args, "--json", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()


def test_without_an_outage_line_or_the_policy_the_table_is_unchanged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A generated trace's fault (a legacy fault line) keeps the one-table output.
    assert main(["simulate", "--generate", "5", "--algorithms", "all-at-once"]) == 0
    assert "outages:" not in capsys.readouterr().out
    assert main(["simulate", "--generate", "5", "--algorithms", "all-at-once", "--outage",
                 "worker-h100:0:100"]) == 0  # fmt: skip
    assert "outages: worker-h100 0–100 s" in capsys.readouterr().out
