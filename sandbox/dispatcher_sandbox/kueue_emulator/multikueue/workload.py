"""The manager's MultiKueue workload reconciler: groups of a Workload and its remote copies,
nomination (with the built-in AllAtOnce and Incremental dispatchers), copy creation, admission,
status sync, eviction and the orphan GC.

Mirrors Kueue v0.19.2 ``pkg/controller/admissionchecks/multikueue/workload.go``
(``wlReconciler``, ``wlGroup``, ``cloneForCreate``). The AllAtOnce and Incremental decisions
(Kueue: ``workload.go``'s ``nominateAndSynchronizeWorkers`` and
``pkg/controller/workloaddispatcher/incrementaldispatcher.go``) are :mod:`.dispatchers`;
:meth:`WorkloadController._nominate_and_sync` writes what they decide and keeps the rounds;
the orphan GC (Kueue: ``multikueuecluster.go``, ``runGC``) is :meth:`WorkloadController.run_gc`.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher_sandbox.kube_client import (
    ADMISSION_CHECKS,
    EVENTS,
    JOBS,
    MULTIKUEUE_CONFIGS,
    WORKLOADS,
    KubeError,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.multikueue import dispatchers
from dispatcher_sandbox.kueue_emulator.multikueue.controllers import (
    SYNC_DEFERRED_REQUEUE_SECONDS,
    TRANSIENT,
    Key,
    RemoveRemoteJob,
    SyncRemoteJob,
    _key,
    _Loop,
)
from dispatcher_sandbox.kueue_emulator.multikueue.multikueuecluster import (
    ClusterController,
    RemoteCluster,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    ALL_AT_ONCE,
    INCREMENTAL,
    KUEUE_MANAGER,
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_PREEMPTION_GATE,
    ORIGIN_LABEL,
    Clock,
    ClusterConnection,
    Counters,
    KueueConfig,
    Obj,
    RemoteObjectNotOwned,
    RetryLimiter,
    condition,
    is_true,
    kind_of_path,
    merge_patch_diff,
    parse_time,
    set_condition,
    throttle,
    timestamp,
    write_admission_status,
)

log = logging.getLogger(__name__)
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # C32: dropped from remote copies
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
JOB_MANAGED_BY = "kueue.x-k8s.io/multikueue"
EVENT_REASON = "MultiKueue"  # C51

# C51 metric names.
DISPATCHED_TOTAL = "multikueue_workloads_dispatched_total"
ADMITTED_TOTAL = "multikueue_workloads_admitted_total"

ERR_NO_REMOTE_CLIENT = "no remote client for nominated cluster"  # C32

# C29 (Kueue's step 6a): the MultiKueue check is Ready, no copy is Admitted any more.
ADMITTING_REMOTE_LOST = "Admitting remote lost"  # the admitting worker stayed unreachable
ADMITTING_REMOTE_GONE = "Admitting remote no longer exists"  # reachable, no admitted copy
READY_WITHOUT_CLUSTER = (
    "Admission check is Ready but no admitting cluster is recorded; this is unexpected, please "
    "report it"
)
# C25: a copy finished with reason OutOfSync (its Job did not match its prebuilt Workload).
OUT_OF_SYNC_RESET = (
    'Remote workload on worker cluster "{cluster}" is out of sync with its user job, resetting '
    "for re-dispatch"
)
MAX_CONDITION_MESSAGE = 32768  # api.TruncateConditionMessage
WORKLOADS_KIND = kind_of_path(WORKLOADS.path())  # the limiter of Kueue's per-reconcile GETs


def _job_terminal(job: Mapping[str, Any]) -> bool:
    """Whether a Job has a ``Complete`` or ``Failed`` condition with status True."""
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _rv(obj: Mapping[str, Any] | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


# --- the workload controller (C20–C41, C56–C61) ----------------------------------------------


@dataclass(frozen=True)
class StatusWriteError:
    """A manager Workload status write the API server refused (e.g. C43's 422)."""

    namespace: str
    name: str
    code: int
    message: str


@dataclass
class _Group:
    """C23: a manager Workload and its copies on the connected clusters of its config."""

    local: Obj
    check: Obj  # the MultiKueue entry of status.admissionChecks (C21)
    clusters: list[str]  # MultiKueueConfig.spec.clusters, in config order (C59)
    remotes: dict[str, RemoteCluster]  # connected clusters of the config
    copies: dict[str, Obj | None]  # cluster -> remote copy

    @property
    def key(self) -> Key:
        return _key(self.local)

    @property
    def status(self) -> Obj:
        status: Obj = self.local.get("status") or {}
        return status

    @property
    def unavailable(self) -> list[str]:
        return [c for c in self.clusters if c not in self.remotes]


def _admission_cluster_queue(local: Obj) -> str:
    return str(((local.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")


def _replica_role(local: Obj) -> str:
    return "standalone"  # C51: LeaderWorkerSet roles are not emulated


def _spec_for_compare(spec: Mapping[str, Any] | None) -> Obj:
    out = copy.deepcopy(dict(spec or {}))
    out.pop("preemptionGates", None)  # C27: gates are per cluster
    return out


def _only_priority_differs(local: Mapping[str, Any], remote: Mapping[str, Any]) -> bool:
    a, b = _spec_for_compare(local), _spec_for_compare(remote)
    for spec in (a, b):
        spec.pop("priority", None)
        spec.pop("priorityClassRef", None)
    return a == b


def clone_for_create(local: Obj, origin: str, *, preemption_gated: bool = False) -> Obj:
    """The remote copy of a manager Workload (C32 ``cloneForCreate``).

    ``preemption_gated`` (v0.20, MultiKueueOrchestratedPreemption): the manager's own
    ``spec.preemptionGates`` are not copied; the copy carries the MultiKueue gate instead.
    """
    meta = local["metadata"]
    labels = dict(meta.get("labels") or {})
    labels.pop(JOB_UID_LABEL, None)
    labels[ORIGIN_LABEL] = origin
    clone_meta: Obj = {"name": meta["name"], "namespace": meta["namespace"], "labels": labels}
    if meta.get("annotations"):
        clone_meta["annotations"] = dict(meta["annotations"])
    spec = copy.deepcopy(local.get("spec") or {})
    if preemption_gated:
        spec["preemptionGates"] = [{"name": MULTIKUEUE_PREEMPTION_GATE}]
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": clone_meta,
        "spec": spec,
    }


def _gate_state(copy_: Mapping[str, Any]) -> Obj | None:
    """The MultiKueue gate's entry of a remote copy's ``status.preemptionGates``."""
    for gate in (copy_.get("status") or {}).get("preemptionGates") or []:
        if gate.get("name") == MULTIKUEUE_PREEMPTION_GATE:
            found: Obj = gate
            return found
    return None


def _set_check(check: Obj, state: str, message: str, clock: Clock) -> Obj:
    updated = copy.deepcopy(check)
    if updated.get("state") != state:
        updated["lastTransitionTime"] = timestamp(clock)
    updated["state"] = state
    updated["message"] = message
    return updated


def _with_check(status: Mapping[str, Any], check: Obj) -> Obj:
    out = copy.deepcopy(dict(status))
    out["admissionChecks"] = [
        check if c.get("name") == check.get("name") else c for c in out.get("admissionChecks") or []
    ]
    return out


class WorkloadController(_Loop):
    """Kueue's ``multikueue_workload`` reconciler (C20–C33, C36–C41) and dispatchers (C56–C61).

    A work queue of Workload keys fed as Kueue's is (C20, ``setupWithManager``): an event of the
    manager Workload queues its key at once; an event of a remote cluster (a copy or a remote Job
    changed, or a watch (re)started, which reports every copy) and a change of a
    MultiKueueConfig's clusters queue the keys concerned after ``batch_period_seconds``
    (wall-clock). MultiKueueClusters and AdmissionChecks are not watched, and losing a worker
    queues nothing. A reconcile that fails is retried with the work queue's backoff
    (:class:`~.runtime.RetryLimiter`: 5 ms doubling up to 1000 s, C32's "no remote client" among
    others); one that asks for it is requeued on the injected clock (``RequeueAfter``).
    """

    name = "multikueue_workload"

    def __init__(
        self,
        conn: ClusterConnection,
        config: KueueConfig,
        clock: Clock,
        clusters: ClusterController,
        *,
        counters: Counters | None = None,
        sync_remote_job: SyncRemoteJob | None = None,
        remove_remote_job: RemoveRemoteJob | None = None,
    ) -> None:
        super().__init__(config, clock)
        self.conn = conn
        self.clusters = clusters
        self.counters = counters if counters is not None else Counters()
        self.sync_remote_job = sync_remote_job
        self.remove_remote_job = remove_remote_job
        # Refused status writes (C43), nomination errors (C32) and remote Jobs Kueue refused to
        # sync into (C33), most recent last.
        self.status_write_errors: collections.deque[StatusWriteError] = collections.deque(
            maxlen=200
        )
        self.nomination_errors: collections.deque[str] = collections.deque(maxlen=200)
        self.ownership_errors: collections.deque[str] = collections.deque(maxlen=200)
        self.retry = RetryLimiter()
        self._keys: set[Key] = set()
        self._all = True
        self._deleted: dict[Key, Obj] = {}
        self._written: dict[Key, Obj] = {}  # our last status write, until the cache catches up
        self._rounds: dict[Key, datetime.datetime] = {}  # C59: in-memory round starts
        self._key_timers: dict[Key, tuple[datetime.datetime, asyncio.Task[None]]] = {}
        self._wall_timers: dict[Key, tuple[float, asyncio.Task[None]]] = {}
        self._config_clusters_seen: dict[str, list[str]] = {}

    # --- queue ---------------------------------------------------------------------------

    def mark_key(self, key: Key) -> None:
        """Reconcile one Workload soon."""
        self._keys.add(key)
        self.mark_dirty()

    def mark_all(self, *_: object) -> None:
        """Reconcile every Workload soon (the manager's Workload watch (re)listed)."""
        self._all = True
        self.mark_dirty()

    def add_after(self, key: Key, seconds: float) -> None:
        """Queue ``key`` after ``seconds`` of wall-clock time, as the work queue's ``AddAfter``:
        an earlier pending add of the same key wins, so events within the period batch."""
        if seconds <= 0:
            self.mark_key(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + seconds
        pending = self._wall_timers.get(key)
        if pending is not None and not pending[1].done():
            if pending[0] <= due:
                return
            pending[1].cancel()

        async def later() -> None:
            await asyncio.sleep(seconds)
            if self._wall_timers.get(key, (None, None))[1] is task:
                del self._wall_timers[key]
            self.mark_key(key)

        task = loop.create_task(later())
        self._wall_timers[key] = (due, task)
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    def on_manager_change(self, resource: Resource, kind: str, obj: Obj) -> None:
        """Listener for the manager connection (``For(&Workload{})`` and the MultiKueueConfig
        handler of ``setupWithManager``)."""
        if resource == WORKLOADS:
            if kind in ("SYNCED", "DISCONNECTED"):
                self.mark_all()
                return
            key = _key(obj)
            if kind == "DELETED":
                self._deleted[key] = obj  # C41: remember it to delete its copies
                self._rounds.pop(key, None)
            self.mark_key(key)
        elif resource == MULTIKUEUE_CONFIGS and kind not in ("SYNCED", "DISCONNECTED"):
            self._config_changed(kind, obj)

    def _config_changed(self, kind: str, obj: Obj) -> None:
        """Kueue's ``configHandler``: a MultiKueueConfig whose ``spec.clusters`` changed, or
        that was deleted, queues (after the batch period) the Workloads of the AdmissionChecks
        that use it; a new config queues nothing."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        clusters = list((obj.get("spec") or {}).get("clusters") or [])
        seen = self._config_clusters_seen.get(name)
        if kind == "DELETED":
            self._config_clusters_seen.pop(name, None)
        else:
            self._config_clusters_seen[name] = clusters
            if seen is None or seen == clusters:
                return
        checks = {
            ac["metadata"]["name"]
            for ac in self.conn.cache(ADMISSION_CHECKS).values()
            if ((ac.get("spec") or {}).get("parameters") or {}).get("name") == name
            and ((ac.get("spec") or {}).get("parameters") or {}).get("kind") == "MultiKueueConfig"
        }
        for wl in self.conn.cache(WORKLOADS).values():
            entries = (wl.get("status") or {}).get("admissionChecks") or []
            if any(entry.get("name") in checks for entry in entries):
                self.add_after(_key(wl), self.config.batch_period_seconds)

    def on_remote_change(self, cluster: str, kind: str, obj: Obj) -> None:
        """Listener for the remote informers (C20: events from remote clusters, batched)."""
        if kind == "DISCONNECTED":
            return  # Kueue's workload reconciler hears nothing of a lost watch
        if kind == "SYNCED":
            remote = self.clusters.remotes.get(cluster)
            keys = remote.keys() if remote is not None else set()
        else:
            keys = {_key(obj)}
        for key in keys:
            self.add_after(key, self.config.batch_period_seconds)

    def _after(self, key: Key, seconds: float) -> None:
        """Reconcile ``key`` again after ``seconds`` of the injected clock (one timer per key)."""
        due = self.clock.now() + datetime.timedelta(seconds=seconds)
        pending = self._key_timers.get(key)
        if pending is not None and not pending[1].done():
            if pending[0] <= due:
                return
            pending[1].cancel()

        async def later() -> None:
            await self.clock.sleep((due - self.clock.now()).total_seconds())
            if self._key_timers.get(key, (None, None))[1] is task:
                del self._key_timers[key]
            self.mark_key(key)

        task = asyncio.get_running_loop().create_task(later())
        self._key_timers[key] = (due, task)
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    @property
    def pending(self) -> bool:
        """Whether a key is queued or waiting for a batch period or a retry (wall clock)."""
        return bool(self._keys) or any(not t.done() for _, t in self._wall_timers.values())

    # --- reading ---------------------------------------------------------------------------

    def _local(self, key: Key) -> Obj | None:
        cached = self.conn.cache(WORKLOADS).get(key[1], key[0])
        written = self._written.get(key)
        if written is not None:
            if cached is not None and _rv(cached) < _rv(written):
                return copy.deepcopy(written)
            del self._written[key]
        return cached

    def _multikueue_check(self, local: Obj) -> tuple[Obj, Obj] | None:
        """C21: the MultiKueue entry of ``status.admissionChecks`` and its AdmissionCheck."""
        for entry in (local.get("status") or {}).get("admissionChecks") or []:
            ac = self.conn.cache(ADMISSION_CHECKS).get(entry.get("name", ""))
            if ac is not None and (ac.get("spec") or {}).get("controllerName") == (
                MULTIKUEUE_CONTROLLER
            ):
                return entry, ac
        return None

    def _config_clusters(self, ac: Obj) -> list[str] | None:
        params = (ac.get("spec") or {}).get("parameters") or {}
        cfg = self.conn.cache(MULTIKUEUE_CONFIGS).get(params.get("name", ""))
        if cfg is None:
            return None
        return list((cfg.get("spec") or {}).get("clusters") or [])

    async def _group(self, local: Obj, check: Obj, ac: Obj) -> _Group | None:
        """C23 (Kueue's ``readGroup``): the connected clusters of the config and the copy on
        each. Kueue GETs each copy; the emulation reads its informer but charges the GET to
        that worker's rate limiter (C10), so a reconcile costs what it costs upstream."""
        names = self._config_clusters(ac)
        if names is None:
            return None
        remotes: dict[str, RemoteCluster] = {}
        for name in names:
            remote = self.clusters.connected(name)
            if remote is not None:
                remotes[name] = remote
        key = _key(local)
        copies: dict[str, Obj | None] = {}
        for name, remote in remotes.items():
            await throttle(remote.client, WORKLOADS_KIND)
            copies[name] = remote.copy_of(key)
        return _Group(local, check, names, remotes, copies)

    # --- writing ---------------------------------------------------------------------------

    async def _write_status(self, local: Obj, status: Obj) -> bool:
        """One admission-status write (C42/C45); a 422 refusal is recorded; errors are retried."""
        key = _key(local)
        try:
            # Strict (resourceVersion precondition): a decision made on a stale copy fails with
            # 409 and is recomputed, instead of undoing a newer nomination or core change.
            written = await write_admission_status(
                self.conn.client, local, status, self.config, strict=True
            )
        except KubeError as error:
            if error.status == 404:
                return False
            if error.status == 409:
                raise
            self.status_write_errors.append(
                StatusWriteError(key[0], key[1], error.status, error.message)
            )
            log.warning("%s: status write for %s/%s refused: %s", self.name, *key, error)
            raise
        if written is not None:
            self._written[key] = written
        return True

    async def _update_acs(self, local: Obj, check: Obj, state: str, message: str) -> None:
        """Kueue's ``updateACS``: set the MultiKueue check's state and a message that ends with
        the state it leaves (``..., Previously: "Ready"``), written as a server-side apply of
        that one check entry by field manager ``kueue.x-k8s.io/multikueue`` (strict), or, under
        the merge-patch gate, as a merge patch of the change."""
        previous = str(check.get("state") or "")
        text = f'{message}, Previously: "{previous}"'[:MAX_CONDITION_MESSAGE]
        updated = _set_check(check, state, text, self.clock)
        meta = local["metadata"]
        key = _key(local)
        try:
            if self.config.merge_patch_gate:
                status = _with_check(local.get("status") or {}, updated)
                changes = merge_patch_diff(local.get("status") or {}, status)
                written: Obj | None = await self.conn.client.merge_patch(
                    WORKLOADS,
                    meta["name"],
                    {
                        "metadata": {"resourceVersion": meta.get("resourceVersion")},
                        "status": changes,
                    },
                    namespace=meta["namespace"],
                    subresource="status",
                    field_manager=KUEUE_MANAGER,
                )
            else:
                written = await self.conn.client.apply(
                    WORKLOADS,
                    {
                        "apiVersion": WORKLOADS.api_version,
                        "kind": "Workload",
                        "metadata": {
                            "name": meta["name"],
                            "namespace": meta["namespace"],
                            "resourceVersion": meta.get("resourceVersion"),
                        },
                        "status": {"admissionChecks": [updated]},
                    },
                    subresource="status",
                    field_manager=MULTIKUEUE_CONTROLLER,
                    force=True,
                )
        except KubeError as error:
            if error.status == 404:
                return
            if error.status != 409:
                self.status_write_errors.append(
                    StatusWriteError(key[0], key[1], error.status, error.message)
                )
            raise
        if written is not None:
            self._written[key] = written

    async def _event(self, local: Obj, message: str, kind: str = "Normal") -> None:
        """A core/v1 Event with reason ``MultiKueue`` on the manager Workload (C51)."""
        meta = local["metadata"]
        now = timestamp(self.clock)
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": WORKLOADS.api_version,
                "kind": "Workload",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": EVENT_REASON,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "kueue-admission"},
            "reportingComponent": "kueue-admission",
            "reportingInstance": "kueue-emulator",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.conn.client.create(EVENTS, body)
        except KubeError as error:
            log.warning(
                "%s: event for %s/%s: %s", self.name, meta["namespace"], meta["name"], error
            )

    async def _remove_copy(self, group: _Group, cluster: str) -> None:
        """Kueue's ``RemoveRemoteObjects`` (C24, C32): the remote Job of the manager Workload's
        owner first, if this manager owns it (also when the copy is already gone), then the
        copy's finalizer, then the copy."""
        remote = group.remotes[cluster]
        if self.remove_remote_job is not None:
            await self.remove_remote_job(remote.client, group.local, remote.name)
        copy_ = group.copies.get(cluster)
        if copy_ is None:
            return
        await self._remove_workload(remote, copy_)
        group.copies[cluster] = None

    async def _remove_remote(self, remote: RemoteCluster, copy_: Obj) -> None:
        """The GC's removal of an orphaned copy (C41): the Job controlling the copy (if this
        manager owns it), then the copy."""
        if self.remove_remote_job is not None:
            await self.remove_remote_job(remote.client, copy_, remote.name)
        await self._remove_workload(remote, copy_)

    async def _remove_workload(self, remote: RemoteCluster, copy_: Obj) -> None:
        meta = copy_["metadata"]
        finalizers = meta.get("finalizers") or []
        if RESOURCE_IN_USE_FINALIZER in finalizers:
            try:
                await remote.client.merge_patch(
                    WORKLOADS,
                    meta["name"],
                    {
                        "metadata": {
                            "finalizers": [f for f in finalizers if f != RESOURCE_IN_USE_FINALIZER],
                            "resourceVersion": meta.get("resourceVersion"),
                        }
                    },
                    namespace=meta["namespace"],
                    field_manager=KUEUE_MANAGER,
                )
            except KubeError as error:
                if error.status != 404:
                    raise
        await remote.client.delete(WORKLOADS, meta["name"], meta["namespace"])

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self) -> float | None:
        """Reconcile the queued Workloads; failures are retried per key with backoff."""
        if not self.conn.cache(WORKLOADS).synced.is_set():
            return None
        if self._all:
            self._all = False
            keys = {_key(o) for o in self.conn.cache(WORKLOADS).values()} | set(self._deleted)
            keys |= self._keys
        else:
            keys = set(self._keys)
        self._keys.clear()
        for key in sorted(keys):
            try:
                requeue = await self.reconcile_key(key)
            except TRANSIENT as error:
                # Kueue returns the error: the work queue retries the key with backoff (C32).
                if isinstance(error, RemoteObjectNotOwned):
                    self.ownership_errors.append(f"{key[0]}/{key[1]}: {error}")
                log.info("%s: %s/%s: %s", self.name, key[0], key[1], error)
                self.add_after(key, self.retry.when(key))
                continue
            self.retry.forget(key)
            if requeue is not None:
                self._after(key, requeue)
        return None

    async def reconcile_key(self, key: Key) -> float | None:
        """One pass of C21–C33 for one Workload; returns a requeue delay in clock seconds."""
        local = self._local(key)
        deleted = local is None or bool(local["metadata"].get("deletionTimestamp"))
        if local is None:
            local = self._deleted.get(key)
            if local is None:
                return None
        found = self._multikueue_check(local)
        if found is None or found[0].get("state") == "Rejected":  # C21
            if deleted:
                self._deleted.pop(key, None)
            return None
        check, ac = found
        if not deleted:
            rejection = await self._owner_rejection(local)  # C22
            if rejection is not None:
                status = _with_check(
                    local.get("status") or {}, _set_check(check, "Rejected", rejection, self.clock)
                )
                await self._write_status(local, status)
                return None
        group = await self._group(local, check, ac)  # C23
        if group is None:  # no MultiKueueConfig: nothing to reach (the GC handles leftovers)
            if deleted:
                self._deleted.pop(key, None)
            return None
        if deleted:  # C41: remote objects are deleted; unreachable ones are left to the GC
            for cluster in list(group.remotes):
                await self._remove_copy(group, cluster)
            self._deleted.pop(key, None)
            self._rounds.pop(key, None)
            return None
        # The remembered deleted Workload stays until a reconcile that sees it deleted: one
        # that read the Workload just before its deletion (the event arriving meanwhile) must
        # not drop it, or the reconcile that event asked for finds nothing and the copies stay
        # (upstream deletes from deletedWlCache only when isDeleted).
        return await self._reconcile_group(group)

    async def _owner_rejection(self, local: Obj) -> str | None:
        """C22: the rejection message for an owner no MultiKueue adapter serves, or one not
        managed by Kueue; None when the Workload may be dispatched.

        The owner is the controller owner reference, else the first owner reference (Kueue's
        ``wlReconciler.adapter``); the only adapter emulated is ``batch/v1`` Job, which must have
        ``spec.managedBy: kueue.x-k8s.io/multikueue``. A Workload without any owner (a bare,
        prebuilt Workload no Job claimed) has no adapter and is rejected with
        "No multikueue adapter found", as upstream; the core then deactivates it (C39).
        """
        owners = local["metadata"].get("ownerReferences") or []
        if not owners:
            return "No multikueue adapter found"
        owner = next((o for o in owners if o.get("controller")), owners[0])
        api_version, kind = owner.get("apiVersion", ""), owner.get("kind", "")
        if (api_version, kind) != ("batch/v1", "Job"):
            group, _, version = api_version.rpartition("/")
            gvk = f"{group}/{version}, Kind={kind}" if group else f"/{version}, Kind={kind}"
            return f'No multikueue adapter found for owner kind "{gvk}"'
        name, namespace = owner.get("name", ""), local["metadata"]["namespace"]
        jobs = self.conn.informers.get(JOBS)  # cached when the Job adapter shares the connection
        if jobs is not None and jobs.synced.is_set():
            job = jobs.get(name, namespace)
        else:
            job = await self.conn.client.get(JOBS, name, namespace)
        if job is None:
            raise KubeError(404, {"message": "owner job not found"}, "GET", "jobs")
        managed_by = (job.get("spec") or {}).get("managedBy") or ""
        if managed_by != JOB_MANAGED_BY:
            return (
                "The owner is not managed by Kueue: Expecting spec.managedBy to be "
                f'"{JOB_MANAGED_BY}" not "{managed_by}"'
            )
        return None

    async def _reconcile_group(self, group: _Group) -> float | None:
        local, status, key = group.local, group.status, group.key
        state = group.check.get("state")
        # C24 (and C40): finished or not reserved -> delete every remote copy.
        if is_true(local, "Finished") or not is_true(local, "QuotaReserved"):
            self._rounds.pop(key, None)
            for cluster in list(group.remotes):
                await self._remove_copy(group, cluster)
            if group.unavailable:
                return self.config.worker_lost_timeout_seconds
            return None
        # C25: a remote copy finished -> copy back, finish locally (OutOfSync -> Retry).
        finished = self._best(group, "Finished")
        if finished is not None and self._finished_before_its_job(group, finished[0]):
            finished = None
        if finished is not None:
            cluster, cond = finished
            if cond.get("reason") == "OutOfSync":
                # A sync failure, not a completion: while the check is Ready, reset it to Retry
                # (updateACS) with a Warning event; never finish the manager Workload.
                if state == "Ready":
                    message = OUT_OF_SYNC_RESET.format(cluster=cluster)
                    await self._update_acs(local, group.check, "Retry", message)
                    await self._event(local, f'{message}, Previously: "Ready"', "Warning")
                return None
            remote_job = group.remotes[cluster].job_of(key)
            if remote_job is not None and not _job_terminal(remote_job):
                # The emulated worker finishes the Workload a moment before its Job controller
                # stand-in completes the Job; with real Kueue the Job completes first. Wait for
                # the Job (its informer wakes this key) so its final status is copied back.
                return None
            if self.sync_remote_job is not None:
                await self.sync_remote_job(group.remotes[cluster].client, local, cluster)
            new_status = copy.deepcopy(status)
            set_condition(
                new_status,
                "Finished",
                True,
                cond.get("reason") or "Succeeded",
                cond.get("message") or "",
                self.clock,
            )
            await self._write_status(local, new_status)
            return None
        # C26: a remote copy evicted.
        evicted = self._best(group, "Evicted")
        if evicted is not None:
            cluster, _ = evicted
            if is_true(local, "Evicted"):
                if self.sync_remote_job is not None and await self.sync_remote_job(
                    group.remotes[cluster].client, local, cluster
                ):
                    return SYNC_DEFERRED_REQUEUE_SECONDS
                return None
            if state == "Ready":
                where = status.get("clusterName") or cluster
                message = (
                    f'Workload evicted on worker cluster: "{where}", '
                    'resetting for re-admission. Previously: "Ready"'
                )
                await self._write_status(
                    local,
                    _with_check(status, _set_check(group.check, "Retry", message, self.clock)),
                )
                await self._event(local, message)
                return None
        # C27: spec drift -> delete the copy (priority changes are pushed instead).
        for cluster, copy_ in list(group.copies.items()):
            if copy_ is None:
                continue
            if _spec_for_compare(copy_.get("spec")) == _spec_for_compare(local.get("spec")):
                continue
            if _only_priority_differs(local.get("spec") or {}, copy_.get("spec") or {}):
                spec = local.get("spec") or {}
                await group.remotes[cluster].client.merge_patch(
                    WORKLOADS,
                    key[1],
                    {
                        "spec": {
                            "priority": spec.get("priority"),
                            "priorityClassRef": spec.get("priorityClassRef"),
                        }
                    },
                    namespace=key[0],
                    field_manager=KUEUE_MANAGER,
                )
                continue
            await self._remove_copy(group, cluster)
        # C28: admission detection, before nomination sync.
        admitted = self._best(group, "Admitted")
        if admitted is not None:
            return await self._admitted(group, admitted[0])
        # C29 (Kueue's step 6a): Ready, but no copy is Admitted. An unreachable admitting worker
        # is waited for workerLostTimeout from when its connection was lost; a reachable one
        # without an admitted copy (deleted, evicted back to pending, drifted away above) is
        # retried at once.
        if state == "Ready":
            admitting = str(status.get("clusterName") or "")
            if admitting and admitting in group.unavailable:
                lost = (self.clock.now() - self.clusters.lost_since(admitting)).total_seconds()
                remaining = self.config.worker_lost_timeout_seconds - lost
                if remaining > 0:
                    return remaining
                await self._update_acs(local, group.check, "Retry", ADMITTING_REMOTE_LOST)
            elif not admitting:
                await self._update_acs(local, group.check, "Retry", READY_WITHOUT_CLUSTER)
            else:
                await self._update_acs(local, group.check, "Retry", ADMITTING_REMOTE_GONE)
            return None
        # C30 (v0.20, MultiKueueOrchestratedPreemption): let one worker at a time preempt.
        gate_requeue: float | None = None
        if self.config.orchestrated_preemption:
            gate_requeue = await self._open_preemption_gate(group)
        # C31: nomination only while the check is Pending and clusterName is unset.
        if state != "Pending" or status.get("clusterName"):
            return gate_requeue
        # C32: every other admission check must be Ready first.
        for entry in status.get("admissionChecks") or []:
            if entry.get("name") != group.check.get("name") and entry.get("state") != "Ready":
                return gate_requeue
        requeue = await self._nominate_and_sync(group)
        if requeue is None or (gate_requeue is not None and gate_requeue < requeue):
            return gate_requeue
        return requeue

    def _finished_before_its_job(self, group: _Group, cluster: str) -> bool:
        """Whether a finished copy finished before Kueue could have created its Job there.

        With Kueue a copy of a Job's Workload finishes only when the worker's Job does, and that
        Job is created with the admission (C33). The emulated worker finishes a copy after its
        run time on its own, so a short Job's copy may finish before this manager saw it
        admitted; such a finish is ignored (the admission is recorded first, which creates the
        Job) instead of finishing the manager Workload without ``clusterName``.
        """
        if self.sync_remote_job is None:
            return False
        owners = group.local["metadata"].get("ownerReferences") or []
        if not any(o.get("kind") == "Job" and o.get("controller") for o in owners):
            return False
        return group.remotes[cluster].job_of(group.key) is None

    async def _open_preemption_gate(self, group: _Group) -> float | None:
        """Kueue's ``workloadToOpenPreemptionGate`` and step 7 of the reconciler (v0.20).

        Among the copies whose MultiKueue gate is not Open, the one with the oldest
        ``BlockedOnPreemptionGates=True`` gets its gate opened (a status write on the worker),
        unless another copy's gate was opened less than ``single_cluster_preemption_seconds``
        ago. Returns when to look again.
        """
        candidate: tuple[str, str, Obj] | None = None
        last_opened: datetime.datetime | None = None
        for cluster in sorted(group.copies):
            copy_ = group.copies[cluster]
            if copy_ is None:
                continue
            gate = _gate_state(copy_)
            if gate is not None and gate.get("position") == "Open":
                opened = parse_time(gate.get("lastTransitionTime"))
                if opened is not None and (last_opened is None or opened > last_opened):
                    last_opened = opened
                continue
            blocked = condition(copy_.get("status"), "BlockedOnPreemptionGates")
            if blocked is None or blocked.get("status") != "True":
                continue
            when = str(blocked.get("lastTransitionTime") or "")
            if candidate is None or when < candidate[1]:
                candidate = (cluster, when, copy_)
        period = self.config.single_cluster_preemption_seconds
        if candidate is None:
            return None
        if last_opened is not None:
            left = period - (self.clock.now() - last_opened).total_seconds()
            if left > 0:
                return left
        cluster, _, copy_ = candidate
        gates = [
            g
            for g in (copy_.get("status") or {}).get("preemptionGates") or []
            if g.get("name") != MULTIKUEUE_PREEMPTION_GATE
        ]
        gates.append(
            {
                "name": MULTIKUEUE_PREEMPTION_GATE,
                "position": "Open",
                "lastTransitionTime": timestamp(self.clock),
            }
        )
        meta = copy_["metadata"]
        # Upstream: a full Status().Update on the worker; the resourceVersion makes it as strict.
        await group.remotes[cluster].client.merge_patch(
            WORKLOADS,
            meta["name"],
            {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": {"preemptionGates": gates},
            },
            namespace=meta["namespace"],
            subresource="status",
            field_manager=KUEUE_MANAGER,
        )
        log.info("%s: %s/%s: opened the preemption gate on %s", self.name, *group.key, cluster)
        return period

    def _best(self, group: _Group, kind: str) -> tuple[str, Obj] | None:
        """The copy with the earliest ``kind=True`` transition (ties: cluster name)."""
        best: tuple[str, str, Obj] | None = None
        for cluster in sorted(group.copies):
            copy_ = group.copies[cluster]
            if copy_ is None:
                continue
            cond = condition(copy_.get("status"), kind)
            if cond is None or cond.get("status") != "True":
                continue
            when = str(cond.get("lastTransitionTime") or "")
            if best is None or when < best[1]:
                best = (cluster, when, cond)
        return (best[0], best[2]) if best is not None else None

    async def _admitted(self, group: _Group, cluster: str) -> float | None:
        """C28: delete the others, sync the job, then one status write (C36), event, counter."""
        local, status = group.local, group.status
        for other, copy_ in list(group.copies.items()):
            if other != cluster and copy_ is not None:
                await self._remove_copy(group, other)
        evicted = condition(status, "Evicted")
        if evicted is not None and evicted.get("status") == "True":
            # Evicted on the manager while still holding quota (C13 EvictedOnManagerCluster):
            # deactivate the admitted copy instead of re-admitting; C24 cleans up after release.
            await self._deactivate_copy(group, cluster, str(evicted.get("message") or ""))
            return None
        deferred = False
        if self.sync_remote_job is not None:  # C33: the real job only on the winner
            deferred = await self.sync_remote_job(group.remotes[cluster].client, local, cluster)
        # C28 step 4: back after workerLostTimeout, or soon while the status sync is deferred.
        requeue = (
            SYNC_DEFERRED_REQUEUE_SECONDS if deferred else self.config.worker_lost_timeout_seconds
        )
        current = status.get("clusterName")
        if current and current != cluster:
            log.error(
                "%s: %s/%s: attempting to change immutable clusterName from %r to %r",
                self.name,
                *group.key,
                current,
                cluster,
            )
            return None
        state = group.check.get("state")
        if state in ("Retry", "Rejected"):
            return requeue
        if state != "Ready" or not current or status.get("nominatedClusterNames"):
            message = f'The workload was admitted on "{cluster}"'
            new_status = _with_check(status, _set_check(group.check, "Ready", message, self.clock))
            new_status["clusterName"] = cluster
            new_status.pop("nominatedClusterNames", None)  # C36: cleared in the same write
            await self._write_status(local, new_status)
            if state != "Ready":
                await self._event(local, message)
                self.counters.inc(
                    ADMITTED_TOTAL,
                    cluster_queue=_admission_cluster_queue(local),
                    cluster=cluster,
                    replica_role=_replica_role(local),
                )
        return requeue

    async def _deactivate_copy(self, group: _Group, cluster: str, message: str) -> None:
        """Mark the admitted copy ``DeactivationTarget`` (reason ``EvictedOnManagerCluster``)."""
        copy_ = group.copies.get(cluster)
        if copy_ is None or is_true(copy_, "DeactivationTarget"):
            return
        remote_status = copy.deepcopy(copy_.get("status") or {})
        set_condition(
            remote_status,
            "DeactivationTarget",
            True,
            "EvictedOnManagerCluster",
            f"Evicted on manager: {message}"[:32768],
            self.clock,
        )
        await write_admission_status(
            group.remotes[cluster].client, copy_, remote_status, self.config, strict=True
        )

    async def _nominate_and_sync(self, group: _Group) -> float | None:
        """C32 with the dispatchers of C56–C61, then create or delete copies."""
        local, status, key = group.local, group.status, group.key
        current = list(status.get("nominatedClusterNames") or [])
        requeue: float | None = None
        dispatcher = self.config.dispatcher_name
        if dispatcher == ALL_AT_ONCE:  # C56
            broadcast = dispatchers.all_at_once(current, group.remotes)
            nominated = current if broadcast is None else broadcast
            if broadcast is not None:
                new_status = copy.deepcopy(status)
                new_status["nominatedClusterNames"] = broadcast
                await self._write_status(local, new_status)
        elif dispatcher == INCREMENTAL:  # C59
            step = dispatchers.incremental(
                current,
                group.clusters,
                self._rounds.get(key),
                self.clock.now(),
                round_seconds=self.config.incremental_round_seconds,
                step_size=self.config.incremental_step_size,
            )
            nominated, requeue = step.nominated, step.requeue
            if step.write:
                new_status = copy.deepcopy(status)
                new_status["nominatedClusterNames"] = nominated
                await self._write_status(local, new_status)
                self._rounds[key] = self.clock.now()
            elif step.requeue is None:  # ErrNoMoreWorkers: no state change
                log.debug("%s: %s/%s: no more workers", self.name, *key)
        else:  # C32: external — read the nomination as written
            nominated = current
        missing = [c for c in nominated if c not in group.remotes]
        for cluster in missing:
            message = f"cluster {cluster}: {ERR_NO_REMOTE_CLIENT}"
            self.nomination_errors.append(f"{key[0]}/{key[1]}: {message}")
            log.warning("%s: %s/%s: %s", self.name, *key, message)
        for cluster, remote in group.remotes.items():
            copy_ = group.copies.get(cluster)
            if cluster in nominated:
                if copy_ is None:
                    try:
                        await remote.client.create(
                            WORKLOADS,
                            clone_for_create(
                                local,
                                self.config.origin,
                                preemption_gated=self.config.orchestrated_preemption,
                            ),
                        )
                    except KubeError as error:
                        if error.status != 409:
                            raise
                    else:
                        self.counters.inc(
                            DISPATCHED_TOTAL,
                            cluster_queue=_admission_cluster_queue(local),
                            cluster=cluster,
                            replica_role=_replica_role(local),
                        )
            elif copy_ is not None:
                await self._remove_copy(group, cluster)
        if missing:
            raise KubeError(503, {"message": ERR_NO_REMOTE_CLIENT}, "SYNC", f"{key[0]}/{key[1]}")
        return requeue

    # --- orphan GC (C41) -----------------------------------------------------------------

    async def collect_garbage(self) -> int:
        """Delete remote copies (origin label) whose manager Workload is gone; the count."""
        manager = self.conn.cache(WORKLOADS)
        if not manager.synced.is_set():
            return 0
        removed = 0
        for remote in list(self.clusters.remotes.values()):
            if not remote.connected:
                continue
            try:
                listed = await remote.client.list(
                    WORKLOADS, label_selector=f"{ORIGIN_LABEL}={self.config.origin}"
                )
                for copy_ in listed.get("items") or []:
                    key = _key(copy_)
                    local = manager.get(key[1], key[0])
                    if local is not None and not local["metadata"].get("deletionTimestamp"):
                        continue
                    await self._remove_remote(remote, copy_)
                    removed += 1
            except TRANSIENT as error:
                log.info("%s: GC on %s: %s", self.name, remote.name, error)
        return removed

    async def run_gc(self) -> None:
        """Run the orphan GC every ``gc_interval_seconds`` of the injected clock (C41)."""
        while True:
            await self.clock.sleep(self.config.gc_interval_seconds)
            await self.collect_garbage()
