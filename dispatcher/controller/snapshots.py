"""Cluster snapshots for decisions, built from a worker's mirror without any API call.

Parsing every cached object for every decision would make a burst quadratic, so each worker has
a :class:`WorkerIndex` of parsed views that is rebuilt only when that worker's caches changed.
Quota held on a worker is computed from the mirrored Workloads (``status.admission`` of those
with ``QuotaReserved=True`` and not finished) rather than read from ClusterQueue status, so it is
consistent with the in-flight ledger, which is settled from the same Workloads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from dispatcher.algorithms.building import snapshot_from_objects
from dispatcher.algorithms.model import ClusterSnapshot, DispatchRequest, QueuedWorkload
from dispatcher.clusters.mirror import Mirror
from dispatcher.clusters.registry import Candidate
from dispatcher.controller.inflight import InFlight
from dispatcher.kueue.admission import admission_usage
from dispatcher.kueue.objects import (
    ClusterQueueView,
    FlavorResource,
    LocalQueueView,
    ResourceFlavorView,
    frozen_map,
    parse_cluster_queue,
    parse_local_queue,
    parse_pod_set,
    parse_resource_flavor,
)

__all__ = [
    "ORIGIN_LABEL",
    "SnapshotCache",
    "WorkerIndex",
    "build_snapshot",
    "condition_status",
    "is_copy",
]


def condition_status(obj: Mapping[str, Any], kind: str) -> str | None:
    """The status of condition ``kind`` (``"True"``, ``"False"``…), or None."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return str(item.get("status"))
    return None


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
"""The label Kueue puts on the copies it creates on workers, with its ``multiKueue.origin``."""


def is_copy(obj: Mapping[str, Any], origin: str) -> bool:
    """Whether a worker Workload is a copy made by the manager of ``origin`` (C32): Kueue keys
    its copies by ``kueue.x-k8s.io/multikueue-origin``, not by namespace/name alone; a
    same-named Workload without the label (the worker's own, another manager's) is not one."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(ORIGIN_LABEL) == origin


class WorkerIndex:
    """Parsed views of one worker's mirror, for one version of its caches.

    ``origin`` is Kueue's ``multiKueue.origin``: only Workloads with that origin label count as
    copies of manager Workloads (``copies``, ``admitted``, ``reserved_keys``); every Workload
    counts for the worker's usage and queues."""

    def __init__(self, origin: str = "multikueue") -> None:
        self.origin = origin
        self.version = -1
        self.local_queues: tuple[LocalQueueView, ...] = ()
        self.cluster_queues: tuple[ClusterQueueView, ...] = ()
        self.flavors: tuple[ResourceFlavorView, ...] = ()
        self.pending: dict[str, tuple[QueuedWorkload, ...]] = {}
        """Pending workloads per ClusterQueue name, by priority then age."""
        self.reserved_keys: frozenset[str] = frozenset()
        """Keys of the copies holding quota on this worker."""
        self.admitted: dict[str, str] = {}
        """Keys of copies ``Admitted=True`` here, with the transition time."""
        self.copies: frozenset[str] = frozenset()
        """Keys of every copy (this manager's origin label) on this worker."""
        self.errors: list[str] = []

    def refresh(self, mirror: Mirror, version: int) -> None:
        """Rebuild from ``mirror`` unless already built for ``version``."""
        if version == self.version:
            return
        errors: list[str] = []
        lqs: list[LocalQueueView] = []
        for raw in mirror.cache("localqueues").items():
            try:
                lqs.append(parse_local_queue(raw))
            except (ValueError, TypeError, KeyError) as error:
                errors.append(f"LocalQueue {_key(raw)}: {error}")
        flavors: list[ResourceFlavorView] = []
        for raw in mirror.cache("resourceflavors").items():
            try:
                flavors.append(parse_resource_flavor(raw))
            except (ValueError, TypeError, KeyError) as error:
                errors.append(f"ResourceFlavor {_key(raw)}: {error}")
        queue_of = {(lq.namespace, lq.name): lq.cluster_queue for lq in lqs}
        reserved: dict[str, dict[FlavorResource, int]] = {}
        pending: dict[str, list[tuple[int, str, QueuedWorkload]]] = {}
        reserved_keys: set[str] = set()
        admitted: dict[str, str] = {}
        copies: set[str] = set()
        for raw in mirror.cache("workloads").items():
            key = _key(raw)
            ours = is_copy(raw, self.origin)
            if ours:
                copies.add(key)
            meta = raw.get("metadata") or {}
            spec = raw.get("spec") or {}
            status = raw.get("status") or {}
            if condition_status(raw, "Finished") == "True":
                continue
            if ours and condition_status(raw, "Admitted") == "True":
                for item in status.get("conditions") or []:
                    if item.get("type") == "Admitted":
                        admitted[key] = str(item.get("lastTransitionTime", ""))
            queue = queue_of.get((str(meta.get("namespace", "")), str(spec.get("queueName", ""))))
            if condition_status(raw, "QuotaReserved") == "True":
                if ours:
                    reserved_keys.add(key)
                cq = str((status.get("admission") or {}).get("clusterQueue") or queue or "")
                try:
                    usage = admission_usage(status.get("admission"))
                except (ValueError, TypeError) as error:
                    errors.append(f"Workload {key}: status.admission: {error}")
                    continue
                totals = reserved.setdefault(cq, {})
                for fr, amount in usage.items():
                    totals[fr] = totals.get(fr, 0) + amount
            elif queue is not None and spec.get("active", True) is not False:
                try:
                    pod_sets = tuple(parse_pod_set(ps) for ps in spec.get("podSets") or [])
                except (ValueError, TypeError, KeyError) as error:
                    errors.append(f"Workload {key}: spec.podSets: {error}")
                    continue
                priority = int(spec.get("priority") or 0)
                created = str(meta.get("creationTimestamp", ""))
                pending.setdefault(queue, []).append(
                    (-priority, created, QueuedWorkload(key, priority, pod_sets))
                )
        cqs: list[ClusterQueueView] = []
        for raw in mirror.cache("clusterqueues").items():
            try:
                view = parse_cluster_queue(raw)
            except (ValueError, TypeError, KeyError) as error:
                errors.append(f"ClusterQueue {_key(raw)}: {error}")
                continue
            cqs.append(dataclasses.replace(view, reserved=frozen_map(reserved.get(view.name, {}))))
        self.local_queues = tuple(lqs)
        self.cluster_queues = tuple(cqs)
        self.flavors = tuple(flavors)
        self.pending = {
            cq: tuple(w for _, _, w in sorted(items, key=lambda t: (t[0], t[1], t[2].key)))
            for cq, items in pending.items()
        }
        self.reserved_keys = frozenset(reserved_keys)
        self.admitted = admitted
        self.copies = frozenset(copies)
        self.errors = errors
        self.version = version


def _queue_of(index: WorkerIndex, namespace: str, queue_name: str) -> str | None:
    for lq in index.local_queues:
        if lq.namespace == namespace and lq.name == queue_name:
            return lq.cluster_queue
    return None


def build_snapshot(
    candidate: Candidate,
    index: WorkerIndex | None,
    request: DispatchRequest,
    in_flight: InFlight,
    *,
    label_key: str,
    resource_pattern: str,
    extra_in_flight: Iterable[QueuedWorkload] = (),
) -> ClusterSnapshot:
    """The snapshot of one candidate cluster for ``request`` (inactive ones carry the reason)."""
    if not candidate.active or index is None:
        return ClusterSnapshot(
            name=candidate.name,
            active=False,
            inactive_reason=candidate.reason or "not connected",
            order=candidate.order,
            labels=frozen_map(candidate.labels),
        )
    cq = _queue_of(index, request.namespace, request.queue_name)
    # The deciding workload's own copy waiting there is not a competitor; a same-named Workload
    # that is not a copy (no origin label) is.
    pending = tuple(
        w
        for w in index.pending.get(cq or "", ())
        if w.key != request.key or request.key not in index.copies
    )
    flying = tuple(
        w
        for w in (*in_flight.on(candidate.name, request.now), *extra_in_flight)
        if w.key != request.key and w.key not in index.reserved_keys
    )
    return snapshot_from_objects(
        candidate.name,
        namespace=request.namespace,
        queue_name=request.queue_name,
        local_queues=index.local_queues,
        cluster_queues=index.cluster_queues,
        flavors=index.flavors,
        active=True,
        order=candidate.order,
        labels=candidate.labels,
        pending=pending,
        in_flight=flying,
        label_key=label_key,
        resource_pattern=resource_pattern,
    )


_CachedSnapshot = tuple[tuple[Any, ...], tuple[QueuedWorkload, ...], ClusterSnapshot]
"""(state it was built in, the in-flight tuple it saw, the snapshot)."""


class SnapshotCache:
    """Snapshots reused across decisions while nothing they are built from changed.

    A snapshot depends on the candidate's state, the worker's index version, the workload's
    namespace and LocalQueue, and the in-flight ledger of that cluster; it also leaves the
    deciding workload itself out of the pending and in-flight lists. Reusing the same
    :class:`ClusterSnapshot` object keeps its ``derived`` cache (the quota left after replaying
    the in-flight workloads, which costs one flavor assignment per in-flight workload): in a
    burst, a nomination changes the ledger of the nominated clusters only, so the other
    candidates' replays are not recomputed for every decision. Snapshots of a cluster where the
    workload has a copy or is in flight are built afresh.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], _CachedSnapshot] = {}

    def get(
        self,
        candidate: Candidate,
        index: WorkerIndex | None,
        request: DispatchRequest,
        in_flight: InFlight,
        *,
        label_key: str,
        resource_pattern: str,
    ) -> ClusterSnapshot:
        """The snapshot of ``candidate`` for ``request`` (see :func:`build_snapshot`)."""

        def build() -> ClusterSnapshot:
            return build_snapshot(
                candidate,
                index,
                request,
                in_flight,
                label_key=label_key,
                resource_pattern=resource_pattern,
            )

        if not candidate.active or index is None:
            return build()
        flying = in_flight.on(candidate.name, request.now)
        if request.key in index.copies or any(w.key == request.key for w in flying):
            return build()
        key = (candidate.name, request.namespace, request.queue_name)
        state = (
            index.version,
            candidate.order,
            tuple(sorted(candidate.labels.items())),
            label_key,
            resource_pattern,
        )
        cached = self._entries.get(key)
        if cached is not None and cached[0] == state and cached[1] is flying:
            return cached[2]
        snapshot = build()
        self._entries[key] = (state, flying, snapshot)
        return snapshot
