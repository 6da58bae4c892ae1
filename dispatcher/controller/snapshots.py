"""Cluster snapshots for decisions, built from a worker's mirror without any API call.

Parsing every cached object for every decision would make a burst quadratic, so each worker has
a :class:`WorkerIndex` of parsed views, updated by each change of that worker's caches (one
Workload event re-parses that Workload, not the worker).
Quota held on a worker is computed from the mirrored Workloads (``status.admission`` of those
with ``QuotaReserved=True`` and not finished) rather than read from ClusterQueue status, so it is
consistent with the in-flight ledger, which is settled from the same Workloads.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import datetime
import functools
import itertools
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from dispatcher.algorithms.building import snapshot_from_objects
from dispatcher.algorithms.model import ClusterSnapshot, DispatchRequest, QueuedWorkload
from dispatcher.algorithms.stages import continue_replay
from dispatcher.clusters.mirror import Mirror
from dispatcher.clusters.registry import Candidate
from dispatcher.clusters.slim import ORIGIN_LABEL, PREBUILT_LABEL
from dispatcher.controller.inflight import InFlight
from dispatcher.controller.records import parse_time, transition_time
from dispatcher.k8s.watching import Key, Listed, Listener, Obj, ObjectCache, ObjectEvent, key_text
from dispatcher.kueue.admission import EPOCH, ReservingWorkload, admission_usage
from dispatcher.kueue.forecast import RunTimes
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
    "owner_job",
    "prebuilt_workload",
]


def condition_status(obj: Mapping[str, Any], kind: str) -> str | None:
    """The status of condition ``kind`` (``"True"``, ``"False"``…), or None."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return str(item.get("status"))
    return None


def is_copy(obj: Mapping[str, Any], origin: str) -> bool:
    """Whether a worker Workload is a copy made by the manager of ``origin`` (C32): Kueue keys
    its copies by ``kueue.x-k8s.io/multikueue-origin``, not by namespace/name alone; a
    same-named Workload without the label (the worker's own, another manager's) is not one."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(ORIGIN_LABEL) == origin


def prebuilt_workload(job: Mapping[str, Any]) -> str:
    """The Workload a worker Job of ours runs (its :data:`PREBUILT_LABEL`), or ``""``."""
    return str(((job.get("metadata") or {}).get("labels") or {}).get(PREBUILT_LABEL) or "")


def owner_job(workload: Mapping[str, Any]) -> str | None:
    """The name of the batch Job that controls a manager Workload (its controller owner
    reference of kind ``Job``), or None: Kueue names the Job it creates on a worker after it."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller") and ref.get("name"):
            api_version = str(ref.get("apiVersion") or "batch/v1")
            if api_version.startswith("batch/"):
                return str(ref["name"])
    return None


_VERSIONS = itertools.count()
"""Index versions, unique across every index of the process (an index built anew for a new
mirror never reuses the version of its predecessor, so a cached snapshot is never mistaken for
a current one)."""

RESOURCES = ("localqueues", "resourceflavors", "clusterqueues", "workloads")
"""The worker caches an index is built from."""
JOBS = "jobs"
"""The worker cache of Jobs (optional: an index of a mirror without it guards Workload names
only)."""

_OrderKey = tuple[int, str, str]
"""A pending workload's place in its ClusterQueue: (-priority, creationTimestamp, key)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    """What one Workload contributes to the index."""

    copy: bool = False
    queue_ref: tuple[str, str] | None = None
    """(namespace, spec.queueName) of an unfinished workload: a change of that LocalQueue
    changes this entry."""
    admitted: str | None = None
    reserved_key: bool = False
    usage: tuple[str, Mapping[FlavorResource, int]] | None = None
    """(ClusterQueue, quota held) of one holding quota."""
    holder: ReservingWorkload | None = None
    """One holding quota as a possible preemption victim (``None`` when its priority cannot be
    read: it is then never taken for a victim)."""
    run: tuple[str, float] | None = None
    """(ClusterQueue, seconds from ``Admitted`` to ``Finished``) of a finished one."""
    pending: tuple[str, _OrderKey, QueuedWorkload] | None = None
    """(ClusterQueue, order, workload) of one waiting in a ClusterQueue."""
    error: str | None = None


class _Pending(Mapping[str, tuple[QueuedWorkload, ...]]):
    """Pending workloads per ClusterQueue, each list kept in queue order; the tuple a reader
    gets is made once per change of that ClusterQueue's list."""

    def __init__(self) -> None:
        self.order: dict[str, list[_OrderKey]] = {}
        self.by_key: dict[str, dict[str, QueuedWorkload]] = {}
        self._tuples: dict[str, tuple[QueuedWorkload, ...]] = {}

    def add(self, cq: str, order: _OrderKey, workload: QueuedWorkload) -> None:
        bisect.insort(self.order.setdefault(cq, []), order)
        self.by_key.setdefault(cq, {})[order[2]] = workload
        self._tuples.pop(cq, None)

    def remove(self, cq: str, order: _OrderKey) -> None:
        keys = self.order[cq]
        del keys[bisect.bisect_left(keys, order)]
        del self.by_key[cq][order[2]]
        self._tuples.pop(cq, None)
        if not keys:
            del self.order[cq], self.by_key[cq]

    def __getitem__(self, cq: str) -> tuple[QueuedWorkload, ...]:
        found = self._tuples.get(cq)
        if found is None:
            items = self.by_key[cq]
            found = self._tuples[cq] = tuple(items[key] for _, _, key in self.order[cq])
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


class WorkerIndex:
    """Parsed views of one worker's mirror, kept in step with its caches event by event.

    ``origin`` is Kueue's ``multiKueue.origin``: only Workloads with that origin label count as
    copies of manager Workloads (``copies``, ``admitted``, ``reserved_keys``); every Workload
    counts for the worker's usage and queues.

    :meth:`refresh` builds the index from a mirror (the first time, or when the worker's mirror
    was replaced by a reconnect) and attaches it to that mirror's caches: from then on every
    change they apply updates the index at once (:meth:`apply`): one Workload event re-parses
    that Workload only, subtracting what it contributed before (quota held in its ClusterQueue,
    its place in a pending list, ...) and adding what it contributes now; a LocalQueue event
    re-derives the Workloads that name it; a re-list (its ``Listed`` marker) rebuilds the whole
    index, as one update. ``version`` changes with every applied change. ``parses`` counts the
    objects parsed (for operation counts).
    """

    def __init__(self, origin: str = "multikueue") -> None:
        self.origin = origin
        self.version = -1
        self.mirror: Mirror | None = None
        """The mirror the index follows (None: not built yet)."""
        self.parses = 0
        """Objects parsed so far (a full build parses every object of the worker)."""
        self.builds = 0
        self.local_queues: tuple[LocalQueueView, ...] = ()
        self.flavors: tuple[ResourceFlavorView, ...] = ()
        self.pending: Mapping[str, tuple[QueuedWorkload, ...]] = _Pending()
        """Pending workloads per ClusterQueue name, by priority then age."""
        self.reserved_keys: AbstractSet[str] = set()
        """Keys of the copies holding quota on this worker."""
        self.admitted: dict[str, str] = {}
        """Keys of copies ``Admitted=True`` here, with the transition time."""
        self.copies: AbstractSet[str] = set()
        """Keys of every copy (this manager's origin label) on this worker."""
        self.foreign_jobs: AbstractSet[Key] = set()
        """Jobs on this worker that are not copies of ours (no origin label of this manager):
        a manager Job of one of these names can never run here (the same-name guard)."""
        self._listeners: list[tuple[ObjectCache, Listener]] = []
        self._runs = RunTimes()
        """Run times of the finished Workloads seen, per ClusterQueue (statistics: kept across
        re-lists)."""
        self._counted: set[Key] = set()
        """Finished Workloads whose run time is already in ``_runs``."""
        self._reset()

    def _reset(self) -> None:
        self._pending = _Pending()
        self.pending = self._pending
        self._reserved_keys: set[str] = set()
        self.reserved_keys = self._reserved_keys
        self.admitted = {}
        self._copies: set[str] = set()
        self.copies = self._copies
        self._foreign_jobs: set[Key] = set()
        self.foreign_jobs = self._foreign_jobs
        self._copy_jobs: dict[Key, str] = {}
        """Jobs on this worker that are copies of ours, with the Workload each runs (C68)."""
        self._lqs: dict[Key, LocalQueueView] = {}
        self._queue_of: dict[tuple[str, str], str] = {}
        self._rfs: dict[Key, ResourceFlavorView] = {}
        self._cqs: dict[Key, ClusterQueueView] = {}
        self._cq_views: tuple[ClusterQueueView, ...] | None = None
        self._entries: dict[Key, _Entry] = {}
        self._by_queue: dict[tuple[str, str], set[Key]] = {}
        self._holders: dict[str, dict[str, ReservingWorkload]] = {}
        self._holder_tuples: dict[str, tuple[ReservingWorkload, ...]] = {}
        self._reserved: dict[str, dict[FlavorResource, list[int]]] = {}
        """Quota held per ClusterQueue: (flavor, resource) -> [amount, workloads counted]."""
        self._errors: dict[str, dict[Key, str]] = {resource: {} for resource in RESOURCES}
        self.local_queues = ()
        self.flavors = ()

    # --- feeding ------------------------------------------------------------------------------

    def refresh(self, mirror: Mirror, version: int | None = None) -> None:
        """Follow ``mirror``: built from it and attached to its caches unless already (the
        index then follows every change by itself, so this costs nothing). ``version`` is not
        used (the caller's count of changes; the index keeps its own)."""
        if mirror is not self.mirror:
            self.attach(mirror)

    def attach(self, mirror: Mirror) -> None:
        """Build from ``mirror`` and follow its caches from now on (no longer the previous
        mirror's)."""
        self.detach()
        self.mirror = mirror
        for resource in (*RESOURCES, JOBS):
            if resource not in mirror.caches:
                continue
            cache = mirror.cache(resource)
            listener = functools.partial(self.apply, resource)
            cache.listeners.append(listener)
            self._listeners.append((cache, listener))
        self._build()

    def detach(self) -> None:
        """Stop following the mirror (the views stay as they are)."""
        for cache, listener in self._listeners:
            with contextlib.suppress(ValueError):
                cache.listeners.remove(listener)
        self._listeners = []

    def apply(self, resource: str, item: ObjectEvent | Listed) -> None:
        """One change of the ``resource`` cache of the mirror, after the cache applied it."""
        if self.mirror is None:
            return
        if isinstance(item, Listed):
            self._build()
            return
        if item.type == "LISTED":
            return  # staged by the cache until its Listed marker
        obj = None if item.type == "DELETED" else item.object
        key = item.key
        if resource == JOBS:
            # No snapshot reads Jobs: the version (which invalidates snapshots) stays.
            self._set_job(key, obj)
            return
        if resource == "workloads":
            self._set_workload(key, obj)
        elif resource == "localqueues":
            self._set_local_queue(key, obj)
        elif resource == "clusterqueues":
            self._set_cluster_queue(key, obj)
        elif resource == "resourceflavors":
            self._set_flavor(key, obj)
        else:
            return
        self.version = next(_VERSIONS)

    def _build(self) -> None:
        assert self.mirror is not None
        # A re-list does not count again the run times of Workloads already counted.
        self._counted = {key for key, entry in self._entries.items() if entry.run is not None}
        self._reset()
        self.builds += 1
        caches = {resource: self.mirror.cache(resource) for resource in RESOURCES}
        for key, raw in sorted(caches["localqueues"].objects.items()):
            self._parse_local_queue(key, raw)
        self._local_queues_changed()
        for key, raw in sorted(caches["resourceflavors"].objects.items()):
            self._parse_flavor(key, raw)
        self.flavors = tuple(view for _, view in sorted(self._rfs.items()))
        for key, raw in caches["clusterqueues"].objects.items():
            self._parse_cluster_queue(key, raw)
        for key, raw in caches["workloads"].objects.items():
            self._add_entry(key, self._derive(raw))
        if JOBS in self.mirror.caches:
            for key, raw in self.mirror.cache(JOBS).objects.items():
                self._set_job(key, raw)
        self.version = next(_VERSIONS)

    # --- views --------------------------------------------------------------------------------

    @property
    def cluster_queues(self) -> tuple[ClusterQueueView, ...]:
        """The ClusterQueues, with the quota held in each (from the mirrored Workloads)."""
        if self._cq_views is None:
            self._cq_views = tuple(
                dataclasses.replace(view, reserved=self._reserved_in(view.name))
                for _, view in sorted(self._cqs.items())
            )
        return self._cq_views

    def run_seconds(self, cq: str) -> tuple[float, ...]:
        """The run times observed in ClusterQueue ``cq`` (most recent ones), sorted."""
        return self._runs.sorted(cq)

    def holders(self, cq: str) -> tuple[ReservingWorkload, ...]:
        """The Workloads holding quota in ClusterQueue ``cq`` (copies of ours or not), by key:
        the possible victims of a preemption there (the tuple is made once per change)."""
        found = self._holder_tuples.get(cq)
        if found is None:
            by_key = self._holders.get(cq, {})
            found = self._holder_tuples[cq] = tuple(by_key[k] for k in sorted(by_key))
        return found

    def _reserved_in(self, cq: str) -> Mapping[FlavorResource, int]:
        totals = self._reserved.get(cq, {})
        return frozen_map({fr: totals[fr][0] for fr in sorted(totals)})

    @property
    def errors(self) -> list[str]:
        """Objects that could not be parsed: LocalQueues, ResourceFlavors, Workloads, then
        ClusterQueues, each by key."""
        return [
            message
            for resource in ("localqueues", "resourceflavors", "workloads", "clusterqueues")
            for _, message in sorted(self._errors[resource].items())
        ]

    # --- LocalQueues, ResourceFlavors, ClusterQueues ------------------------------------------

    def _error(self, resource: str, key: Key, message: str | None) -> None:
        if message is None:
            self._errors[resource].pop(key, None)
        else:
            self._errors[resource][key] = message

    def _parse_local_queue(self, key: Key, raw: Obj | None) -> None:
        self._lqs.pop(key, None)
        self._error("localqueues", key, None)
        if raw is None:
            return
        self.parses += 1
        try:
            self._lqs[key] = parse_local_queue(raw)
        except (ValueError, TypeError, KeyError) as error:
            self._error("localqueues", key, f"LocalQueue {key_text(raw)}: {error}")

    def _local_queues_changed(self) -> None:
        self.local_queues = tuple(view for _, view in sorted(self._lqs.items()))
        self._queue_of = {(lq.namespace, lq.name): lq.cluster_queue for lq in self.local_queues}

    def _set_local_queue(self, key: Key, raw: Obj | None) -> None:
        before = dict(self._queue_of)
        self._parse_local_queue(key, raw)
        self._local_queues_changed()
        # The Workloads naming a queue whose ClusterQueue changed move (rare: re-derive them).
        moved = {
            ref for ref in {*before, *self._queue_of} if before.get(ref) != self._queue_of.get(ref)
        }
        workloads = self.mirror.cache("workloads") if self.mirror is not None else None
        for ref in moved:
            for wl_key in sorted(self._by_queue.get(ref, ())):
                raw_workload = workloads.objects.get(wl_key) if workloads is not None else None
                if raw_workload is not None:
                    self._set_workload(wl_key, raw_workload)

    def _parse_flavor(self, key: Key, raw: Obj | None) -> None:
        self._rfs.pop(key, None)
        self._error("resourceflavors", key, None)
        if raw is None:
            return
        self.parses += 1
        try:
            self._rfs[key] = parse_resource_flavor(raw)
        except (ValueError, TypeError, KeyError) as error:
            self._error("resourceflavors", key, f"ResourceFlavor {key_text(raw)}: {error}")

    def _set_flavor(self, key: Key, raw: Obj | None) -> None:
        self._parse_flavor(key, raw)
        self.flavors = tuple(view for _, view in sorted(self._rfs.items()))

    def _parse_cluster_queue(self, key: Key, raw: Obj | None) -> None:
        self._cqs.pop(key, None)
        self._error("clusterqueues", key, None)
        self._cq_views = None
        if raw is None:
            return
        self.parses += 1
        try:
            self._cqs[key] = parse_cluster_queue(raw)
        except (ValueError, TypeError, KeyError) as error:
            self._error("clusterqueues", key, f"ClusterQueue {key_text(raw)}: {error}")

    def _set_cluster_queue(self, key: Key, raw: Obj | None) -> None:
        self._parse_cluster_queue(key, raw)

    # --- the same-name guard ---------------------------------------------------------------

    def _set_job(self, key: Key, raw: Obj | None) -> None:
        self._copy_jobs.pop(key, None)
        if raw is None or is_copy(raw, self.origin):
            self._foreign_jobs.discard(key)
            if raw is not None:
                self._copy_jobs[key] = prebuilt_workload(raw)
        else:
            self._foreign_jobs.add(key)

    def job_runs(self, namespace: str, job: str) -> str | None:
        """The Workload that our Job ``namespace/job`` on this worker runs (its
        ``prebuilt-workload-name`` label, ``""`` when it has none), or None when no Job of
        ours has that name here."""
        return self._copy_jobs.get((namespace, job))

    def leftover(self, namespace: str, workload: str, job: str) -> str:
        """The other Workload that our Job ``namespace/job`` here runs, when it is a leftover
        in the way of ``workload``'s copy (its ``prebuilt-workload-name`` label names another
        Workload: MultiKueue would sync the copy's status from it and never create the copy's
        own Job, C68), else ``""``."""
        runs = self.job_runs(namespace, job)
        return runs if runs and runs != workload else ""

    def name_taken(self, namespace: str, workload: str, job: str | None) -> str:
        """Why a copy of the manager Workload ``namespace/workload`` (owned by the batch Job
        ``job``, if any) can never run on this worker, or ``""``: a Workload or Job of the same
        name is there that is not a copy of ours (Kueue would take that Workload for its copy,
        and refuses to sync a Job it does not own; C28, C33), or a Job of ours that runs
        another Workload (a leftover: MultiKueue syncs a copy's status from whatever Job of its
        name exists there, and never creates the copy's own; C68)."""
        entry = self._entries.get((namespace, workload))
        if entry is not None and not entry.copy:
            return f"Workload {namespace}/{workload} exists there and is not a copy of ours"
        if job is not None and (namespace, job) in self._foreign_jobs:
            return f"Job {namespace}/{job} exists there and is not a copy of ours"
        runs = self.leftover(namespace, workload, job) if job is not None else ""
        if runs:
            return (
                f"Job {namespace}/{job} exists there for another Workload ({runs}), a leftover "
                "of an earlier Job of that name"
            )
        return ""

    # --- Workloads ----------------------------------------------------------------------------

    def _derive(self, raw: Obj) -> _Entry:
        """What one Workload contributes (one parse)."""
        self.parses += 1
        key = key_text(raw)
        ours = is_copy(raw, self.origin)
        if condition_status(raw, "Finished") == "True":
            return _Entry(copy=ours, run=_run(raw))
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        admitted = None
        if ours and condition_status(raw, "Admitted") == "True":
            for item in status.get("conditions") or []:
                if item.get("type") == "Admitted":
                    admitted = str(item.get("lastTransitionTime", ""))
        ref = (str(meta.get("namespace", "")), str(spec.get("queueName", "")))
        queue = self._queue_of.get(ref)
        entry = _Entry(copy=ours, queue_ref=ref, admitted=admitted)
        if condition_status(raw, "QuotaReserved") == "True":
            cq = str((status.get("admission") or {}).get("clusterQueue") or queue or "")
            try:
                usage = admission_usage(status.get("admission"))
            except (ValueError, TypeError) as error:
                return dataclasses.replace(
                    entry, reserved_key=ours, error=f"Workload {key}: status.admission: {error}"
                )
            holder, problem = _holder(key, cq, usage, meta, spec, status)
            return dataclasses.replace(
                entry, reserved_key=ours, usage=(cq, usage), holder=holder, error=problem
            )
        if queue is None or spec.get("active", True) is False:
            return entry
        try:
            pod_sets = tuple(parse_pod_set(ps) for ps in spec.get("podSets") or [])
        except (ValueError, TypeError, KeyError) as error:
            return dataclasses.replace(entry, error=f"Workload {key}: spec.podSets: {error}")
        try:
            priority = int(spec.get("priority") or 0)
        except (ValueError, TypeError) as error:
            return dataclasses.replace(entry, error=f"Workload {key}: spec.priority: {error}")
        created = str(meta.get("creationTimestamp", ""))
        workload = QueuedWorkload(key, priority, pod_sets, _max_execution(spec))
        return dataclasses.replace(entry, pending=(queue, (-priority, created, key), workload))

    def _set_workload(self, key: Key, raw: Obj | None) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._remove_entry(key, old)
            if old.run is not None:
                self._counted.add(key)
        if raw is not None:
            self._add_entry(key, self._derive(raw))
        else:
            self._counted.discard(key)

    def _add_entry(self, key: Key, entry: _Entry) -> None:
        self._entries[key] = entry
        if entry.run is not None and key not in self._counted:
            cq, seconds = entry.run
            self._runs.add(cq, seconds)
        name = f"{key[0]}/{key[1]}"
        if entry.copy:
            self._copies.add(name)
        if entry.queue_ref is not None:
            self._by_queue.setdefault(entry.queue_ref, set()).add(key)
        if entry.admitted is not None:
            self.admitted[name] = entry.admitted
        if entry.reserved_key:
            self._reserved_keys.add(name)
        if entry.usage is not None:
            cq, usage = entry.usage
            totals = self._reserved.setdefault(cq, {})
            for fr, amount in usage.items():
                held = totals.setdefault(fr, [0, 0])
                held[0] += amount
                held[1] += 1
            self._cq_views = None
        if entry.holder is not None:
            self._holders.setdefault(entry.holder.cluster_queue, {})[name] = entry.holder
            self._holder_tuples.pop(entry.holder.cluster_queue, None)
        if entry.pending is not None:
            self._pending.add(*entry.pending)
        if entry.error is not None:
            self._errors["workloads"][key] = entry.error

    def _remove_entry(self, key: Key, entry: _Entry) -> None:
        name = f"{key[0]}/{key[1]}"
        if entry.copy:
            self._copies.discard(name)
        if entry.queue_ref is not None:
            keys = self._by_queue[entry.queue_ref]
            keys.discard(key)
            if not keys:
                del self._by_queue[entry.queue_ref]
        if entry.admitted is not None:
            self.admitted.pop(name, None)
        if entry.reserved_key:
            self._reserved_keys.discard(name)
        if entry.usage is not None:
            cq, usage = entry.usage
            totals = self._reserved[cq]
            for fr, amount in usage.items():
                held = totals[fr]
                held[0] -= amount
                held[1] -= 1
                if held[1] == 0:
                    del totals[fr]
            if not totals:
                del self._reserved[cq]
            self._cq_views = None
        if entry.holder is not None:
            holding = entry.holder.cluster_queue
            in_queue = self._holders[holding]
            del in_queue[name]
            if not in_queue:
                del self._holders[holding]
            self._holder_tuples.pop(holding, None)
        if entry.pending is not None:
            cq, order, _ = entry.pending
            self._pending.remove(cq, order)
        if entry.error is not None:
            self._errors["workloads"].pop(key, None)


def _moment(value: object) -> datetime.datetime:
    seconds = parse_time(value if isinstance(value, str) else None)
    return EPOCH if seconds is None else datetime.datetime.fromtimestamp(seconds, datetime.UTC)


def _holder(
    key: str,
    cq: str,
    usage: Mapping[FlavorResource, int],
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
) -> tuple[ReservingWorkload | None, str | None]:
    """A Workload holding quota as a possible victim, or why it cannot be one."""
    try:
        priority = int(spec.get("priority") or 0)
    except (ValueError, TypeError) as error:
        return None, f"Workload {key}: spec.priority: {error}"
    conditions = {
        str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, Mapping)
    }
    reserved = conditions.get("QuotaReserved") or {}
    return (
        ReservingWorkload(
            key=key,
            cluster_queue=cq,
            usage=usage,
            priority=priority,
            reserved_at=_moment(reserved.get("lastTransitionTime")),
            queued_at=_moment(meta.get("creationTimestamp")),
            admitted=(conditions.get("Admitted") or {}).get("status") == "True",
            evicting=(conditions.get("Evicted") or {}).get("status") == "True",
            max_execution_seconds=_max_execution(spec),
        ),
        None,
    )


def _max_execution(spec: Mapping[str, Any]) -> int | None:
    """``spec.maximumExecutionTimeSeconds`` when it is a positive integer (the CRD's minimum is
    1); anything else counts as not set."""
    value = spec.get("maximumExecutionTimeSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _run(raw: Mapping[str, Any]) -> tuple[str, float] | None:
    """(ClusterQueue, seconds it ran: ``Admitted`` to ``Finished``) of a finished Workload,
    when both times and the queue are there."""
    status = raw.get("status") or {}
    cq = (
        (status.get("admission") or {}).get("clusterQueue") if isinstance(status, Mapping) else None
    )
    admitted = transition_time(raw, "Admitted")
    finished = transition_time(raw, "Finished")
    if not isinstance(cq, str) or admitted is None or finished is None or finished < admitted:
        return None
    return cq, finished - admitted


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
            taints=candidate.taints,
            taints_error=candidate.taints_error,
        )
    cq = _queue_of(index, request.namespace, request.queue_name)
    flying = tuple(
        w
        for w in (*in_flight.on(candidate.name, request.now), *extra_in_flight)
        if w.key != request.key and w.key not in index.reserved_keys
    )
    # The deciding workload's own copy waiting there is not a competitor; a same-named Workload
    # that is not a copy (no origin label) is. The copy of a workload in flight here is counted
    # once, by the in-flight replay (what it takes or claims, or that it queues), whether or not
    # the worker shows it pending yet.
    hidden = {w.key for w in flying if w.key in index.copies}
    if request.key in index.copies:
        hidden.add(request.key)
    queued = index.pending.get(cq or "", ())
    pending = tuple(w for w in queued if w.key not in hidden) if hidden else tuple(queued)
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
        holders=index.holders(cq) if cq is not None else (),
        run_seconds=index.run_seconds(cq) if cq is not None else (),
        label_key=label_key,
        resource_pattern=resource_pattern,
        taints=candidate.taints,
        taints_error=candidate.taints_error,
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
    candidates' replays are not recomputed for every decision. A snapshot built anew (its
    ledger or the worker's index changed) continues the replay of the one it replaces where
    :func:`~dispatcher.algorithms.stages.continue_replay` allows: a nomination appended to the
    ledger, or a copy that reserved what its nomination counted on. Snapshots of a cluster where
    the workload has a copy or is in flight are built afresh.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], _CachedSnapshot] = {}
        self.seeded = 0
        """Snapshots whose in-flight replay continued from the one they replaced (a burst)."""

    def forget(self, cluster: str) -> None:
        """Drop the snapshots of ``cluster`` (a worker that is gone)."""
        for key in [k for k in self._entries if k[0] == cluster]:
            del self._entries[key]

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
        if request.key in index.copies or in_flight.holds(candidate.name, request.key):
            return build()
        key = (candidate.name, request.namespace, request.queue_name)
        state = (
            index.version,
            candidate.order,
            tuple(sorted(candidate.labels.items())),
            candidate.taints,
            candidate.taints_error,
            label_key,
            resource_pattern,
        )
        cached = self._entries.get(key)
        if cached is not None and cached[0] == state and cached[1] is flying:
            return cached[2]
        snapshot = build()
        # Whatever changed (the index version included), the replay continues from the
        # previous snapshot of this queue when that gives the full replay's result.
        if cached is not None and continue_replay(snapshot, cached[2]):
            self.seeded += 1
        self._entries[key] = (state, flying, snapshot)
        return snapshot
