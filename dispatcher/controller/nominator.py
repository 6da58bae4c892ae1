"""The nomination loop: eligible Workloads in, ``status.nominatedClusterNames`` out.

Level-triggered and idempotent. Every change of a manager Workload, of the MultiKueue
configuration or of a worker's caches puts the affected Workload keys on a de-duplicating work
queue; K workers reconcile them. A reconcile reads only the mirrors: it checks eligibility
(contract C49), asks the plugin pipeline for a decision over snapshots of the candidate clusters
(C50), writes the nomination when it differs from the current one (server-side apply with our
field manager, or a JSON merge patch, always with the resourceVersion the decision was based on),
records the nomination as in-flight capacity, emits an Event that explains the choice, and
schedules the follow-up the algorithm asked for. After a restart the state that decisions
depend on is rebuilt from the API: the nomination's clock from our field manager's managedFields
entry (:func:`nomination_time`), and the in-flight ledger re-seeded from current nominations with
that clock. What stays in memory only (the Event de-duplication, the stuck report, the wait for a
leftover copy) is listed in the README ("Restarts").

Its parts, each in its own module:

- :mod:`~dispatcher.controller.triggers`: which keys each watch event can change;
- :mod:`~dispatcher.controller.step`: the decision step (a decision in, a typed outcome out),
  shared with the simulator;
- :mod:`~dispatcher.controller.writer`: the nomination write, its lost races, and the
  expectations of its echo;
- :mod:`~dispatcher.controller.events`: Events from a background recorder;
- :mod:`~dispatcher.controller.stuck`: the field-manager pitfall (C43), a copy ``Admitted`` on a
  nominated worker while the manager Workload never gets ``clusterName``;
- :mod:`~dispatcher.controller.outage`: unplaceable workloads during a worker outage;
- :mod:`~dispatcher.controller.config`: the configuration and its defaults.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.trace import Tracer

from dispatcher.algorithms.building import queued_workload, request_from_workload
from dispatcher.algorithms.model import (
    ClusterSnapshot,
    Decision,
    DispatchRequest,
    RejectionReason,
)
from dispatcher.algorithms.stages import DISRUPTION_SCORER, HINTS_STAGE, PREDICTED_START_SCORER
from dispatcher.clusters.registry import MANAGER, Candidate, ClusterRegistry
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.events import EventRecorder
from dispatcher.controller.inflight import InFlight
from dispatcher.controller.outage import (
    RELEASED_AT,
    RELEASED_FOR,
    RELEASES,
    RESTORED_AT,
    Holder,
    OutageBook,
    Placement,
    format_time,
    release_due,
    released_state,
    requested_resources,
    starved_on,
    untried,
)
from dispatcher.controller.records import Record, Unconfirmed, parse_time
from dispatcher.controller.records import transition_time as _transition_time
from dispatcher.controller.snapshots import (
    SnapshotCache,
    WorkerIndex,
    condition_status,
    is_copy,
    owner_job,
)
from dispatcher.controller.step import Action, account, outcome
from dispatcher.controller.stuck import StuckDetector
from dispatcher.controller.triggers import CAPACITY_KEY, USAGE_KEY, Triggers
from dispatcher.controller.workqueue import WorkQueue
from dispatcher.controller.writer import ECHO_TTL_SECONDS, NominationWriter
from dispatcher.k8s.errors import ApiError, ApiUnreachable
from dispatcher.k8s.ratelimit import TokenBucket
from dispatcher.k8s.watching import ObjectEvent, WatchItem, key_text
from dispatcher.kueue.admission import admission_usage, format_resource_quantity
from dispatcher.kueue.eligibility import (
    ADMITTING_REMOTE_GONE,
    copy_evicted_on,
    copy_lost_on,
    eligibility,
    multikueue_check_state,
)
from dispatcher.kueue.gputypes import GpuTypeCheck, check_gpu_type, cluster_gpu_types
from dispatcher.kueue.objects import InvalidField, frozen_map
from dispatcher.telemetry.metrics import ConnectionState, Metrics
from dispatcher.telemetry.tracing import ATTR_NAMESPACE, ATTR_WORKLOAD, SPAN_RECONCILE

log = logging.getLogger(__name__)

__all__ = ["Nominator", "Record"]

Decide = Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]

# The ``algorithm`` label of a nomination written back to the worker whose copy holds quota
# (no pipeline decided it, see ``Nominator._holding_copy``).
HOLDER_ALGORITHM = "copy-holds-quota"
EVENT_FLUSH_SECONDS = 1.0
"""How long a stopping loop still sends queued Events (part of the shutdown budget)."""


def _holds(copy: Mapping[str, Any]) -> bool:
    """Whether a worker's copy holds quota there as the holder rule reads it: ``Admitted`` or
    ``QuotaReserved`` True, and not ``Evicted``."""
    if condition_status(copy, "Evicted") == "True":
        return False
    return "True" in (condition_status(copy, "Admitted"), condition_status(copy, "QuotaReserved"))


def _created(obj: Mapping[str, Any]) -> str:
    """``metadata.creationTimestamp`` of ``obj`` as text ("" when it has none)."""
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


class WriteFailed(ApiError):
    """A nomination write that failed other than by a lost race: the API's error, re-raised
    so that the reconcile loop counts it as a ``write`` error (not ``api``) and retries."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(
            error.status,
            error.reason,
            error.message,
            retry_after=error.retry_after,
            body=error.body,
        )


def nomination_time(workload: Mapping[str, Any], field_manager: str) -> float | None:
    """When ``field_manager`` last changed ``status.nominatedClusterNames``, from the API: the
    ``time`` of its managedFields entry for the status subresource (``operation: Apply``,
    ``subresource: status``), provided that entry still owns the field. None when it does not
    (another writer took it over, or the nomination is not ours).

    kube-apiserver stamps an Apply entry's ``time`` only when the apply changed the object, with
    a resolution of one second; the dispatcher's status apply owns nothing but the nomination,
    so the time is when the nomination last changed by our hand. A restart recovers the
    nomination's age (capacity-first's patience, Incremental's round, in-flight ages) from it.
    """
    for entry in (workload.get("metadata") or {}).get("managedFields") or ():
        if not isinstance(entry, Mapping):
            continue
        if (
            entry.get("manager") != field_manager
            or entry.get("operation") != "Apply"
            or entry.get("subresource") != "status"
        ):
            continue
        owned = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:nominatedClusterNames")
        if owned is None:
            return None
        return parse_time(entry.get("time"))
    return None


_DURATION = re.compile(r"\b\d+(?:\.\d+)?s\b")
"""A duration in a message ("for 12s"): Events that differ only in those are one Event."""


def _quota_text(usage: Mapping[tuple[str, str], int]) -> str:
    return (
        ", ".join(
            f"{format_resource_quantity(resource, amount)} {resource} in flavor {flavor}"
            for (flavor, resource), amount in sorted(usage.items())
        )
        or "no quota"
    )


def starved_message(cluster_queue: str, holders: Sequence[Holder], limit: int = 5) -> str:
    """The ``BlockedByUnplaceable`` line: the holders a starved workload waits behind."""
    named = "; ".join(f"{h.key} (waiting for {', '.join(h.waiting_for)})" for h in holders[:limit])
    more = f"; +{len(holders) - limit} more" if len(holders) > limit else ""
    return (
        f"waits for manager quota in ClusterQueue {cluster_queue} (or its cohort) held by "
        f"{len(holders)} workload(s) that no reachable worker can run: {named}{more}"
    )[:1024]


def summarize(decision: Decision, limit: int = 6) -> str:
    """One line for an Event: what was chosen and a short verdict per cluster."""
    chosen = ", ".join(decision.nominate) or "none"
    parts = []
    for verdict in decision.verdicts[:limit]:
        if verdict.kept:
            fit = "fits now" if verdict.fits_now else "queues"
            # The placement hints that ranked it, by name (the ``hints`` score's detail).
            hints = next((c.detail for c in verdict.scores if c.scorer == HINTS_STAGE), "")
            fit = f"{fit}; {hints}" if hints else fit
            # What admitting it there would preempt (least disruption's detail), and when it
            # would start where it has to wait.
            if not verdict.fits_now:
                for scorer in (DISRUPTION_SCORER, PREDICTED_START_SCORER):
                    detail = next((c.detail for c in verdict.scores if c.scorer == scorer), "")
                    shown = detail.startswith(("would preempt", "predicted start"))
                    fit = f"{fit}; {detail}" if shown else fit
            parts.append(f"{verdict.cluster}: rank {verdict.rank} ({fit})")
        else:
            parts.append(f"{verdict.cluster}: {verdict.dropped_by}: {verdict.reason}")
    more = len(decision.verdicts) - limit
    tail = f"; +{more} more" if more > 0 else ""
    text = f"nominated [{chosen}] by {decision.algorithm}: {decision.reason}"
    if not decision.nominate and all(v.reason in decision.reason for v in decision.verdicts):
        # Nothing nominated: the reason already gives every cluster's verdict.
        return text[:1024]
    return (text + ". " + "; ".join(parts) + tail)[:1024]


class Nominator:
    """Reconciles manager Workloads into nominations."""

    def __init__(
        self,
        registry: ClusterRegistry,
        decide: Decide,
        *,
        config: ControllerConfig | None = None,
        metrics: Metrics | None = None,
        now: Callable[[], float] | None = None,
        tracer: Tracer | None = None,
        event_limiter: TokenBucket | None = None,
    ) -> None:
        self.registry = registry
        self.decide = decide
        self.config = config or ControllerConfig()
        self.metrics = metrics
        self.queue = WorkQueue()
        self.in_flight = InFlight()
        self.records: dict[str, Record] = {}
        self.indexes: dict[str, WorkerIndex] = {}
        self._snapshots = SnapshotCache()
        self._now = now or (lambda: datetime.datetime.now(datetime.UTC).timestamp())
        self.writer = NominationWriter(
            lambda: self.registry.manager.api,
            field_manager=self.config.field_manager,
            metrics=metrics,
            now=self._now,
            cached_version=self._cached_version,
        )
        """Our writes to manager Workloads, and the expectations of their echoes
        (:mod:`dispatcher.controller.writer`)."""
        self._limiter = anyio.CapacityLimiter(max(1, self.config.workers))
        self.inline_decisions = 0
        """Decisions run on the event loop, without a thread (operation counts)."""
        self._decision_lock = anyio.Lock()
        self._published_states: set[str] = set()
        self._in_flight_published: set[str] = set()
        """Clusters whose in-flight gauge was set (a worker's first is set at 0)."""
        self._retrying: set[str] = set()
        """Keys whose last reconcile got no usable decision (timed out, failed, withheld):
        retried with the queue's backoff, which a success resets."""
        self._started: float | None = None
        self._tracer = tracer or trace.get_tracer(__name__)
        self.outage = OutageBook()
        """Unplaceable holders, starved workloads, and which workloads each worker's
        reachability can change (:mod:`dispatcher.controller.outage`)."""
        self._released: dict[str, str] = {}
        """Workloads we released (deactivated), by key, with their creationTimestamp."""
        self._restore_wake = anyio.Event()
        self.releases = 0
        self.restores = 0
        self.events = EventRecorder(
            lambda: self.registry.manager.api, metrics=metrics, limiter=event_limiter
        )
        """Events are sent by a background task and aggregated (:meth:`run` starts it), with
        ``event_limiter`` as their own rate limit when given (else the manager client's)."""
        self.stuck = StuckDetector(
            registry=registry,
            index=self._index,
            queue=self.queue,
            events=self.events,
            config=self.config,
            metrics=metrics,
            backlog=self._copy_backlog,
        )
        """Admitted on a worker, never recorded by Kueue (:mod:`dispatcher.controller.stuck`)."""
        self.triggers = Triggers(
            registry=registry,
            queue=self.queue,
            outage=self.outage,
            writer=self.writer,
            config=self.config,
            wake_restorer=self._wake_restorer,
        )
        """Which workload keys each event can change (:mod:`dispatcher.controller.triggers`)."""

    # --- events from the registry --------------------------------------------------------------

    def on_change(self, cluster: str, resource: str, item: WatchItem) -> None:
        """Registry callback: turn a change into the workload keys it may affect
        (:mod:`dispatcher.controller.triggers`)."""
        self.triggers.on_change(cluster, resource, item)
        if (
            cluster == MANAGER
            and resource == "workloads"
            and isinstance(item, ObjectEvent)
            and item.type != "DELETED"
        ):
            self._note_copy_lost(item.object)
            self._note_copy_evicted(item.object)
        if resource == "connection" and cluster not in self.registry.workers:
            self._forget_worker(cluster)

    def _note_copy_lost(self, workload: Mapping[str, Any]) -> None:
        """Remember the worker whose admitted copy of ``workload`` Kueue reports gone (C29's
        "Admitting remote no longer exists"), for ``lost_copy_cooldown_seconds``: the stage
        ``copy-lost`` leaves it out of the next decisions (C91). Seen on the manager's watch,
        between Kueue's ``Retry`` and the eviction that empties ``clusterName``."""
        cooldown = self.config.lost_copy_cooldown_seconds
        if cooldown <= 0 or not (workload.get("status") or {}).get("clusterName"):
            return
        lost = copy_lost_on(workload, self.registry.multikueue_checks())
        if lost is None:
            return
        key = key_text(workload)
        record = self.records.setdefault(key, Record())
        now = self._now()
        seen = record.copies_lost.get(lost)
        if seen is not None and now - seen < cooldown:
            return  # the same loss, seen again in a later event
        record.copies_lost[lost] = now
        log.info(
            "workload %s: its admitted copy on %s is gone (Kueue: %s); %s is left out of its "
            "decisions for %g s",
            key,
            lost,
            ADMITTING_REMOTE_GONE,
            lost,
            cooldown,
            extra={"workload": key, "cluster": lost},
        )

    def _mirrored_copy(self, cluster: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Workload ``namespace/name`` as this dispatcher's mirror of worker ``cluster``
        shows it (None: no such worker or mirror, or not there)."""
        worker = self.registry.workers.get(cluster) if cluster else None
        if worker is None or worker.mirror is None:
            return None
        return worker.mirror.cache("workloads").get(name, namespace)

    def _note_copy_evicted(self, workload: Mapping[str, Any]) -> None:
        """Remember the worker that evicted ``workload``'s admitted copy by Kueue's word (the
        ``Retry`` of C26, "Workload evicted on worker cluster") while this dispatcher's mirror
        of that worker still shows the copy holding quota and not ``Evicted``.

        Kueue reads the worker through its own clients and resets the Workload, and the manager
        may reserve quota again, before the worker's update reaches a mirror that lags behind
        (a busy event loop). The holder rule would then take the old copy for one that holds
        quota and write its worker back, keeping the copy that the worker re-queued (C92,
        :meth:`_holding_copy`). The copy is known by its ``creationTimestamp``: a later copy
        on the worker is a new one."""
        evicted = copy_evicted_on(workload, self.registry.multikueue_checks())
        if evicted is None:
            return
        meta = workload.get("metadata") or {}
        copy = self._mirrored_copy(
            evicted, str(meta.get("namespace", "")), str(meta.get("name", ""))
        )
        if copy is None or not is_copy(copy, self.config.origin) or not _holds(copy):
            return  # the mirror shows it released or gone already
        created = _created(copy)
        key = key_text(workload)
        record = self.records.setdefault(key, Record())
        if record.copies_evicted.get(evicted) == created:
            return  # the same eviction, seen again in a later event
        record.copies_evicted[evicted] = created
        log.info(
            "workload %s: Kueue reports its copy on %s evicted (C26) before this dispatcher's "
            "mirror of %s shows it; that copy holds nothing until the mirror catches up",
            key,
            evicted,
            evicted,
            extra={"workload": key, "cluster": evicted},
        )

    def _copies_lost(self, record: Record, now: float) -> tuple[dict[str, str], float | None]:
        """The workers the ``copy-lost`` stage leaves out now, with the verdict's text, and in
        how many seconds the first of them is back (None: none left out). Expired entries are
        dropped."""
        cooldown = self.config.lost_copy_cooldown_seconds
        left_out: dict[str, str] = {}
        back: float | None = None
        for cluster, seen in list(record.copies_lost.items()):
            remaining = seen + cooldown - now
            if remaining <= 0:
                del record.copies_lost[cluster]
                continue
            left_out[cluster] = (
                f'its admitted copy there vanished (Kueue: "{ADMITTING_REMOTE_GONE}"); left out '
                f"for {cooldown:g} s from then (C91)"
            )
            back = remaining if back is None else min(back, remaining)
        return left_out, back

    def _copy_backlog(self, cluster: str) -> int:
        """How many of our nominations to ``cluster`` have no copy holding quota there yet:
        the copies Kueue has still to make (or the worker to reserve). Nominations whose copy
        holds quota there stay in the in-flight ledger until Kueue records them, and do not
        count: under the field-manager pitfall that is every one of them."""
        index = self.indexes.get(cluster)
        reserved = index.reserved_keys if index is not None else frozenset()
        return sum(1 for w in self.in_flight.on(cluster, self._now()) if w.key not in reserved)

    def _forget_worker(self, cluster: str) -> None:
        """A worker the registry stopped (its MultiKueueCluster deleted, or its kubeconfig
        replaced: then a new index is built on the new mirror when it is first read): drop what
        the loop kept of it, so a removed cluster holds no index, snapshots or stuck-detector
        state (``tests/controller/test_triggers.py``)."""
        index = self.indexes.pop(cluster, None)
        if index is not None:
            index.detach()
        self._snapshots.forget(cluster)
        self.stuck.forget(cluster)

    @property
    def waiting(self) -> tuple[str, ...]:
        """Keys of the manager Workloads a capacity or connectivity change can place."""
        return self.triggers.waiting

    @property
    def fan_outs(self) -> int:
        """Fan-out walks (re-queues of every waiting or every workload), for operation counts."""
        return self.triggers.fan_outs

    @property
    def writes(self) -> int:
        """Nomination writes accepted."""
        return self.writer.writes

    @property
    def races(self) -> int:
        """Nomination writes that lost a race (409, or Kueue admitted meanwhile)."""
        return self.writer.races

    @property
    def echoes_skipped(self) -> int:
        """Echoes of our own nomination writes that queued nothing (operation counts)."""
        return self.writer.echoes_skipped

    def awaiting_echo(self, key: str) -> bool:
        """Whether a write of ours to ``key`` has not come back on the watch yet."""
        return self.writer.awaiting(key)

    def _cached_version(self, key: str) -> str | None:
        """The resourceVersion of the manager Workload ``key`` in our cache (None: absent)."""
        namespace, _, name = key.partition("/")
        found = self.registry.manager.cache("workloads").get(name, namespace)
        return None if found is None else str((found.get("metadata") or {}).get("resourceVersion"))

    def _wake_restorer(self) -> None:
        """A worker's reachability changed: released workloads may be restorable."""
        if self._released:
            self._restore_wake.set()

    # --- running -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the reconcile workers until cancelled."""
        self.triggers.requeue_all()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self.events.run)
                group.start_soon(self._restorer)
                for _ in range(max(1, self.config.workers)):
                    group.start_soon(self._worker)
        finally:
            # The Events of decisions already written still go out, within a short bound.
            with anyio.CancelScope(shield=True), anyio.move_on_after(EVENT_FLUSH_SECONDS):
                await self.events.flush()

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except anyio.EndOfStream:
                return
            prefix = next((p for p in (CAPACITY_KEY, USAGE_KEY) if key.startswith(p)), None)
            if prefix is not None:
                try:
                    self.triggers.requeue_waiting_on(
                        key.removeprefix(prefix), nominated_there=prefix == CAPACITY_KEY
                    )
                finally:
                    self.queue.done(key)
                continue
            try:
                await self.reconcile(key)
                if key not in self._retrying:
                    self.queue.forget(key)  # a success resets the key's backoff
            except InvalidField as error:
                # A Workload the CRD schema would have refused: reported, not retried (any
                # change of it queues it again), and no capacity change re-queues it.
                self.queue.forget(key)
                self.triggers.not_waiting(key)
                await self._report_invalid(key, error)
            except ApiError as error:
                # 429 and 503 may say when to come back (Retry-After): never sooner.
                delay = self.queue.add_rate_limited(key, at_least=error.retry_after)
                log.warning(
                    "reconcile %s failed: %s; retrying in %.2fs",
                    key,
                    error,
                    delay,
                    extra={"workload": key},
                )
                if self.metrics is not None:
                    self.metrics.error("write" if isinstance(error, WriteFailed) else "api")
            except Exception:
                # A bug or an object nobody foresaw costs this key a backoff, never the loop.
                delay = self.queue.add_rate_limited(key)
                log.exception(
                    "reconcile %s failed unexpectedly; retrying in %.2fs",
                    key,
                    delay,
                    extra={"workload": key},
                )
                if self.metrics is not None:
                    self.metrics.error("unexpected")
            finally:
                self.queue.done(key)
                if self.metrics is not None:
                    self.metrics.set_queue_depth(len(self.queue))

    async def _report_invalid(self, key: str, error: InvalidField) -> None:
        """Log and record a Warning Event once per problem for a Workload that cannot be read."""
        namespace, _, name = key.partition("/")
        workload = self.registry.manager.cache("workloads").get(name, namespace)
        record = self.records.setdefault(key, Record())
        message = f"cannot dispatch: {error}"
        if workload is not None and self._event_once(
            workload, record, "InvalidWorkload", message, "Warning"
        ):
            log.warning("workload %s: %s", key, message, extra={"workload": key})

    # --- one workload --------------------------------------------------------------------------

    def _index(self, cluster: str) -> WorkerIndex | None:
        worker = self.registry.workers.get(cluster)
        if worker is None or worker.mirror is None:
            return None
        index = self.indexes.get(cluster)
        if index is None:
            index = self.indexes[cluster] = WorkerIndex(self.config.origin)
        index.refresh(worker.mirror)  # built once per mirror, then fed by its events
        return index

    async def reconcile(self, key: str) -> None:
        """Decide and, if needed, write the nomination of one manager Workload (one trace span
        per reconcile, exported only when OTLP is configured)."""
        namespace, _, name = key.partition("/")
        with self._tracer.start_as_current_span(SPAN_RECONCILE) as span:
            span.set_attribute(ATTR_NAMESPACE, namespace)
            span.set_attribute(ATTR_WORKLOAD, name)
            outcome = await self._reconcile(key, namespace, name)
            span.set_attribute("dispatcher.outcome", outcome)

    async def _reconcile(self, key: str, namespace: str, name: str) -> str:
        self._retrying.discard(key)
        if self.writer.behind(key):
            # The echo queues it; should it never come, the expectation's TTL ends the wait.
            self.queue.add_after(key, ECHO_TTL_SECONDS)
            return "waiting for the echo of our write"
        workload = self.registry.manager.cache("workloads").get(name, namespace)
        if workload is None:
            self.in_flight.forget(key)
            self.records.pop(key, None)
            return "deleted"
        record = self.records.setdefault(key, Record())
        if record.unconfirmed is not None:
            await self._confirm_landed(key, workload, record)
        checks = self.registry.multikueue_checks()
        verdict = eligibility(workload, checks)
        status = workload.get("status") or {}
        if not verdict.eligible:
            await self.stuck.check_finished_unrecorded(key, workload, record, checks)
            await self.stuck.check_eviction(key, workload, record, self._now())
            self.stuck.check_leftover_job(key, workload, record, self._now())
            self._not_eligible(key, workload, record)
            await self._outside_dispatch(key, workload, record)
            return "not eligible"
        assert verdict.check is not None
        now = self._now()
        _, _, problem = self.registry.config_of(verdict.check)
        if problem and problem != record.problem:
            log.warning("workload %s: %s", key, problem, extra={"workload": key})
        record.problem = problem
        candidates, _ = self.registry.candidates(verdict.check)
        waiting = self._first_sync_pending(candidates, now)
        if waiting is not None:
            # Just (re)started and a worker mirror is still listing: a decision now would see
            # a partial picture and could move a standing nomination away from the worker
            # where Kueue is admitting the copy (a contradictory write, C48). The worker's
            # state change re-queues waiting workloads; the grace bounds the wait.
            self.queue.add_after(key, waiting)
            return "waiting for worker sync"
        current = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
        if current != record.nominated:
            # Someone else (or our earlier self, before a restart) changed it: take its clock
            # from the API, else start it now.
            record.nominated = current
            record.nominated_at = self._nominated_at(workload, current, now)
            ours = nomination_time(workload, self.config.field_manager) is not None
            if ours and record.first_nominated_at is None:
                # Written by us before a restart: its admission still counts (time to admission).
                record.first_nominated_at = record.nominated_at
        await self.stuck.check_admitted(key, workload, record, current, now)
        holder = self._holding_copy(candidates, namespace, name, record)
        if holder is not None:
            record.leftover_since = None
            await self._placed(key, workload, record, Placement((holder,), nominated=current))
            return await self._keep_holder(key, workload, record, current, holder, now)
        if await self._wait_for_leftover(key, workload, record, candidates, current, now):
            self.outage.index(key, current)
            return "waiting for a leftover copy to be removed"
        _, back = self._copies_lost(record, now)
        if back is not None:
            # Decided again once the worker that lost its copy may be a candidate again.
            self.queue.add_after(key, back)
        # Decisions are serialised with their in-flight bookkeeping: a burst must not have two
        # decisions look at the same idle cluster before either is recorded (issue 4). The
        # nomination counts as in flight from the decision on, and is rolled back if the write
        # loses a race. Writes themselves run concurrently.
        async with self._decision_lock:
            started = anyio.current_time()  # the decision's latency includes its snapshots
            # The candidates read at the start of this reconcile: a reachability change since
            # runs this reconcile again (the triggers re-queue those in progress).
            candidates, request, snapshots = self._inputs(
                workload, verdict.check, record, current, now, candidates
            )
            decision = await self._decide(key, request, snapshots)
            self._observe_decision(workload, decision, started)
            if decision is None:
                self._retry_with_backoff(key, "no decision")
                return "no decision"
            placement = (
                None
                if decision.withheld
                else await self._placement(key, decision, candidates, request, current)
            )
            step = outcome(decision, current, snapshots)
            account(step, self.in_flight, request, now)
            target = step.target
        if placement is not None and await self._placed(key, workload, record, placement):
            return "released"
        if step.action is Action.KEEP:
            self.queue.add_after(key, self.config.resync_seconds)
            return "kept: no active candidate"
        if step.action is Action.WITHHELD:
            await self._withhold(key, workload, record, decision)
            self._retry_with_backoff(key, "decision withheld")
            return "withheld"
        message = summarize(decision)
        if step.action is Action.WRITE:

            def roll_back() -> None:
                """The write did not land: the ledger goes back to the standing nomination."""
                if current:
                    self.in_flight.record(current, queued_workload(request), now)
                else:
                    self.in_flight.forget(key)
                self._publish_in_flight()

            try:
                written = await self._write_or_remember(
                    workload, record, Unconfirmed(target, decision.algorithm, message)
                )
            except WriteFailed as error:
                # An answer that refused the write: it did not land, and what it nominated must
                # not stay counted as in-flight capacity (phantom usage) until the entry
                # expires. Without an answer (status 0) or with a 504 (the server may still
                # apply it) it may have landed: the entry stays for _confirm_landed.
                if error.status not in (0, 504):
                    roll_back()
                raise
            if not written:
                roll_back()
                self.queue.add(key)  # re-read and decide again on fresh data
                return "race"
            self._written(workload, record, target, now, decision.algorithm)
            self._predicted(record, decision, target, now)
            if placement is not None:
                # The echo of this write is not reconciled (expectations): index the workers
                # whose reachability can change the new nomination now, as its reconcile would.
                self.outage.index(key, placement.workers | frozenset(target))
        # One Event per nomination written, and one per change of the reason nothing is
        # nominated; a decision that keeps the current nomination (its message counts the
        # patience down) records none, so a waiting workload does not accumulate Events.
        if target != current or not target:
            self._nomination_event(workload, record, target, message)
        self.queue.add_after(
            key, step.follow_up if step.follow_up is not None else self.config.resync_seconds
        )
        return "nominated" if step.action is Action.WRITE else "unchanged"

    def _retry_with_backoff(self, key: str, why: str) -> None:
        """Decide ``key`` again after the work queue's exponential backoff of its failures
        (bounded by the queue's maximum delay, and never later than ``resync_seconds``), not
        at the resync: a hung or failing plugin is skipped or answers again soon. The next
        decision that succeeds resets it."""
        self._retrying.add(key)
        delay = self.queue.add_rate_limited(key)
        if delay > self.config.resync_seconds:
            delay = self.config.resync_seconds
            self.queue.add_after(key, delay)  # the earlier deadline wins
        log.info(
            "workload %s: %s; deciding again in %.2fs (attempt %d)",
            key,
            why,
            delay,
            self.queue.failures(key),
            extra={"workload": key},
        )

    def _holding_copy(
        self, candidates: Sequence[Candidate], namespace: str, name: str, record: Record
    ) -> str | None:
        """The connected candidate whose copy of this Workload already holds quota there, if
        any: Admitted first, then QuotaReserved, earliest first, then config order.

        Kueue makes the first cluster that admits a copy the winner (C28) and sets
        ``clusterName`` to it, which its webhook allows only when that cluster is in the
        nomination (C18). Moving the nomination away from such a cluster would leave the
        workload unadmittable, so the dispatcher keeps it (or puts it back).

        A copy being evicted (``Evicted`` True: the worker preempted it and is releasing its
        quota, which real Kueue shows for a second or more while the Job's pods stop) holds
        nothing: the worker's next write clears both conditions, while the manager may already
        have reset the Workload and reserved it again (C26, C38). Putting that worker back then
        would keep the old copy, to be admitted there again behind the manager's back; it is a
        leftover instead (:meth:`_leftover`; seen on real Kueue v0.19.2 in the seeded mix, C92).
        So is a copy Kueue reported evicted before this dispatcher's mirror shows it
        (:meth:`_note_copy_evicted`; a nomination written back that way failed CI at 154127d).
        """
        self._forget_evicted_copies(record, namespace, name)
        best: tuple[int, float, int, str] | None = None
        for candidate, copy in self._copies(candidates, namespace, name):
            if condition_status(copy, "Evicted") == "True" or candidate.name in (
                record.copies_evicted
            ):
                continue
            for rank, kind in enumerate(("Admitted", "QuotaReserved")):
                if condition_status(copy, kind) == "True":
                    since = _transition_time(copy, kind) or 0.0
                    entry = (rank, since, candidate.order, candidate.name)
                    best = entry if best is None or entry < best else best
                    break
        return best[3] if best is not None else None

    def _forget_evicted_copies(self, record: Record, namespace: str, name: str) -> None:
        """Drop the evicted copies (:meth:`_note_copy_evicted`) the mirror of their worker now
        shows released, gone or replaced by a later copy, and those of removed workers."""
        for cluster, created in list(record.copies_evicted.items()):
            copy = self._mirrored_copy(cluster, namespace, name)
            if copy is None or not _holds(copy) or _created(copy) != created:
                del record.copies_evicted[cluster]

    def _leftover(self, candidates: Sequence[Candidate], namespace: str, name: str) -> list[str]:
        """The connected candidates that still hold a copy of this Workload (C32).

        Called only for a workload nominated nowhere and holding quota on no worker. Kueue
        creates copies only on nominated clusters, so such a copy is left from an earlier
        attempt: typically the manager was evicted and requeued after a worker evicted (e.g.
        preempted) the copy (C26), and the evicted copy is still queued on that worker. Kueue
        removes every copy on a cluster that is not nominated at its next reconcile of the
        workload (C31/C32), or while the manager's quota is released (C24). Nominating that
        worker before then keeps the old copy, and with it the worker Job Kueue created at
        the first admission: when the worker admits the old copy again, that Job runs at once,
        and a short one finishes before Kueue's next reconcile sees the copy admitted, so the
        manager Workload ends ``Finished`` with no ``clusterName`` (C25 finishes it from a
        finished copy whatever the check state; seen on real Kueue v0.19.2 in the seeded mix).
        """
        return [candidate.name for candidate, _ in self._copies(candidates, namespace, name)]

    def _copies(
        self, candidates: Sequence[Candidate], namespace: str, name: str
    ) -> Iterator[tuple[Candidate, Mapping[str, Any]]]:
        """The ``candidates`` (of the workload's check) whose mirror is usable (connected, or
        stale within the grace) and have a copy of this Workload, with the copy as their mirror
        shows it. A same-named Workload without our origin label is not a copy (C23)."""
        for candidate in candidates:
            worker = candidate.worker
            if (
                worker is None
                or worker.mirror is None
                # (an active candidate's mirror is usable: its activeness includes that)
                or (not candidate.active and not self.registry.mirror_usable(worker.name))
            ):
                continue
            copy = worker.mirror.cache("workloads").get(name, namespace)
            if copy is not None and is_copy(copy, self.config.origin):
                yield candidate, copy

    async def _wait_for_leftover(
        self,
        key: str,
        workload: Mapping[str, Any],
        record: Record,
        candidates: Sequence[Candidate],
        current: tuple[str, ...],
        now: float,
    ) -> bool:
        """Whether to write no nomination yet because a copy from an earlier attempt is still
        on a worker (see :meth:`_leftover`). Its removal on the worker queues the workload
        again; ``leftover_wait_seconds`` bounds the wait (a worker Kueue does not reach keeps
        its copy until its garbage collector runs)."""
        namespace, _, name = key.partition("/")
        leftover = self._leftover(candidates, namespace, name) if not current else []
        if not leftover:
            record.leftover_since = None
            return False
        if record.leftover_since is None:
            record.leftover_since = now
        waited = now - record.leftover_since
        if waited >= self.config.leftover_wait_seconds:
            return False
        message = (
            f"not nominated yet: a copy from an earlier attempt is still on "
            f"{', '.join(leftover)}; Kueue removes it from a worker that is not nominated"
        )
        if self._event_once(workload, record, "WaitingForCopyRemoval", message, "Normal"):
            log.info("workload %s: %s", key, message, extra={"workload": key})
        self.queue.add_after(key, self.config.leftover_wait_seconds - waited)
        return True

    async def _keep_holder(
        self,
        key: str,
        workload: Mapping[str, Any],
        record: Record,
        current: tuple[str, ...],
        holder: str,
        now: float,
    ) -> str:
        """A copy on ``holder`` holds quota: keep a nomination that includes it, or write
        ``[holder]`` back (see :meth:`_holding_copy`); no decision is made meanwhile."""
        follow_up = self.config.resync_seconds
        if holder in current:
            self.queue.add_after(key, follow_up)
            return "kept: a copy holds quota"
        async with self._decision_lock:
            self.in_flight.forget(key)  # the copy's quota shows in the worker's own usage
        target = (holder,)
        message = (
            f"nominated [{holder}]: its copy already holds quota there and Kueue admits the "
            f"first such copy (previous nomination [{', '.join(current) or 'none'}])"
        )
        landing = Unconfirmed(target, HOLDER_ALGORITHM, message)
        if not await self._write_or_remember(workload, record, landing):
            self.queue.add(key)
            return "race"
        self._written(workload, record, target, now, HOLDER_ALGORITHM)
        log.info("workload %s: %s", key, message, extra={"workload": key})
        record.event_message = message
        self._event(workload, "Nominated", message, "Normal")
        self.queue.add_after(key, follow_up)
        return "nominated"

    async def _withhold(
        self, key: str, workload: Mapping[str, Any], record: Record, decision: Decision
    ) -> None:
        """A fail-closed plugin's filter failed: nothing is written (the standing nomination,
        if any, stays). Logged and recorded as a Warning Event once per distinct reason."""
        message = f"decision withheld: {decision.withheld}"[:1024]
        if self._event_once(workload, record, "DecisionWithheld", message, "Warning"):
            log.warning("workload %s: %s", key, message, extra={"workload": key})
        else:
            log.debug("workload %s: %s", key, message, extra={"workload": key})

    async def _write_or_remember(
        self, workload: Mapping[str, Any], record: Record, landing: Unconfirmed
    ) -> bool:
        """:meth:`_write` ``landing.target``; when no answer comes back (a timeout, a cut
        connection) the write may still have been applied, so it is remembered for
        :meth:`_confirm_landed` before the error propagates (the key is retried). A failure
        propagates as :class:`WriteFailed` (counted as a ``write`` error)."""
        try:
            return await self.writer.write(workload, landing.target)
        except ApiError as error:
            if isinstance(error, ApiUnreachable):
                record.unconfirmed = landing
            raise WriteFailed(error) from error

    async def _confirm_landed(self, key: str, workload: Mapping[str, Any], record: Record) -> None:
        """Finish the bookkeeping of a write whose answer was lost once the API shows that it
        landed: the Workload carries that nomination, or Kueue admitted it on a cluster only
        that write nominated (C18 allows ``clusterName`` only from the nomination, C28 then
        clears the nomination). Without this, a lost answer would lose the write's Event, its
        counted nomination and the time-to-admission sample, because the retry finds nothing
        left to write."""
        landing = record.unconfirmed
        assert landing is not None
        status = workload.get("status") or {}
        current = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
        cluster = str(status.get("clusterName") or "")
        shown = current == landing.target != record.nominated
        admitted = bool(cluster) and cluster in landing.target and cluster not in record.nominated
        if not (shown or admitted):
            return  # not visible (yet), or it did not land
        log.info(
            "workload %s: nominated %s (the answer to that write was lost; it was applied)",
            key,
            list(landing.target),
            extra={"workload": key, "clusters": list(landing.target)},
        )
        self._written(workload, record, landing.target, self._now(), landing.algorithm)
        self._nomination_event(workload, record, landing.target, landing.message)

    def _written(
        self,
        workload: Mapping[str, Any],
        record: Record,
        target: tuple[str, ...],
        now: float,
        algorithm: str,
    ) -> None:
        """Bookkeeping after a nomination ``target`` was written: the record's clocks, the
        nominations counter (labelled with ``algorithm``) and the in-flight gauge."""
        record.nominated, record.nominated_at = target, now
        record.unconfirmed = None
        if target and record.first_nominated_at is None:
            record.first_nominated_at = now
        if self.metrics is not None and target:
            admission = (workload.get("status") or {}).get("admission") or {}
            self.metrics.nominated(
                target, cluster_queue=str(admission.get("clusterQueue") or ""), algorithm=algorithm
            )
        self._publish_in_flight()

    def _predicted(
        self, record: Record, decision: Decision, target: tuple[str, ...], now: float
    ) -> None:
        """Remember the start predicted on each nominated cluster where the workload has to
        wait (compared with its admission later), and publish the predicted wait."""
        record.predicted = {
            cluster: at
            for cluster, at in decision.predictions.items()
            if cluster in target and at - now >= 1.0
        }
        if self.metrics is not None:
            for cluster, at in record.predicted.items():
                self.metrics.predicted_wait(cluster, at - now)

    def _nominated_at(
        self, workload: Mapping[str, Any], current: tuple[str, ...], now: float
    ) -> float | None:
        """The clock of a nomination this process did not write: when our field manager last
        changed it (:func:`nomination_time`, never later than ``now``), else ``now``; None
        without a nomination."""
        if not current:
            return None
        recovered = nomination_time(workload, self.config.field_manager)
        return now if recovered is None else min(recovered, now)

    def _first_sync_pending(self, candidates: Sequence[Candidate], now: float) -> float | None:
        """Seconds of grace left while a candidate worker has not settled yet, else None."""
        if self._started is None:
            self._started = now
        left = self._started + self.config.sync_grace_seconds - now
        if left <= 0:
            return None
        if not self.registry.synced:
            return left
        clusters = self.registry.manager.cache("multikueueclusters")
        for candidate in candidates:
            if clusters.get(candidate.name) is None:
                continue  # no MultiKueueCluster: nothing will connect
            worker = self.registry.workers.get(candidate.name)
            if worker is None or not worker.settled:
                return left
        return None

    def _inputs(
        self,
        workload: Mapping[str, Any],
        check: str,
        record: Record,
        current: tuple[str, ...],
        now: float,
        candidates: list[Candidate] | None = None,
    ) -> tuple[list[Candidate], DispatchRequest, list[ClusterSnapshot]]:
        """The candidates (read now unless given), the request and the candidate snapshots of
        one decision (from the mirrors only)."""
        if candidates is None:
            candidates, _ = self.registry.candidates(check)
        request = request_from_workload(
            workload,
            now=now,
            queued_at=_transition_time(workload, "QuotaReserved"),
            nominated_at=record.nominated_at,
            label_key=self.config.gpu_label_key,
            resource_pattern=self.config.gpu_resource_pattern,
        )
        if current:
            # After a restart the ledger is empty: re-seed it from the nomination in the API.
            self.in_flight.record(current, queued_workload(request), record.nominated_at or now)
        snapshots = [
            self._snapshots.get(
                candidate,
                self._index(candidate.name) if candidate.active else None,
                request,
                self.in_flight,
                label_key=self.config.gpu_label_key,
                resource_pattern=self.config.gpu_resource_pattern,
            )
            for candidate in candidates
        ]
        taken = self._name_taken(request, workload, candidates)
        if taken:
            request = dataclasses.replace(request, name_taken=frozen_map(taken))
        lost, _ = self._copies_lost(record, now)
        if lost:
            request = dataclasses.replace(request, copy_lost=frozen_map(lost))
        return candidates, request, snapshots

    def _name_taken(
        self, request: DispatchRequest, workload: Mapping[str, Any], candidates: list[Candidate]
    ) -> dict[str, str]:
        """The same-name guard: candidates holding a Workload or Job of this workload's name
        that is not a copy of ours (C28, C33), with what holds it. A set lookup per candidate
        whose mirror is indexed (every active one, after its snapshot); the workload's own
        copies do not count."""
        job = owner_job(workload)
        taken: dict[str, str] = {}
        for candidate in candidates:
            index = self.indexes.get(candidate.name)
            if index is None or index.mirror is None:
                continue
            why = index.name_taken(request.namespace, request.name, job)
            if why:
                taken[candidate.name] = why
        return taken

    async def evaluate(self, key: str) -> tuple[str, Decision | None]:
        """A fresh decision for ``key`` without writing anything (``explain``): the
        eligibility verdict and, when eligible, the decision."""
        namespace, _, name = key.partition("/")
        workload = self.registry.manager.cache("workloads").get(name, namespace)
        if workload is None:
            return "not found in the manager cluster", None
        verdict = eligibility(workload, self.registry.multikueue_checks())
        if not verdict.eligible:
            return verdict.reason, None
        assert verdict.check is not None
        current = tuple(
            str(n) for n in (workload.get("status") or {}).get("nominatedClusterNames") or ()
        )
        record = self.records.get(key) or Record(
            nominated=current, nominated_at=self._nominated_at(workload, current, self._now())
        )
        _, request, snapshots = self._inputs(workload, verdict.check, record, current, self._now())
        return verdict.reason, await self._decide(key, request, snapshots)

    # --- unplaceable workloads (a worker outage) -------------------------------------------------

    async def _placement(
        self,
        key: str,
        decision: Decision,
        candidates: Sequence[Candidate],
        request: DispatchRequest,
        current: tuple[str, ...],
    ) -> Placement:
        """Where the workload could go (:class:`~dispatcher.controller.outage.Placement`).

        The decision's kept clusters are the reachable eligible workers (its ``active`` filter
        dropped the others). Only when there is none are the unreachable candidates judged: the
        pipeline runs once more over our last mirror of each as if it were reachable; one never
        mirrored cannot be judged and counts as possibly eligible. A candidate without a
        MultiKueueCluster is a configuration problem, not an outage, and counts for nothing."""
        if decision.kept:
            return Placement(decision.kept, nominated=current)
        known: dict[str, Candidate] = {}
        unknown: list[str] = []
        for candidate in candidates:
            if candidate.active or candidate.worker is None:
                continue
            mirror = candidate.worker.mirror
            if mirror is not None and mirror.listed:
                known[candidate.name] = candidate
            else:
                unknown.append(candidate.name)
        unreachable: tuple[str, ...] = ()
        if known:
            as_if = [
                self._snapshots.get(
                    dataclasses.replace(known[c.name], active=True, reason=""),
                    self._index(c.name),
                    request,
                    self.in_flight,
                    label_key=self.config.gpu_label_key,
                    resource_pattern=self.config.gpu_resource_pattern,
                )
                for c in candidates
                if c.name in known
            ]
            judged = await self._decide(key, request, as_if)
            if judged is not None and not judged.withheld:
                unreachable = tuple(n for n in judged.kept if n in known)
            else:
                unreachable = tuple(known)  # cannot judge them: they may be eligible
        return Placement((), unreachable, tuple(unknown), current)

    async def _placed(
        self, key: str, workload: Mapping[str, Any], record: Record, placement: Placement
    ) -> bool:
        """Record where a quota-holding workload could go; for an unplaceable one, its holder
        entry (gauges), its ``Unplaceable`` Event (once per change) and, with the release
        policy on, its release when due. Whether it was released (the reconcile ends)."""
        self.outage.index(key, placement.workers)
        self.outage.starved.pop(key, None)  # it holds quota now
        self.outage.pending_quota.pop(key, None)
        record.placement = placement
        if not placement.unplaceable:
            self._no_longer_unplaceable(key, record)
            return False
        now = self._now()
        holder = self.outage.holders.get(key)
        if holder is None or holder.waiting_for != placement.waiting_for:
            holder = self._holder(
                key, workload, placement, holder.since if holder is not None else now
            )
            self.outage.holders[key] = holder
            self._publish_outage()
            self._requeue_starved(holder)
        message = (
            f"holds quota on the manager ({_quota_text(holder.usage)} in ClusterQueue "
            f"{holder.cluster_queue}) but no reachable worker can run it; eligible workers "
            f"unreachable: {placement.describe()}"
        )
        if message != record.outage_message:
            record.outage_message = message
            log.warning("workload %s %s", key, message, extra={"workload": key})
            self._event(workload, "Unplaceable", message, "Warning")
        if not self.config.unplaceable_release:
            return False
        state = released_state(workload)
        left = release_due(state, holder.since, now, self.config.unplaceable_patience_seconds)
        if left > 0:
            self.queue.add_after(key, left)
            return False
        return await self._release(key, workload, holder, state.releases, now)

    def _holder(
        self, key: str, workload: Mapping[str, Any], placement: Placement, since: float
    ) -> Holder:
        admission = (workload.get("status") or {}).get("admission") or {}
        cluster_queue = str(admission.get("clusterQueue") or "")
        return Holder(
            key,
            cluster_queue,
            self._cohort(cluster_queue),
            admission_usage(admission),
            placement.waiting_for,
            since,
            _created(workload),
        )

    async def _placement_now(
        self, key: str, workload: Mapping[str, Any], check: str
    ) -> Placement | None:
        """A fresh placement of a quota-holding workload (``explain``); None when the pipeline
        gave no usable decision."""
        current = tuple(
            str(n) for n in (workload.get("status") or {}).get("nominatedClusterNames") or ()
        )
        record = Record(nominated=current, nominated_at=self._now() if current else None)
        candidates, request, snapshots = self._inputs(workload, check, record, current, self._now())
        decision = await self._decide(key, request, snapshots)
        if decision is None or decision.withheld:
            return None
        return await self._placement(key, decision, candidates, request, current)

    async def explain_outage(self, key: str) -> list[str]:
        """``explain``'s lines on a worker outage: whether a quota-holding workload is
        unplaceable (and which unreachable workers could run it), whether we released it, and
        for one pending with "insufficient unused quota" the unplaceable workloads holding
        that quota in its ClusterQueue or cohort (judged now, from the mirrors)."""
        namespace, _, name = key.partition("/")
        cache = self.registry.manager.cache("workloads")
        workload = cache.get(name, namespace)
        if workload is None:
            return []
        lines = []
        state = released_state(workload)
        if (workload.get("spec") or {}).get("active") is False and state.released_at is not None:
            lines.append(
                f"released by the dispatcher (release {state.releases}, waiting for "
                f"{', '.join(state.waiting_for) or 'an eligible worker'}): it reactivates it "
                f"when an eligible worker is reachable"
            )
            return lines
        checks = self.registry.multikueue_checks()
        verdict = eligibility(workload, checks)
        if verdict.eligible and verdict.check is not None:
            placement = await self._placement_now(key, workload, verdict.check)
            if placement is not None and placement.unplaceable:
                holder = self._holder(key, workload, placement, self._now())
                lines.append(
                    f"unplaceable: holds quota on the manager ({_quota_text(holder.usage)} in "
                    f"ClusterQueue {holder.cluster_queue}) and no reachable worker can run it; "
                    f"eligible workers unreachable: {placement.describe()}"
                )
            elif placement is not None and placement.reachable:
                lines.append(
                    f"placeable: reachable eligible workers {', '.join(placement.reachable)}"
                )
            return lines
        pairs = starved_on(workload)
        if not pairs:
            return lines
        cluster_queue = self._queue_of(workload)
        cohort = self._cohort(cluster_queue)
        cohorts = {
            str(cq["metadata"]["name"]): self._cohort(str(cq["metadata"]["name"]))
            for cq in self.registry.manager.cache("clusterqueues").items()
        }
        for other in cache.items():
            admission = (other.get("status") or {}).get("admission") or {}
            held_in = str(admission.get("clusterQueue") or "")
            if not held_in or not (
                held_in == cluster_queue or (cohort and cohorts.get(held_in) == cohort)
            ):
                continue
            other_key = key_text(other)
            judged = eligibility(other, checks)
            if other_key in self.outage.holders or not judged.eligible or judged.check is None:
                continue
            placement = await self._placement_now(other_key, other, judged.check)
            if placement is not None and placement.unplaceable:
                self.outage.holders[other_key] = self._holder(
                    other_key, other, placement, self._now()
                )
        found_in, holders = self.blocking_holders(workload)
        wanted = ", ".join(f"{resource} in flavor {flavor}" for flavor, resource in pairs)
        if holders:
            lines.append(starved_message(found_in, holders))
        elif cluster_queue:
            lines.append(
                f"pending on the manager (insufficient unused quota for {wanted} in "
                f"ClusterQueue {cluster_queue}); no unplaceable workload holds it"
            )
        else:
            queue = (workload.get("spec") or {}).get("queueName")
            lines.append(
                f"pending on the manager (insufficient unused quota for {wanted}); its "
                f"ClusterQueue is unknown (no LocalQueue {queue!r} in the mirror)"
            )
        return lines

    def _no_longer_unplaceable(self, key: str, record: Record) -> None:
        holder = self.outage.holders.pop(key, None)
        record.outage_message = ""
        if holder is not None:
            log.info("workload %s is no longer unplaceable", key, extra={"workload": key})
            self._publish_outage()
            self._requeue_starved(holder)

    async def _outside_dispatch(
        self, key: str, workload: Mapping[str, Any], record: Record
    ) -> None:
        """A workload the dispatcher does not nominate for: no longer a holder; a released one
        is kept for the restorer; a pending one may be starved behind unplaceable holders."""
        self.outage.index(key, ())
        self._no_longer_unplaceable(key, record)
        record.placement = None
        state = released_state(workload)
        if (workload.get("spec") or {}).get("active") is False and state.released_at is not None:
            self._released[key] = str((workload.get("metadata") or {}).get("creationTimestamp"))
            self.outage.starved.pop(key, None)
            self.outage.pending_quota.pop(key, None)
            self.outage.index(key, state.waiting_for)
            self._restore_wake.set()
            return
        self._released.pop(key, None)
        await self._check_starved(key, workload, record)

    def _cohort(self, cluster_queue: str) -> str:
        found = self.registry.manager.cache("clusterqueues").get(cluster_queue) or {}
        spec = found.get("spec") or {}
        return str(spec.get("cohortName") or spec.get("cohort") or "")

    def _queue_of(self, workload: Mapping[str, Any]) -> str:
        """The manager ClusterQueue behind a workload's LocalQueue ('' when unknown)."""
        meta = workload.get("metadata") or {}
        queue = str((workload.get("spec") or {}).get("queueName") or "")
        if not queue:
            return ""
        local = self.registry.manager.cache("localqueues").get(queue, str(meta.get("namespace")))
        return str(((local or {}).get("spec") or {}).get("clusterQueue") or "")

    def blocking_holders(self, workload: Mapping[str, Any]) -> tuple[str, list[Holder]]:
        """For a workload pending on the manager with "insufficient unused quota": its
        ClusterQueue and the unplaceable holders in it or its cohort that hold a flavor and
        resource it lacks, oldest first (empty when none)."""
        pairs = starved_on(workload)
        if not pairs or not self.outage.holders:
            return "", []
        cluster_queue = self._queue_of(workload)
        if not cluster_queue:
            return "", []
        holders = self.outage.holders_for(cluster_queue, self._cohort(cluster_queue))
        return cluster_queue, [h for h in holders if any(p in h.usage for p in pairs)]

    async def _check_starved(self, key: str, workload: Mapping[str, Any], record: Record) -> None:
        """A ``BlockedByUnplaceable`` Event (once per change) on a workload waiting for manager
        quota that unplaceable workloads hold."""
        pairs = starved_on(workload)
        queued = not pairs and untried(workload)
        cluster_queue = self._queue_of(workload) if pairs or queued else ""
        if cluster_queue:
            self.outage.pending_quota[key] = cluster_queue
        else:
            self.outage.pending_quota.pop(key, None)
        if queued and cluster_queue:
            holders = self._holders_ahead(cluster_queue, requested_resources(workload))
        else:
            _, holders = self.blocking_holders(workload) if cluster_queue else ("", [])
        if not holders:
            self.outage.starved.pop(key, None)
            record.starved_message = ""
            return
        newly = key not in self.outage.starved
        self.outage.starved[key] = cluster_queue
        if newly and not queued:
            # Workloads queued behind this one that Kueue has not tried yet wait for the same.
            self._requeue_pending(cluster_queue, self._cohort(cluster_queue))
        message = starved_message(cluster_queue, holders)
        if queued:
            message = (
                message + "; Kueue has not tried it yet: it is queued behind workloads short of "
                "the same quota"
            )[:1024]
        if message != record.starved_message:
            record.starved_message = message
            log.warning("workload %s %s", key, message, extra={"workload": key})
            self._event(workload, "BlockedByUnplaceable", message, "Warning")

    def _holders_ahead(self, cluster_queue: str, resources: set[str]) -> list[Holder]:
        """For a workload Kueue has not tried yet: the unplaceable holders of a flavor and
        resource it requests that a starved workload of its ClusterQueue (or cohort) is short
        of (Kueue reported it "insufficient unused quota")."""
        cohort = self._cohort(cluster_queue)
        cohorts = self._cohorts()
        cache = self.registry.manager.cache("workloads")
        short: set[tuple[str, str]] = set()
        for key, cq in self.outage.starved.items():
            if not (cq == cluster_queue or (cohort and cohorts.get(cq, "") == cohort)):
                continue
            namespace, _, name = key.partition("/")
            found = cache.get(name, namespace)
            if found is not None:
                short.update(p for p in starved_on(found) if p[1] in resources)
        if not short:
            return []
        holders = self.outage.holders_for(cluster_queue, cohort)
        return [h for h in holders if any(p in h.usage for p in short)]

    def _cohorts(self) -> dict[str, str]:
        return {
            str(cq["metadata"]["name"]): self._cohort(str(cq["metadata"]["name"]))
            for cq in self.registry.manager.cache("clusterqueues").items()
        }

    def _requeue_pending(self, cluster_queue: str, cohort: str) -> None:
        for key in self.outage.pending_in(cluster_queue, cohort, self._cohorts()):
            self.queue.add(key)

    def _requeue_starved(self, holder: Holder) -> None:
        """The holders of a ClusterQueue (or cohort) changed: look again at the workloads
        pending for quota there (their Event names the holders; one pending before the holder
        appeared is starved by it now)."""
        if self.outage.pending_quota:
            self._requeue_pending(holder.cluster_queue, holder.cohort)

    def _publish_outage(self) -> None:
        if self.metrics is not None:
            self.metrics.set_unplaceable(self.outage.quota(), self.outage.counts())

    async def _release(
        self, key: str, workload: Mapping[str, Any], holder: Holder, releases: int, now: float
    ) -> bool:
        """Deactivate an unplaceable workload (``spec.active: false``) so that Kueue evicts it
        and releases its manager quota; annotated so that only such workloads are restored.
        Conditioned on the resourceVersion the placement was judged on."""
        meta = workload["metadata"]
        body = {
            "metadata": {
                "resourceVersion": str(meta.get("resourceVersion", "")),
                "annotations": {
                    RELEASED_AT: format_time(now),
                    RELEASED_FOR: ",".join(holder.waiting_for),
                    RELEASES: str(releases + 1),
                },
            },
            "spec": {"active": False},
        }
        try:
            await self.writer.merge_patch_workload(meta, body)
        except ApiError as error:
            if error.status == 409:
                self.queue.add(key)  # changed meanwhile: judge it again
                return True
            raise WriteFailed(error) from error
        self.releases += 1
        if self.metrics is not None:
            self.metrics.unplaceable_action("release", cluster_queue=holder.cluster_queue)
        waited = now - holder.since
        message = (
            f"released its manager quota ({_quota_text(holder.usage)} in ClusterQueue "
            f"{holder.cluster_queue}): deactivated (spec.active=false) after {waited:.0f}s "
            f"unplaceable, waiting for {', '.join(holder.waiting_for)}; the dispatcher "
            f"reactivates it when an eligible worker is reachable (release {releases + 1})"
        )
        log.warning("workload %s %s", key, message, extra={"workload": key})
        self._event(workload, "QuotaReleased", message, "Warning")
        return True

    async def _restorer(self) -> None:
        """Reactivate released workloads once an eligible worker is reachable, oldest first
        (woken by a worker's reachability change and by a released workload's reconcile)."""
        while True:
            await self._restore_wake.wait()
            try:
                await self.restore_ready()
            except Exception:
                log.exception("restoring released workloads failed")
                if self.metrics is not None:
                    self.metrics.error("unexpected")

    async def restore_ready(self) -> list[str]:
        """Restore every released workload that an eligible worker can run again, in Kueue's
        queue order (creationTimestamp, then UID, C94; then name); the keys restored."""
        while True:
            self._restore_wake = anyio.Event()
            ready = await self._ready_to_restore()
            if not self._restore_wake.is_set():
                break
            # Something changed while they were judged (a worker came back): judge them all
            # again, so the order covers every workload restorable now.
        restored = []
        for _, key, held, back in sorted(
            ready, key=lambda r: (r[0], str((r[2].get("metadata") or {}).get("uid", "")), r[1])
        ):
            if await self._restore(key, held, back):
                restored.append(key)
        return restored

    async def _ready_to_restore(
        self,
    ) -> list[tuple[str, str, Mapping[str, Any], tuple[str, ...]]]:
        cache = self.registry.manager.cache("workloads")
        ready: list[tuple[str, str, Mapping[str, Any], tuple[str, ...]]] = []
        for key, created in list(self._released.items()):
            namespace, _, name = key.partition("/")
            workload = cache.get(name, namespace)
            state = released_state(workload) if workload is not None else None
            if (
                workload is None
                or state is None
                or state.released_at is None
                or (workload.get("spec") or {}).get("active") is not False
            ):
                self._released.pop(key, None)
                continue
            reachable = await self._restorable(key, workload, state.waiting_for)
            if reachable:
                ready.append((created, key, workload, reachable))
        return ready

    async def _restorable(
        self, key: str, workload: Mapping[str, Any], waiting_for: tuple[str, ...]
    ) -> tuple[str, ...]:
        """The reachable workers that make a released workload placeable again: one it waited
        for, else any the pipeline keeps now; empty when none is."""
        check, _ = multikueue_check_state(workload, self.registry.multikueue_checks())
        if check is None:
            return tuple(
                n
                for n in waiting_for
                if (v := self.registry.activeness(n)) is not None and v.active
            )
        candidates, _ = self.registry.candidates(check)
        back = tuple(c.name for c in candidates if c.active and c.name in waiting_for)
        if back:
            return back
        if not any(c.active for c in candidates):
            return ()
        try:
            _, request, snapshots = self._inputs(workload, check, Record(), (), self._now())
        except InvalidField:
            return ()
        decision = await self._decide(key, request, snapshots)
        return () if decision is None or decision.withheld else decision.kept

    async def _restore(
        self, key: str, workload: Mapping[str, Any], reachable: tuple[str, ...]
    ) -> bool:
        meta = workload["metadata"]
        now = self._now()
        body = {
            "metadata": {
                "resourceVersion": str(meta.get("resourceVersion", "")),
                "annotations": {RELEASED_AT: None, RESTORED_AT: format_time(now)},
            },
            "spec": {"active": True},
        }
        try:
            await self.writer.merge_patch_workload(meta, body)
        except ApiError as error:
            # Its next change (or the resync) reconciles it and wakes the restorer again.
            log.warning("could not restore workload %s: %s", key, error, extra={"workload": key})
            if self.metrics is not None:
                self.metrics.error("write_conflict" if error.status == 409 else "write")
            self.queue.add_after(key, 1.0 if error.status == 409 else self.config.resync_seconds)
            return False
        self._released.pop(key, None)
        self.restores += 1
        if self.metrics is not None:
            cluster_queue = str(
                ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or ""
            ) or self._queue_of(workload)
            self.metrics.unplaceable_action("restore", cluster_queue=cluster_queue)
        message = (
            f"reactivated (spec.active=true): eligible worker {', '.join(reachable)} is "
            f"reachable again; Kueue queues it again in creation order"
        )
        log.info("workload %s %s", key, message, extra={"workload": key})
        self._event(workload, "QuotaRestored", message, "Normal")
        return True

    def _not_eligible(self, key: str, workload: Mapping[str, Any], record: Record) -> None:
        status = workload.get("status") or {}
        cluster = status.get("clusterName")
        if cluster and not record.admission_reported and record.first_nominated_at is not None:
            # Time from quota reservation on the manager (when the workload started waiting
            # for a worker) to admission on a worker (the metric's documented meaning).
            record.admission_reported = True
            self.stuck.admission_recorded(str(cluster), self._now())
            admitted = _transition_time(workload, "Admitted") or self._now()
            reserved = _transition_time(workload, "QuotaReserved") or record.first_nominated_at
            if self.metrics is not None:
                cq = str((status.get("admission") or {}).get("clusterQueue") or "")
                self.metrics.observe_time_to_admission(
                    max(0.0, admitted - reserved),
                    cluster_queue=cq,
                    cluster=str(cluster),
                )
            predicted = record.predicted.get(str(cluster))
            if predicted is not None:
                log.info(
                    "workload %s: admitted on %s %.0fs %s its predicted start",
                    key,
                    cluster,
                    abs(admitted - predicted),
                    "after" if admitted >= predicted else "before",
                    extra={"workload": key, "clusters": [str(cluster)]},
                )
                if self.metrics is not None:
                    self.metrics.observe_predicted_start_error(
                        admitted - predicted, cluster=str(cluster)
                    )
            record.predicted = {}
        if cluster and not record.gpu_checked and record.first_nominated_at is not None:
            self._verify_gpu_type(key, workload, record)
        if not cluster:
            record.first_nominated_at = None
            record.admission_reported = False
            record.gpu_checked = False
        self.in_flight.forget(key)
        record.nominated, record.nominated_at = (), None
        self._publish_in_flight()

    # --- verified GPU type (issue 18 item 4) ------------------------------------------------

    def gpu_type_check(self, workload: Mapping[str, Any]) -> GpuTypeCheck | None:
        """Compare the GPU flavor the worker assigned to an admitted workload (its copy's
        ``status.admission`` in our mirror of that worker) with the GPU types the workload
        requires or prefers. None when it is not admitted, its copy is not in the mirror (yet),
        or there is nothing to compare (no GPU flavor, no GPU type asked for)."""
        found = self._copy_admission(workload)
        return None if found is None else self._check_gpu_type(workload, *found)

    def _check_gpu_type(
        self, workload: Mapping[str, Any], cluster: str, admission: Mapping[str, Any]
    ) -> GpuTypeCheck | None:
        """:meth:`gpu_type_check` once the copy's admission on ``cluster`` was found."""
        index = self._index(cluster)
        if index is None:
            return None
        try:
            request = request_from_workload(
                workload,
                now=self._now(),
                label_key=self.config.gpu_label_key,
                resource_pattern=self.config.gpu_resource_pattern,
            )
        except InvalidField:
            return None
        mkc = self.registry.manager.cache("multikueueclusters").get(cluster) or {}
        claimed = cluster_gpu_types((), cluster_labels=(mkc.get("metadata") or {}).get("labels"))
        return check_gpu_type(
            cluster,
            admission,
            {flavor.name: flavor for flavor in index.flavors},
            required=request.required_gpu_types,
            preferred=request.preferred_gpu_types,
            claimed=claimed,
            label_key=self.config.gpu_label_key,
            resource_pattern=self.config.gpu_resource_pattern,
        )

    def _copy_admission(self, workload: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
        """The cluster an admitted workload runs on and its copy's ``status.admission`` there,
        from our mirror of that worker (None: not admitted, or not in the mirror yet)."""
        cluster = str((workload.get("status") or {}).get("clusterName") or "")
        meta = workload.get("metadata") or {}
        copy = self._mirrored_copy(
            cluster, str(meta.get("namespace", "")), str(meta.get("name", ""))
        )
        admission = ((copy or {}).get("status") or {}).get("admission")
        return (cluster, admission) if admission else None

    def _verify_gpu_type(self, key: str, workload: Mapping[str, Any], record: Record) -> None:
        """Once per admission: a GPU type mismatch is a Warning ``GPUTypeMismatch`` Event, a log
        line and ``multikueue_dispatcher_gpu_type_mismatches_total``. Until the copy's
        admission is in our mirror nothing is concluded (the copy's next event comes back)."""
        found = self._copy_admission(workload)
        if found is None:
            return
        record.gpu_checked = True
        check = self._check_gpu_type(workload, *found)
        if check is None or not check.mismatch:
            return
        cluster = found[0]
        log.warning("workload %s: %s", key, check.message, extra={"workload": key})
        if self.metrics is not None:
            self.metrics.gpu_type_mismatch(cluster=cluster, kind=check.mismatch)
        self._event(workload, "GPUTypeMismatch", check.message, "Warning")

    async def _decide(
        self, key: str, request: DispatchRequest, snapshots: list[ClusterSnapshot]
    ) -> Decision | None:
        """Run the pipeline in a worker thread with a deadline; a hung or failing plugin costs
        this one decision, never the loop (the thread is abandoned on timeout). A pipeline of
        built-in stages only runs on the loop (``ControllerConfig.inline_decisions``)."""
        try:
            if self.config.inline_decisions:
                self.inline_decisions += 1
                decision = self.decide(request, snapshots)
            else:
                with anyio.fail_after(self.config.decision_timeout_seconds):
                    decision = await anyio.to_thread.run_sync(
                        self.decide,
                        request,
                        snapshots,
                        abandon_on_cancel=True,
                        limiter=self._limiter,
                    )
        except TimeoutError:
            log.error(
                "workload %s: no decision within %.1fs (a plugin hangs?)",
                key,
                self.config.decision_timeout_seconds,
                extra={"workload": key},
            )
            if self.metrics is not None:
                self.metrics.error("decision")
            return None
        except Exception:
            log.exception("workload %s: the decision failed", key, extra={"workload": key})
            if self.metrics is not None:
                self.metrics.error("decision")
            return None
        if self.metrics is not None:
            for error in decision.errors:
                self.metrics.error("plugin")
                log.warning(
                    "workload %s: plugin stage %s (%s) failed: %s",
                    key,
                    error.stage,
                    error.source,
                    error.message,
                    extra={"workload": key, "plugin": error.source},
                )
        return decision

    def _observe_decision(
        self, workload: Mapping[str, Any], decision: Decision | None, started: float
    ) -> None:
        """Record a decision taken in a reconcile: its latency since ``started`` (before the
        snapshots were built), the clusters its filters dropped (by filter and reason code) and
        whether no cluster passed them. A decision that failed is counted as a ``decision``
        error instead; a withheld one (a fail-closed filter failed) filtered nothing."""
        if self.metrics is None or decision is None:
            return
        admission = (workload.get("status") or {}).get("admission") or {}
        cluster_queue = str(admission.get("clusterQueue") or "")
        self.metrics.observe_decision_latency(
            anyio.current_time() - started,
            cluster_queue=cluster_queue,
            algorithm=decision.algorithm,
        )
        if decision.withheld:
            return
        for verdict in decision.verdicts:
            if not verdict.kept and verdict.dropped_by:
                self.metrics.filtered_cluster(
                    plugin=verdict.dropped_by,
                    reason=verdict.reason_code or RejectionReason.OTHER,
                )
        if not decision.nominate and not any(verdict.kept for verdict in decision.verdicts):
            self.metrics.no_feasible_cluster(
                cluster_queue=cluster_queue, algorithm=decision.algorithm
            )

    def _publish_in_flight(self) -> None:
        """Set the in-flight gauge of the clusters whose ledger changed since the last call,
        and of workers never published yet (at 0): a write changes one or a few clusters'."""
        if self.metrics is None:
            return
        now = self._now()
        clusters = self.in_flight.changed() | (
            set(self.registry.workers) - self._in_flight_published
        )
        for cluster in clusters:
            self.metrics.set_in_flight(cluster, self.in_flight.count(cluster, now))
        self._in_flight_published |= clusters

    def publish_connection_states(self) -> None:
        """Export every worker's connection state as a metric (called on every change)."""
        if self.metrics is None:
            return
        phases = {
            "Connected": ConnectionState.CONNECTED,
            "Connecting": ConnectionState.CONNECTING,
            "Disconnected": ConnectionState.DISCONNECTED,
            "Unusable": ConnectionState.UNUSABLE,
        }
        states = self.registry.states()
        for name, state in states.items():
            self.metrics.set_connection_state(
                name, phases.get(state.phase, ConnectionState.DISCONNECTED)
            )
        for name in self._published_states - set(states):
            self.metrics.forget_cluster(name)  # its MultiKueueCluster was deleted
            self._in_flight_published.discard(name)
        self._published_states = set(states)

    def _event_once(
        self, workload: Mapping[str, Any], record: Record, reason: str, message: str, kind: str
    ) -> bool:
        """:meth:`_event` unless ``message`` is the workload's last Event message, durations
        aside (a workload decided again and again for the same reason does not accumulate
        Events, even when the reason counts how long a worker has been lost); whether it was
        recorded."""
        if _DURATION.sub("#s", message) == _DURATION.sub("#s", record.event_message):
            return False
        record.event_message = message
        self._event(workload, reason, message, kind)
        return True

    def _nomination_event(
        self, workload: Mapping[str, Any], record: Record, target: tuple[str, ...], message: str
    ) -> None:
        """The Event of a decision: ``Nominated`` for a nomination, a Warning ``NotNominated``
        when nothing is nominated (once per distinct message)."""
        if target:
            self._event_once(workload, record, "Nominated", message, "Normal")
        else:
            self._event_once(workload, record, "NotNominated", message, "Warning")

    def _event(self, workload: Mapping[str, Any], reason: str, message: str, kind: str) -> None:
        """A core/v1 Event on the Workload, queued for the background recorder (never awaited
        by a reconcile; :mod:`dispatcher.controller.events`)."""
        self.events.record(workload, reason, message, kind)
