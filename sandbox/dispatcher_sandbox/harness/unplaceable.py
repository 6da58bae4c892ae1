"""The unplaceable-workload world (issue 17) the controller tests share: manager Workloads that
hold quota or starve behind it, and a pipeline stand-in keeping the clusters a workload's label
allows."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest, Verdict
from dispatcher.clusters.registry import WORKER_RESOURCES
from dispatcher.k8s.resources import LOCAL_QUEUES, WORKLOADS
from dispatcher_sandbox.harness.controller import (
    CHECK,
    ELIGIBLE_STATUS,
    KUEUE,
    MERGE,
    World,
    workload,
)

Obj = dict[str, Any]
ALLOWED = "test/allowed"


# Watch loops of a worker mirror: clusterqueues, localqueues, flavors, workloads, jobs.
W2_LOOPS = len(WORKER_RESOURCES)


STARVED_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
    "flavor default-flavor, 8 more needed"
)


def allowed_only(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
    """Keep the active clusters the workload's ``test/allowed`` label lists (all when it has
    none); nominate the first kept (the current nomination when it is still kept)."""
    allowed = request.labels.get(ALLOWED)
    names = set(allowed.split(".")) if allowed else None
    verdicts = []
    for snap in snapshots:
        if not snap.active:
            verdicts.append(Verdict(snap.name, False, "active", "inactive"))
        elif names is not None and snap.name not in names:
            verdicts.append(Verdict(snap.name, False, "allowed", "not allowed"))
        else:
            verdicts.append(Verdict(snap.name, True, rank=len([v for v in verdicts if v.kept])))
    kept = [v.cluster for v in verdicts if v.kept]
    chosen = tuple(n for n in request.nominated if n in kept) or tuple(kept[:1])
    return Decision("allowed-only", chosen, "kept" if chosen else "none kept", tuple(verdicts))


def holding(name: str, allowed: str, *, gpus: int = 8) -> Obj:
    """A manager Workload holding quota in ClusterQueue ``cq`` (what Kueue writes), allowed
    only on the workers ``allowed`` (dot-separated)."""
    return workload(
        name, requests={"cpu": "1", "nvidia.com/gpu": str(gpus)}, labels={ALLOWED: allowed}
    )


def reserved_status(gpus: int = 8) -> Obj:
    return {
        "conditions": copy.deepcopy(ELIGIBLE_STATUS["conditions"]),
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {"cpu": "default-flavor", "nvidia.com/gpu": "default-flavor"},
                    "resourceUsage": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                }
            ],
        },
        "admissionChecks": [
            {
                "name": CHECK,
                "state": "Pending",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }


PENDING_STATUS = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": STARVED_MESSAGE,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
}


async def add(env: World, obj: Obj, status: Obj) -> None:
    name = obj["metadata"]["name"]
    await env.api.create(WORKLOADS, obj, namespace="default")
    await env.api.request(
        "PATCH",
        WORKLOADS.path("default", name) + "/status",
        body={"status": status},
        content_type=MERGE,
    )


async def local_queue(env: World) -> None:
    await env.api.create(
        LOCAL_QUEUES,
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "user-queue", "namespace": "default"},
            "spec": {"clusterQueue": "cq"},
        },
        namespace="default",
    )
