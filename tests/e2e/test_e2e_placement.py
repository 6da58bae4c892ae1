"""Issue 18's placement checks end to end, on every backend (sandbox, real Kueue).

Item 4, the verified GPU type: after admission the dispatcher compares the flavor the worker
assigned with the GPU type the workload required or preferred. The mismatch is provoked by a
MultiKueueCluster mislabelled on purpose: worker2's says it offers A100s (the admin override
label ``multikueue-dispatcher.io/gpu-type``), while its only flavor, ``h100``, is labelled
H100 (``tests/e2e/topology.yaml``).
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.kueue.gputypes import CLUSTER_GPU_TYPE_LABEL
from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import (
    A100,
    H100,
    NAMESPACE,
    ApiBackend,
    Backend,
    admitted_on,
    listed_events,
    manager_events,
    patch_multikueue_cluster,
)

pytestmark = [pytest.mark.slow, pytest.mark.crds]


@pytest.fixture(autouse=True)
async def clean(backend: Backend) -> None:
    """Every test starts with no Jobs and no Workloads on any cluster."""
    await backend.reset()


def gpu_job(name: str, gpus: int, **extra: Any) -> WorkloadLine:
    data: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "count": 1,
        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus},
        **extra,
    }
    return WorkloadLine.model_validate(data)


async def label_cluster(backend: ApiBackend, cluster: str, value: str | None) -> None:
    """Set (or, with None, remove) the GPU-type override label of a MultiKueueCluster."""
    await patch_multikueue_cluster(backend, cluster, {"labels": {CLUSTER_GPU_TYPE_LABEL: value}})


async def test_item4_a_gpu_type_mismatch_is_surfaced_as_a_warning_event(
    backend: ApiBackend,
) -> None:
    """A Job that requires H100s is admitted on worker2's ``h100``: verified, no Event. Then
    worker2's MultiKueueCluster is mislabelled (it says A100), and a Job that prefers A100s and
    needs three GPUs, which fits only worker2 (worker1 has 2), is admitted there on ``h100``
    too. The dispatcher reports a Warning ``GPUTypeMismatch`` naming the flavor, its type, the
    preference and the label's claim; the first Job, admitted and checked before it, still
    has none."""
    await backend.submit(gpu_job("gpu-requires-h100", 1, gpuType=H100))
    required = await backend.wait_workload(
        "gpu-requires-h100", admitted_on("worker2"), "admitted on worker2", backend.timeouts.long
    )
    await label_cluster(backend, "worker2", A100)
    try:
        await backend.submit(gpu_job("gpu-prefers-a100", 3, preferredGpuTypes=[A100]))
        admitted = await backend.wait_workload(
            "gpu-prefers-a100", admitted_on("worker2"), "admitted on worker2", backend.timeouts.long
        )
        name = str(admitted["metadata"]["name"])
        found = await manager_events(backend, name, "GPUTypeMismatch", backend.timeouts.short)
    finally:
        await label_cluster(backend, "worker2", None)
    [event] = found
    assert event["type"] == "Warning"
    assert event["message"] == (
        f"GPU type mismatch on worker2: the worker assigned flavor h100 ({H100}); the "
        f"workload prefers {A100} (its MultiKueueCluster's labels say it offers {A100}: "
        "mislabelled?)"
    )
    # The first Job was admitted, and checked, before the second was submitted.
    first = str(required["metadata"]["name"])
    assert await listed_events(backend, first, "GPUTypeMismatch") == []
