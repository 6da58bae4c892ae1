"""The dispatcher end to end on the sandbox: fake clusters, emulated Kueue, the real manager
process over HTTPS (issue 5 "must show")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatcher.topology import default_topology, demo_workloads
from dispatcher_sandbox.environment import environment

pytestmark = pytest.mark.slow

GPU_OF_CLUSTER = {
    "worker-a100": "NVIDIA-A100-SXM4-80GB",
    "worker-h100": "NVIDIA-H100-80GB-HBM3",
    "worker-cpu": None,
}


def job_name(workload: dict[str, Any]) -> str:
    owners = workload["metadata"].get("ownerReferences") or []
    return str(owners[0]["name"]) if owners else workload["metadata"]["name"]


def admitted(workloads: list[dict[str, Any]], count: int) -> bool:
    placed = [w for w in workloads if (w.get("status") or {}).get("clusterName")]
    return len(workloads) >= count and len(placed) >= count


async def test_default_topology_mix_lands_on_matching_gpu_types(
    tmp_path: Path, crds_dir: Path
) -> None:
    lines = [line for line in demo_workloads() if line.name != "too-big"]
    async with environment(tmp_path, default_topology(), crds=crds_dir) as env:
        await env.submit(lines)
        workloads = await env.wait_for_manager(lambda ws: admitted(ws, len(lines)), within=90)
        placed = {job_name(w): w["status"]["clusterName"] for w in workloads}
        by_name = {line.name: line for line in lines}
        for name, cluster in placed.items():
            line = by_name[name]
            if line.gpu_type is not None:
                assert GPU_OF_CLUSTER[cluster] == line.gpu_type, (name, cluster)
            if line.preferred_gpu_types:
                assert GPU_OF_CLUSTER[cluster] in line.preferred_gpu_types, (name, cluster)
            # The nomination is cleared in the admission write (C36, S5).
        assert all(not (w["status"].get("nominatedClusterNames")) for w in workloads)
        # Remote copies per admitted workload (C51): Kueue's dispatched counter over the
        # workloads that have a clusterName.
        copies_per_admitted = env.kueue.manager.dispatched() / len(placed)
        assert copies_per_admitted <= 1.1
        # Every decision is explained by an Event on the Workload.
        events = await env.manager_client.request("GET", "/api/v1/events")
        explained = {
            e["involvedObject"]["name"]
            for e in events["items"]
            if e.get("reason") == "Nominated"
            and (e.get("source") or {}).get("component") == "multikueue-dispatcher"
        }
        assert {w["metadata"]["name"] for w in workloads} <= explained
