"""Fault events: a worker down for a period (the simulator's model of C29 and S8)."""

from __future__ import annotations

import pytest

from dispatcher.sim.engine import Latencies
from dispatcher.sim.trace import FaultEvent
from dispatcher_sandbox.harness.sim import A100, run, trace, workload

PIPELINE = "gpu-type-affinity+capacity-first"


@pytest.mark.parametrize("algorithm", [PIPELINE, "all-at-once", "incremental"])
def test_c29_a_lost_winner_is_requeued_after_worker_lost_timeout(algorithm: str) -> None:
    # An 8-GPU A100 job lands on worker-a100-east (first in config order / most free); the
    # worker goes down at t=100 while it runs; Kueue notices after workerLostTimeout (900 s).
    job = workload("big", 0.0, gpus=8, gpu_type=A100, run=3000.0)
    down = FaultEvent("worker-a100-east", 100.0, 20_000.0)
    result, metrics = run(algorithm, trace(job, faults=[down]))[algorithm]
    outcome = result.outcomes[0]
    assert outcome.cluster == "worker-a100-east"
    assert outcome.requeues == 1
    assert metrics["admissions"] == 2
    second = [i for i in result.intervals if i.start > 100.0]
    assert [i.cluster for i in second] == ["worker-a100-west"]
    # Requeued after the timeout, not before; Incremental walks its list from the head again
    # and wastes a round on the down cluster (C61).
    wait = 300.0 if algorithm == "incremental" else 0.0
    assert 1000.0 + wait <= second[0].start < 1010.0 + wait
    assert outcome.finished is not None


def test_s8_the_dispatcher_leaves_a_down_worker_out_and_uses_it_again() -> None:
    down = FaultEvent("worker-a100-east", 0.0, 1000.0)
    during = [workload(f"during-{i}", 10.0 + i, gpus=1, gpu_type=A100) for i in range(3)]
    after = [workload(f"after-{i}", 1100.0 + i, gpus=1, gpu_type=A100) for i in range(3)]
    result, metrics = run(PIPELINE, trace(*during, *after, faults=[down]))[PIPELINE]
    where = {o.key.split("/")[1]: o.cluster for o in result.outcomes}
    assert {where[f"during-{i}"] for i in range(3)} == {"worker-a100-west"}
    assert where["after-0"] == "worker-a100-east"  # back, and the most free again
    assert metrics["copies_per_admitted"] == 1.0


def test_all_at_once_re_broadcasts_when_a_worker_comes_back() -> None:
    # Every GPU worker is full of 8-GPU jobs except a100-east, which is down: the H100 job's
    # copies wait; when a100-east is back it gets a copy too (C56: the set is recomputed).
    down = FaultEvent("worker-a100-east", 0.0, 500.0)
    result, _ = run("all-at-once", trace(workload("job", 10.0, gpus=1), faults=[down]))[
        "all-at-once"
    ]
    assert result.copies_created == 4  # admitted at once on a connected worker
    lat = Latencies(worker_lost_timeout_s=60.0)
    assert lat.worker_lost_timeout_s == 60.0
