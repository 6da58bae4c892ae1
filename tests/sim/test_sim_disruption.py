"""Least-disruption placement in the simulator (issue 18 item 1), and the metrics and variants
that compare it with today's capacity-first on one held trace: ``a+b#name`` runs the pipeline
with the options under ``#name`` laid over its own, and ``preemptions_per_1000`` and
``gpu_hours_lost`` count what preemption cost."""

from __future__ import annotations

import pytest

from dispatcher.kueue.hints import CLUSTER_NAMES
from dispatcher.sim.engine import parse_algorithms
from dispatcher.sim.trace import TraceWorkload
from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.sim import A100, run, trace

OURS = "gpu-type-affinity+capacity-first"
TODAY = f"{OURS}#today"
OPTIONS = {"#today": {"capacity-first": {"preemption": "ignore"}}}


def a100_job(
    name: str, arrival: float, gpus: int, priority: str, run: float, worker: str | None = None
) -> TraceWorkload:
    """A Job of ``gpus`` A100s; pinned to ``worker`` with the upstream cluster-names hint on its
    pod template."""
    data = {
        "name": name,
        "runSeconds": run,
        "requests": {"cpu": str(gpus), "memory": f"{gpus}Gi", "nvidia.com/gpu": gpus},
        "gpuType": A100,
        "priorityClass": priority,
        "podAnnotations": {CLUSTER_NAMES.key: worker} if worker else {},
    }
    return TraceWorkload(arrival, WorkloadLine.model_validate(data))


def contention() -> list[TraceWorkload]:
    """worker-a100-east (32 A100s, first in the MultiKueueConfig) full of 32 one-GPU low Jobs
    from t=0; worker-a100-west (16) full of one 16-GPU low Job from t=50 (both pinned with the
    cluster-names hint); at t=100 a 16-GPU high Job that fits nowhere now."""
    east = [a100_job(f"east-{i:02d}", 0.0, 1, "low", 7200, "worker-a100-east") for i in range(32)]
    west = a100_job("west", 50.0, 16, "low", 7200, "worker-a100-west")
    high = a100_job("high", 100.0, 16, "high", 600)
    return [*east, west, high]


def test_least_disruption_preempts_one_job_where_today_preempts_sixteen() -> None:
    results = run(f"{OURS},{TODAY}", trace(*contention()), options=OPTIONS)
    ours, today = results[OURS][1], results[TODAY][1]
    # Today: east first in order, 16 of its one-GPU Jobs preempted (16 GPUs x ~100 s).
    # Least disruption: west's single Job (16 GPUs x ~50 s), half the GPU-hours.
    assert (today["preemptions_on_workers"], ours["preemptions_on_workers"]) == (16, 1)
    assert ours["gpu_hours_lost"] < today["gpu_hours_lost"]
    assert today["gpu_hours_lost"] == pytest.approx(16 * 100 / 3600, abs=0.02)
    assert ours["gpu_hours_lost"] == pytest.approx(16 * 50 / 3600, abs=0.02)
    assert ours["preemptions_per_1000"] == pytest.approx(1000 * ours["preemptions"] / 34, abs=1e-3)


@pytest.mark.parametrize(
    ("text", "options", "expected"),
    [
        pytest.param(
            f"{OURS},{TODAY}",
            OPTIONS,
            [(OURS, {}), (TODAY, {"capacity-first": {"preemption": "ignore"}})],
            id="variant-over-nothing",
        ),
        pytest.param(
            f"{TODAY}@release",
            {"capacity-first": {"policy": "best-fit"}, **OPTIONS},
            [
                (
                    f"{OURS}#today@release",
                    {"capacity-first": {"policy": "best-fit", "preemption": "ignore"}},
                )
            ],
            id="variant-over-algorithm-options-with-release",
        ),
    ],
)
def test_a_variant_lays_its_options_over_the_algorithms(
    text: str, options: dict[str, dict[str, object]], expected: list[tuple[str, object]]
) -> None:
    got = [
        (c.name, {k: dict(v) for k, v in c.options.items()})
        for c in parse_algorithms(text, options)
    ]
    assert got == expected


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        pytest.param(TODAY, {}, "has no object under '#today'", id="variant-without-options"),
        pytest.param(
            TODAY,
            {"#today": {"incremental": {}}},
            "#today.incremental: not an object of options of an algorithm",
            id="variant-of-another-algorithm",
        ),
        pytest.param(
            "all-at-once#today",
            OPTIONS,
            "Kueue's built-in all-at-once takes no options",
            id="builtin",
        ),
    ],
)
def test_a_bad_variant_is_named(text: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_algorithms(text, options)  # type: ignore[arg-type]


def test_the_predicted_start_and_its_error_are_reported() -> None:
    """worker-a100-east's 32 GPUs run two waves of 32 one-GPU Jobs of 600 s (the first teaches
    the dispatcher how long its Jobs run); a 33rd Job pinned there waits for the second wave:
    predicted to start when it ends, and it does, within the simulated latencies."""
    east = "worker-a100-east"
    waves = [
        a100_job(f"wave{w}-{i:02d}", 650.0 * w, 1, "low", 600, east)
        for w in (0, 1)
        for i in range(32)
    ]
    late = a100_job("late", 700.0, 1, "low", 60, east)
    metrics = run(OURS, trace(*waves, late))[OURS][1]
    assert metrics["predicted_starts"] == 1
    assert metrics["predicted_start_error_p50_s"] < 5.0
    assert metrics["predicted_start_error_p90_s"] < 5.0
