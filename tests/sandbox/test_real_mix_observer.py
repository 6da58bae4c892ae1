"""The real-Kueue mix harness's observer (``dispatcher.sandbox.real.mix``), without a control
plane: the clusters' watches are separate streams, so a worker's copy can be seen before its
manager Workload, and a copy that AllAtOnce made on a worker that lost may be gone before its
next event (``test_kueue_all_at_once_copies_to_every_worker_a_check_of_the_harness`` counted
2 copies of 3 once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dispatcher.sandbox.real.mix import ORIGIN_LABEL, _Observer


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


def _copy(admitted: bool) -> dict[str, Any]:
    conditions = [{"type": "Admitted", "status": "True"}] if admitted else []
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
    events = [("worker1", _copy(admitted=True)), ("worker2", _copy(admitted=False))]
    if copies_first:
        events.append(("manager", _manager_workload()))
    else:
        events.insert(0, ("manager", _manager_workload()))
    for cluster, obj in events:
        observer._seen(cluster, obj)
    item = observer.followed["team-a/job"]
    assert (item.copies, item.admitted_copy_on) == ({"worker1", "worker2"}, "worker1")
    assert observer.early == {}
