"""The real-Kueue mix harness's observer (``dispatcher_sandbox.real_kueue.mix``), without a control
plane: the clusters' watches are separate streams, so a worker's copy can be seen before its
manager Workload, and a copy that AllAtOnce made on a worker that lost may be gone before its
next event (``test_kueue_all_at_once_copies_to_every_worker_a_check_of_the_harness`` counted
2 copies of 3 once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dispatcher_sandbox.real_kueue.mix import ORIGIN_LABEL, _Observer


@dataclass
class _Cluster:
    name: str

    def client(self, user_agent: str) -> Any:
        return object()  # never used: the informers are not run here


@dataclass
class _Plane:
    manager: _Cluster
    clusters: list[_Cluster]


@dataclass
class _Running:
    plane: _Plane


def _observer() -> _Observer:
    manager = _Cluster("manager")
    running = _Running(_Plane(manager, [manager, _Cluster("worker1"), _Cluster("worker2")]))
    return _Observer(running, {"team-a/job"})  # type: ignore[arg-type]


def _manager_workload() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "job-abc",
            "namespace": "team-a",
            "ownerReferences": [{"kind": "Job", "name": "job", "controller": True}],
        },
        "status": {"nominatedClusterNames": ["worker1", "worker2"]},
    }


def _copy(admitted: bool, evicted: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Admitted", "status": "True"}] if admitted else []
    if evicted:
        conditions.append({"type": "Evicted", "status": "True"})
    return {
        "metadata": {
            "name": "job-abc",
            "namespace": "team-a",
            "labels": {ORIGIN_LABEL: "multikueue"},
        },
        "status": {"conditions": conditions},
    }


@pytest.mark.parametrize(
    "copies_first", [pytest.param(True, id="copies-first"), pytest.param(False, id="manager-first")]
)
def test_copies_count_whichever_stream_comes_first(copies_first: bool) -> None:
    observer = _observer()
    events = [
        ("worker2", _copy(admitted=True)),
        ("worker2", _copy(admitted=True, evicted=True)),
        ("worker1", _copy(admitted=True)),
    ]
    if copies_first:
        events.append(("manager", _manager_workload()))
    else:
        events.insert(0, ("manager", _manager_workload()))
    for cluster, obj in events:
        observer._seen(cluster, obj)
    item = observer.followed["team-a/job"]
    assert (item.copies, item.admitted_copy_on) == ({"worker1", "worker2"}, "worker1")
    assert item.evicted_on == {"worker2"}  # preempted there, then sent to worker1
    assert observer.early == {}


def _reserved(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True"}]
    return obj


def _unnominated() -> dict[str, Any]:
    obj = _manager_workload()
    obj["status"] = {}
    return obj


def test_milestones_are_the_times_each_was_first_seen_an_early_copy_keeping_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the time goes (``benchmarks/dispatch_real.py``): each milestone is the instant its
    first evidence arrived, also for a copy seen before its manager Workload, and a later event
    never moves one."""
    clock = iter(float(t) for t in range(1, 100))
    monkeypatch.setattr("dispatcher_sandbox.real_kueue.mix.time.monotonic", lambda: next(clock))
    observer = _observer()
    admitted = _manager_workload()
    admitted["status"]["clusterName"] = "worker1"
    events = [
        ("manager", _unnominated()),  # t=1: created
        ("manager", _reserved(_unnominated())),  # t=2: reserved
        ("worker1", _copy(admitted=False)),  # t=3: the copy, before the nomination (two streams)
        ("manager", _reserved(_manager_workload())),  # t=4: nominated
        ("worker1", _copy(admitted=True)),  # t=5: copy admitted
        ("worker2", _copy(admitted=True)),  # t=6: a second copy moves nothing
        ("manager", _reserved(admitted)),  # t=7: clusterName
        ("manager", _reserved(admitted)),  # t=8: moves nothing
    ]
    for cluster, obj in events:
        observer._seen(cluster, obj)
    item = observer.followed["team-a/job"]
    assert (
        item.created_at,
        item.reserved_at,
        item.copied_at,
        item.nominated_at,
        item.copy_admitted_at,
        item.admitted_at,
    ) == (1.0, 2.0, 3.0, 4.0, 5.0, 7.0)
