"""Topologies for the simulator: the topology files the sandbox also serves, as Kueue views.

The simulator reads the same topology YAML as ``sandbox serve`` (:mod:`dispatcher.topology`): the
objects that would be created on each cluster (:func:`~dispatcher.topology.topology_objects`) are
parsed with the production views of :mod:`dispatcher.kueue.objects`, so a ClusterQueue means the
same to the simulator, the emulator and the dispatcher.

One key is added for the simulator, at the top level of the file and removed before the sandbox
validates the rest: ``clusterLabels: {WORKER: {LABEL: VALUE}}``, the labels of each worker's
MultiKueueCluster object (admin hints such as ``multikueue-dispatcher.io/gpu-type`` or
``multikueue-dispatcher.io/cost``, which algorithms read from the snapshots).

Which GPU a worker really has (to count GPU-type mismatches) comes from its **nodes**: a flavor's
hardware types are its own ``nvidia.com/gpu.product`` node label when it has one, else the labels
of the worker's nodes that the flavor's ``nodeLabels`` select.

:func:`default_topology` is the simulator's default: five workers with mixed GPU types, one of
them (``worker-l4``) with an unlabelled flavor, as clusters that share one ``default-flavor``
name often have; only its MultiKueueCluster label tells the dispatcher what GPU it offers.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dispatcher.kueue.admission import QueuePolicy, parse_queue_policy
from dispatcher.kueue.gputypes import CLUSTER_GPU_TYPE_LABEL, DEFAULT_GPU_LABEL
from dispatcher.kueue.hints import Taint, parse_taint_list
from dispatcher.kueue.objects import (
    ClusterQueueView,
    InvalidField,
    LocalQueueView,
    ResourceFlavorView,
    frozen_map,
    parse_cluster_queue,
    parse_local_queue,
    parse_resource_flavor,
)
from dispatcher.topology import (
    Topology,
    TopologyError,
    parse_topology,
    topology_objects,
)

__all__ = [
    "CLUSTER_LABELS_KEY",
    "CLUSTER_TAINTS_KEY",
    "GPU_RESOURCE",
    "ClusterModel",
    "SimTopology",
    "default_topology",
    "load_topology",
    "scaled_topology",
    "sim_topology",
    "topology_yaml",
]

CLUSTER_LABELS_KEY = "clusterLabels"
"""Top-level topology key for MultiKueueCluster labels (simulator only)."""
CLUSTER_TAINTS_KEY = "clusterTaints"
"""Top-level topology key for MultiKueueCluster taints (simulator only): worker name → list of
``{key, value, effect}``, as the ``multikueue-dispatcher.io/cluster-taints`` annotation holds
them on a real MultiKueueCluster (:mod:`dispatcher.kueue.hints`)."""
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class ClusterModel:
    """One cluster's Kueue setup: ClusterQueues (quota only), flavors, LocalQueues."""

    name: str
    order: int
    """Position in the MultiKueueConfig (-1 for the manager)."""
    queues: Mapping[str, ClusterQueueView]
    policies: Mapping[str, QueuePolicy]
    flavors: Mapping[str, ResourceFlavorView]
    local_queues: tuple[LocalQueueView, ...]
    labels: Mapping[str, str]
    """MultiKueueCluster labels (workers)."""
    hardware: Mapping[str, frozenset[str]]
    """Flavor name → GPU types its nodes really have."""
    taints: tuple[Taint, ...] = ()
    """MultiKueueCluster taints (workers)."""

    def cluster_queue_of(self, namespace: str, queue: str) -> str | None:
        """The ClusterQueue behind LocalQueue ``namespace/queue`` (``None`` if there is none)."""
        for lq in self.local_queues:
            if lq.namespace == namespace and lq.name == queue and not lq.stopped:
                return lq.cluster_queue if lq.cluster_queue in self.queues else None
        return None

    def capacity(self, resource: str) -> int:
        """Nominal quota of ``resource`` over all ClusterQueues, in milli-units."""
        return sum(
            quota.nominal
            for cq in self.queues.values()
            for group in cq.resource_groups
            for fq in group.flavors
            for name, quota in fq.resources.items()
            if name == resource
        )

    def gpu_capacity_by_type(self) -> dict[str, int]:
        """GPU quota (milli-units) per hardware GPU type ("unknown" when no node says)."""
        out: dict[str, int] = {}
        for cq in self.queues.values():
            for group in cq.resource_groups:
                for fq in group.flavors:
                    quota = fq.resources.get(GPU_RESOURCE)
                    if quota is None or quota.nominal == 0:
                        continue
                    types = sorted(self.hardware.get(fq.name, frozenset())) or ["unknown"]
                    out[types[0]] = out.get(types[0], 0) + quota.nominal
        return out


@dataclass(frozen=True)
class SimTopology:
    """The manager and the workers (in MultiKueueConfig order) of a simulation."""

    topology: Topology
    """The validated sandbox topology (workload objects use its priority classes)."""
    manager: ClusterModel
    workers: tuple[ClusterModel, ...]
    source: str = "default"

    def worker(self, name: str) -> ClusterModel:
        """A worker by name."""
        for worker in self.workers:
            if worker.name == name:
                return worker
        raise KeyError(name)


def _hardware(
    flavors: Mapping[str, ResourceFlavorView], nodes: Sequence[Mapping[str, str]]
) -> dict[str, frozenset[str]]:
    out = {}
    for name, flavor in flavors.items():
        if DEFAULT_GPU_LABEL in flavor.node_labels:
            out[name] = frozenset({flavor.node_labels[DEFAULT_GPU_LABEL]})
            continue
        selected = [n for n in nodes if all(n.get(k) == v for k, v in flavor.node_labels.items())]
        out[name] = frozenset(n[DEFAULT_GPU_LABEL] for n in selected if DEFAULT_GPU_LABEL in n)
    return out


def _model(
    name: str,
    order: int,
    objects: Sequence[tuple[Any, Mapping[str, Any]]],
    labels: Mapping[str, str],
    nodes: Sequence[Mapping[str, str]],
) -> ClusterModel:
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for _, body in objects:
        by_kind.setdefault(str(body.get("kind")), []).append(body)
    queues = {}
    policies = {}
    for raw in by_kind.get("ClusterQueue", []):
        view = parse_cluster_queue(raw)
        queues[view.name] = view
        policies[view.name] = parse_queue_policy(raw)
    flavors = {v.name: v for v in map(parse_resource_flavor, by_kind.get("ResourceFlavor", []))}
    return ClusterModel(
        name=name,
        order=order,
        queues=frozen_map(queues),
        policies=frozen_map(policies),
        flavors=frozen_map(flavors),
        local_queues=tuple(parse_local_queue(q) for q in by_kind.get("LocalQueue", [])),
        labels=frozen_map(dict(labels)),
        hardware=frozen_map(_hardware(flavors, nodes)),
    )


def sim_topology(
    topology: Topology,
    cluster_labels: Mapping[str, Mapping[str, str]] | None = None,
    *,
    source: str = "topology",
    cluster_taints: Mapping[str, tuple[Taint, ...]] | None = None,
) -> SimTopology:
    """Build the simulator's view of a validated sandbox topology."""
    labels = cluster_labels or {}
    taints = cluster_taints or {}
    for key, given in ((CLUSTER_LABELS_KEY, labels), (CLUSTER_TAINTS_KEY, taints)):
        unknown = sorted(set(given) - {w.name for w in topology.workers})
        if unknown:
            raise TopologyError(f"{source}: {key}: no worker named {unknown[0]!r}")
    objects = topology_objects(topology)
    order = topology.multikueue_order()
    workers = []
    for name in order:
        worker = topology.worker(name)
        nodes = [dict(n.labels) for n in worker.nodes]
        model = _model(name, order.index(name), objects[name], labels.get(name, {}), nodes)
        workers.append(dataclasses.replace(model, taints=taints.get(name, ())))
    manager = _model(topology.manager.name, -1, objects[topology.manager.name], {}, [])
    return SimTopology(topology, manager, tuple(workers), source=source)


def _from_data(data: Any, source: str) -> SimTopology:
    if not isinstance(data, Mapping):
        raise TopologyError(f"{source}: a topology must be a mapping")
    body = dict(data)
    raw_labels = body.pop(CLUSTER_LABELS_KEY, None) or {}
    if not isinstance(raw_labels, Mapping) or not all(
        isinstance(v, Mapping) for v in raw_labels.values()
    ):
        raise TopologyError(f"{source}: {CLUSTER_LABELS_KEY}: must map worker names to labels")
    labels = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw_labels.items()}
    raw_taints = body.pop(CLUSTER_TAINTS_KEY, None) or {}
    if not isinstance(raw_taints, Mapping):
        raise TopologyError(f"{source}: {CLUSTER_TAINTS_KEY}: must map worker names to taints")
    taints = {}
    for worker, items in raw_taints.items():
        try:
            taints[str(worker)] = parse_taint_list(items, f"{CLUSTER_TAINTS_KEY}.{worker}")
        except InvalidField as error:
            raise TopologyError(f"{source}: {error}") from None
    return sim_topology(
        parse_topology(body, source=source), labels, source=source, cluster_taints=taints
    )


def load_topology(path: str | Path) -> SimTopology:
    """Read a topology YAML file (the sandbox format plus ``clusterLabels`` and
    ``clusterTaints``)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise TopologyError(f"{path}: not valid YAML{at}: {problem}") from None
    return _from_data(data, str(path))


# --- the default topology ------------------------------------------------------------------

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"


def _queue(flavor: str, cpu: int, memory_gi: int, gpus: int | None) -> dict[str, Any]:
    resources: list[dict[str, Any]] = [
        {"name": "cpu", "nominalQuota": cpu},
        {"name": "memory", "nominalQuota": f"{memory_gi}Gi"},
    ]
    covered = ["cpu", "memory"]
    if gpus is not None:
        resources.append({"name": GPU_RESOURCE, "nominalQuota": gpus})
        covered.append(GPU_RESOURCE)
    return {
        "name": "cluster-queue",
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {"coveredResources": covered, "flavors": [{"name": flavor, "resources": resources}]}
        ],
    }


def _gpu_worker(
    name: str, gpu_type: str | None, gpus: int, *, labelled: bool = True
) -> dict[str, Any]:
    """A worker with ``gpus`` GPUs of one type on 8-GPU nodes (or a CPU farm)."""
    if gpu_type is None:
        nodes = [
            {
                "name": f"{name}-node-{i + 1}",
                "labels": {"node.kubernetes.io/instance-type": "cpu-64"},
                "capacity": {"cpu": 64, "memory": "256Gi"},
            }
            for i in range(max(1, gpus))
        ]
        cpu_flavor = {"name": "cpu", "nodeLabels": {"node.kubernetes.io/instance-type": "cpu-64"}}
        return {
            "name": name,
            "nodes": nodes,
            "resourceFlavors": [cpu_flavor],
            "clusterQueues": [_queue("cpu", 64 * max(1, gpus), 256 * max(1, gpus), None)],
        }
    per_node = 8
    nodes = [
        {
            "name": f"{name}-node-{i + 1}",
            "labels": {DEFAULT_GPU_LABEL: gpu_type},
            "capacity": {"cpu": 128, "memory": "1024Gi", GPU_RESOURCE: per_node},
        }
        for i in range(max(1, gpus // per_node))
    ]
    flavor_name = gpu_type.split("-")[1].lower() if labelled else "default-flavor"
    flavor: dict[str, Any] = {"name": flavor_name}
    if labelled:
        flavor["nodeLabels"] = {DEFAULT_GPU_LABEL: gpu_type}
    return {
        "name": name,
        "nodes": nodes,
        "resourceFlavors": [flavor],
        "clusterQueues": [_queue(flavor_name, 12 * gpus, 96 * gpus, gpus)],
    }


def _topology_data(workers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    totals = {"cpu": 0, "memory": 0, "gpu": 0}
    for worker in workers:
        for res in worker["clusterQueues"][0]["resourceGroups"][0]["flavors"][0]["resources"]:
            value = int(str(res["nominalQuota"]).removesuffix("Gi"))
            key = {"cpu": "cpu", "memory": "memory", GPU_RESOURCE: "gpu"}[res["name"]]
            totals[key] += value
    return {
        "namespaces": ["default", "team-a", "team-b"],
        "priorityClasses": [{"name": "high", "value": 300}, {"name": "low", "value": 100}],
        "localQueues": [
            {"name": "user-queue", "namespace": ns, "clusterQueue": "cluster-queue"}
            for ns in ("default", "team-a", "team-b")
        ],
        "manager": {
            "resourceFlavors": [{"name": "default-flavor"}],
            "clusterQueue": {
                "name": "cluster-queue",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": totals["cpu"]},
                                    {"name": "memory", "nominalQuota": f"{totals['memory']}Gi"},
                                    {"name": GPU_RESOURCE, "nominalQuota": totals["gpu"]},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        "workers": list(workers),
    }


DEFAULT_WORKERS: tuple[tuple[str, str | None, int, bool], ...] = (
    ("worker-a100-east", A100, 32, True),
    ("worker-a100-west", A100, 16, True),
    ("worker-h100", H100, 16, True),
    ("worker-l4", L4, 16, False),
    ("worker-cpu", None, 4, True),
)
"""The default workers: name, GPU type (``None``: CPU farm), GPUs (CPU farm: 64-CPU nodes),
whether the flavor carries the GPU label; in MultiKueueConfig order."""


def default_topology() -> SimTopology:
    """The simulator's default topology (see the module docstring and ``docs/simulator.md``)."""
    workers = [_gpu_worker(n, t, g, labelled=lab) for n, t, g, lab in DEFAULT_WORKERS]
    data = _topology_data(workers)
    data[CLUSTER_LABELS_KEY] = {"worker-l4": {CLUSTER_GPU_TYPE_LABEL: L4}}
    return _from_data(data, "default")


def scaled_topology(count: int) -> SimTopology:
    """``count`` workers cycling through the default ones' kinds (for the speed benchmark).

    More than 20 workers exceeds what a MultiKueueConfig may list (contract C9); the simulator
    accepts it to measure its own scaling, so the limit is lifted here on purpose.
    """
    kinds = DEFAULT_WORKERS
    workers = []
    labels = {}
    for index in range(count):
        base, gpu_type, gpus, labelled = kinds[index % len(kinds)]
        name = f"{base}-{index // len(kinds) + 1}"
        workers.append(_gpu_worker(name, gpu_type, gpus, labelled=labelled))
        if not labelled and gpu_type is not None:
            labels[name] = {CLUSTER_GPU_TYPE_LABEL: gpu_type}
    first = parse_topology(_topology_data(workers[:1]), source="scaled")
    # Validate every worker through the sandbox model (with a one-worker topology each), then
    # put them together without the 20-cluster limit.
    validated = []
    for worker in workers:
        one = parse_topology(_topology_data([worker]), source="scaled")
        validated.extend(one.workers)
    whole = _topology_data(workers)
    manager = parse_topology({**whole, "workers": []}, source="scaled").manager
    full = first.model_copy(update={"workers": validated, "manager": manager})
    return sim_topology(full, labels, source=f"scaled:{count}")


def topology_yaml(topology: SimTopology) -> str:
    """The topology as YAML (sandbox format plus ``clusterLabels`` and ``clusterTaints``)."""
    data = topology.topology.model_dump(by_alias=True, exclude_none=True)
    labels = {w.name: dict(w.labels) for w in topology.workers if w.labels}
    if labels:
        data[CLUSTER_LABELS_KEY] = labels
    taints = {
        w.name: [{"key": t.key, "value": t.value, "effect": t.effect} for t in w.taints]
        for w in topology.workers
        if w.taints
    }
    if taints:
        data[CLUSTER_TAINTS_KEY] = taints
    return yaml.safe_dump(copy.deepcopy(data), sort_keys=False)
