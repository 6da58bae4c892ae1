"""``evaluate_available``: the admission model seen from the dispatcher (one ClusterQueue, what it
can reserve now, the workloads holding quota in it) agrees with the full model
(:func:`evaluate`) on mode and victims, for a ClusterQueue without a cohort (where the two views
hold the same facts), on seeded random queues; and it follows C72's rule on borrowing.
"""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest

from dispatcher.kueue.admission import (
    PendingWorkload,
    QuotaSnapshot,
    ReservingWorkload,
    evaluate,
    evaluate_available,
)
from dispatcher.kueue.objects import (
    ClusterQueueView,
    parse_cluster_queue,
    parse_pod_set,
    parse_resource_flavor,
)
from dispatcher.kueue.quantities import MILLI

GPU = "nvidia.com/gpu"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
FLAVORS = {"f": parse_resource_flavor({"metadata": {"name": "f"}, "spec": {}})}
POLICIES = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]


def queue(gpus: int, policy: str, **more: Any) -> ClusterQueueView:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": gpus}]}],
            }
        ],
        "preemption": {"withinClusterQueue": policy},
        **more,
    }
    return parse_cluster_queue({"metadata": {"name": "cq"}, "spec": spec})


def pending(gpus: int, priority: int) -> PendingWorkload:
    pod_set = parse_pod_set(
        {
            "name": "main",
            "count": 1,
            "template": {
                "spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: gpus}}}]}
            },
        }
    )
    # Newer than every holder, as a copy created when it is nominated.
    return PendingWorkload("ns/new", "cq", (pod_set,), priority, T0 + datetime.timedelta(days=1))


def holder(index: int, gpus: int, priority: int, evicting: bool = False) -> ReservingWorkload:
    moment = T0 + datetime.timedelta(seconds=index)
    return ReservingWorkload(
        key=f"ns/h{index:02d}",
        cluster_queue="cq",
        usage={("f", GPU): gpus * MILLI},
        priority=priority,
        reserved_at=moment,
        queued_at=moment,
        evicting=evicting,
    )


def random_case(seed: int) -> tuple[ClusterQueueView, PendingWorkload, list[ReservingWorkload]]:
    rng = random.Random(seed)
    quota = rng.randint(1, 8)
    holders, used = [], 0
    for index in range(rng.randint(0, 6)):
        gpus = rng.randint(1, 3)
        if used + gpus > quota:
            break
        used += gpus
        holders.append(holder(index, gpus, rng.choice([0, 5, 10]), rng.random() < 0.15))
    return (
        queue(quota, rng.choice(POLICIES)),
        pending(rng.randint(1, quota), rng.choice([0, 5, 10, 20])),
        holders,
    )


@pytest.mark.parametrize("seed", range(300))
def test_agrees_with_the_full_model_without_a_cohort(seed: int) -> None:
    cq, workload, holders = random_case(seed)
    snapshot = QuotaSnapshot.build([cq], holders)
    full = evaluate(workload, snapshot, FLAVORS, cq.policy, holders)
    seen = evaluate_available(workload, cq, FLAVORS, snapshot.availability("cq"), holders)
    assert (seen.mode, [v.key for v in seen.victims]) == (
        full.mode,
        [v.key for v in full.victims],
    )


def test_the_seeded_cases_cover_every_mode() -> None:
    modes = set()
    for seed in range(300):
        cq, workload, holders = random_case(seed)
        available = QuotaSnapshot.build([cq], holders).availability("cq")
        modes.add(evaluate_available(workload, cq, FLAVORS, available, holders).mode)
    assert modes == {"fit", "preempt", "wait"}


@pytest.mark.parametrize(
    ("borrow", "mode"),
    [
        pytest.param(None, "wait", id="c72-no-borrow-within-cohort-waits"),
        pytest.param("LowerPriority", "preempt", id="c72-borrow-within-cohort-preempts"),
    ],
)
def test_c72_a_preemptor_above_nominal_preempts_only_with_borrow_within_cohort(
    borrow: str | None, mode: str
) -> None:
    preemption: dict[str, Any] = {"withinClusterQueue": "LowerPriority"}
    if borrow:
        preemption["borrowWithinCohort"] = {"policy": borrow}
    cq = queue(2, "LowerPriority", cohortName="pool", preemption=preemption)
    holders = [holder(0, 2, 0)]
    # 2 GPUs of its own, 1 more the cohort would lend now: 3 fits only by borrowing.
    available = {("f", GPU): 1 * MILLI}
    result = evaluate_available(pending(3, 10), cq, FLAVORS, available, holders)
    assert result.mode == mode
    if mode == "preempt":
        assert [v.key for v in result.victims] == ["ns/h00"]
