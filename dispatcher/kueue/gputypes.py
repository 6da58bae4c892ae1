"""GPU types: what a workload requires or prefers, and what a worker cluster offers.

Two conventions exist in the field (contract C71) and both are understood:

* **node labels**: worker ResourceFlavors carry ``nodeLabels`` such as
  ``nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`` and a workload asks for a type with the same key
  in its pod template's ``nodeSelector`` or required node affinity;
* **one extended resource per type**: ClusterQueues cover ``example.com/gpu-h100`` and workloads
  request that resource. The type is the part of the name matched by the ``type`` group of a
  configurable pattern (default :data:`DEFAULT_GPU_RESOURCE_PATTERN`, giving ``h100``).

A workload's *preferred* types come from an annotation of ours, an ordered comma list. An admin may
override what a cluster offers with labels on its MultiKueueCluster object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dispatcher.kueue.objects import ClusterQueueView, PodSetView, ResourceFlavorView

__all__ = [
    "CLUSTER_GPU_TYPE_LABEL",
    "CLUSTER_GPU_TYPE_PREFIX",
    "DEFAULT_GPU_LABEL",
    "DEFAULT_GPU_RESOURCE_PATTERN",
    "PREFERRED_GPU_TYPES_ANNOTATION",
    "GpuTypeCheck",
    "check_gpu_type",
    "cluster_gpu_types",
    "gpu_type_of_resource",
    "parse_preferred_gpu_types",
    "required_gpu_types",
]

DEFAULT_GPU_LABEL = "nvidia.com/gpu.product"
"""Node label key carrying the GPU model (NVIDIA GPU Feature Discovery)."""

DEFAULT_GPU_RESOURCE_PATTERN = r"^[^/]+/gpu-(?P<type>[A-Za-z0-9][-A-Za-z0-9_.]*)$"
"""Extended resource names that encode a GPU type, e.g. ``example.com/gpu-h100`` → ``h100``."""

PREFERRED_GPU_TYPES_ANNOTATION = "multikueue-dispatcher.io/preferred-gpu-types"
"""Workload annotation: ordered, comma-separated GPU types the workload prefers."""

CLUSTER_GPU_TYPE_LABEL = "multikueue-dispatcher.io/gpu-type"
"""MultiKueueCluster label naming the one GPU type the cluster offers (admin override)."""

CLUSTER_GPU_TYPE_PREFIX = "gpu-type.multikueue-dispatcher.io/"
"""MultiKueueCluster label prefix: ``gpu-type.multikueue-dispatcher.io/<type>: "true"`` adds a
type to the override (label values cannot hold a list)."""


def gpu_type_of_resource(resource: str, pattern: str = DEFAULT_GPU_RESOURCE_PATTERN) -> str | None:
    """The GPU type encoded in an extended resource name, or ``None``."""
    match = re.match(pattern, resource)
    return match.group("type") if match else None


def _affinity_types(pod_set: PodSetView, label_key: str) -> frozenset[str] | None:
    if not pod_set.required_affinity:
        return None
    allowed: set[str] = set()
    for term in pod_set.required_affinity:
        term_values: set[str] | None = None
        for req in term:
            if req.key == label_key and req.operator == "In":
                values = set(req.values)
                term_values = values if term_values is None else term_values & values
        if term_values is None:
            return None  # one alternative term leaves the type open
        allowed |= term_values
    return frozenset(allowed)


def required_gpu_types(
    pod_sets: Iterable[PodSetView],
    *,
    label_key: str = DEFAULT_GPU_LABEL,
    resource_pattern: str = DEFAULT_GPU_RESOURCE_PATTERN,
) -> frozenset[str] | None:
    """GPU types a workload can run on, or ``None`` when it does not constrain the type.

    Each pod set may constrain the type through ``nodeSelector[label_key]``, through required
    node affinity (``In`` on ``label_key`` in every alternative term) or by requesting a per-type
    extended resource. Constraints of several pod sets intersect, so the result may be empty
    (unsatisfiable).
    """
    result: frozenset[str] | None = None
    for pod_set in pod_sets:
        constraints: list[frozenset[str]] = []
        if label_key in pod_set.node_selector:
            constraints.append(frozenset({pod_set.node_selector[label_key]}))
        affinity = _affinity_types(pod_set, label_key)
        if affinity is not None:
            constraints.append(affinity)
        resource_types = {
            t
            for name, amount in pod_set.requests.items()
            if amount > 0 and (t := gpu_type_of_resource(name, resource_pattern)) is not None
        }
        if resource_types:
            constraints.append(frozenset(resource_types))
        for constraint in constraints:
            result = constraint if result is None else result & constraint
    return result


def parse_preferred_gpu_types(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """Ordered, de-duplicated GPU types from :data:`PREFERRED_GPU_TYPES_ANNOTATION`."""
    raw = annotations.get(PREFERRED_GPU_TYPES_ANNOTATION, "")
    seen: dict[str, None] = {}
    for item in raw.split(","):
        name = item.strip()
        if name:
            seen.setdefault(name, None)
    return tuple(seen)


def cluster_gpu_types(
    flavors: Iterable[ResourceFlavorView],
    *,
    cluster_queue: ClusterQueueView | None = None,
    cluster_labels: Mapping[str, str] | None = None,
    label_key: str = DEFAULT_GPU_LABEL,
    resource_pattern: str = DEFAULT_GPU_RESOURCE_PATTERN,
) -> frozenset[str]:
    """GPU types a worker offers.

    An admin override on the MultiKueueCluster (:data:`CLUSTER_GPU_TYPE_LABEL` and/or labels with
    :data:`CLUSTER_GPU_TYPE_PREFIX` set to ``"true"``) wins. Otherwise the types are learned from
    the ``label_key`` node label of the flavors (only those the ClusterQueue uses, when one is
    given) and from per-type extended resources the ClusterQueue covers.
    """
    labels = cluster_labels or {}
    override = {
        key[len(CLUSTER_GPU_TYPE_PREFIX) :]
        for key, value in labels.items()
        if key.startswith(CLUSTER_GPU_TYPE_PREFIX) and value.lower() == "true"
    }
    if labels.get(CLUSTER_GPU_TYPE_LABEL):
        override.add(labels[CLUSTER_GPU_TYPE_LABEL])
    if override:
        return frozenset(override)
    used: set[str] | None = None
    types: set[str] = set()
    if cluster_queue is not None:
        used = {fq.name for group in cluster_queue.resource_groups for fq in group.flavors}
        for group in cluster_queue.resource_groups:
            for resource in group.covered:
                if (t := gpu_type_of_resource(resource, resource_pattern)) is not None:
                    types.add(t)
    for flavor in flavors:
        if used is not None and flavor.name not in used:
            continue
        if label_key in flavor.node_labels:
            types.add(flavor.node_labels[label_key])
    return frozenset(types)


@dataclass(frozen=True, slots=True)
class GpuTypeCheck:
    """The GPU type a worker gave an admitted workload, against the types it required or
    preferred (issue 18 item 4)."""

    cluster: str
    assigned: tuple[tuple[str, str | None], ...]
    """Each flavor the worker assigned to a GPU resource, with its GPU type (``None``: the
    flavor names none, so the type cannot be read from it)."""
    mismatch: Literal["", "required", "preferred"]
    """``required``: a known assigned type is not one the workload requires; ``preferred``:
    it requires none, and a known assigned type is not one it prefers; ``""``: no mismatch
    (or nothing to compare)."""
    message: str

    @property
    def verified(self) -> bool:
        """Every GPU flavor's type was known and matched."""
        return not self.mismatch and all(t is not None for _, t in self.assigned)


def _is_gpu_resource(resource: str, pattern: str) -> bool:
    return (
        resource.rsplit("/", 1)[-1] == "gpu" or gpu_type_of_resource(resource, pattern) is not None
    )


def check_gpu_type(
    cluster: str,
    admission: Mapping[str, Any] | None,
    flavors: Mapping[str, ResourceFlavorView],
    *,
    required: frozenset[str] | None,
    preferred: tuple[str, ...],
    claimed: frozenset[str] = frozenset(),
    label_key: str = DEFAULT_GPU_LABEL,
    resource_pattern: str = DEFAULT_GPU_RESOURCE_PATTERN,
) -> GpuTypeCheck | None:
    """Compare the flavors ``cluster`` assigned to the GPU resources of a workload (its copy's
    ``status.admission``) with the GPU types the workload ``required`` or ``preferred``.

    A flavor's type is its ``label_key`` node label, else the type a per-type resource name
    encodes. ``claimed`` is what the cluster's MultiKueueCluster labels say it offers (named
    in the message when it disagrees: a mislabelled cluster). ``None`` when there is nothing
    to compare: no GPU assignment, or neither a requirement nor a preference."""
    if not required and not preferred:
        return None
    assigned: dict[str, str | None] = {}
    for assignment in (admission or {}).get("podSetAssignments") or []:
        for resource, flavor in ((assignment or {}).get("flavors") or {}).items():
            if not _is_gpu_resource(str(resource), resource_pattern):
                continue
            view = flavors.get(str(flavor))
            kind = view.node_labels.get(label_key) if view is not None else None
            assigned[str(flavor)] = kind or gpu_type_of_resource(str(resource), resource_pattern)
    if not assigned:
        return None
    pairs = tuple(sorted(assigned.items()))
    known = {t for _, t in pairs if t is not None}
    shown = ", ".join(f"{name} ({t or f'no {label_key} node label'})" for name, t in pairs)
    mismatch: Literal["", "required", "preferred"] = ""
    if required:
        wanted = f"requires {', '.join(sorted(required))}"
        if known - required:
            mismatch = "required"
    else:
        wanted = f"prefers {', '.join(preferred)}"
        if known - set(preferred):
            mismatch = "preferred"
    if mismatch:
        message = (
            f"GPU type mismatch on {cluster}: the worker assigned flavor {shown}; "
            f"the workload {wanted}"
        )
        if claimed and claimed != known:
            message += (
                f" (its MultiKueueCluster's labels say it offers {', '.join(sorted(claimed))}: "
                "mislabelled?)"
            )
    elif len(known) < len(pairs):
        message = f"GPU type not verified on {cluster}: flavor {shown}; the workload {wanted}"
    else:
        message = f"GPU type verified on {cluster}: flavor {shown}; the workload {wanted}"
    return GpuTypeCheck(cluster, pairs, mismatch, message)
