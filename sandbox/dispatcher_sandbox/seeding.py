"""How a topology and a workload mix reach running clusters: through their API.

The pure part (what goes where) is :func:`dispatcher.topology.topology_objects`; this module
writes those objects with the test world's own client (:mod:`dispatcher_sandbox.kube_client`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from dispatcher.topology import (
    SANDBOX_FIELD_MANAGER,
    Topology,
    WorkloadLine,
    topology_objects,
    workload_object,
)
from dispatcher.topology.resources import JOBS, WORKLOADS, Resource
from dispatcher_sandbox.kube_client import KubeClient

Obj = dict[str, Any]


async def _apply(client: KubeClient, resource: Resource, body: Obj, field_manager: str) -> None:
    status = body.get("status")
    main = {k: v for k, v in body.items() if k != "status"}
    await client.apply(resource, main, field_manager=field_manager, force=True)
    if status is not None:
        await client.apply(
            resource,
            {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": body["metadata"]}
            | {"status": status},
            subresource="status",
            field_manager=field_manager,
            force=True,
        )


async def apply_topology(
    topology: Topology,
    clients: Mapping[str, KubeClient],
    worker_kubeconfigs: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    field_manager: str = SANDBOX_FIELD_MANAGER,
) -> int:
    """Create (or update) every object of the topology through the API of running clusters.

    ``clients`` maps every cluster name of the topology to a client of that cluster. Objects are
    written with server-side apply (force), so applying twice is harmless. Returns the number
    of objects written.
    """
    missing = [name for name in topology.cluster_names if name not in clients]
    if missing:
        raise ValueError(f"no client for cluster(s) {missing}")
    written = 0
    for name, objects in topology_objects(topology, worker_kubeconfigs).items():
        for resource, body in objects:
            await _apply(clients[name], resource, copy.deepcopy(body), field_manager)
            written += 1
    return written


async def submit_workloads(
    client: KubeClient,
    lines: Iterable[WorkloadLine],
    topology: Topology | None = None,
    *,
    field_manager: str = SANDBOX_FIELD_MANAGER,
) -> list[Obj]:
    """Create the Job or Workload of every line through the API (usually on the manager)."""
    created: list[Obj] = []
    for line in lines:
        body = workload_object(line, topology)
        resource = JOBS if body["kind"] == "Job" else WORKLOADS
        created.append(
            await client.request(
                "POST",
                resource.path(line.namespace),
                query={"fieldManager": field_manager},
                body=body,
            )
        )
    return created
