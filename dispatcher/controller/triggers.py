"""Triggers: which manager Workload keys each watch event can change.

Level-triggered like Kueue's own controllers, but an event costs work proportional to what it can
change:

- a manager Workload event queues that key (not the echo of our own nomination write: the
  writer's expectations); a re-list queues its keys once, at its marker;
- a copy's event on a worker queues its one manager Workload (our copies only, by the origin
  label, C32); while the manager's watch has not shown our last write to that Workload, the
  echo of the write queues it instead (a reconcile before it could only wait);
- a worker Job that is not a copy of ours, created, changed or deleted, queues the waiting
  workloads its name owns (the same-name guard); no worker Job event does more;
- any other change of a worker's quotas, queues or flavors asks for one delayed re-queue
  (``capacity_coalesce_seconds``, coalesced in the work queue) of the waiting workloads whose
  MultiKueue check lists that worker and that are nominated nowhere or there; a change of what
  its queues hold (a Workload, a ClusterQueue's usage) only of the ones nominated nowhere, and a
  LocalQueue's status (not read) of none; a worker's first list is covered by its connection
  settling, which re-queues every waiting workload once;
- Kueue's verdict on a MultiKueueCluster (its ``Active`` condition) or our mirror of a worker
  becoming (un)usable re-queues the workloads that worker's reachability can change (and the
  reconciles in progress); any other MultiKueueCluster, MultiKueueConfig or AdmissionCheck change
  re-queues every workload, and so does a manager ClusterQueue's new, changed or removed spec
  (its cohort is read; its status, changed by every reservation, is not).

"Waiting" workloads hold quota on the manager and have no ``clusterName``: the ones a capacity or
connectivity change can place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from dispatcher.clusters.registry import MANAGER, ClusterRegistry
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.outage import OutageBook
from dispatcher.controller.snapshots import (
    JOBS,
    condition_status,
    is_copy,
    owner_job,
    prebuilt_workload,
)
from dispatcher.controller.workqueue import WorkQueue
from dispatcher.controller.writer import NominationWriter
from dispatcher.k8s.watching import Listed, ObjectEvent, WatchItem, key_text
from dispatcher.kueue.hints import CLUSTER_TAINTS

__all__ = ["CAPACITY_KEY", "USAGE_KEY", "Triggers"]

CAPACITY_KEY = "capacity:"
"""Work-queue keys of coalesced capacity changes (``capacity:<worker>``); a Workload key is
``namespace/name`` and a namespace holds no colon."""
USAGE_KEY = "usage:"
"""Work-queue keys of coalesced usage changes (``usage:<worker>``): what a worker's queues hold
changed, not what they are."""
_SHAPED = frozenset({"clusterqueues", "localqueues", "resourceflavors"})


class _Waiting(NamedTuple):
    """What the fan-outs read of a waiting workload."""

    checks: tuple[str, ...]
    """The names of its admission checks."""
    nominated: tuple[str, ...]
    """Its ``status.nominatedClusterNames``."""
    job: str | None = None
    """``namespace/name`` of the batch Job that owns it (the same-name guard's key)."""


class Triggers:
    """Maps the registry's change callbacks to work-queue keys."""

    def __init__(
        self,
        *,
        registry: ClusterRegistry,
        queue: WorkQueue,
        outage: OutageBook,
        writer: NominationWriter,
        config: ControllerConfig,
        wake_restorer: Callable[[], None],
    ) -> None:
        self._registry = registry
        self._queue = queue
        self._outage = outage
        self._writer = writer
        self._config = config
        self._wake_restorer = wake_restorer
        self._usable: dict[str, tuple[bool, bool]] = {}
        self._mkc_seen: dict[str, tuple[str, str]] = {}
        self._cq_seen: dict[str, str] = {}
        self._shapes: dict[tuple[str, str, str], tuple[str, str]] = {}
        """Per worker queue and flavor: what :meth:`_worker_change` compares (spec and
        conditions; status)."""
        self._waiting: dict[str, _Waiting] = {}
        """Manager Workloads that hold quota and have no ``clusterName``, with the names of
        their admission checks and their nomination, kept from the manager's workload events in
        the order they started waiting, so a fan-out walks them and not the whole cache."""
        self._by_job: dict[str, set[str]] = {}
        """Waiting workloads by the key of the Job that owns them: a worker Job event of that
        name (not a copy of ours) can change where they may go (the same-name guard)."""
        self.fan_outs = 0
        """Fan-out walks (re-queues of every waiting or every workload), for operation counts."""

    def not_waiting(self, key: str) -> None:
        """Leave ``key`` out of the fan-outs until its next event (an unreadable Workload)."""
        self._forget_waiting(key)

    def _forget_waiting(self, key: str) -> None:
        gone = self._waiting.pop(key, None)
        if gone is not None and gone.job is not None:
            keys = self._by_job.get(gone.job)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_job[gone.job]

    def on_change(self, cluster: str, resource: str, item: WatchItem) -> None:
        """Registry callback: turn a change into the workload keys it may affect."""
        # A re-list delivers each object as a LISTED event, then one Listed marker: the keys of
        # the listed objects are queued one by one, a fan-out happens once, at the marker.
        fans_out = isinstance(item, Listed) or (
            isinstance(item, ObjectEvent) and item.type != "LISTED"
        )
        if cluster == MANAGER:
            if resource == "workloads":
                if isinstance(item, ObjectEvent):
                    self._track_waiting(item)
                    # A re-list replaces the cache at its marker, which queues every listed key.
                    if item.type != "LISTED" and not self._writer.own_echo(item):
                        self._queue_unless_behind(key_text(item.object))
                elif isinstance(item, Listed):
                    self._writer.forget_echoes()  # every listed key is decided again anyway
                    listed = {f"{namespace}/{name}" for namespace, name in item.keys}
                    for key in [k for k in self._waiting if k not in listed]:
                        self._forget_waiting(key)
                    for key in sorted(listed):
                        self._queue.add(key)
            elif resource == "clusterqueues" and isinstance(item, ObjectEvent):
                # Only a ClusterQueue's spec (its cohort) is read on the manager; its status
                # changes with every reservation and can change no decision.
                if self._cq_change(item) and item.type != "LISTED":
                    self.requeue_all()
            elif resource == "multikueueclusters" and isinstance(item, ObjectEvent):
                change = self._mkc_change(item)
                if change == "active":
                    # Kueue's verdict on one worker alone: only the workloads it can change.
                    name = key_text(item.object).lstrip("/")
                    self._reachability_changed(name, self._mkc_seen[name][0] == "True")
                elif change == "other":
                    self.requeue_all()
            elif fans_out:
                self.requeue_all()
            return
        if resource == JOBS and isinstance(item, ObjectEvent):
            # Only the same-name guard reads worker Jobs: a Job that is not a copy of ours, or a
            # copy of ours that runs another Workload (a leftover), come or gone, changes where
            # the waiting workloads its name owns may go; a workload's own Job changes nothing.
            if item.type != "LISTED":
                ours = is_copy(item.object, self._config.origin)
                runs = prebuilt_workload(item.object) if ours else ""
                for key in sorted(self._by_job.get(key_text(item.object), ())):
                    if not ours or (runs and key.partition("/")[2] != runs):
                        self._queue_unless_behind(key)
            return
        if (
            resource == "workloads"
            and isinstance(item, ObjectEvent)
            and is_copy(item.object, self._config.origin)
        ):
            # A copy of ours (C32: by its origin label) changes its one manager Workload.
            self._queue_unless_behind(key_text(item.object))
        if fans_out and resource != "connection":
            change = self._worker_change(cluster, resource, item)
            if change and not self._first_list(cluster, resource, item):
                # Quota, queues or usage changed on this worker: one delayed re-queue of the
                # workloads that can go there, however many events come meanwhile.
                prefix = CAPACITY_KEY if change == "shape" else USAGE_KEY
                self._queue.add_after(prefix + cluster, self._config.capacity_coalesce_seconds)
        elif fans_out:
            self._requeue_waiting()
        elif resource == "connection":
            changed = self._usability_changed(cluster)
            if changed == "settled":
                self._requeue_waiting()
            elif changed == "usable":
                self._reachability_changed(cluster, self._registry.mirror_usable(cluster))

    def _queue_unless_behind(self, key: str) -> None:
        """Queue ``key``, unless the manager's watch has not shown our last write to it yet: a
        reconcile now could only wait for that echo, which queues the key instead (the writer
        remembers that it was asked for; a re-list forgets the echoes and queues every key)."""
        if not self._writer.behind(key):
            self._queue.add(key)

    def _worker_change(self, cluster: str, resource: str, item: WatchItem) -> str:
        """What a worker event changed of what the decisions read: ``shape`` (a queue's or a
        flavor's spec or its ``Active`` condition, a new or deleted one, a re-list), ``usage``
        (only what its queues hold: a Workload, a ClusterQueue's usage), or nothing (a
        LocalQueue's status, which is not kept)."""
        if not isinstance(item, ObjectEvent):
            return "shape"  # a re-list's marker: anything may have changed
        if resource == "workloads":
            return "usage"
        if resource not in _SHAPED:
            return "shape"
        key = (cluster, resource, key_text(item.object))
        if item.type == "DELETED":
            self._shapes.pop(key, None)
            return "shape"
        obj = item.object
        status = obj.get("status") or {}
        conditions = [(c.get("type"), c.get("status")) for c in status.get("conditions") or []]
        seen = (repr((obj.get("spec"), conditions)), repr(status))
        before = self._shapes.get(key)
        self._shapes[key] = seen
        if before is None or before[0] != seen[0]:
            return "shape"
        return "usage" if before[1] != seen[1] else ""

    def _first_list(self, cluster: str, resource: str, item: WatchItem) -> bool:
        """Whether ``item`` ends the first list of a worker resource: what a worker's first
        sync can change is decided when its connection settles (every waiting workload is
        re-queued then), not once per resource."""
        worker = self._registry.workers.get(cluster)
        mirror = worker.mirror if worker is not None else None
        return (
            isinstance(item, Listed)
            and mirror is not None
            and resource in mirror.caches
            and mirror.cache(resource).lists == 1
        )

    def _usability_changed(self, cluster: str) -> str:
        """What of a worker's connection change can change a decision: ``usable`` when our
        mirror of it became usable or unusable (a blip within the stale grace does neither),
        ``settled`` when its first connection attempt got an outcome (decisions wait for that
        after a start), else empty."""
        worker = self._registry.workers.get(cluster)
        seen = (self._registry.mirror_usable(cluster), worker is not None and worker.settled)
        before = self._usable.get(cluster)
        if before == seen:
            return ""
        self._usable[cluster] = seen
        if before is None or before[1] != seen[1]:
            return "settled"
        return "usable"

    def _cq_change(self, item: ObjectEvent) -> bool:
        """Whether a manager ClusterQueue event changed what is read of it: a new or deleted
        queue, or another spec (a status-only change, such as the usage every reservation
        updates, does not)."""
        name = str((item.object.get("metadata") or {}).get("name") or "")
        if item.type == "DELETED":
            self._cq_seen.pop(name, None)
            return True
        spec = repr(item.object.get("spec"))
        before = self._cq_seen.get(name)
        self._cq_seen[name] = spec
        return before != spec

    def _mkc_change(self, item: ObjectEvent) -> str:
        """What a MultiKueueCluster event changed: ``active`` when nothing but the status of
        its ``Active`` condition (a known cluster, same spec, labels and taints: then only the
        workloads that cluster's reachability can change are re-evaluated), ``none`` when
        neither (a message or heartbeat), ``other`` otherwise (a new, deleted or edited
        cluster: everything is re-evaluated)."""
        obj = item.object
        name = str((obj.get("metadata") or {}).get("name") or "")
        active = next(
            (
                str(c.get("status"))
                for c in (obj.get("status") or {}).get("conditions") or []
                if c.get("type") == "Active"
            ),
            "",
        )
        meta = obj.get("metadata") or {}
        shape = repr(
            (
                sorted((meta.get("labels") or {}).items()),
                # Of its annotations only the taints (placement hints) can change a decision.
                (meta.get("annotations") or {}).get(CLUSTER_TAINTS.key),
                obj.get("spec"),
            )
        )
        before = self._mkc_seen.get(name)
        self._mkc_seen[name] = (active, shape)
        if item.type == "DELETED":
            self._mkc_seen.pop(name, None)
            return "other"
        if before is None or before[1] != shape:
            return "other"
        return "none" if before[0] == active else "active"

    def _reachability_changed(self, worker: str, back: bool) -> None:
        """A worker became unreachable: only the workloads for which it is eligible, nominated
        or awaited can change. One that is back may also be a better place for any workload
        waiting for a worker, so those are decided again too."""
        if back:
            self._requeue_waiting()
        self._requeue_affected(worker)

    def _requeue_affected(self, worker: str) -> None:
        """A worker became reachable or unreachable: re-evaluate the workloads for which it is
        eligible, nominated or awaited (:meth:`OutageBook.affected_by`), and wake the restorer
        for the released ones."""
        # A reconcile running now may have read the worker's old state before it indexed what
        # the worker can change: it runs once more when it is done (the queue's dirty mark).
        for key in self._outage.affected_by(worker) | self._queue.processing:
            self._queue.add(key)
        self._wake_restorer()

    @property
    def waiting(self) -> tuple[str, ...]:
        """Keys of the manager Workloads a capacity or connectivity change can place."""
        return tuple(self._waiting)

    def _track_waiting(self, item: ObjectEvent) -> None:
        """Keep :attr:`_waiting` in step with one manager workload event."""
        self._set_waiting(item.object, item.type != "DELETED")

    def _set_waiting(self, obj: Mapping[str, Any], present: bool = True) -> None:
        key = key_text(obj)
        status = obj.get("status") or {}
        if (
            present
            and not status.get("clusterName")
            and condition_status(obj, "QuotaReserved") == "True"
        ):
            job = owner_job(obj)
            job_key = None if job is None else f"{key.partition('/')[0]}/{job}"
            before = self._waiting.get(key)
            if before is not None and before.job != job_key:
                self._forget_waiting(key)
            # (assigning keeps the key's place: the set stays in the order they started waiting)
            self._waiting[key] = _Waiting(
                tuple(str(c.get("name") or "") for c in status.get("admissionChecks") or []),
                tuple(str(n) for n in status.get("nominatedClusterNames") or ()),
                job_key,
            )
            if job_key is not None:
                self._by_job.setdefault(job_key, set()).add(key)
        else:
            self._forget_waiting(key)

    def requeue_waiting_on(self, cluster: str, *, nominated_there: bool = True) -> None:
        """A capacity change on ``cluster`` (coalesced): re-queue the waiting workloads whose
        MultiKueue admission check lists it (one whose check is unknown yet, too) and that are
        not nominated at all, or (``nominated_there``: the queues or flavors themselves changed)
        nominated to it.

        A standing nomination is kept while its workers stay eligible (the selectors' patience),
        which a change elsewhere, or of the usage alone, cannot alter: it is decided again on
        its own events, its nominated workers' queue changes, its patience follow-up or the
        resync. Re-queuing it here made each capacity event of a burst re-decide every
        nominated workload whose copy Kueue had not admitted yet.
        """
        self.fan_outs += 1
        checks = self._registry.multikueue_checks()
        reaches: dict[str, bool] = {}
        for key, waiting in self._waiting.items():
            if waiting.nominated and not (nominated_there and cluster in waiting.nominated):
                continue
            mine = [n for n in waiting.checks if n in checks]
            if not mine:
                self._queue_unless_behind(key)
                continue
            for check in mine:
                if check not in reaches:
                    reaches[check] = cluster in self._registry.config_of(check)[1]
                if reaches[check]:
                    self._queue_unless_behind(key)
                    break

    def requeue_all(self) -> None:
        """Re-queue every manager Workload; the walk also re-derives :attr:`_waiting` from the
        cache (events seen before this loop was attached are not lost)."""
        self.fan_outs += 1
        for obj in self._registry.manager.cache("workloads").items():
            self._set_waiting(obj)
            self._queue_unless_behind(key_text(obj))

    def _requeue_waiting(self) -> None:
        """Capacity or connectivity changed somewhere: look again at undispatched workloads."""
        self.fan_outs += 1
        for key in self._waiting:
            self._queue_unless_behind(key)
