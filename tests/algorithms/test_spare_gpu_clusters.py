"""CPU-only work prefers clusters without GPUs (gpu-type-affinity ``spare_gpu_clusters``)."""

from __future__ import annotations

import pytest

from dispatcher.testing import decide, make_cluster, make_request

A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("request_kwargs", "cpu_farm_cpu", "options", "expected"),
    [
        pytest.param({"cpu": 8}, 32, None, "cpu-farm", id="cpu-only-goes-to-the-cpu-farm"),
        pytest.param(
            {"cpu": 8}, 4, None, "a100", id="cpu-only-falls-back-when-the-farm-is-too-small"
        ),
        pytest.param(
            {"cpu": 8, "gpus": 1}, 32, None, "a100", id="gpu-work-is-not-sent-to-the-farm"
        ),
        pytest.param(
            {"cpu": 8},
            32,
            {"gpu-type-affinity": {"spare_gpu_clusters": False}},
            "a100",
            id="switched-off-most-free-wins",
        ),
    ],
)
def test_spare_gpu_clusters(
    request_kwargs: dict[str, int],
    cpu_farm_cpu: int,
    options: dict[str, dict[str, object]] | None,
    expected: str,
) -> None:
    clusters = [
        make_cluster("a100", cpu=128, gpus=8, gpu_type=A100, order=0),
        make_cluster("cpu-farm", cpu=cpu_farm_cpu, order=1),
    ]
    decision = decide(make_request(**request_kwargs), clusters, options=options)
    assert decision.nominate == (expected,)
