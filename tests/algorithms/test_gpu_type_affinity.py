"""gpu-type-affinity, alone and in the default pipeline (composed with capacity-first).

Aspects: required type through nodeSelector, required node affinity and per-type extended
resources; preferences in order; a full preferred cluster loses to a free less-preferred one;
admin override labels; strict vs lenient handling of clusters without GPU type information.
"""

from __future__ import annotations

import pytest

from dispatcher.algorithms import ClusterSnapshot
from dispatcher.kueue.gputypes import CLUSTER_GPU_TYPE_LABEL, CLUSTER_GPU_TYPE_PREFIX
from dispatcher.testing import (
    FlavorSpec,
    assert_decision,
    decide,
    dispatch_burst,
    make_cluster,
    make_pod_set,
    make_request,
)

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def _fleet(h100_used: int = 0, a100_used: int = 0) -> list[ClusterSnapshot]:
    return [
        make_cluster("worker-a100", gpus=8, used_gpus=a100_used, gpu_type=A100, order=0),
        make_cluster("worker-h100", gpus=4, used_gpus=h100_used, gpu_type=H100, order=1),
        make_cluster("worker-cpu", cpu=256, order=2),
    ]


@pytest.mark.parametrize(
    "request_kwargs",
    [
        pytest.param({"gpus": 1, "gpu_type": H100}, id="node-selector"),
        pytest.param(
            {"pod_sets": [make_pod_set(gpus=1, affinity_gpu_types=[H100])]}, id="node-affinity"
        ),
        pytest.param(
            {"pod_sets": [make_pod_set(gpus=1, affinity_gpu_types=[H100, "NVIDIA-H200"])]},
            id="node-affinity-either-type",
        ),
    ],
)
@pytest.mark.parametrize(
    ("h100_used", "expected"),
    [
        pytest.param(0, ["worker-h100"], id="h100-free"),
        pytest.param(4, ["worker-h100"], id="h100-full-still-never-a100"),
    ],
)
def test_h100_required_never_lands_on_a100(
    request_kwargs: dict[str, object], h100_used: int, expected: list[str]
) -> None:
    request = make_request(**request_kwargs)  # type: ignore[arg-type]
    decision = decide(request, _fleet(h100_used=h100_used))
    assert_decision(
        decision, nominate=expected, dropped={"worker-a100": "gpu-type", "worker-cpu": "gpu-type"}
    )
    assert "requires" in decision.verdict("worker-a100").reason


def test_h100_required_burst_never_touches_a100() -> None:
    requests = [make_request(f"h-{i}", gpus=1, gpu_type=H100) for i in range(12)]
    decisions = dispatch_burst(requests, _fleet())
    assert {d.nominate for d in decisions} == {("worker-h100",)}


@pytest.mark.parametrize(
    ("h100_used", "expected"),
    [
        pytest.param(0, "worker-h100", id="h100-free-takes-h100"),
        pytest.param(4, "worker-a100", id="h100-full-takes-a100"),
        pytest.param(3, "worker-h100", id="h100-one-left-takes-h100"),
    ],
)
def test_preferred_h100_then_a100(h100_used: int, expected: str) -> None:
    request = make_request(gpus=1, preferred=[H100, A100])
    decision = decide(request, _fleet(h100_used=h100_used))
    assert_decision(decision, nominate=[expected])


def test_preference_order_matters() -> None:
    request = make_request(gpus=1, preferred=[A100, H100])
    assert_decision(decide(request, _fleet()), nominate=["worker-a100"])


def test_gpu_type_affinity_alone_ignores_capacity() -> None:
    """Alone, the algorithm ranks by preference only; composition adds capacity."""
    request = make_request(gpus=1, preferred=[H100])
    decision = decide(request, _fleet(h100_used=4), names=["gpu-type-affinity"])
    assert_decision(decision, nominate=["worker-h100"])


def test_per_type_extended_resource() -> None:
    clusters = [
        make_cluster("a100s", gpus=8, gpu_resource="example.com/gpu-a100", order=0),
        make_cluster("h100s", gpus=8, gpu_resource="example.com/gpu-h100", order=1),
    ]
    request = make_request(gpus=2, gpu_resource="example.com/gpu-h100")
    assert request.required_gpu_types == frozenset({"h100"})
    assert_decision(decide(request, clusters), nominate=["h100s"], dropped={"a100s": "gpu-type"})


def test_mixed_cluster_uses_the_matching_flavor() -> None:
    mixed = make_cluster(
        "mixed",
        flavors=[
            FlavorSpec("a100", {"nvidia.com/gpu": 8}, node_labels={"nvidia.com/gpu.product": A100}),
            FlavorSpec(
                "h100",
                {"nvidia.com/gpu": 2},
                used={"nvidia.com/gpu": 2},
                node_labels={"nvidia.com/gpu.product": H100},
            ),
        ],
    )
    other = make_cluster("h100-spare", gpus=4, gpu_type=H100, order=1)
    request = make_request(gpus=1, gpu_type=H100)
    decision = decide(request, [mixed, other])
    # The A100 flavor of "mixed" has room, but the nodeSelector rules it out: H100 there is full.
    assert_decision(decision, nominate=["h100-spare"])
    assert decision.verdict("mixed").fits_now is False


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({CLUSTER_GPU_TYPE_LABEL: H100}, id="single-type-label"),
        pytest.param({CLUSTER_GPU_TYPE_PREFIX + H100: "true"}, id="per-type-label"),
    ],
)
def test_admin_override_labels(labels: dict[str, str]) -> None:
    # Flavors say nothing about the GPU type; the MultiKueueCluster labels do.
    unlabeled = make_cluster("labelled-by-admin", gpus=4, labels=labels)
    assert unlabeled.gpu_types == {H100}
    request = make_request(gpus=1, gpu_type=H100)
    decision = decide(request, [make_cluster("a100", gpus=8, gpu_type=A100), unlabeled])
    assert_decision(decision, nominate=["labelled-by-admin"], dropped={"a100": "gpu-type"})


@pytest.mark.parametrize(
    ("strict", "expected"),
    [
        pytest.param(True, [], id="strict-drops"),
        pytest.param(False, ["unknown"], id="lenient-keeps"),
    ],
)
def test_cluster_without_type_information(strict: bool, expected: list[str]) -> None:
    request = make_request(gpus=1, gpu_type=H100)
    decision = decide(
        request,
        [make_cluster("unknown", gpus=4)],
        options={"gpu-type-affinity": {"strict": strict}},
    )
    assert decision.nominate == tuple(expected)


def test_contradicting_pod_sets_are_unsatisfiable() -> None:
    request = make_request(
        pod_sets=[
            make_pod_set("a", gpus=1, gpu_type=H100),
            make_pod_set("b", gpus=1, gpu_type=A100),
        ]
    )
    assert request.required_gpu_types == frozenset()
    decision = decide(request, _fleet())
    assert decision.nominate == ()
    assert "contradict" in decision.verdict("worker-h100").reason
