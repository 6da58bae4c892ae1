"""dispatcher.kueue: quantities, views of raw v1beta2 objects, GPU types, flavor fit.

The raw dicts below use the v1beta2 field names of the Kueue CRDs (``spec.podSets[].template``,
``spec.resourceGroups[].flavors[].resources[].nominalQuota``, ``status.flavorsReservation``,
``spec.nodeLabels``, ``spec.clusterQueue``), so requests and snapshots are built the way the
controller will build them from mirrored objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dispatcher.algorithms import request_from_workload, snapshot_from_objects
from dispatcher.kueue.flavorfit import assign_flavors, available_now, capacity_ceiling
from dispatcher.kueue.gputypes import PREFERRED_GPU_TYPES_ANNOTATION
from dispatcher.kueue.objects import (
    parse_cluster_queue,
    parse_local_queue,
    parse_pod_set,
    parse_resource_flavor,
    parse_workload,
    pod_requests,
)
from dispatcher.kueue.quantities import QuantityError, format_quantity, parse_quantity
from dispatcher.testing import assert_decision, decide

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        pytest.param("1", 1000, id="one"),
        pytest.param("500m", 500, id="milli"),
        pytest.param("0.5", 500, id="decimal-fraction"),
        pytest.param("1.5Gi", 1536 * 2**20 * 1000, id="binary-suffix"),
        pytest.param("2k", 2_000_000, id="decimal-suffix"),
        pytest.param("1e3", 1_000_000, id="exponent"),
        pytest.param("1n", 1, id="sub-milli-rounds-up"),
        pytest.param(" 8 ", 8000, id="whitespace"),
        pytest.param(4, 4000, id="int"),
        pytest.param(0.25, 250, id="float"),
    ],
)
def test_parse_quantity(text: str | int | float, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("bad", ["", "abc", "1Qi", "--1", "1.2.3"])
def test_parse_quantity_rejects(bad: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_format_quantity() -> None:
    assert [format_quantity(m) for m in (2000, 1500, 0)] == ["2", "1500m", "0"]


def test_pod_requests_follow_kubernetes_rules() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "1"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "4"}}},
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {
        "cpu": 4100,  # max(1 + 0.5 + 0.25 sidecar, 4 init) + 0.1 overhead
        "memory": 2**30 * 1000,
        "nvidia.com/gpu": 1000,
    }


def _workload(
    pod_spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"namespace": "team-a", "name": "job-x", "annotations": annotations or {}},
        "spec": {
            "queueName": "user-queue",
            "priority": 100,
            "podSets": [{"name": "workers", "count": 2, "template": {"spec": pod_spec}}],
        },
        "status": {"nominatedClusterNames": ["worker-a"]},
    }


GPU_CONTAINER = {"resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}


@pytest.mark.parametrize(
    ("pod_spec", "annotations", "required", "preferred"),
    [
        pytest.param({"containers": [GPU_CONTAINER]}, None, None, (), id="no-constraint"),
        pytest.param(
            {"containers": [GPU_CONTAINER], "nodeSelector": {"nvidia.com/gpu.product": H100}},
            None,
            {H100},
            (),
            id="node-selector",
        ),
        pytest.param(
            {
                "containers": [GPU_CONTAINER],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "nvidia.com/gpu.product",
                                            "operator": "In",
                                            "values": [H100, "NVIDIA-H200"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
            None,
            {H100, "NVIDIA-H200"},
            (),
            id="required-node-affinity",
        ),
        pytest.param(
            {"containers": [{"resources": {"requests": {"example.com/gpu-h100": "1"}}}]},
            None,
            {"h100"},
            (),
            id="per-type-extended-resource",
        ),
        pytest.param(
            {"containers": [GPU_CONTAINER]},
            {PREFERRED_GPU_TYPES_ANNOTATION: f"{H100}, NVIDIA-A100-SXM4-80GB,{H100}"},
            None,
            (H100, "NVIDIA-A100-SXM4-80GB"),
            id="preferred-annotation-ordered-deduplicated",
        ),
    ],
)
def test_request_from_raw_workload(
    pod_spec: dict[str, Any],
    annotations: dict[str, str] | None,
    required: set[str] | None,
    preferred: tuple[str, ...],
) -> None:
    request = request_from_workload(_workload(pod_spec, annotations), now=50.0, nominated_at=20.0)
    assert request.key == "team-a/job-x"
    assert request.queue_name == "user-queue"
    assert request.priority == 100
    assert request.required_gpu_types == (None if required is None else frozenset(required))
    assert request.preferred_gpu_types == preferred
    assert request.nominated == ("worker-a",)
    assert request.nomination_age == 30.0


def test_workload_totals() -> None:
    view = parse_workload(_workload({"containers": [GPU_CONTAINER]}))
    assert view.total_requests == {"cpu": 4000, "nvidia.com/gpu": 2000}
    assert parse_pod_set({"name": "x", "count": 3, "template": {}}).total == {}


CLUSTER_QUEUE = {
    "metadata": {"name": "gpu-cq"},
    "spec": {
        "cohortName": "pool",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "h100",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "32"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 2},
                        ],
                    }
                ],
            }
        ],
    },
    "status": {
        "flavorsReservation": [
            {
                "name": "h100",
                "resources": [{"name": "nvidia.com/gpu", "total": "3", "borrowed": "0"}],
            }
        ],
        "pendingWorkloads": 2,
    },
}
PEER_QUEUE = {
    "metadata": {"name": "peer-cq"},
    "spec": {
        "cohortName": "pool",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "h100",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "0"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 4, "lendingLimit": 3},
                        ],
                    }
                ],
            }
        ],
    },
    "status": {
        "flavorsReservation": [
            {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "2"}]}
        ]
    },
}
FLAVOR = {
    "metadata": {"name": "h100"},
    "spec": {
        "nodeLabels": {"nvidia.com/gpu.product": H100},
        "nodeTaints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
    },
}
LOCAL_QUEUE = {
    "metadata": {"namespace": "team-a", "name": "user-queue"},
    "spec": {"clusterQueue": "gpu-cq"},
}


def test_cluster_queue_view_and_borrowing() -> None:
    cq = parse_cluster_queue(CLUSTER_QUEUE)
    assert cq.cohort == "pool"
    assert cq.pending_workloads == 2
    assert cq.quota("h100", "nvidia.com/gpu").borrowing_limit == 2000  # type: ignore[union-attr]
    key = ("h100", "nvidia.com/gpu")
    # Peer lends at most 3 of 4, and has 2 unused: room 2 now, 3 ever; our borrowing limit is 2.
    assert capacity_ceiling(cq, {key: 3000})[key] == 6000
    assert available_now(cq, {key: 2000})[key] == 3000
    assert (
        available_now(
            parse_cluster_queue(
                {**CLUSTER_QUEUE, "spec": {**CLUSTER_QUEUE["spec"], "cohortName": None}}
            )
        )[key]
        == 1000
    )


def test_snapshot_from_objects_follows_local_queue_to_cluster_queue() -> None:
    snapshot = snapshot_from_objects(
        "worker-h100",
        namespace="team-a",
        queue_name="user-queue",
        local_queues=[parse_local_queue(LOCAL_QUEUE)],
        cluster_queues=[parse_cluster_queue(CLUSTER_QUEUE), parse_cluster_queue(PEER_QUEUE)],
        flavors=[parse_resource_flavor(FLAVOR)],
    )
    assert snapshot.cluster_queue is not None
    assert snapshot.cluster_queue.name == "gpu-cq"
    assert snapshot.gpu_types == {H100}
    assert snapshot.cohort_room == {("h100", "cpu"): 0, ("h100", "nvidia.com/gpu"): 2000}
    assert snapshot.cohort_limit == {("h100", "cpu"): 0, ("h100", "nvidia.com/gpu"): 3000}

    missing = snapshot_from_objects(
        "w",
        namespace="team-b",
        queue_name="user-queue",
        local_queues=[parse_local_queue(LOCAL_QUEUE)],
    )
    assert missing.cluster_queue is None


def _gpu_pod_spec(tolerate: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [GPU_CONTAINER],
        "nodeSelector": {"nvidia.com/gpu.product": H100},
    }
    if tolerate:
        spec["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return spec


@pytest.mark.parametrize(
    ("tolerate", "expected"),
    [
        pytest.param(True, ["worker-h100"], id="tolerates-flavor-taint"),
        pytest.param(False, [], id="untolerated-taint"),
    ],
)
def test_end_to_end_from_raw_objects(tolerate: bool, expected: list[str]) -> None:
    request = request_from_workload(_workload(_gpu_pod_spec(tolerate)), now=0.0)
    request = dataclasses.replace(request, nominated=())
    snapshot = snapshot_from_objects(
        "worker-h100",
        namespace="team-a",
        queue_name="user-queue",
        local_queues=[parse_local_queue(LOCAL_QUEUE)],
        cluster_queues=[parse_cluster_queue(CLUSTER_QUEUE), parse_cluster_queue(PEER_QUEUE)],
        flavors=[parse_resource_flavor(FLAVOR)],
    )
    decision = decide(request, [snapshot])
    assert decision.nominate == tuple(expected)
    if tolerate:
        # 2 GPUs needed: 1 unreserved nominal + borrowed from the peer.
        assert decision.verdict("worker-h100").fits_now is True
        assert_decision(decision, nominate=expected)
    else:
        assert "untolerated taint gpu=true:NoSchedule" in decision.verdict("worker-h100").reason


def test_assign_flavors_tries_flavors_in_order() -> None:
    cq = parse_cluster_queue(
        {
            "metadata": {"name": "cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": 4}]},
                            {
                                "name": "on-demand",
                                "resources": [{"name": "cpu", "nominalQuota": 16}],
                            },
                        ],
                    }
                ]
            },
        }
    )
    flavors = {n: parse_resource_flavor({"metadata": {"name": n}}) for n in ("spot", "on-demand")}
    small = parse_pod_set(
        {
            "name": "a",
            "count": 2,
            "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "2"}}}]}},
        }
    )
    big = parse_pod_set(
        {
            "name": "b",
            "count": 3,
            "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "2"}}}]}},
        }
    )
    result = assign_flavors([small, big], cq, flavors, available_now(cq))
    assert result.fits
    assert result.flavors == {"a": {"cpu": "spot"}, "b": {"cpu": "on-demand"}}
    assert result.usage == {("spot", "cpu"): 4000, ("on-demand", "cpu"): 6000}
