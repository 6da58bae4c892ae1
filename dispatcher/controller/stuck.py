"""Stuck detection: a workload its worker admitted but Kueue never records as admitted, and an
eviction Kueue never finishes.

The field-manager pitfall (contract C43): a copy ``Admitted`` on a nominated worker while the
manager Workload never gets ``status.clusterName``, or a Job that ran and finished there with the
manager's check still ``Pending``; and the refusal to sync into a same-named Job that is not this
manager's (C33). Each is reported once per workload: a log line, an ``AdmissionStuck`` Event and
``multikueue_dispatcher_stuck_workloads_total``.

A leftover Job in the way (C68): a workload admitted on a worker where a Job of ours for another
Workload holds its Job's name never runs there. Reported once per workload: a log line, a
``LeftoverJob`` Event and ``multikueue_dispatcher_leftover_jobs_total``.

The stuck eviction (C93): a manager Workload evicted while its Job showed running pods, whose
copies are all gone, keeps the manager's quota for good (nothing copies the Job's status any
more). Reported once per eviction: a log line, an ``EvictionStuck`` Event and
``multikueue_dispatcher_stuck_evictions_total``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.events import EventRecorder
from dispatcher.controller.records import PITFALL_ADVICE, Record, parse_time, transition_time
from dispatcher.controller.snapshots import (
    ORIGIN_LABEL,
    WorkerIndex,
    condition_status,
    owner_job,
)
from dispatcher.controller.workqueue import WorkQueue
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.patching import MERGE_PATCH
from dispatcher.k8s.resources import JOBS
from dispatcher.kueue.eligibility import multikueue_check_state
from dispatcher.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["BACKLOG_PATIENCE", "StuckDetector"]

BACKLOG_PATIENCE = 10
"""How many ``stuck_after_seconds`` a copy admitted on a worker may wait for Kueue to record it
while Kueue still has copies of ours to make on that worker (its clients' backlog in a burst),
before it counts as stuck all the same."""


class StuckDetector:
    """Finds and reports stuck workloads for the nomination loop (which calls it per reconcile)."""

    def __init__(
        self,
        *,
        registry: ClusterRegistry,
        index: Callable[[str], WorkerIndex | None],
        queue: WorkQueue,
        events: EventRecorder,
        config: ControllerConfig,
        metrics: Metrics | None,
        backlog: Callable[[str], int] | None = None,
    ) -> None:
        """``backlog(cluster)``: how many of our nominations to ``cluster`` have no copy
        holding quota there yet (Kueue has still to make them)."""
        self._registry = registry
        self._backlog = backlog
        self._index = index
        self._queue = queue
        self._events = events
        self._config = config
        self._metrics = metrics
        self._recorded: dict[str, float] = {}
        """When Kueue last recorded an admission on each worker (clusterName set on a manager
        Workload we nominated there), on the nominator's clock."""

    def forget(self, cluster: str) -> None:
        """Drop what is kept of ``cluster`` (a worker that is gone)."""
        self._recorded.pop(cluster, None)

    @property
    def clusters(self) -> frozenset[str]:
        """The clusters whose last recorded admission is kept."""
        return frozenset(self._recorded)

    def admission_recorded(self, cluster: str, now: float) -> None:
        """Kueue recorded an admission on ``cluster`` at ``now``: it is making progress there."""
        if now > self._recorded.get(cluster, float("-inf")):
            self._recorded[cluster] = now

    async def check_admitted(
        self,
        key: str,
        workload: Mapping[str, Any],
        record: Record,
        current: tuple[str, ...],
        now: float,
    ) -> None:
        """Report the field-manager pitfall (C43): admitted on a nominated worker long ago, yet
        Kueue never set ``clusterName`` on the manager, nor recorded any other admission on that
        worker for as long (a Kueue that records others is behind, not refusing)."""
        if record.stuck_reported:
            return
        for cluster in current:
            index = self._index(cluster)
            since = parse_time(index.admitted.get(key)) if index is not None else None
            if since is None:
                continue
            if now - since < self._config.stuck_after_seconds:
                # Nothing else may wake this workload up (the rejected admission write changes
                # nothing we watch): look again when it would count as stuck.
                self._queue.add_after(key, self._config.stuck_after_seconds - (now - since))
                continue
            recorded = self._recorded.get(cluster)
            if recorded is not None and now - recorded < self._config.stuck_after_seconds:
                # Kueue recorded another admission on this worker lately: it is working through
                # a backlog of its worker clients (v0.19's 5 QPS per worker: about 110 s from a
                # copy's admission to clusterName in a 300-Job burst on real Kueue), not refusing
                # the write, which the pitfall refuses for every workload. Look again once that
                # progress is as old as the threshold.
                self._queue.add_after(key, self._config.stuck_after_seconds - (now - recorded))
                continue
            if (
                self._backlog is not None
                and self._backlog(cluster) > 0
                and now - since < BACKLOG_PATIENCE * self._config.stuck_after_seconds
            ):
                # Kueue still has copies of ours to make on this worker: a burst, its worker
                # clients' backlog ahead of the read-backs (a false report in each 300-Job
                # burst on real Kueue v0.19.2 before this; one read-back early in the burst
                # and none for a while after it is no sign of the pitfall). Not for ever: a
                # pitfall under steady load is reported after BACKLOG_PATIENCE thresholds.
                self._queue.add_after(key, self._config.stuck_after_seconds)
                continue
            cause = await self.cause(cluster, workload)
            if cause is None:
                # Kueue has not synced the Job to the worker yet: it is behind (a backlog of
                # its worker clients), not refusing the admission. Look again later.
                self._queue.add_after(key, self._config.stuck_after_seconds)
                continue
            self.report(
                key,
                workload,
                record,
                f"the copy on {cluster} was admitted {now - since:.0f}s ago but Kueue has not "
                f"set status.clusterName: {cause}",
            )
            return

    async def cause(self, cluster: str, workload: Mapping[str, Any]) -> str | None:
        """Why Kueue does not record an admission it can see (C43 or C33), or None when it is
        not stuck but behind.

        Before writing ``clusterName`` Kueue syncs the workload's Job to the admitting worker and
        refuses a Job of that name there that does not carry this manager's origin label
        (``ValidateRemoteObjectOwnership``): its reconcile fails before the admission write,
        again and again. The worker's Job tells the two apart: a same-named Job without our
        origin label is that refusal; Kueue's own Job is the field-manager pitfall (Kueue syncs
        the Job before it writes ``clusterName``, ``workload.go`` step 6). No Job at all means
        Kueue has not reached that step yet (its worker clients are rate limited, C20): None, not
        stuck. One GET on the worker, only when a workload looks stuck."""
        meta = workload.get("metadata") or {}
        owner = owner_job(workload)
        worker = self._registry.workers.get(cluster)
        if owner is None or worker is None or worker.mirror is None:
            return PITFALL_ADVICE
        namespace, name = str(meta.get("namespace", "")), owner
        try:
            job = await worker.mirror.api.get(JOBS, name, namespace)
        except ApiError as error:
            if error.status == 404:
                return None
            log.info(
                "workload %s/%s: could not read Job %s on %s to tell why it is stuck: %s",
                namespace,
                meta.get("name", ""),
                name,
                cluster,
                error,
                extra={"workload": f"{namespace}/{meta.get('name', '')}"},
            )
            return PITFALL_ADVICE
        origin = ((job.get("metadata") or {}).get("labels") or {}).get(ORIGIN_LABEL)
        if origin == self._config.origin:
            return PITFALL_ADVICE
        found = f"origin {origin!r}" if origin else "no origin label"
        return (
            f"a Job {namespace}/{name} already exists on {cluster} and was not created by this "
            f"manager's Kueue ({found}, expected {ORIGIN_LABEL}={self._config.origin}): Kueue "
            f"refuses to sync into it and will not admit the workload until that Job is deleted "
            f"or renamed (contract C33)"
        )

    async def check_finished_unrecorded(
        self,
        key: str,
        workload: Mapping[str, Any],
        record: Record,
        checks: Collection[str],
    ) -> None:
        """Report the pitfall's other signature: the Job ran on a worker and finished before
        ``stuck_after_seconds``, so the manager Workload is ``Finished`` with no
        ``clusterName``, the nomination still standing and the MultiKueue check ``Pending``
        (seen on real Kueue v0.19.2 without a remedy: 8 of the 10 demo workloads)."""
        if record.stuck_reported:
            return
        status = workload.get("status") or {}
        nominated = [str(n) for n in status.get("nominatedClusterNames") or ()]
        if status.get("clusterName") or not nominated:
            return
        finished = any(
            c.get("type") == "Finished" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if not finished:
            return
        check, state = multikueue_check_state(workload, checks)
        if check is None or state != "Pending":
            return
        self.report(
            key,
            workload,
            record,
            f"finished on {', '.join(nominated)} but Kueue never set status.clusterName and its "
            f"admission check {check} stayed Pending: {PITFALL_ADVICE}",
        )

    async def check_eviction(
        self, key: str, workload: Mapping[str, Any], record: Record, now: float
    ) -> None:
        """Report an eviction Kueue will not finish (C93): ``Evicted=True`` beside
        ``QuotaReserved=True`` for ``stuck_after_seconds``, and no copy of the workload on any
        worker of its MultiKueueConfig; with ``stuck_eviction_release``, then release it.

        Kueue gives the manager's quota back only once the manager Job shows no active pods
        (C37), and that count is the worker's, copied by MultiKueue from a worker that still
        has a copy. With a copy left (C92's evicting copy, or one on a worker of the config that
        cannot be seen now) the release may still come and nothing is reported; the workload
        is looked at again after the threshold, since nothing else need change while it
        waits."""
        if (
            condition_status(workload, "Evicted") != "True"
            or condition_status(workload, "QuotaReserved") != "True"
            or condition_status(workload, "Finished") == "True"
        ):
            return
        since = transition_time(workload, "Evicted")
        release = self._config.stuck_eviction_release
        if since is None or (
            record.eviction_reported == since and (not release or record.eviction_released == since)
        ):
            return
        threshold = self._config.stuck_after_seconds
        if now - since < threshold:
            self._queue.add_after(key, threshold - (now - since))
            return
        check, _ = multikueue_check_state(workload, self._registry.multikueue_checks())
        if check is None:
            return  # not dispatched by MultiKueue: its Job runs on the manager, no copy to wait for
        workers = []
        for cluster in self._registry.config_of(check)[1]:
            worker = self._registry.workers.get(cluster)
            if worker is None:
                continue  # no MultiKueueCluster of that name: Kueue has no copy there either
            index = self._index(cluster)
            if index is None or not worker.connected or key in index.copies:
                self._queue.add_after(key, threshold)
                return
            workers.append(cluster)
        if record.eviction_reported != since:
            record.eviction_reported = since
            self._report_eviction(key, workload, record, now - since)
        if release and record.eviction_released != since:
            if await self._release_eviction(key, workload, workers):
                record.eviction_released = since
            else:
                self._queue.add_after(key, threshold)

    def _report_eviction(
        self, key: str, workload: Mapping[str, Any], record: Record, age: float
    ) -> None:
        """Log, count and emit the ``EvictionStuck`` Event of a stuck eviction (C93)."""
        status = workload.get("status") or {}
        namespace = str((workload.get("metadata") or {}).get("namespace", ""))
        evicted: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Evicted"), {}
        )
        owner = owner_job(workload)
        vanished = (
            f" (its admitted copy vanished on {', '.join(sorted(record.copies_lost))}: check "
            f"that its Job runs there no more)"
            if record.copies_lost
            else ""
        )
        if self._config.stuck_eviction_release and owner is not None:
            vanished = ""
            release = (
                f"the dispatcher sets the status.active of Job {namespace}/{owner} to 0 once no "
                f"Job of it on a worker has active pods (stuck_eviction_release)"
            )
        elif owner is not None:
            release = (
                f"set the status.active of Job {namespace}/{owner} to 0 (kubectl patch job "
                f"{owner} -n {namespace} --subresource=status --type=merge "
                """-p '{"status":{"active":0,"ready":0}}'), or delete the Job and submit it """
                "again"
            )
        else:
            release = (
                "set its owner's count of active pods to 0 as MultiKueue would, or delete the "
                "owner and submit it again"
            )
        message = (
            f"evicted {age:.0f}s ago ({evicted.get('reason', '')}: "
            f"{evicted.get('message', '')}) and still holding the manager's quota, with no copy "
            f"left on any worker: Kueue releases the quota only once the manager Job shows no "
            f"active pods, a count it copies from a worker's copy, so it never will (contract "
            f"C93; kueue#15380). To release it{vanished}, {release}"
        )
        log.error("workload %s: eviction stuck: %s", key, message, extra={"workload": key})
        if self._metrics is not None:
            self._metrics.stuck_eviction(cluster_queue=_cluster_queue(workload))
        self._events.record(workload, "EvictionStuck", message, "Warning")

    async def _release_eviction(
        self, key: str, workload: Mapping[str, Any], workers: Sequence[str]
    ) -> bool:
        """The opt-in release of a stuck eviction (C93): the manager Job's ``status.active``
        and ``status.ready`` set to 0, what MultiKueue would copy from a worker whose Job has
        no pods. Not while a Job of the workload on one of ``workers`` (its MultiKueueConfig's,
        all in sight) still has active pods: its pods may still run there. Whether it is done
        (False: look again later)."""
        namespace = str((workload.get("metadata") or {}).get("namespace", ""))
        owner = owner_job(workload)
        if owner is None:
            return True  # nothing this policy can write; reported as such
        for cluster in workers:
            worker = self._registry.workers.get(cluster)
            if worker is None or worker.mirror is None:
                return False
            try:
                job = await worker.mirror.api.get(JOBS, owner, namespace)
            except ApiError as error:
                if error.status == 404:
                    continue
                log.info(
                    "workload %s: could not read Job %s/%s on %s before releasing its eviction: %s",
                    key,
                    namespace,
                    owner,
                    cluster,
                    error,
                    extra={"workload": key, "cluster": cluster},
                )
                return False
            labels = (job.get("metadata") or {}).get("labels") or {}
            active = int((job.get("status") or {}).get("active") or 0)
            if labels.get(ORIGIN_LABEL) == self._config.origin and active:
                log.info(
                    "workload %s: its Job on %s still has %d active pods; the release of its "
                    "eviction waits for them",
                    key,
                    cluster,
                    active,
                    extra={"workload": key, "cluster": cluster},
                )
                return False
        try:
            await self._registry.manager.api.request(
                "PATCH",
                JOBS.path(namespace, owner, "status"),
                query=[("fieldManager", self._config.field_manager)],
                body={"status": {"active": 0, "ready": 0}},
                content_type=MERGE_PATCH,
            )
        except ApiError as error:
            if error.status == 404:
                return True  # the Job is gone: Kueue releases the quota with it
            log.warning(
                "workload %s: could not release its stuck eviction (Job %s/%s status): %s",
                key,
                namespace,
                owner,
                error,
                extra={"workload": key},
            )
            return False
        message = (
            f"set status.active and status.ready of Job {namespace}/{owner} to 0: no copy of it "
            f"is left on any worker and none of its Jobs there has active pods, so Kueue can "
            f"finish the eviction and queue it again (contract C93, stuck_eviction_release)"
        )
        log.info("workload %s: eviction released: %s", key, message, extra={"workload": key})
        if self._metrics is not None:
            self._metrics.stuck_eviction_release(cluster_queue=_cluster_queue(workload))
        self._events.record(workload, "EvictionReleased", message, "Normal")
        return True

    def check_leftover_job(
        self, key: str, workload: Mapping[str, Any], record: Record, now: float
    ) -> None:
        """Report a workload admitted on a worker where a leftover Job of ours holds its Job's
        name (C68): that Job's ``prebuilt-workload-name`` label names another Workload (an
        earlier Job of that name), so MultiKueue syncs this workload's status from it and
        never creates the workload's own Job; the copy keeps its quota there and nothing runs.
        Deleting that Job lets MultiKueue create the right one (real Kueue v0.19.2: created
        10 s after the deletion, then ran). Reported once, ``stuck_after_seconds`` after the
        admission (a moment's overlap of an old Job going and the new one coming is not
        reported): a log line, a ``LeftoverJob`` Event and
        ``multikueue_dispatcher_leftover_jobs_total``. The mirror's slim Jobs answer it: no
        request."""
        if record.leftover_job_reported or condition_status(workload, "Finished") == "True":
            return
        cluster = str((workload.get("status") or {}).get("clusterName") or "")
        job = owner_job(workload)
        worker = self._registry.workers.get(cluster) if cluster else None
        if worker is None or job is None:
            return
        threshold = self._config.stuck_after_seconds
        if not worker.settled:
            # Just started and that worker's Jobs are not listed yet; nothing else wakes an
            # admitted workload up. A worker that settled without a list (unreachable, Jobs
            # refused) is not waited for: this cannot be told there.
            self._queue.add_after(key, threshold)
            return
        index = self._index(cluster)
        if index is None:
            return
        meta = workload.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        runs = index.leftover(namespace, name, job)
        if not runs:
            return
        since = transition_time(workload, "Admitted")
        if since is not None and now - since < threshold:
            self._queue.add_after(key, threshold - (now - since))
            return
        record.leftover_job_reported = True
        message = (
            f"admitted on {cluster}, but the Job {namespace}/{job} there runs another Workload "
            f"({runs}): a leftover of an earlier Job of that name. MultiKueue copies this "
            f"workload's status from it and never creates the workload's own Job, so it will "
            f"not run; delete that Job on {cluster} (kubectl delete job {job} -n {namespace}) "
            f"and MultiKueue creates the workload's own (contract C68)"
        )
        log.error("workload %s: %s", key, message, extra={"workload": key, "cluster": cluster})
        if self._metrics is not None:
            self._metrics.leftover_job(cluster_queue=_cluster_queue(workload), cluster=cluster)
        self._events.record(workload, "LeftoverJob", message, "Warning")

    def report(self, key: str, workload: Mapping[str, Any], record: Record, message: str) -> None:
        """Log, count and emit an ``AdmissionStuck`` Event, once per workload."""
        record.stuck_reported = True
        log.error("workload %s is stuck: %s", key, message, extra={"workload": key})
        if self._metrics is not None:
            self._metrics.stuck_workload(cluster_queue=_cluster_queue(workload))
        self._events.record(workload, "AdmissionStuck", message, "Warning")


def _cluster_queue(workload: Mapping[str, Any]) -> str:
    """The manager ClusterQueue a workload's quota is reserved in ('' when none)."""
    return str(((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
