"""Kueue's built-in dispatchers as the simulator models them (contract C56–C61, S10)."""

from __future__ import annotations

import pytest

from dispatcher.sim.engine import Latencies
from dispatcher.sim.trace import FaultEvent
from dispatcher_sandbox.harness.sim import A100, H100, run, trace, workload

WORKERS = 5  # the default simulator topology


@pytest.mark.parametrize(
    ("faults", "eligible"),
    [
        pytest.param((), WORKERS, id="all-workers-connected"),
        pytest.param((FaultEvent("worker-l4", 0.0, 5000.0),), WORKERS - 1, id="one-worker-down"),
    ],
)
def test_c56_all_at_once_copies_equal_eligible_workers(
    faults: tuple[FaultEvent, ...], eligible: int
) -> None:
    items = [workload(f"wl-{i}", 10.0 + i, gpus=1) for i in range(4)]
    result, metrics = run("all-at-once", trace(*items, faults=faults))["all-at-once"]
    assert metrics["admitted"] == 4
    assert result.copies_created == 4 * eligible
    assert metrics["copies_per_dispatch"] == eligible


def test_c57_all_at_once_first_admission_wins_and_losers_are_deleted() -> None:
    result, metrics = run("all-at-once", trace(workload("one", 5.0, gpus=1)))["all-at-once"]
    assert metrics["admitted"] == 1
    # Every GPU worker admitted its copy in the same cycle; the earliest (ties: config order)
    # won, and the three other reservations were waste until their copies were deleted.
    assert result.wasted_reservations == 3
    assert metrics["admitted_by_cluster"] == {"worker-a100-east": 1}
    assert result.copies_created == WORKERS


@pytest.mark.parametrize(
    ("step_size", "gpu_type", "clusters_tried", "rounds_waited"),
    [
        # Config order: a100-east, a100-west, h100, l4, cpu. An H100 job fits only the third.
        pytest.param(1, H100, 3, 2, id="step-1-h100-third-in-config-order"),
        pytest.param(1, A100, 1, 0, id="step-1-a100-first-in-config-order"),
        pytest.param(3, H100, 3, 0, id="step-3-h100-in-first-round"),
        pytest.param(2, H100, 4, 1, id="step-2-h100-in-second-round"),
    ],
)
def test_c59_incremental_one_round_per_five_minutes_in_config_order(
    step_size: int, gpu_type: str, clusters_tried: int, rounds_waited: int
) -> None:
    latencies = Latencies(incremental_step_size=step_size)
    result, metrics = run(
        "incremental", trace(workload("job", 0.0, gpu_type=gpu_type)), latencies=latencies
    )["incremental"]
    assert metrics["admitted"] == 1
    assert result.copies_created == clusters_tried
    tta = result.outcomes[0].tta
    assert tta is not None
    assert rounds_waited * 300.0 <= tta < rounds_waited * 300.0 + 5.0


def test_c61_incremental_nominates_a_down_cluster_and_wastes_its_round() -> None:
    # a100-east is down: Incremental (connectivity not checked) still spends round 1 on it.
    down = (FaultEvent("worker-a100-east", 0.0, 10_000.0),)
    result, metrics = run("incremental", trace(workload("job", 1.0, gpu_type=A100), faults=down))[
        "incremental"
    ]
    assert metrics["admitted_by_cluster"] == {"worker-a100-west": 1}
    tta = result.outcomes[0].tta
    assert tta is not None
    assert 300.0 <= tta < 305.0


def test_s10_capacity_first_makes_one_copy_where_incremental_walks_the_list() -> None:
    items = [workload(f"h-{i}", 10.0 * i, gpu_type=H100) for i in range(5)]
    runs = run("gpu-type-affinity+capacity-first,incremental,all-at-once", trace(*items))
    ours = runs["gpu-type-affinity+capacity-first"][1]
    assert ours["copies_per_admitted"] == 1.0
    assert ours["tta_p95_s"] < 5.0
    assert runs["incremental"][1]["tta_p95_s"] >= 600.0
    assert runs["all-at-once"][1]["copies_per_admitted"] == WORKERS
