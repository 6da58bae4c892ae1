"""Small builders for Kueue v0.19 (v1beta2) objects, and a helper that creates them via the API.

Every builder returns a plain dict that the real CRD schemas and CEL rules accept. Quantities are
Kubernetes strings or integers (``"500m"``, ``"1Gi"``, ``2``). Import from tests in this folder
with ``from kueue_builders import ...`` (pytest puts the folder on ``sys.path``)::

    await create(api, resource_flavor("h100", gpu_product=H100),
                 cluster_queue("cq", {"h100": {"cpu": 8, GPU: 4}}, preemption="LowerPriority"),
                 local_queue("lq", "team-a", "cq"),
                 workload("job-1", "team-a", queue="lq", cpu="500m", gpus=2, gpu_product=H100))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes_asyncio import client

from dispatcher.topology.runs import RUN_SECONDS_ANNOTATION

Obj = dict[str, Any]
Quantity = str | int

KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"
API_VERSION = f"{KUEUE}/{V1BETA2}"
GPU = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"

# kind -> (plural, namespaced)
KINDS: dict[str, tuple[str, bool]] = {
    "ResourceFlavor": ("resourceflavors", False),
    "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True),
    "Workload": ("workloads", True),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
    "Cohort": ("cohorts", False),
    "AdmissionCheck": ("admissionchecks", False),
    "MultiKueueConfig": ("multikueueconfigs", False),
    "MultiKueueCluster": ("multikueueclusters", False),
}


def _kueue(kind: str, name: str, spec: Obj, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    """A core/v1 Namespace."""
    meta: Obj = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def resource_flavor(
    name: str,
    *,
    gpu_product: str | None = None,
    node_labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    tolerations: Sequence[Mapping[str, str]] = (),
) -> Obj:
    """A ResourceFlavor; ``gpu_product`` adds the ``nvidia.com/gpu.product`` node label (C71)."""
    labels = dict(node_labels or {})
    if gpu_product:
        labels[GPU_PRODUCT] = gpu_product
    spec: Obj = {}
    if labels:
        spec["nodeLabels"] = labels
    if taints:
        spec["nodeTaints"] = [dict(t) for t in taints]
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return _kueue("ResourceFlavor", name, spec)


def _group(
    quotas: Mapping[str, Mapping[str, Quantity]],
    borrowing_limits: Mapping[str, Mapping[str, Quantity]],
    lending_limits: Mapping[str, Mapping[str, Quantity]],
) -> Obj:
    covered: list[str] = []
    for per_flavor in quotas.values():
        covered.extend(r for r in per_flavor if r not in covered)
    flavors = []
    for flavor_name, per_flavor in quotas.items():
        resources = []
        for resource in covered:
            item: Obj = {"name": resource, "nominalQuota": per_flavor.get(resource, 0)}
            if resource in borrowing_limits.get(flavor_name, {}):
                item["borrowingLimit"] = borrowing_limits[flavor_name][resource]
            if resource in lending_limits.get(flavor_name, {}):
                item["lendingLimit"] = lending_limits[flavor_name][resource]
            resources.append(item)
        flavors.append({"name": flavor_name, "resources": resources})
    return {"coveredResources": covered, "flavors": flavors}


def cluster_queue(
    name: str,
    quotas: Mapping[str, Mapping[str, Quantity]] | Sequence[Mapping[str, Mapping[str, Quantity]]],
    *,
    cohort: str | None = None,
    borrowing_limits: Mapping[str, Mapping[str, Quantity]] | None = None,
    lending_limits: Mapping[str, Mapping[str, Quantity]] | None = None,
    preemption: str | None = None,
    queueing_strategy: str | None = None,
    admission_checks: Iterable[str] = (),
    namespace_selector: Mapping[str, Any] | None = None,
    stop_policy: str | None = None,
) -> Obj:
    """A ClusterQueue.

    ``quotas`` maps flavor → resource → nominal quota, flavors in order, one resource group
    covering every resource named (a resource a flavor does not name gets quota 0); pass a list
    of such maps for several resource groups. ``borrowing_limits``/``lending_limits`` use the
    same flavor → resource shape. ``preemption`` sets ``withinClusterQueue``. The namespace
    selector defaults to ``{}`` (all namespaces): Kueue's default (unset) admits none.
    """
    groups = [quotas] if isinstance(quotas, Mapping) else list(quotas)
    spec: Obj = {
        "namespaceSelector": dict(namespace_selector) if namespace_selector is not None else {},
        "resourceGroups": [_group(g, borrowing_limits or {}, lending_limits or {}) for g in groups],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = {"withinClusterQueue": preemption}
    if queueing_strategy:
        spec["queueingStrategy"] = queueing_strategy
    checks = list(admission_checks)
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    return _kueue("ClusterQueue", name, spec)


def local_queue(name: str, namespace: str, cluster_queue: str) -> Obj:
    """A LocalQueue pointing at a ClusterQueue."""
    return _kueue("LocalQueue", name, {"clusterQueue": cluster_queue}, namespace)


def cohort(name: str, quotas: Mapping[str, Mapping[str, Quantity]] | None = None) -> Obj:
    """A Cohort object, optionally with its own quota (flavor → resource → nominal)."""
    spec: Obj = {}
    if quotas:
        spec["resourceGroups"] = [_group(quotas, {}, {})]
    return _kueue("Cohort", name, spec)


def workload_priority_class(name: str, value: int) -> Obj:
    """A WorkloadPriorityClass."""
    return {
        "apiVersion": API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def admission_check(
    name: str, controller: str = MULTIKUEUE_CONTROLLER, config: str | None = None
) -> Obj:
    """An AdmissionCheck (MultiKueue's by default, with ``config`` as its MultiKueueConfig)."""
    spec: Obj = {"controllerName": controller}
    if config:
        spec["parameters"] = {"apiGroup": KUEUE, "kind": "MultiKueueConfig", "name": config}
    return _kueue("AdmissionCheck", name, spec)


def pod_set(
    name: str = "main",
    *,
    count: int = 1,
    cpu: Quantity | None = None,
    memory: Quantity | None = None,
    gpus: Quantity | None = None,
    gpu_resource: str = GPU,
    gpu_product: str | None = None,
    requests: Mapping[str, Quantity] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
) -> Obj:
    """One ``spec.podSets[]`` item; ``gpu_product`` adds a ``nodeSelector`` on the GPU type."""
    wanted: Obj = dict(requests or {})
    for key, value in (("cpu", cpu), ("memory", memory), (gpu_resource, gpus)):
        if value is not None:
            wanted[key] = value
    selector = dict(node_selector or {})
    if gpu_product:
        selector[GPU_PRODUCT] = gpu_product
    spec: Obj = {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": wanted}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {"name": name, "count": count, "template": {"spec": spec}}


def workload(
    name: str,
    namespace: str = "default",
    *,
    queue: str = "user-queue",
    pod_sets: Sequence[Obj] | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    run_seconds: float | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    active: bool | None = None,
    **one_pod_set: Any,
) -> Obj:
    """A Workload; without ``pod_sets``, one pod set from :func:`pod_set` keyword arguments.

    ``run_seconds`` sets the sandbox annotation that makes a worker "run" it that long.
    ``priority_class`` references a WorkloadPriorityClass (``priority`` is then required by CEL,
    as Kueue's webhook would have filled it in).
    """
    spec: Obj = {
        "queueName": queue,
        "podSets": list(pod_sets) if pod_sets is not None else [pod_set(**one_pod_set)],
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class:
        spec["priorityClassRef"] = {
            "group": KUEUE,
            "kind": "WorkloadPriorityClass",
            "name": priority_class,
        }
        spec.setdefault("priority", 0)
    if active is not None:
        spec["active"] = active
    obj = _kueue("Workload", name, spec, namespace)
    notes = dict(annotations or {})
    if run_seconds is not None:
        notes[RUN_SECONDS_ANNOTATION] = str(run_seconds)
    if notes:
        obj["metadata"]["annotations"] = notes
    if labels:
        obj["metadata"]["labels"] = dict(labels)
    return obj


async def create(api: client.ApiClient, *objs: Obj) -> list[Obj]:
    """Create objects in order (Kueue kinds and Namespaces); returns what the server stored."""
    custom = client.CustomObjectsApi(api)
    created: list[Obj] = []
    for obj in objs:
        kind = obj["kind"]
        if kind == "Namespace":
            result = await client.CoreV1Api(api).create_namespace(obj)  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well
            created.append(api.sanitize_for_serialization(result))
            continue
        plural, namespaced = KINDS[kind]
        if namespaced:
            stored = await custom.create_namespaced_custom_object(
                KUEUE, V1BETA2, obj["metadata"]["namespace"], plural, obj
            )
        else:
            stored = await custom.create_cluster_custom_object(KUEUE, V1BETA2, plural, obj)
        created.append(stored)
    return created
