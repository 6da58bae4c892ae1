"""Topologies (YAML) and workload files (JSONL): the worlds the simulator and the sandbox share.

A **topology** describes a MultiKueue setup: a manager and workers, each with nodes (labels and
capacity, GPUs as the extended resource ``nvidia.com/gpu``), ResourceFlavors (GPU type as the
node label ``nvidia.com/gpu.product``, contract C71), ClusterQueues (resource groups, quotas,
cohorts, ``borrowingLimit``, preemption, C69), namespaces and LocalQueues repeated on every
cluster under the same names (C68), WorkloadPriorityClasses, and on the manager its
ClusterQueue with the MultiKueue AdmissionCheck, the MultiKueueConfig (cluster order matters for
the Incremental dispatcher, C59) and one MultiKueueCluster per worker pointing at a kubeconfig
Secret in ``kueue-system`` (C10, C77). Keys are spelled as in the Kueue API (``nodeLabels``,
``nominalQuota``, ``cohortName``…); unknown keys are errors, and every error names its field.

:func:`default_topology` is the sandbox's default (README, *The sandbox*;
``topologies/default.yaml`` in this package):
``worker-a100`` (8 × NVIDIA-A100-SXM4-80GB), ``worker-h100`` (4 × NVIDIA-H100-80GB-HBM3) and
``worker-cpu``. :func:`generic_topology` builds N identical CPU workers.

:func:`topology_objects` says what goes where: every API object of the topology, per cluster.
The test world creates them on running clusters (``dispatcher_sandbox.seeding``); the simulator
reads them in memory. Nothing here does I/O beyond reading the files it is given.

A **workload file** is JSON Lines, one Job per line (``kind: Workload`` lines describe a prebuilt
Workload); see :class:`WorkloadLine`. :func:`load_workloads` validates each line and reports
errors as ``FILE:LINE: field: message``; :func:`workload_object` turns a line into the API
object. Lines checked against a topology are for its MultiKueue manager, where only Jobs are
accepted: Kueue's MultiKueue rejects a Workload that no Job owns ("No multikueue adapter found",
contract C22), so a ``kind: Workload`` line is refused there with an error naming its line and
the ``kind`` field (:func:`check_manager_lines` does the same for lines built in code). Workload
lines remain for a worker's own Kueue (which admits prebuilt Workloads) and for models (the
simulator, the demo's expectations).
"""

from __future__ import annotations

import base64
import importlib.resources
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from dispatcher.kueue.quantities import QuantityError, format_quantity, parse_quantity
from dispatcher.topology.resources import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    NODES,
    RESOURCE_FLAVORS,
    SECRETS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    Resource,
)
from dispatcher.topology.runs import HOLD_ANNOTATION, RUN_SECONDS_ANNOTATION

__all__ = [
    "DEFAULT_TOPOLOGY",
    "GPU_PRODUCT_LABEL",
    "HOLD_ANNOTATION",
    "KUEUE_NAMESPACE",
    "MULTIKUEUE_MANAGED_BY",
    "PREFERRED_GPU_TYPES_ANNOTATION",
    "RUN_SECONDS_ANNOTATION",
    "SANDBOX_FIELD_MANAGER",
    "Topology",
    "TopologyError",
    "WorkloadFileError",
    "WorkloadLine",
    "check_manager_lines",
    "default_topology",
    "demo_workloads",
    "generic_topology",
    "load_topology",
    "load_workloads",
    "parse_topology",
    "parse_workload_lines",
    "topology_objects",
    "workload_object",
]

Obj = dict[str, Any]

KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_NAMESPACE = "kueue-system"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
SECRET_KEY = "kubeconfig"  # C10: MultiKueueConfigSecretKey
SANDBOX_FIELD_MANAGER = "multikueue-dispatcher-sandbox"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOAD_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
PREFERRED_GPU_TYPES_ANNOTATION = "multikueue-dispatcher.io/preferred-gpu-types"
DEFAULT_TOPOLOGY = "default"
MAX_MULTIKUEUE_CLUSTERS = 20  # C9

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class TopologyError(ValueError):
    """A topology that does not validate; the message names each offending field."""


class WorkloadFileError(ValueError):
    """A workload file line that does not validate (``FILE:LINE: field: message``)."""


class _FieldError(ValueError):
    """A cross-field check that fails: ``field`` (relative to the model checked) is the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# --- field types -------------------------------------------------------------------------------


def _quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("must be a Kubernetes quantity such as 8, 500m or 32Gi")
    try:
        milli = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 8, 500m, 32Gi)") from exc
    if milli < 0:
        raise ValueError("must not be negative")
    return value if isinstance(value, str) else format_quantity(milli)


def _subdomain(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{value!r} is not a DNS-1123 subdomain (lowercase, digits, '-', '.')")
    return value


def _label(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{value!r} is not a DNS-1123 label (lowercase, digits, '-')")
    return value


Quantity = Annotated[str, BeforeValidator(_quantity)]
Name = Annotated[str, BeforeValidator(_subdomain)]
LabelName = Annotated[str, BeforeValidator(_label)]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class _Model(BaseModel):
    """Strict, camelCase keys as in the Kubernetes API."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=False
    )


def _unique(names: Iterable[str], what: str, field: str) -> None:
    """Raise for the second occurrence of a name; ``field`` is the list (``.N`` is appended)."""
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            raise _FieldError(f"{field}.{index}", f"{what} {name!r} appears twice")
        seen.add(name)


# --- topology model ----------------------------------------------------------------------------


class Taint(_Model):
    """A node or flavor taint."""

    key: str
    value: str | None = None
    effect: TaintEffect


class Toleration(_Model):
    """A toleration (ResourceFlavor ``tolerations``)."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None


class Node(_Model):
    """A node: labels, taints and capacity (GPUs as ``nvidia.com/gpu``)."""

    name: Name
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    capacity: dict[str, Quantity] = Field(default_factory=lambda: {"cpu": "8", "memory": "32Gi"})


class ResourceFlavor(_Model):
    """A ResourceFlavor (C71): GPU type as a ``nodeLabels`` entry."""

    name: Name
    node_labels: dict[str, str] = Field(default_factory=dict)
    node_taints: list[Taint] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)


class ResourceQuota(_Model):
    """One resource of a flavor in a resource group (C69)."""

    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(_Model):
    """A flavor's quotas in a resource group."""

    name: Name
    resources: list[ResourceQuota] = Field(min_length=1, max_length=64)


class ResourceGroup(_Model):
    """Resources covered together, and the flavors (in order) that provide them."""

    covered_resources: list[str] = Field(min_length=1, max_length=64)
    flavors: list[FlavorQuotas] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _resources_match(self) -> ResourceGroup:
        for index, flavor in enumerate(self.flavors):
            names = [r.name for r in flavor.resources]
            if names != self.covered_resources:
                raise _FieldError(
                    f"flavors.{index}.resources",
                    f"flavor {flavor.name!r} lists resources {names}, but every flavor must list "
                    f"exactly coveredResources {self.covered_resources}, in that order",
                )
        return self


class BorrowWithinCohort(_Model):
    """``preemption.borrowWithinCohort``."""

    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class Preemption(_Model):
    """ClusterQueue ``preemption``."""

    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None


class ClusterQueue(_Model):
    """A ClusterQueue (C69)."""

    name: Name
    cohort_name: Name | None = None
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    namespace_selector: dict[str, Any] = Field(default_factory=dict)
    preemption: Preemption | None = None
    resource_groups: list[ResourceGroup] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _borrowing_needs_cohort(self) -> ClusterQueue:
        if self.cohort_name is None:
            for g, group in enumerate(self.resource_groups):
                for f, flavor in enumerate(group.flavors):
                    for r, resource in enumerate(flavor.resources):
                        if resource.borrowing_limit is not None:
                            raise _FieldError(
                                f"resourceGroups.{g}.flavors.{f}.resources.{r}.borrowingLimit",
                                f"borrowingLimit of {flavor.name}/{resource.name} needs a "
                                "cohortName (borrowingLimit must be nil when cohort is empty)",
                            )
        return self

    def flavor_names(self) -> list[str]:
        """Every flavor the queue names."""
        return [f.name for g in self.resource_groups for f in g.flavors]


class _Cluster(_Model):
    nodes: list[Node] = Field(default_factory=list)
    resource_flavors: list[ResourceFlavor] = Field(default_factory=list)

    def _check_flavors(self, queues: Sequence[tuple[str, ClusterQueue]]) -> None:
        _unique((n.name for n in self.nodes), "node", "nodes")
        _unique((f.name for f in self.resource_flavors), "resourceFlavor", "resourceFlavors")
        known = {f.name for f in self.resource_flavors}
        for where, queue in queues:
            for g, group in enumerate(queue.resource_groups):
                for f, flavor in enumerate(group.flavors):
                    if flavor.name not in known:
                        raise _FieldError(
                            f"{where}.resourceGroups.{g}.flavors.{f}.name",
                            f"clusterQueue {queue.name!r} names flavor {flavor.name!r}, which is "
                            f"not in resourceFlavors {sorted(known)}",
                        )


class Worker(_Cluster):
    """A worker cluster: Kueue core only, no MultiKueue (C72)."""

    name: LabelName
    cluster_queues: list[ClusterQueue] = Field(min_length=1)
    kubeconfig_secret: Name | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Worker:
        _unique((q.name for q in self.cluster_queues), "clusterQueue", "clusterQueues")
        self._check_flavors([(f"clusterQueues.{i}", q) for i, q in enumerate(self.cluster_queues)])
        return self

    @property
    def secret_name(self) -> str:
        """The manager Secret holding this worker's kubeconfig."""
        return self.kubeconfig_secret or f"{self.name}-kubeconfig"


class MultiKueue(_Model):
    """The manager's MultiKueue objects."""

    admission_check: Name = "multikueue"
    config: Name = "multikueue"
    # Order of MultiKueueConfig.spec.clusters (C59); default: the order of ``workers``.
    clusters: list[LabelName] | None = None


class Manager(_Cluster):
    """The manager cluster: its ClusterQueue carries the MultiKueue AdmissionCheck."""

    name: LabelName = "manager"
    cluster_queue: ClusterQueue
    multi_kueue: MultiKueue = Field(default_factory=MultiKueue)

    @model_validator(mode="after")
    def _consistent(self) -> Manager:
        self._check_flavors([("clusterQueue", self.cluster_queue)])
        return self


class LocalQueue(_Model):
    """A LocalQueue, created on every cluster (C68); ``clusterQueue`` names the worker queue."""

    name: Name
    namespace: LabelName
    cluster_queue: Name


class PriorityClass(_Model):
    """A WorkloadPriorityClass, created on every cluster."""

    name: Name
    value: int
    description: str | None = None


class Topology(_Model):
    """A sandbox topology: one manager, workers, and what every cluster shares."""

    namespaces: list[LabelName] = Field(default_factory=lambda: ["default"])
    priority_classes: list[PriorityClass] = Field(default_factory=list)
    local_queues: list[LocalQueue] = Field(min_length=1)
    manager: Manager
    workers: list[Worker] = Field(default_factory=list, max_length=MAX_MULTIKUEUE_CLUSTERS)

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        _unique(self.namespaces, "namespace", "namespaces")
        _unique((p.name for p in self.priority_classes), "priorityClass", "priorityClasses")
        _unique(
            (f"{q.namespace}/{q.name}" for q in self.local_queues),
            "localQueue (namespace/name)",
            "localQueues",
        )
        for index, worker in enumerate(self.workers):
            if worker.name == self.manager.name:
                raise _FieldError(f"workers.{index}.name", "the manager already has this name")
        _unique((w.name for w in self.workers), "worker", "workers")
        for index, queue in enumerate(self.local_queues):
            if queue.namespace not in self.namespaces:
                raise _FieldError(
                    f"localQueues.{index}.namespace",
                    f"{queue.namespace!r} is not in namespaces {self.namespaces}",
                )
            for worker in self.workers:
                if queue.cluster_queue not in {q.name for q in worker.cluster_queues}:
                    raise _FieldError(
                        f"localQueues.{index}.clusterQueue",
                        f"worker {worker.name!r} has no clusterQueue {queue.cluster_queue!r} "
                        "(LocalQueues are repeated on every worker, C68)",
                    )
        order = self.manager.multi_kueue.clusters
        if order is not None:
            _unique(order, "cluster", "manager.multiKueue.clusters")
            if sorted(order) != sorted(w.name for w in self.workers):
                raise _FieldError(
                    "manager.multiKueue.clusters",
                    f"{order} must list every worker exactly once",
                )
        return self

    @property
    def cluster_names(self) -> list[str]:
        """Manager first, then the workers."""
        return [self.manager.name, *(w.name for w in self.workers)]

    def worker(self, name: str) -> Worker:
        """A worker by name."""
        for worker in self.workers:
            if worker.name == name:
                return worker
        raise KeyError(name)

    def multikueue_order(self) -> list[str]:
        """MultiKueueConfig cluster order (C59)."""
        return list(self.manager.multi_kueue.clusters or [w.name for w in self.workers])


# --- loading -----------------------------------------------------------------------------------


def _describe_errors(error: ValidationError, source: str) -> str:
    lines = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        message = item["msg"]
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, _FieldError):
            loc += cause.field.split(".")
            message = cause.message
        elif item["type"] == "extra_forbidden":
            message = "unknown field"
        elif item["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        lines.append(f"{source}: {'.'.join(loc) or '(top level)'}: {message}")
    return "\n".join(lines)


def parse_topology(data: Any, *, source: str = "topology") -> Topology:
    """Validate a topology given as plain data (for example parsed YAML)."""
    if not isinstance(data, Mapping):
        raise TopologyError(f"{source}: a topology must be a mapping, not {type(data).__name__}")
    try:
        return Topology.model_validate(data)
    except ValidationError as error:
        raise TopologyError(_describe_errors(error, source)) from None


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology YAML file; ``"default"`` names the shipped default."""
    if str(path) == DEFAULT_TOPOLOGY:
        return default_topology()
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise TopologyError(f"{path}: not valid YAML: {error}") from None
    return parse_topology(data, source=str(path))


def default_topology() -> Topology:
    """The sandbox's default topology (README, *The sandbox*), shipped as
    ``topologies/default.yaml``."""
    resource = importlib.resources.files("dispatcher.topology") / "topologies" / "default.yaml"
    return parse_topology(yaml.safe_load(resource.read_text(encoding="utf-8")), source="default")


def generic_topology(worker_names: Sequence[str]) -> Topology:
    """Identical CPU workers (quota 8 CPUs, 32Gi each), for ``sandbox serve --workers N``.

    No nodes are declared: each cluster only has its ``<cluster>-control-plane`` node.
    """

    def queue(name: str, cpu: int, memory: int, preemption: bool = True) -> Obj:
        return {
            "name": name,
            "preemption": {"withinClusterQueue": "LowerPriority"} if preemption else None,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": f"{memory}Gi"},
                            ],
                        }
                    ],
                }
            ],
        }

    count = max(len(worker_names), 1)
    data = {
        "namespaces": ["default"],
        "priorityClasses": [{"name": "high", "value": 300}, {"name": "low", "value": 100}],
        "localQueues": [
            {"name": "user-queue", "namespace": "default", "clusterQueue": "cluster-queue"}
        ],
        "manager": {
            "resourceFlavors": [{"name": "default-flavor"}],
            "clusterQueue": queue("cluster-queue", 8 * count, 32 * count),
        },
        "workers": [
            {
                "name": name,
                "resourceFlavors": [{"name": "default-flavor"}],
                "clusterQueues": [queue("cluster-queue", 8, 32)],
            }
            for name in worker_names
        ],
    }
    return parse_topology(data, source="generic")


# --- objects -----------------------------------------------------------------------------------


def _dump(model: BaseModel) -> Obj:
    out: Obj = model.model_dump(by_alias=True, exclude_none=True)
    return out


def _node(node: Node) -> Obj:
    capacity = {"pods": "110", **node.capacity}
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", **node.labels}
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {"taints": [_dump(t) for t in node.taints]} if node.taints else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
        },
    }
    return body


def _flavor(flavor: ResourceFlavor) -> Obj:
    spec: Obj = {}
    if flavor.node_labels:
        spec["nodeLabels"] = dict(flavor.node_labels)
    if flavor.node_taints:
        spec["nodeTaints"] = [_dump(t) for t in flavor.node_taints]
    if flavor.tolerations:
        spec["tolerations"] = [_dump(t) for t in flavor.tolerations]
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor.name},
        "spec": spec,
    }


def _cluster_queue(queue: ClusterQueue, admission_check: str | None = None) -> Obj:
    spec = _dump(queue)
    spec.pop("name")
    if admission_check is not None:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": admission_check}]}
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": queue.name},
        "spec": spec,
    }


def _local_queue(queue: LocalQueue, cluster_queue: str) -> Obj:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": queue.name, "namespace": queue.namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def _shared(topology: Topology) -> list[tuple[Resource, Obj]]:
    objects: list[tuple[Resource, Obj]] = [
        (NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for ns in topology.namespaces
    ]
    for pc in topology.priority_classes:
        body: Obj = {
            "apiVersion": KUEUE_API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": pc.name},
            "value": pc.value,
        }
        if pc.description:
            body["description"] = pc.description
        objects.append((WORKLOAD_PRIORITY_CLASSES, body))
    return objects


def _kubeconfig_yaml(kubeconfig: Mapping[str, Any]) -> bytes:
    return yaml.safe_dump(dict(kubeconfig), sort_keys=False).encode()


def topology_objects(
    topology: Topology, worker_kubeconfigs: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, list[tuple[Resource, Obj]]]:
    """Every object of the topology, per cluster name, in creation order.

    ``worker_kubeconfigs`` (worker name → kubeconfig) fills the manager's Secrets; workers
    without one get no Secret (their MultiKueueCluster then reports it missing, C11).
    """
    kubeconfigs = worker_kubeconfigs or {}
    out: dict[str, list[tuple[Resource, Obj]]] = {}
    for worker in topology.workers:
        objects = _shared(topology)
        objects += [(NODES, _node(n)) for n in worker.nodes]
        objects += [(RESOURCE_FLAVORS, _flavor(f)) for f in worker.resource_flavors]
        objects += [(CLUSTER_QUEUES, _cluster_queue(q)) for q in worker.cluster_queues]
        objects += [(LOCAL_QUEUES, _local_queue(q, q.cluster_queue)) for q in topology.local_queues]
        out[worker.name] = objects
    manager = topology.manager
    mk = manager.multi_kueue
    objects = _shared(topology)
    objects.append(
        (
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
        )
    )
    objects += [(NODES, _node(n)) for n in manager.nodes]
    for worker in topology.workers:
        kubeconfig = kubeconfigs.get(worker.name)
        if kubeconfig is None:
            continue
        objects.append(
            (
                SECRETS,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": worker.secret_name, "namespace": KUEUE_NAMESPACE},
                    "type": "Opaque",
                    "data": {SECRET_KEY: base64.b64encode(_kubeconfig_yaml(kubeconfig)).decode()},
                },
            )
        )
    for worker in topology.workers:
        objects.append(
            (
                MULTIKUEUE_CLUSTERS,
                {
                    "apiVersion": KUEUE_API,
                    "kind": "MultiKueueCluster",
                    "metadata": {"name": worker.name},
                    "spec": {
                        "clusterSource": {
                            "kubeConfig": {"location": worker.secret_name, "locationType": "Secret"}
                        }
                    },
                },
            )
        )
    if topology.workers:
        objects.append(
            (
                MULTIKUEUE_CONFIGS,
                {
                    "apiVersion": KUEUE_API,
                    "kind": "MultiKueueConfig",
                    "metadata": {"name": mk.config},
                    "spec": {"clusters": topology.multikueue_order()},
                },
            )
        )
        objects.append(
            (
                ADMISSION_CHECKS,
                multikueue_admission_check(mk.admission_check, mk.config),
            )
        )
    objects += [(RESOURCE_FLAVORS, _flavor(f)) for f in manager.resource_flavors]
    check = mk.admission_check if topology.workers else None
    objects.append((CLUSTER_QUEUES, _cluster_queue(manager.cluster_queue, check)))
    objects += [
        (LOCAL_QUEUES, _local_queue(q, manager.cluster_queue.name)) for q in topology.local_queues
    ]
    out[manager.name] = objects
    return {name: out[name] for name in topology.cluster_names}


# --- workload files ----------------------------------------------------------------------------


class PodSetLine(_Model):
    """A pod set of a workload line: ``count`` pods, each with ``requests``."""

    name: LabelName = "main"
    count: int = Field(default=1, ge=1)
    requests: dict[str, Quantity] = Field(default_factory=lambda: {"cpu": "1"})


class WorkloadLine(_Model):
    """One line of a workload file (JSON object).

    ``kind``: ``Job`` (default: a suspended ``batch/v1`` Job with the queue label and
    ``spec.managedBy: kueue.x-k8s.io/multikueue``, one pod set only) or ``Workload`` (a prebuilt
    Workload, never for a MultiKueue manager: see :func:`check_manager_lines`). ``podSets`` or
    the shorthand ``count``/``requests`` for one pod set ``main``.
    ``gpuType``: required GPU model (pod ``nodeSelector`` on ``nvidia.com/gpu.product``);
    ``preferredGpuTypes``: ordered preference (annotation
    ``multikueue-dispatcher.io/preferred-gpu-types``). ``priorityClass`` names a
    WorkloadPriorityClass (``priority`` gives a Workload's value when no topology is at hand).
    ``runSeconds``: how long it runs once admitted on a worker (sandbox annotation; absent: until
    deleted). ``holdUntilConfigMap``: it does not finish before a ConfigMap of that name exists
    in its namespace on the cluster where it runs (:mod:`dispatcher.topology.runs`).
    ``serviceAccountName``: the pods' ServiceAccount (the test world creates none, so its pods
    are refused and the Job runs with none: :func:`dispatcher.topology.runs.pods_refused`).
    ``annotations`` go on the Job (or Workload) itself; ``podAnnotations`` on its pod template,
    which is where a Job's placement hints reach its Workload (:mod:`dispatcher.kueue.hints`).
    """

    kind: Literal["Job", "Workload"] = "Job"
    name: Name
    namespace: LabelName = "default"
    queue: Name = "user-queue"
    pod_sets: list[PodSetLine] | None = Field(default=None, min_length=1, max_length=18)
    count: int | None = Field(default=None, ge=1)
    requests: dict[str, Quantity] | None = None
    gpu_type: str | None = None
    preferred_gpu_types: list[str] | None = None
    priority_class: Name | None = None
    priority: int | None = None
    run_seconds: float | None = Field(default=None, ge=0)
    hold_until_config_map: Name | None = None
    service_account_name: Name | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    pod_annotations: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shape(self) -> WorkloadLine:
        if self.pod_sets is not None and (self.count is not None or self.requests is not None):
            raise _FieldError("podSets", "give either podSets or count/requests, not both")
        if self.kind == "Job" and self.pod_sets is not None and len(self.pod_sets) != 1:
            raise _FieldError("podSets", "a Job has exactly one pod set")
        if self.pod_sets is not None:
            _unique((p.name for p in self.pod_sets), "pod set", "podSets")
        if self.kind == "Job" and self.priority is not None:
            raise _FieldError(
                "priority", "a Job takes its priority from priorityClass (a Workload label)"
            )
        return self

    @field_validator("preferred_gpu_types")
    @classmethod
    def _no_commas(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            if not item or "," in item:
                raise ValueError(f"{item!r}: GPU types are non-empty and have no commas")
        return value

    def pod_set_lines(self) -> list[PodSetLine]:
        """The pod sets, with the shorthand expanded."""
        if self.pod_sets is not None:
            return list(self.pod_sets)
        return [
            PodSetLine(
                name="main",
                count=self.count or 1,
                requests=dict(self.requests) if self.requests is not None else {"cpu": "1"},
            )
        ]


def _pod_template(
    pod_set: PodSetLine,
    gpu_type: str | None,
    preferred: list[str] | None = None,
    annotations: Mapping[str, str] | None = None,
    service_account: str | None = None,
) -> Obj:
    spec: Obj = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/e2e-test-images/agnhost:2.52",
                "args": ["pause"],
                "resources": {
                    "requests": dict(pod_set.requests),
                    # Extended resources (GPUs) need limits equal to requests.
                    "limits": {k: v for k, v in pod_set.requests.items() if "/" in k},
                },
            }
        ],
    }
    if not spec["containers"][0]["resources"]["limits"]:
        del spec["containers"][0]["resources"]["limits"]
    if gpu_type:
        spec["nodeSelector"] = {GPU_PRODUCT_LABEL: gpu_type}
    if service_account:
        spec["serviceAccountName"] = service_account
    template: Obj = {"spec": spec}
    # Kueue copies the pod template (not the Job's annotations) into the Workload, so the
    # preference and the placement hints travel with the template to where the dispatcher
    # reads them.
    notes = dict(annotations or {})
    if preferred:
        notes[PREFERRED_GPU_TYPES_ANNOTATION] = ",".join(preferred)
    if notes:
        template["metadata"] = {"annotations": notes}
    return template


def workload_object(line: WorkloadLine, topology: Topology | None = None) -> Obj:
    """The Job or Workload a workload-file line stands for.

    For a Workload with a ``priorityClass``, the value comes from ``priority`` or else from the
    topology's priority classes.
    """
    labels = dict(line.labels)
    annotations = dict(line.annotations)
    if line.run_seconds is not None:
        annotations[RUN_SECONDS_ANNOTATION] = format(line.run_seconds, "g")
    if line.hold_until_config_map is not None:
        annotations[HOLD_ANNOTATION] = line.hold_until_config_map
    if line.preferred_gpu_types:
        annotations[PREFERRED_GPU_TYPES_ANNOTATION] = ",".join(line.preferred_gpu_types)
    meta: Obj = {"name": line.name, "namespace": line.namespace}
    pod_sets = line.pod_set_lines()
    if line.kind == "Job":
        labels[QUEUE_NAME_LABEL] = line.queue
        if line.priority_class:
            labels[WORKLOAD_PRIORITY_CLASS_LABEL] = line.priority_class
        meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        [pod_set] = pod_sets
        return {
            "apiVersion": f"{JOBS.group}/{JOBS.version}",
            "kind": "Job",
            "metadata": meta,
            "spec": {
                "parallelism": pod_set.count,
                "completions": pod_set.count,
                "suspend": True,
                "managedBy": MULTIKUEUE_MANAGED_BY,
                "template": _pod_template(
                    pod_set,
                    line.gpu_type,
                    line.preferred_gpu_types,
                    line.pod_annotations,
                    line.service_account_name,
                ),
            },
        }
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    spec: Obj = {
        "queueName": line.queue,
        "podSets": [
            {
                "name": p.name,
                "count": p.count,
                "template": _pod_template(
                    p,
                    line.gpu_type,
                    line.preferred_gpu_types,
                    line.pod_annotations,
                    line.service_account_name,
                ),
            }
            for p in pod_sets
        ],
    }
    if line.priority_class:
        value = line.priority
        if value is None and topology is not None:
            for pc in topology.priority_classes:
                if pc.name == line.priority_class:
                    value = pc.value
        if value is None:
            raise WorkloadFileError(
                f"{line.name}: priorityClass {line.priority_class!r} has no value "
                "(give priority, or a topology that defines the class)"
            )
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": line.priority_class,
        }
        spec["priority"] = value
    elif line.priority is not None:
        spec["priority"] = line.priority
    return {"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": meta, "spec": spec}


MANAGER_WORKLOAD_LINE = (
    'kind: "Workload" cannot be submitted to the MultiKueue manager: Kueue rejects a Workload '
    'that no Job owns ("No multikueue adapter found", C22); remove "kind" to submit a Job'
)


def check_manager_lines(lines: Iterable[WorkloadLine]) -> None:
    """Refuse lines that a MultiKueue manager would reject: ``kind: Workload`` (C22).

    Raises :class:`WorkloadFileError` naming each such line (``NAMESPACE/NAME: kind: ...``).
    """
    errors = [
        f"{line.namespace}/{line.name}: {MANAGER_WORKLOAD_LINE}"
        for line in lines
        if line.kind == "Workload"
    ]
    if errors:
        raise WorkloadFileError("\n".join(errors))


def _topology_problems(line: WorkloadLine, topology: Topology) -> list[str]:
    """What is wrong with a line for the topology's manager (``field: message``): a
    ``kind: Workload`` line (C22), or names the topology does not have."""
    problems = [MANAGER_WORKLOAD_LINE] if line.kind == "Workload" else []
    queues = {(q.namespace, q.name) for q in topology.local_queues}
    if (line.namespace, line.queue) not in queues:
        problems.append(
            f"queue: no LocalQueue {line.namespace}/{line.queue} in the topology "
            f"(it has {', '.join(sorted(f'{ns}/{q}' for ns, q in queues))})"
        )
    classes = {p.name for p in topology.priority_classes}
    if line.priority_class is not None and line.priority_class not in classes:
        problems.append(
            f"priorityClass: {line.priority_class!r} is not a priority class of the topology "
            f"({', '.join(sorted(classes)) or 'none'})"
        )
    return problems


def parse_workload_lines(
    lines: Iterable[str], *, source: str = "workloads", topology: Topology | None = None
) -> list[WorkloadLine]:
    """Validate JSON Lines; blank lines and ``#`` comments are skipped.

    With a ``topology``, the lines are for its MultiKueue manager: each must be a Job (not
    ``kind: Workload``, see :func:`check_manager_lines`) and its LocalQueue (namespace and
    queue) and priority class must exist in the topology. Raises :class:`WorkloadFileError`
    listing every bad line as ``SOURCE:LINE: field: message``.
    """
    out: list[WorkloadLine] = []
    errors: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            data = json.loads(text)
        except ValueError as error:
            errors.append(f"{where}: not valid JSON: {error}")
            continue
        if not isinstance(data, dict):
            errors.append(f"{where}: each line must be a JSON object")
            continue
        try:
            line = WorkloadLine.model_validate(data)
        except ValidationError as error:
            errors.append(_describe_errors(error, where))
            continue
        key = (line.namespace, line.name)
        if key in seen:
            errors.append(
                f"{where}: name: {line.namespace}/{line.name} already defined on line {seen[key]}"
            )
            continue
        if topology is not None:
            problems = _topology_problems(line, topology)
            if problems:
                errors += [f"{where}: {problem}" for problem in problems]
                continue
        seen[key] = number
        out.append(line)
    if errors:
        raise WorkloadFileError("\n".join(errors))
    return out


def load_workloads(path: str | Path, topology: Topology | None = None) -> list[WorkloadLine]:
    """Read and validate a JSONL workload file (see :func:`parse_workload_lines`)."""
    with Path(path).open(encoding="utf-8") as handle:
        return parse_workload_lines(handle, source=str(path), topology=topology)


def demo_workloads() -> list[WorkloadLine]:
    """The demo workload mix for the default topology (``topologies/demo-workloads.jsonl``)."""
    resource = (
        importlib.resources.files("dispatcher.topology") / "topologies" / "demo-workloads.jsonl"
    )
    return parse_workload_lines(
        resource.read_text(encoding="utf-8").splitlines(),
        source="demo-workloads.jsonl",
        topology=default_topology(),
    )


def multikueue_admission_check(
    name: str = "multikueue", config: str = "multikueue"
) -> dict[str, Any]:
    """An AdmissionCheck of Kueue's MultiKueue controller whose parameters name the
    MultiKueueConfig ``config``."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {
            "controllerName": MULTIKUEUE_CONTROLLER,
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "MultiKueueConfig",
                "name": config,
            },
        },
    }
