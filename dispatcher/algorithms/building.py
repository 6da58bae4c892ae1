"""Build requests and snapshots from Kueue objects (views or raw dicts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dispatcher.algorithms.model import ClusterSnapshot, DispatchRequest, QueuedWorkload
from dispatcher.kueue.admission import ReservingWorkload
from dispatcher.kueue.flavorfit import cohort_lending
from dispatcher.kueue.gputypes import (
    DEFAULT_GPU_LABEL,
    DEFAULT_GPU_RESOURCE_PATTERN,
    cluster_gpu_types,
    parse_preferred_gpu_types,
    required_gpu_types,
)
from dispatcher.kueue.hints import Taint, parse_placement_hints
from dispatcher.kueue.objects import (
    ClusterQueueView,
    InvalidField,
    LocalQueueView,
    ResourceFlavorView,
    WorkloadView,
    frozen_map,
    parse_workload,
)

__all__ = ["queued_workload", "request_from_workload", "snapshot_from_objects"]


def request_from_workload(
    workload: WorkloadView | Mapping[str, Any],
    *,
    now: float,
    queued_at: float | None = None,
    nominated_at: float | None = None,
    label_key: str = DEFAULT_GPU_LABEL,
    resource_pattern: str = DEFAULT_GPU_RESOURCE_PATTERN,
) -> DispatchRequest:
    """A :class:`DispatchRequest` for a manager Workload at time ``now``.

    A raw Workload that cannot be dispatched (a field Kueue's CRD schema would refuse, or no
    pod set) raises :class:`~dispatcher.kueue.objects.InvalidField` naming the field.
    """
    view = workload if isinstance(workload, WorkloadView) else parse_workload(workload)
    if not view.pod_sets and not isinstance(workload, WorkloadView):
        raise InvalidField("spec.podSets", "no pod sets (Kueue's Workload CRD requires 1 to 18)")
    preferred = parse_preferred_gpu_types(view.annotations)
    # A Job's annotations do not reach its Workload, but its pod template does: the GPU
    # preference (from the first pod template that carries it) and the placement hints are
    # read there too.
    annotation_maps: list[tuple[str, Mapping[str, str]]] = [
        ("metadata.annotations", view.annotations)
    ]
    if not isinstance(workload, WorkloadView):
        for index, pod_set in enumerate((workload.get("spec") or {}).get("podSets") or []):
            template_meta = (pod_set.get("template") or {}).get("metadata") or {}
            annotations = template_meta.get("annotations")
            if not annotations or not isinstance(annotations, Mapping):
                continue
            annotation_maps.append(
                (f"spec.podSets[{index}].template.metadata.annotations", annotations)
            )
            if not preferred:
                preferred = parse_preferred_gpu_types(annotations)
    hints = parse_placement_hints(annotation_maps)
    return DispatchRequest(
        namespace=view.namespace,
        name=view.name,
        now=now,
        pod_sets=view.pod_sets,
        queue_name=view.queue_name,
        priority=view.priority,
        required_gpu_types=required_gpu_types(
            view.pod_sets, label_key=label_key, resource_pattern=resource_pattern
        ),
        preferred_gpu_types=preferred,
        queued_at=queued_at,
        nominated=view.nominated_cluster_names,
        nominated_at=nominated_at,
        labels=view.labels,
        annotations=view.annotations,
        max_execution_seconds=view.max_execution_seconds,
        hints=hints,
    )


def queued_workload(request: DispatchRequest) -> QueuedWorkload:
    """The in-flight record for a request we nominate somewhere."""
    return QueuedWorkload(
        key=request.key,
        priority=request.priority,
        pod_sets=request.pod_sets,
        max_execution_seconds=request.max_execution_seconds,
    )


def snapshot_from_objects(
    name: str,
    *,
    namespace: str,
    queue_name: str,
    local_queues: Iterable[LocalQueueView] = (),
    cluster_queues: Iterable[ClusterQueueView] = (),
    flavors: Iterable[ResourceFlavorView] = (),
    active: bool = True,
    inactive_reason: str = "",
    order: int = 0,
    labels: Mapping[str, str] | None = None,
    pending: Iterable[QueuedWorkload] = (),
    in_flight: Iterable[QueuedWorkload] = (),
    holders: Iterable[ReservingWorkload] = (),
    run_seconds: Iterable[float] = (),
    label_key: str = DEFAULT_GPU_LABEL,
    resource_pattern: str = DEFAULT_GPU_RESOURCE_PATTERN,
    taints: tuple[Taint, ...] = (),
    taints_error: str = "",
) -> ClusterSnapshot:
    """A worker's snapshot for one workload's ``namespace/queue_name`` from its mirrored objects.

    Follows LocalQueue → ClusterQueue (contract C69) and computes the cohort's lending room from
    the other ClusterQueues of the cohort. ``holders`` are the Workloads holding quota in the
    workload's ClusterQueue, ``run_seconds`` how long that ClusterQueue's finished workloads
    ran, sorted (both taken as they are: building a snapshot must not cost a pass over them).
    """
    cqs = {cq.name: cq for cq in cluster_queues}
    lq = next((q for q in local_queues if q.namespace == namespace and q.name == queue_name), None)
    cq = cqs.get(lq.cluster_queue) if lq is not None and not lq.stopped else None
    room, limit = cohort_lending(cq, cqs.values()) if cq is not None else ({}, {})
    flavor_map = {f.name: f for f in flavors}
    return ClusterSnapshot(
        name=name,
        active=active,
        inactive_reason=inactive_reason,
        order=order,
        labels=frozen_map(labels),
        cluster_queue=cq,
        flavors=frozen_map(flavor_map),
        cohort_room=frozen_map(room),
        cohort_limit=frozen_map(limit),
        pending=tuple(pending),
        in_flight=tuple(in_flight),
        holders=tuple(holders) if cq is not None else (),
        run_seconds=tuple(run_seconds) if cq is not None else (),
        gpu_types=cluster_gpu_types(
            flavor_map.values(),
            cluster_queue=cq,
            cluster_labels=labels,
            label_key=label_key,
            resource_pattern=resource_pattern,
        ),
        taints=taints,
        taints_error=taints_error,
    )
