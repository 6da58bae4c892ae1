"""The discrete-event simulation: Kueue's manager and workers, and one dispatcher, in virtual time.

What happens to one workload (contract points in brackets):

1. It **arrives** on the manager and waits for quota in the manager's ClusterQueue; a scheduling
   cycle (:func:`dispatcher.kueue.admission.plan_admissions`) reserves it, possibly preempting
   lower-priority workloads there.
2. The **dispatcher** nominates workers. Kueue's built-ins are modelled as Kueue runs them:
   ``all-at-once`` nominates every connected worker of the MultiKueueConfig at once (C56, C57);
   ``incremental`` appends ``step_size`` workers in config order every 5-minute round, without
   checking connectivity (C58–C61). A **pipeline** of plugin algorithms is run the way the manager
   process runs it: requests and snapshots built with :mod:`dispatcher.algorithms.building`,
   decisions through :meth:`dispatcher.plugins.PluginHost.decide`, in-flight capacity in an
   :class:`dispatcher.controller.inflight.InFlight` ledger, a follow-up after the decision's
   ``requeue_after`` (else the resync period).
3. After the nomination write, Kueue **creates copies** on the nominated connected workers and
   deletes copies on workers no longer nominated (C32).
4. Each worker's Kueue **admits** copies in scheduling cycles of the same admission model, with
   ``LowerPriority`` preemption as its ClusterQueue says (C72). A preempted copy goes back to its
   worker's queue; a preempted *winner* makes the manager evict and requeue the workload (C26,
   C38, C37).
5. The manager sees remote events after the **event batching** period (1 s, C20); the earliest
   admitted copy wins, the other copies are deleted and the nomination is cleared (C28, C36).
6. The job runs ``runSeconds`` on the winner, then quota is released on the worker and, one
   batching period later, on the manager.

A **fault** takes a worker down: it is disconnected (MultiKueueCluster ``Active=False``), admits
nothing, and what ran there is lost; the manager notices the lost winners after
``worker_lost_timeout_s`` (C29) and requeues them, releasing their manager quota then (real
Kueue holds it until the manager Job shows no active pods, C93: a simplification,
docs/simulator.md). The worker comes back empty. A workload that
was never admitted keeps its manager quota for as long as the outage lasts (Kueue releases quota
only for a workload admitted on a lost worker).

**Unplaceable workloads** (issue 17): a workload that holds manager quota, is not admitted on any
worker and has no reachable *eligible* worker (one the pipeline's filters keep, reachability
ignored) is unplaceable. With the dispatcher's opt-in policy (:class:`ReleasePolicy`, an
algorithm named ``NAME@release``) it is deactivated after ``unplaceable_patience_seconds``
(manager quota released, queue position kept: it is queued again by its creation time) and
restored, oldest first, when an eligible worker is back; each later release of the same workload
waits twice as long as the one before (up to ``unplaceable_backoff_max_seconds``). While a
worker is down, every waiting workload is sampled every :data:`STARVE_SAMPLE_S` seconds: one with
eligible workers (the :data:`REFERENCE_PIPELINE`'s filters, the same for every algorithm) none of
which is reachable is *held*; one with a reachable eligible worker that has free quota for it
right now is *starving* (its ``starved_s`` grows).

Everything is deterministic: events are ordered by (time, sequence number), no set of strings is
iterated where order matters, and there is no wall clock inside the simulation.

Scale: a worker's queue under ``all-at-once`` holds a copy of nearly every pending workload. Before
each scheduling cycle, identical workloads (same pod sets, priority and ClusterQueue) are cut to
the number that could possibly get quota (free quota plus what lower-priority workloads hold, per
resource) plus one; the ones cut would fail for the same reason the last one kept does, so the
outcome of the cycle is the same.
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dispatcher.algorithms import (
    ClusterSnapshot,
    DispatchRequest,
    Pipeline,
    QueuedWorkload,
    StageContext,
    request_from_workload,
    snapshot_from_objects,
)
from dispatcher.controller.inflight import InFlight
from dispatcher.controller.step import Action, account, outcome
from dispatcher.kueue.admission import (
    EPOCH,
    PendingWorkload,
    QuotaSnapshot,
    ReservingWorkload,
    plan_admissions,
)
from dispatcher.kueue.forecast import RunTimes
from dispatcher.kueue.objects import FlavorResource, PodSetView, frozen_map
from dispatcher.plugins import PluginHost
from dispatcher.plugins.host import pipeline_for
from dispatcher.sim.trace import Trace, TraceWorkload
from dispatcher.sim.world import ClusterModel, SimTopology
from dispatcher.topology import workload_object

__all__ = [
    "KUEUE_ALL_AT_ONCE",
    "KUEUE_INCREMENTAL",
    "REFERENCE_PIPELINE",
    "RELEASE_SUFFIX",
    "STARVE_SAMPLE_S",
    "AlgorithmChoice",
    "Latencies",
    "Outcome",
    "Release",
    "ReleasePolicy",
    "RunInterval",
    "SimResult",
    "Simulation",
    "parse_algorithms",
    "simulate",
]

KUEUE_ALL_AT_ONCE = "all-at-once"
"""Kueue's built-in AllAtOnce dispatcher, modelled in the simulated manager."""
KUEUE_INCREMENTAL = "incremental"
"""Kueue's built-in Incremental dispatcher, modelled in the simulated manager."""

Kind = Literal["all-at-once", "incremental", "pipeline"]

RELEASE_SUFFIX = "@release"
"""``NAME@release`` in ``--algorithms``: pipeline ``NAME`` with the unplaceable-release policy."""
REFERENCE_PIPELINE = ("gpu-type-affinity", "capacity-first")
"""Whose filters say which workers can run a workload, for the outage metrics of every run."""
STARVE_SAMPLE_S = 5.0
"""While a worker is down, waiting workloads are sampled for starvation this often (seconds)."""


@dataclass(frozen=True)
class ReleasePolicy:
    """The dispatcher's opt-in policy for unplaceable workloads (issue 17), in the simulator.

    The names are the dispatcher's settings: after ``unplaceable_patience_seconds`` of being
    unplaceable a workload is deactivated (its manager quota released) and it is restored when
    an eligible worker is reachable again; the n-th release of one workload waits
    ``patience × 2**(n-1)`` seconds of unplaceability, at most ``unplaceable_backoff_max_seconds``.
    """

    unplaceable_patience_seconds: float = 60.0
    unplaceable_backoff_max_seconds: float = 3600.0

    def __post_init__(self) -> None:
        if not self.unplaceable_patience_seconds > 0:
            raise ValueError("unplaceable_patience_seconds: must be > 0 seconds")
        if self.unplaceable_backoff_max_seconds < self.unplaceable_patience_seconds:
            raise ValueError(
                "unplaceable_backoff_max_seconds: must be >= unplaceable_patience_seconds"
            )

    def wait(self, releases: int) -> float:
        """How long a workload released ``releases`` times before waits until the next release."""
        return min(
            self.unplaceable_patience_seconds * 2.0 ** min(releases, 60),
            self.unplaceable_backoff_max_seconds,
        )


@dataclass(frozen=True)
class Latencies:
    """Control-plane latencies and timers of the simulated Kueue and dispatcher (seconds)."""

    event_batch_s: float = 1.0
    """Kueue MultiKueue batches remote events for 1 s (``UpdatesBatchPeriod``, C20)."""
    manager_admission_s: float = 0.5
    """From a change to the manager's scheduling cycle."""
    dispatcher_reaction_s: float = 0.1
    """From a workload becoming eligible to the dispatcher's decision (watch and queue)."""
    nomination_write_s: float = 0.05
    """From a decision to the nomination being visible to Kueue (status write)."""
    copy_creation_s: float = 0.2
    """From a nomination change to the remote copy created (or deleted) on a worker."""
    worker_admission_s: float = 0.5
    """From a change on a worker to its scheduling cycle."""
    resync_s: float = 30.0
    """The dispatcher's follow-up when a decision names no time (``resync_seconds``)."""
    worker_lost_timeout_s: float = 900.0
    """Kueue's ``workerLostTimeout`` (C29)."""
    incremental_round_s: float = 300.0
    """Kueue's Incremental round (5 minutes, fixed, C58)."""
    incremental_step_size: int = 1
    """Kueue's Incremental ``stepSize`` (Kueue's default is 3; S10 compares with 1)."""
    idle_horizon_s: float = 86400.0
    """Stop when nothing but timers happened for this long (unadmittable workloads)."""


@dataclass(frozen=True)
class AlgorithmChoice:
    """What runs as the dispatcher: a Kueue built-in or a pipeline of plugin algorithms."""

    name: str
    kind: Kind
    pipeline: tuple[str, ...] = ()
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    release: bool = False
    """The unplaceable-release policy is on (pipelines only; the name ends in ``@release``)."""


VARIANT_MARK = "#"
"""``a+b#name`` in ``--algorithms``: the pipeline ``a+b`` with the options given under the key
``#name`` of ``--algorithm-options`` laid over the per-algorithm ones (a variant to compare with
the pipeline itself in one run)."""


def _variant_options(
    names: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    variant: str,
    where: str,
) -> dict[str, dict[str, Any]]:
    """The options of each of ``names``: the algorithm's own, then the variant's over them."""
    used = {n: dict(options[n]) for n in names if n in options}
    if not variant:
        return used
    key = f"{VARIANT_MARK}{variant}"
    extra = options.get(key)
    if not isinstance(extra, Mapping):
        raise ValueError(
            f"--algorithms: {where}: --algorithm-options has no object under {key!r} "
            '(e.g. {"' + key + '": {"capacity-first": {"preemption": "ignore"}}})'
        )
    for name, given in extra.items():
        if name not in names or not isinstance(given, Mapping):
            raise ValueError(
                f"--algorithm-options: {key}.{name}: not an object of options of an algorithm "
                f"of {where}"
            )
        used[name] = {**used.get(name, {}), **given}
    return used


def parse_algorithms(
    text: str, options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[AlgorithmChoice]:
    """Parse ``--algorithms``: comma-separated; ``a+b`` composes a pipeline of plugins.

    ``all-at-once`` and ``incremental`` alone are Kueue's built-in dispatchers as Kueue runs them;
    anything else is a pipeline of algorithms as ``multikueue-dispatcher plugins`` lists them;
    the prefix ``plugin:`` forces a pipeline (``plugin:all-at-once`` runs the plugin re-creation
    of AllAtOnce through the dispatcher instead of Kueue's own). ``options`` maps algorithm names
    to their options (for pipelines that use them), and ``#variant`` keys to options laid over
    them for ``a+b#variant`` (:data:`VARIANT_MARK`). The suffix ``@release`` turns on the
    unplaceable-release policy.
    """
    out = []
    opts = options or {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        release = item.endswith(RELEASE_SUFFIX)
        item = item.removesuffix(RELEASE_SUFFIX)
        base, _, variant = item.partition(VARIANT_MARK)
        suffix = f"{VARIANT_MARK}{variant}" if variant else ""
        if base in (KUEUE_ALL_AT_ONCE, KUEUE_INCREMENTAL):
            if release:
                raise ValueError(
                    f"--algorithms: {item}{RELEASE_SUFFIX}: the unplaceable-release policy is the "
                    "dispatcher's; "
                    f"Kueue's built-in {base} has none (plugin:{base}{RELEASE_SUFFIX} runs the "
                    "dispatcher's re-creation with it)"
                )
            if variant:
                raise ValueError(f"--algorithms: {item}: Kueue's built-in {base} takes no options")
            out.append(AlgorithmChoice(base, base))  # type: ignore[arg-type]
            continue
        forced = base.startswith("plugin:")
        names = tuple(n.strip() for n in base.removeprefix("plugin:").split("+") if n.strip())
        used = _variant_options(names, opts, variant, item)
        label = ("plugin:" if forced else "") + "+".join(names)
        label += suffix + (RELEASE_SUFFIX if release else "")
        out.append(AlgorithmChoice(label, "pipeline", names, used, release=release))
    if not out:
        raise ValueError("no algorithm given")
    seen = [c.name for c in out]
    if len(set(seen)) != len(seen):
        raise ValueError(f"an algorithm is listed twice: {seen}")
    return out


# --- results -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunInterval:
    """A job running on a worker (the winner's copy), for utilization."""

    cluster: str
    start: float
    end: float
    usage: Mapping[str, int]
    """Resource → milli-units."""
    gpu_type: str | None
    """The hardware GPU type it ran on (``None``: no GPU)."""
    preempted: bool = False
    """It ended because it was preempted (its running time is lost)."""


@dataclass
class Outcome:
    """What happened to one workload."""

    key: str
    arrival: float
    gpus: int
    required: tuple[str, ...] | None
    preferred: tuple[str, ...]
    first_admitted: float | None = None
    cluster: str | None = None
    """Where it was first admitted."""
    finished: float | None = None
    mismatch: bool = False
    """Admitted on hardware of a GPU type it does not accept."""
    preference_miss: bool = False
    """Admitted on a GPU type outside its preferred list."""
    requeues: int = 0
    eligible: tuple[str, ...] | None = None
    """Workers the :data:`REFERENCE_PIPELINE`'s filters keep for it (computed with outages)."""
    starved_s: float = 0.0
    """Seconds (in :data:`STARVE_SAMPLE_S` steps) it waited while a worker was down and a
    reachable eligible worker had free quota for it."""
    starved_last: float | None = None
    """The last sample at which it was starving."""
    held_at: float | None = None
    """When the outage first held it: the first sample while it waited (or its release) at
    which none of its eligible workers was reachable."""
    last_admitted: float | None = None
    """Its last admission on a worker (after a requeue, the one it ran under)."""
    releases: int = 0
    """Times the unplaceable-release policy deactivated it."""

    @property
    def held(self) -> bool:
        """The outage held it (see ``held_at``)."""
        return self.held_at is not None

    @property
    def tta(self) -> float | None:
        """Time to admission: arrival on the manager → first admission on a worker."""
        return None if self.first_admitted is None else self.first_admitted - self.arrival


@dataclass(frozen=True, slots=True)
class Release:
    """One deactivation by the unplaceable-release policy, with what the policy saw."""

    key: str
    at: float
    unplaceable_since: float
    eligible: tuple[str, ...]
    """The workload's eligible workers (the pipeline's filters, reachability ignored)."""
    reachable: tuple[str, ...]
    """Of those, the ones up at the release (always empty: the policy's invariant)."""
    restored_at: float | None = None


@dataclass
class SimResult:
    """The raw outcome of one run (see :mod:`dispatcher.sim.report` for the metrics)."""

    algorithm: str
    outcomes: list[Outcome]
    intervals: list[RunInterval]
    copies_created: int = 0
    """Remote copies created (Kueue's ``multikueue_workloads_dispatched_total``, C51)."""
    admissions: int = 0
    """Admissions on a worker seen by the manager, re-admissions after a requeue included
    (Kueue's ``multikueue_workloads_admitted_total``, C51)."""
    dispatches: int = 0
    """Times a workload started waiting for a worker (quota reserved on the manager)."""
    preemptions: int = 0
    """Workloads evicted to make room (on workers and on the manager)."""
    preemptions_workers: int = 0
    """Of those, evictions by the workers' Kueue (caused by copies)."""
    preemptions_by_losers: int = 0
    """Of those, evictions caused by copies that then lost (``all-at-once`` waste)."""
    decisions: int = 0
    wasted_reservations: int = 0
    """Copies admitted on a worker that were not the winner (deleted afterwards)."""
    end_time: float = 0.0
    events: int = 0
    """Events processed (a measure of the simulation's work)."""
    wall_s: float = 0.0
    decision_errors: list[str] = field(default_factory=list)
    prediction_errors: list[float] = field(default_factory=list)
    """Admission minus predicted start, per workload admitted where its nomination predicted a
    wait (the dispatcher's ``multikueue_dispatcher_predicted_start_error_seconds``)."""
    releases: list[Release] = field(default_factory=list)
    """Deactivations by the unplaceable-release policy, in time order (``restored_at`` set
    when the workload was restored)."""


# --- state -------------------------------------------------------------------------------------


def _ts(seconds: float) -> datetime.datetime:
    return EPOCH + datetime.timedelta(seconds=seconds)


@dataclass(eq=False)
class _Entry:
    """A workload in one Kueue's queues: the manager Workload or a remote copy."""

    wl: _Workload
    cluster: str
    cq: str
    queued_at: float
    usage: Mapping[FlavorResource, int] | None = None
    reserved_at: float | None = None
    queued_ts: datetime.datetime = EPOCH
    reserved_ts: datetime.datetime = EPOCH

    def __post_init__(self) -> None:
        self.queued_ts = _ts(self.queued_at)

    def sort_key(self) -> tuple[int, float, str]:
        return (-self.wl.priority, self.queued_at, self.wl.key)


@dataclass(eq=False)
class _Workload:
    index: int
    item: TraceWorkload
    key: str
    priority: int
    pod_sets: tuple[PodSetView, ...]
    shape: tuple[Any, ...]
    totals: Mapping[str, int]
    request: DispatchRequest
    outcome: Outcome
    state: str = "new"
    """new → queued (manager) → reserved (dispatching) → running → finished."""
    gen: int = 0
    queued_at: float = 0.0
    reserved_at: float | None = None
    nominated: tuple[str, ...] = ()
    nominated_at: float | None = None
    visible: tuple[str, ...] = ()
    """The nomination as Kueue's MultiKueue controller last synced it."""
    token: int = 0
    copies: dict[str, _Entry] = field(default_factory=dict)
    winner: str | None = None
    run_start: float | None = None
    unplaceable_since: float | None = None
    """When it last became unplaceable (``None``: it is not, or the policy is off)."""
    release_token: int = 0
    release: Release | None = None
    """Its current deactivation (state ``inactive``)."""
    predicted: dict[str, float] = field(default_factory=dict)
    """The start predicted on each cluster of its standing nomination where it had to wait."""


class _Kueue:
    """One cluster's Kueue: pending and reserving entries per ClusterQueue, and usage."""

    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        self.pending: dict[str, _Entry] = {}
        self.reserving: dict[str, _Entry] = {}
        self.usage: dict[str, dict[FlavorResource, int]] = {n: {} for n in model.queues}
        self.version = 0
        self.cycle_at: float | None = None
        self.up = True
        self.fresh: set[str] = set()
        """Pending keys added since the last cycle."""
        self.released = True
        """Quota was released since the last cycle: every pending entry is evaluated again."""
        self.runs = RunTimes()
        """Run times of the workloads that finished here, per ClusterQueue (the statistics
        the dispatcher's mirror keeps)."""
        self._holders_version = -1
        self._holders_by_queue: dict[str, tuple[ReservingWorkload, ...]] = {}

    def finished_run(self, cq: str, seconds: float) -> None:
        """A workload of ``cq`` finished after running ``seconds``."""
        self.runs.add(cq, seconds)
        self.version += 1

    def run_seconds(self, cq: str | None) -> tuple[float, ...]:
        """The run times observed in ``cq``, sorted."""
        if cq is None:
            return ()
        return self.runs.sorted(cq)

    def add(self, entry: _Entry) -> None:
        self.pending[entry.wl.key] = entry
        self.fresh.add(entry.wl.key)
        self.version += 1

    def remove(self, key: str) -> _Entry | None:
        entry = self.pending.pop(key, None)
        if entry is None:
            entry = self.reserving.pop(key, None)
            if entry is not None and entry.usage is not None:
                self.released = True
                into = self.usage[entry.cq]
                for fr, amount in entry.usage.items():
                    into[fr] = into.get(fr, 0) - amount
        if entry is not None:
            self.version += 1
        return entry

    def reserve(self, entry: _Entry, usage: Mapping[FlavorResource, int], now: float) -> None:
        self.pending.pop(entry.wl.key, None)
        entry.usage = usage
        entry.reserved_at = now
        entry.reserved_ts = _ts(now)
        self.reserving[entry.wl.key] = entry
        into = self.usage[entry.cq]
        for fr, amount in usage.items():
            into[fr] = into.get(fr, 0) + amount
        self.version += 1

    def unreserve(self, key: str) -> _Entry | None:
        """Evicted: release the quota and put the entry back in the queue."""
        entry = self.remove(key)
        if entry is not None:
            entry.usage = None
            entry.reserved_at = None
            self.add(entry)
        return entry

    def clear(self) -> list[_Entry]:
        gone = [*self.pending.values(), *self.reserving.values()]
        self.pending.clear()
        self.reserving.clear()
        self.usage = {n: {} for n in self.model.queues}
        self.fresh.clear()
        self.released = True
        self.version += 1
        return gone

    def holders_in(self, cq: str | None) -> tuple[ReservingWorkload, ...]:
        """The entries holding quota in ``cq`` (made once per change of this Kueue)."""
        if self._holders_version != self.version:
            by_queue: dict[str, list[ReservingWorkload]] = {}
            for holder in self.holders():
                by_queue.setdefault(holder.cluster_queue, []).append(holder)
            self._holders_by_queue = {name: tuple(found) for name, found in by_queue.items()}
            self._holders_version = self.version
        return self._holders_by_queue.get(cq or "", ())

    def holders(self) -> list[ReservingWorkload]:
        """The entries holding quota, as possible preemption victims."""
        return [
            ReservingWorkload(
                key=e.wl.key,
                cluster_queue=e.cq,
                usage=e.usage or frozen_map(),
                priority=e.wl.priority,
                reserved_at=e.reserved_ts,
                queued_at=e.queued_ts,
                max_execution_seconds=e.wl.request.max_execution_seconds,
            )
            for e in self.reserving.values()
        ]

    def _waiting(self) -> list[_Entry]:
        """Entries to evaluate in this cycle."""
        if self.released:
            waiting = list(self.pending.values())
        else:
            # Like Kueue's inadmissible list: entries that did not fit are tried again only
            # once quota is released; until then only new arrivals are evaluated.
            waiting = [self.pending[k] for k in self.fresh if k in self.pending]
        self.fresh.clear()
        self.released = False
        return waiting

    def _candidates(
        self, waiting: list[_Entry], holders: Sequence[ReservingWorkload]
    ) -> list[_Entry]:
        """Pending entries in queue order, identical ones cut to what could get quota (+1)."""
        snapshot = QuotaSnapshot.build(self.model.queues.values(), holders)
        free: dict[tuple[str, str], int] = {}
        for cq in self.model.queues:
            for fr, amount in snapshot.availability(cq).items():
                free[(cq, fr[1])] = free.get((cq, fr[1]), 0) + amount
        lower: dict[tuple[str, int], dict[str, int]] = {}

        def held_below(cq: str, priority: int) -> Mapping[str, int]:
            cached = lower.get((cq, priority))
            if cached is None:
                cached = {}
                policy = self.model.policies.get(cq)
                strict = policy is not None and policy.within_cluster_queue == "LowerPriority"
                if policy is not None and policy.within_cluster_queue != "Never":
                    for h in holders:
                        if h.cluster_queue == cq and (
                            h.priority < priority or (h.priority == priority and not strict)
                        ):
                            for (_, resource), amount in h.usage.items():
                                cached[resource] = cached.get(resource, 0) + amount
                lower[(cq, priority)] = cached
            return cached

        kept: list[_Entry] = []
        counts: dict[tuple[Any, ...], int] = {}
        bounds: dict[tuple[Any, ...], int] = {}
        for entry in sorted(waiting, key=_Entry.sort_key):
            group = (entry.cq, entry.wl.priority, entry.wl.shape)
            bound = bounds.get(group)
            if bound is None:
                below = held_below(entry.cq, entry.wl.priority)
                bound = 1 << 40
                for resource, amount in entry.wl.totals.items():
                    if amount > 0:
                        room = free.get((entry.cq, resource), 0) + below.get(resource, 0)
                        bound = min(bound, room // amount)
                bounds[group] = bound
            seen = counts.get(group, 0)
            if seen <= bound:
                kept.append(entry)
                counts[group] = seen + 1
        return kept

    def cycle(
        self,
    ) -> tuple[
        list[tuple[_Entry, Mapping[FlavorResource, int]]], list[tuple[_Entry, _Entry]], bool
    ]:
        """One scheduling cycle: admitted entries with their usage, (victim, preemptor) pairs,
        and whether a preemption is pending."""
        waiting = self._waiting()
        if not waiting:
            return [], [], False
        holders = self.holders()
        candidates = self._candidates(waiting, holders)
        by_key = {e.wl.key: e for e in candidates}
        plan = plan_admissions(
            (
                PendingWorkload(
                    key=e.wl.key,
                    cluster_queue=e.cq,
                    pod_sets=e.wl.pod_sets,
                    priority=e.wl.priority,
                    queued_at=e.queued_ts,
                )
                for e in candidates
            ),
            holders,
            self.model.queues.values(),
            self.model.flavors,
            self.model.policies,
        )
        admitted = [(by_key[ev.key], ev.usage) for ev in plan.admitted]
        victims: list[tuple[_Entry, _Entry]] = []
        seen: set[str] = set()
        for ev in plan.preempting:
            for v in ev.victims:
                if not v.evicting and v.key not in seen and v.key in self.reserving:
                    seen.add(v.key)
                    victims.append((self.reserving[v.key], by_key[ev.key]))
        return admitted, victims, bool(plan.preempting)


# --- the simulation ----------------------------------------------------------------------------

MANAGER = "manager"


class Simulation:
    """One run of one dispatcher over one trace and topology."""

    def __init__(
        self,
        topology: SimTopology,
        trace: Trace,
        algorithm: AlgorithmChoice,
        *,
        latencies: Latencies | None = None,
        host: PluginHost | None = None,
        policy: ReleasePolicy | None = None,
    ) -> None:
        """Prepare a run; ``host`` (plugins) is needed for pipelines and for traces with faults
        (the outage metrics use :data:`REFERENCE_PIPELINE`); ``policy`` parametrises the
        unplaceable-release policy of an ``@release`` algorithm."""
        self.topology = topology
        self.trace = trace
        self.algorithm = algorithm
        self.lat = latencies or Latencies()
        self.host = host
        self.policy = policy or ReleasePolicy()
        self.pipeline: Pipeline | None = None
        self.modes: dict[str, Pipeline] = {}
        """The pipelines a workload's dispatch-mode hint may pick instead (as the manager's)."""
        if algorithm.kind == "pipeline":
            if host is None:
                raise ValueError("a plugin host is needed to run a pipeline")
            self.pipeline = host.pipeline(algorithm.pipeline, algorithm.options)
            self.modes = host.mode_pipelines(algorithm.options)
        self.reference: Pipeline | None = None
        if trace.faults:
            if host is None:
                raise ValueError("a plugin host is needed for the outage metrics")
            self.reference = host.pipeline(REFERENCE_PIPELINE)
        self._eligible_cache: dict[tuple[Any, ...], tuple[str, ...]] = {}
        self._empty_cache: dict[tuple[str, str, str], ClusterSnapshot] = {}
        self._room_cache: dict[tuple[str, str, str], tuple[Any, ClusterSnapshot]] = {}
        self._sampling = False
        self._inactive: list[_Workload] = []
        self.now = 0.0
        self._heap: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._work = 0
        self._last_progress = 0.0
        self.manager = _Kueue(topology.manager)
        self.workers = {w.name: _Kueue(w) for w in topology.workers}
        self.config_order = [w.name for w in topology.workers]
        self.in_flight = InFlight(expiry_seconds=600.0)
        self._preemptions: list[tuple[_Workload, str]] = []
        self._snap_cache: dict[tuple[str, str, str], tuple[Any, ClusterSnapshot]] = {}
        self.workloads = [self._prepare(i, item) for i, item in enumerate(trace.workloads)]
        self.by_key = {w.key: w for w in self.workloads}
        self.result = SimResult(
            algorithm=algorithm.name,
            outcomes=[w.outcome for w in self.workloads],
            intervals=[],
        )

    # --- setup ---------------------------------------------------------------------------------

    def _prepare(self, index: int, item: TraceWorkload) -> _Workload:
        line = item.line.model_copy(update={"kind": "Workload"})
        raw = workload_object(line, self.topology.topology)
        request = request_from_workload(raw, now=item.arrival)
        pod_sets = request.pod_sets
        shape = tuple(
            (
                p.name,
                p.count,
                tuple(sorted(p.requests.items())),
                tuple(sorted(p.node_selector.items())),
            )
            for p in pod_sets
        )
        totals = dict(request.totals)
        required = request.required_gpu_types
        outcome = Outcome(
            key=request.key,
            arrival=item.arrival,
            gpus=totals.get("nvidia.com/gpu", 0) // 1000,
            required=tuple(sorted(required)) if required is not None else None,
            preferred=request.preferred_gpu_types,
        )
        return _Workload(
            index=index,
            item=item,
            key=request.key,
            priority=request.priority,
            pod_sets=pod_sets,
            shape=shape,
            totals=frozen_map(totals),
            request=request,
            outcome=outcome,
        )

    # --- event loop ----------------------------------------------------------------------------

    _TIMERS = frozenset({"reconcile", "round", "sample"})

    def _at(self, when: float, kind: str, *args: Any) -> None:
        if kind not in self._TIMERS:
            self._work += 1
        heapq.heappush(self._heap, (when, next(self._seq), kind, args))

    def run(self) -> SimResult:
        """Run to the end and return the raw result."""
        started = time.perf_counter()
        for wl in self.workloads:
            self._at(wl.item.arrival, "arrive", wl)
        for fault in self.trace.faults:
            if fault.cluster not in self.workers:
                where = f"{fault.where}: " if fault.where else ""
                raise ValueError(
                    f"{where}fault names unknown worker {fault.cluster!r} (workers: "
                    f"{', '.join(self.config_order)})"
                )
            self._at(fault.start, "down", fault.cluster)
            if not fault.permanent:
                self._at(fault.end, "up", fault.cluster)
        if self.reference is not None:
            for wl in self.workloads:
                wl.outcome.eligible = self._eligible(self.reference, wl)
        handlers: dict[str, Callable[..., None]] = {
            "arrive": self._arrive,
            "manager-cycle": self._manager_cycle,
            "dispatch": self._dispatch,
            "reconcile": self._reconcile,
            "round": self._round,
            "sync": self._sync,
            "create": self._create,
            "delete": self._delete,
            "worker-cycle": self._worker_cycle,
            "observe-admitted": self._observe_admitted,
            "observe-evicted": self._observe_evicted,
            "finish": self._finish,
            "observe-finished": self._observe_finished,
            "down": self._down,
            "up": self._up,
            "worker-lost": self._worker_lost,
            "release": self._release,
            "sample": self._sample,
        }
        while self._heap:
            when, _, kind, args = heapq.heappop(self._heap)
            if kind not in self._TIMERS:
                self._work -= 1
            elif self._work == 0 and when > self._last_progress + self.lat.idle_horizon_s:
                break
            self.now = when
            if kind != "sample":
                self.result.events += 1
            handlers[kind](*args)
        self.result.end_time = self.now
        self.finish_releases()
        self.result.preemptions_by_losers = sum(
            1 for wl, cluster in self._preemptions if wl.outcome.cluster != cluster
        )
        self.result.wall_s = time.perf_counter() - started
        return self.result

    def _progress(self) -> None:
        self._last_progress = self.now

    # --- manager -------------------------------------------------------------------------------

    def _arrive(self, wl: _Workload) -> None:
        self._progress()
        cq = self.topology.manager.cluster_queue_of(wl.request.namespace, wl.request.queue_name)
        if cq is None:
            return  # no LocalQueue on the manager: Kueue never reserves it
        wl.state = "queued"
        wl.queued_at = self.now
        self.manager.add(_Entry(wl, MANAGER, cq, queued_at=wl.queued_at))
        self._kick(self.manager, self.lat.manager_admission_s, "manager-cycle")
        self._wake_sampler()

    def _kick(self, kueue: _Kueue, delay: float, kind: str, *args: Any) -> None:
        when = self.now + delay
        if kueue.cycle_at is not None and kueue.cycle_at <= when:
            return
        kueue.cycle_at = when
        self._at(when, kind, *args)

    def _manager_cycle(self) -> None:
        if self.manager.cycle_at is not None and self.manager.cycle_at > self.now:
            return  # superseded by an earlier one
        self.manager.cycle_at = None
        admitted, victims, preempting = self.manager.cycle()
        for victim, _ in victims:
            self.result.preemptions += 1
            if victim.wl.state == "finishing":
                self._observe_finished(victim.wl, victim.wl.gen)
            else:
                self._evict_on_manager(victim.wl, requeue_at=victim.wl.item.arrival, preempted=True)
        for entry, usage in admitted:
            self.manager.reserve(entry, usage, self.now)
            wl = entry.wl
            wl.state = "reserved"
            wl.reserved_at = self.now
            self.result.dispatches += 1
            wl.nominated, wl.nominated_at, wl.visible = (), None, ()
            self._at(self.now + self.lat.dispatcher_reaction_s, "dispatch", wl, wl.gen)
        if preempting or victims:
            self._kick(self.manager, self.lat.manager_admission_s, "manager-cycle")

    def _evict_on_manager(self, wl: _Workload, requeue_at: float, preempted: bool = False) -> None:
        """Evicted on the manager (C37): copies deleted, nomination cleared, requeued."""
        self._progress()
        if wl.state == "running" and wl.winner is not None:
            self._record_run(wl, wl.winner, preempted)
        for cluster in list(wl.copies):
            self._drop_copy(wl, cluster)
        self.in_flight.forget(wl.key)
        self.manager.remove(wl.key)
        wl.gen += 1
        wl.unplaceable_since = None  # back in the queue: it holds no quota, the clock stops
        wl.release_token += 1
        wl.outcome.requeues += 1
        wl.state = "queued"
        wl.winner = None
        wl.nominated, wl.nominated_at, wl.visible = (), None, ()
        wl.queued_at = requeue_at
        wl.reserved_at = None
        cq = self.topology.manager.cluster_queue_of(wl.request.namespace, wl.request.queue_name)
        if cq is not None:
            self.manager.add(_Entry(wl, MANAGER, cq, queued_at=requeue_at))
        self._kick(self.manager, self.lat.manager_admission_s, "manager-cycle")
        self._wake_sampler()

    def _live(self, wl: _Workload, gen: int) -> bool:
        return wl.gen == gen and wl.state == "reserved"

    # --- dispatchers ---------------------------------------------------------------------------

    def _dispatch(self, wl: _Workload, gen: int) -> None:
        if not self._live(wl, gen):
            return
        kind = self.algorithm.kind
        if kind == "all-at-once":
            self._nominate(wl, self._connected(), delay=0.0)
        elif kind == "incremental":
            self._round(wl, gen)
        else:
            self._check_unplaceable(wl)
            self._reconcile(wl, gen, wl.token)

    def _connected(self) -> tuple[str, ...]:
        return tuple(sorted(n for n in self.config_order if self.workers[n].up))

    def _nominate(self, wl: _Workload, clusters: tuple[str, ...], delay: float) -> None:
        if clusters == wl.nominated:
            return
        wl.nominated = clusters
        wl.nominated_at = self.now
        self._at(self.now + delay, "sync", wl, wl.gen)

    def _round(self, wl: _Workload, gen: int) -> None:
        """Kueue's Incremental: append the next ``stepSize`` clusters of the config (C59)."""
        if not self._live(wl, gen) or wl.winner is not None:
            return
        rest = [n for n in self.config_order if n not in wl.nominated]
        if not rest:
            return  # ErrNoMoreWorkers
        added = tuple(rest[: self.lat.incremental_step_size])
        self._nominate(wl, (*wl.nominated, *added), delay=0.0)
        self._at(self.now + self.lat.incremental_round_s, "round", wl, gen)

    def _request(self, wl: _Workload) -> DispatchRequest:
        return dataclasses.replace(
            wl.request,
            now=self.now,
            queued_at=wl.reserved_at,
            nominated=wl.nominated,
            nominated_at=wl.nominated_at,
        )

    def _snapshot(self, worker: str, namespace: str, queue: str) -> ClusterSnapshot:
        kueue = self.workers[worker]
        in_flight = self.in_flight.on(worker, self.now)
        stamp = (kueue.version, kueue.up, tuple(w.key for w in in_flight))
        cache_key = (worker, namespace, queue)
        cached = self._snap_cache.get(cache_key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        model = kueue.model
        queues = [
            dataclasses.replace(
                cq,
                reserved=frozen_map(kueue.usage[name]),
                pending_workloads=sum(1 for e in kueue.pending.values() if e.cq == name),
            )
            for name, cq in model.queues.items()
        ]
        cq_name = model.cluster_queue_of(namespace, queue)
        pending = tuple(
            QueuedWorkload(key=e.wl.key, priority=e.wl.priority, pod_sets=e.wl.pod_sets)
            for e in sorted(kueue.pending.values(), key=_Entry.sort_key)
            if e.cq == cq_name
        )
        snap = snapshot_from_objects(
            worker,
            namespace=namespace,
            queue_name=queue,
            local_queues=model.local_queues,
            cluster_queues=queues,
            flavors=model.flavors.values(),
            active=kueue.up,
            inactive_reason="" if kueue.up else "worker is down",
            order=model.order,
            labels=model.labels,
            taints=model.taints,
            pending=pending,
            in_flight=in_flight,
            holders=kueue.holders_in(cq_name),
            run_seconds=kueue.run_seconds(cq_name),
        )
        self._snap_cache[cache_key] = (stamp, snap)
        return snap

    def _reconcile(self, wl: _Workload, gen: int, token: int) -> None:
        """One decision of the plugin pipeline, as the manager process makes it."""
        if not self._live(wl, gen) or token != wl.token or wl.winner is not None:
            return
        assert self.pipeline is not None
        assert self.host is not None
        wl.token += 1
        request = self._request(wl)
        snapshots = [
            self._snapshot(n, request.namespace, request.queue_name) for n in self.config_order
        ]
        pipeline = pipeline_for(request, self.pipeline, self.modes)
        decision = self.host.decide(pipeline, request, snapshots)
        self.result.decisions += 1
        if decision.errors and len(self.result.decision_errors) < 20:
            self.result.decision_errors += [
                f"{e.source}/{e.stage}: {e.message}" for e in decision.errors
            ]
        # The controller's own step (dispatcher.controller.step): the same outcome for the same
        # decision, the same in-flight accounting; only the write's latency is modelled here.
        step = outcome(decision, wl.nominated, snapshots)
        account(step, self.in_flight, request, self.now)
        if step.action is Action.WRITE:
            self._nominate(wl, step.target, delay=self.lat.nomination_write_s)
            wl.predicted = {
                cluster: at
                for cluster, at in decision.predictions.items()
                if cluster in step.target and at - self.now >= 1.0
            }
        follow = step.follow_up
        follow = self.lat.resync_s if follow is None else max(follow, 0.001)
        self._at(self.now + follow, "reconcile", wl, gen, wl.token)

    # --- Kueue MultiKueue on the manager -------------------------------------------------------

    def _sync(self, wl: _Workload, gen: int) -> None:
        """Kueue reads the nomination: copies on nominated connected clusters, others deleted."""
        if not self._live(wl, gen) or wl.winner is not None:
            return
        wl.visible = wl.nominated
        for cluster in wl.nominated:
            if cluster not in wl.copies and self.workers[cluster].up:
                self._at(self.now + self.lat.copy_creation_s, "create", wl, gen, cluster)
        for cluster in list(wl.copies):
            if cluster not in wl.nominated:
                self._at(self.now + self.lat.copy_creation_s, "delete", wl, gen, cluster)

    def _create(self, wl: _Workload, gen: int, cluster: str) -> None:
        if not self._live(wl, gen) or wl.winner is not None:
            return
        kueue = self.workers[cluster]
        if cluster not in wl.visible or cluster in wl.copies or not kueue.up:
            return
        cq = kueue.model.cluster_queue_of(wl.request.namespace, wl.request.queue_name)
        self.result.copies_created += 1
        entry = _Entry(wl, cluster, cq or "", queued_at=self.now)
        wl.copies[cluster] = entry
        if cq is None:
            return  # no LocalQueue there: the copy stays pending forever
        kueue.add(entry)
        self._kick(kueue, self.lat.worker_admission_s, "worker-cycle", cluster)

    def _delete(self, wl: _Workload, gen: int, cluster: str) -> None:
        if wl.gen != gen or cluster not in wl.copies or cluster in wl.visible:
            return
        if wl.winner == cluster:
            return
        self._drop_copy(wl, cluster)

    def _drop_copy(self, wl: _Workload, cluster: str) -> None:
        entry = wl.copies.pop(cluster, None)
        self.in_flight.settle(cluster, wl.key)
        if entry is None:
            return
        kueue = self.workers[cluster]
        held = entry.usage is not None
        if kueue.remove(wl.key) is not None and held:
            self._kick(kueue, self.lat.worker_admission_s, "worker-cycle", cluster)

    # --- workers -------------------------------------------------------------------------------

    def _worker_cycle(self, cluster: str) -> None:
        kueue = self.workers[cluster]
        if kueue.cycle_at is not None and kueue.cycle_at > self.now:
            return
        kueue.cycle_at = None
        if not kueue.up:
            return
        admitted, victims, preempting = kueue.cycle()
        for victim, preemptor in victims:
            self._preempt_copy(cluster, victim, preemptor.wl)
        for entry, usage in admitted:
            kueue.reserve(entry, usage, self.now)
            wl = entry.wl
            self.in_flight.settle(cluster, wl.key)
            self._progress()
            if wl.winner is not None:
                self.result.wasted_reservations += 1
            self._at(self.now + self.lat.event_batch_s, "observe-admitted", wl, wl.gen)
        if preempting or victims:
            self._kick(kueue, self.lat.worker_admission_s, "worker-cycle", cluster)

    def _preempt_copy(self, cluster: str, victim: _Entry, preemptor: _Workload) -> None:
        self.result.preemptions += 1
        self.result.preemptions_workers += 1
        self._preemptions.append((preemptor, cluster))
        self._progress()
        wl = victim.wl
        kueue = self.workers[cluster]
        if wl.winner == cluster:
            # Recorded while the copy still holds its usage.
            self._record_run(wl, cluster, preempted=True)
        kueue.unreserve(wl.key)
        if wl.winner == cluster:
            # The running job is evicted on the worker: Retry, then eviction on the manager.
            wl.state = "evicting"
            self._at(self.now + self.lat.event_batch_s, "observe-evicted", wl, wl.gen)

    def _observe_admitted(self, wl: _Workload, gen: int) -> None:
        """C28: the earliest admitted copy wins; the others are deleted; nomination cleared."""
        if not self._live(wl, gen) or wl.winner is not None:
            return
        admitted: list[tuple[float, int, str]] = [
            (e.reserved_at, self.workers[c].model.order, c)
            for c, e in wl.copies.items()
            if e.reserved_at is not None
        ]
        if not admitted:
            return
        reserved_at, _, winner = min(admitted)
        wl.winner = winner
        wl.state = "running"
        self.result.admissions += 1
        self.result.wasted_reservations += len(admitted) - 1
        wl.run_start = reserved_at
        wl.nominated, wl.visible = (), ()
        self.in_flight.forget(wl.key)
        for cluster in list(wl.copies):
            if cluster != winner:
                self._at(self.now + self.lat.copy_creation_s, "delete", wl, gen, cluster)
        predicted = wl.predicted.get(winner)
        if predicted is not None:
            self.result.prediction_errors.append(reserved_at - predicted)
        wl.predicted = {}
        outcome = wl.outcome
        outcome.last_admitted = reserved_at
        if outcome.first_admitted is None:
            outcome.first_admitted = reserved_at
            outcome.cluster = winner
            entry = wl.copies[winner]
            hardware = self._hardware(winner, entry)
            if wl.outcome.gpus > 0:
                required = outcome.required
                if required is not None and not (hardware & set(required)):
                    outcome.mismatch = True
                if outcome.preferred and not (hardware & set(outcome.preferred)):
                    outcome.preference_miss = True
        self._at(reserved_at + wl.item.run_seconds, "finish", wl, gen, winner)

    def _hardware(self, cluster: str, entry: _Entry) -> set[str]:
        model = self.workers[cluster].model
        out: set[str] = set()
        for (flavor, resource), amount in (entry.usage or {}).items():
            if resource == "nvidia.com/gpu" and amount > 0:
                out |= model.hardware.get(flavor, frozenset())
        return out

    def _record_run(self, wl: _Workload, cluster: str, preempted: bool = False) -> None:
        entry = wl.copies.get(cluster)
        if entry is None or wl.run_start is None:
            return
        usage: dict[str, int] = {}
        for (_, resource), amount in (entry.usage or {}).items():
            usage[resource] = usage.get(resource, 0) + amount
        hardware = sorted(self._hardware(cluster, entry))
        self.result.intervals.append(
            RunInterval(
                cluster,
                wl.run_start,
                max(self.now, wl.run_start),
                frozen_map(usage),
                hardware[0] if hardware else None,
                preempted,
            )
        )
        wl.run_start = None

    def _observe_evicted(self, wl: _Workload, gen: int) -> None:
        if wl.gen != gen or wl.state != "evicting":
            return
        self._evict_on_manager(wl, requeue_at=self.now)

    def _finish(self, wl: _Workload, gen: int, cluster: str) -> None:
        if wl.gen != gen or wl.state != "running" or wl.winner != cluster:
            return
        self._progress()
        entry = wl.copies.get(cluster)
        if entry is not None and wl.run_start is not None:
            self.workers[cluster].finished_run(entry.cq, self.now - wl.run_start)
        self._record_run(wl, cluster)
        wl.state = "finishing"
        self._drop_copy(wl, cluster)
        self._at(self.now + self.lat.event_batch_s, "observe-finished", wl, gen)

    def _observe_finished(self, wl: _Workload, gen: int) -> None:
        if wl.gen != gen or wl.state != "finishing":
            return
        self._progress()
        wl.state = "finished"
        wl.outcome.finished = self.now - self.lat.event_batch_s
        if self.manager.remove(wl.key) is not None:
            self._kick(self.manager, self.lat.manager_admission_s, "manager-cycle")

    # --- faults --------------------------------------------------------------------------------

    def _down(self, cluster: str) -> None:
        self._progress()
        kueue = self.workers[cluster]
        kueue.up = False
        for entry in kueue.clear():
            wl = entry.wl
            wl.copies.pop(cluster, None)
            self.in_flight.settle(cluster, wl.key)
            if wl.winner == cluster and wl.state == "running":
                self._record_run(wl, cluster)
                wl.state = "lost"
                self._at(self.now + self.lat.worker_lost_timeout_s, "worker-lost", wl, wl.gen)
        self._reroute(cluster)
        self._wake_sampler()

    def _up(self, cluster: str) -> None:
        self._progress()
        self.workers[cluster].up = True
        self._restore()
        self._reroute(cluster)

    def _reroute(self, cluster: str) -> None:
        """A worker's connectivity changed: dispatchers react as their real counterparts do."""
        for wl in self.workloads:
            if wl.state != "reserved" or wl.winner is not None:
                continue
            kind = self.algorithm.kind
            if kind == "all-at-once":
                self._nominate(wl, self._connected(), delay=0.0)
            elif kind == "incremental":
                if cluster in wl.nominated:
                    self._at(self.now, "sync", wl, wl.gen)
            else:
                self._check_unplaceable(wl)
                if cluster in wl.nominated or not wl.nominated:
                    when = self.now + self.lat.dispatcher_reaction_s
                    self._at(when, "reconcile", wl, wl.gen, wl.token)

    def _worker_lost(self, wl: _Workload, gen: int) -> None:
        if wl.gen != gen or wl.state != "lost":
            return
        self._evict_on_manager(wl, requeue_at=self.now)

    # --- eligibility, the unplaceable-release policy, starvation --------------------------------

    def _empty_snapshot(self, worker: str, namespace: str, queue: str) -> ClusterSnapshot:
        """The worker as an empty, active cluster: what filters see when reachability and load
        are ignored."""
        key = (worker, namespace, queue)
        snap = self._empty_cache.get(key)
        if snap is None:
            model = self.workers[worker].model
            snap = snapshot_from_objects(
                worker,
                namespace=namespace,
                queue_name=queue,
                local_queues=model.local_queues,
                cluster_queues=model.queues.values(),
                flavors=model.flavors.values(),
                active=True,
                order=model.order,
                labels=model.labels,
                taints=model.taints,
            )
            self._empty_cache[key] = snap
        return snap

    def _pipeline_of(self, wl: _Workload) -> Pipeline:
        """The pipeline that decides ``wl`` (its dispatch-mode hint's, else the run's)."""
        assert self.pipeline is not None
        return pipeline_for(wl.request, self.pipeline, self.modes)

    def _eligible(self, pipeline: Pipeline, wl: _Workload) -> tuple[str, ...]:
        """The workers ``pipeline``'s filters keep for ``wl``, reachability ignored (config
        order). Computed once per workload shape and placement hints on the workers' empty
        snapshots: the built-in filters (LocalQueue, can-ever-fit, GPU type) and the hints stage
        depend only on the setup."""
        request = wl.request
        key = (
            id(pipeline),
            wl.shape,
            wl.priority,
            request.namespace,
            request.queue_name,
            request.preferred_gpu_types,
            request.hints,
        )
        cached = self._eligible_cache.get(key)
        if cached is None:
            snaps = [
                self._empty_snapshot(n, request.namespace, request.queue_name)
                for n in self.config_order
            ]
            decision = pipeline.decide(request, snaps)
            kept = {v.cluster for v in decision.verdicts if v.kept}
            cached = tuple(n for n in self.config_order if n in kept)
            self._eligible_cache[key] = cached
        return cached

    def _unplaceable(self, wl: _Workload) -> bool:
        """Holds manager quota, admitted nowhere, and no eligible worker is reachable (a
        workload no worker could ever run is not unplaceable: no outage explains it)."""
        if wl.state != "reserved" or wl.winner is not None or self.pipeline is None:
            return False
        if any(e.reserved_at is not None for e in wl.copies.values()):
            return False
        eligible = self._eligible(self._pipeline_of(wl), wl)
        return bool(eligible) and not any(self.workers[n].up for n in eligible)

    def _check_unplaceable(self, wl: _Workload) -> None:
        """Start (or stop) the policy's clock for ``wl``."""
        if not self.algorithm.release:
            return
        if not self._unplaceable(wl):
            if wl.unplaceable_since is not None:
                wl.unplaceable_since = None
                wl.release_token += 1
            return
        if wl.unplaceable_since is None:
            wl.unplaceable_since = self.now
            wl.release_token += 1
            wait = self.policy.wait(wl.outcome.releases)
            self._at(self.now + wait, "release", wl, wl.gen, wl.release_token)

    def _release(self, wl: _Workload, gen: int, token: int) -> None:
        """Deactivate an unplaceable workload: its manager quota is released; it keeps its
        queue position (creation time) for when it is restored."""
        if wl.gen != gen or token != wl.release_token or wl.unplaceable_since is None:
            return
        if not self._unplaceable(wl):
            wl.unplaceable_since = None
            return
        self._progress()
        eligible = self._eligible(self._pipeline_of(wl), wl)
        release = Release(
            key=wl.key,
            at=self.now,
            unplaceable_since=wl.unplaceable_since,
            eligible=eligible,
            reachable=tuple(n for n in eligible if self.workers[n].up),
        )
        for cluster in list(wl.copies):
            self._drop_copy(wl, cluster)
        self.in_flight.forget(wl.key)
        self.manager.remove(wl.key)
        wl.gen += 1
        wl.state = "inactive"
        wl.nominated, wl.nominated_at, wl.visible = (), None, ()
        wl.reserved_at = None
        wl.unplaceable_since = None
        wl.release = release
        wl.outcome.releases += 1
        if wl.outcome.held_at is None:
            wl.outcome.held_at = self.now
        self._inactive.append(wl)
        self._kick(self.manager, self.lat.manager_admission_s, "manager-cycle")

    def _restore(self) -> None:
        """Reactivate, oldest first, the released workloads that have an eligible worker up."""
        if not self._inactive:
            return
        back = [
            wl
            for wl in self._inactive
            if any(self.workers[n].up for n in self._eligible(self._pipeline_of(wl), wl))
        ]
        back.sort(key=lambda w: (w.item.arrival, w.key))
        cq = None
        for wl in back:
            self._inactive.remove(wl)
            assert wl.release is not None
            self.result.releases.append(dataclasses.replace(wl.release, restored_at=self.now))
            wl.release = None
            wl.state = "queued"
            wl.queued_at = wl.item.arrival
            cq = self.topology.manager.cluster_queue_of(wl.request.namespace, wl.request.queue_name)
            if cq is not None:
                self.manager.add(_Entry(wl, MANAGER, cq, queued_at=wl.item.arrival))
        if back:
            self._progress()
            self._kick(self.manager, self.lat.manager_admission_s, "manager-cycle")
            self._wake_sampler()

    def finish_releases(self) -> None:
        """Record the releases still in force at the end of the run (never restored)."""
        for wl in self._inactive:
            if wl.release is not None:
                self.result.releases.append(wl.release)
        self.result.releases.sort(key=lambda r: (r.at, r.key))

    def _room_snapshot(self, worker: str, namespace: str, queue: str) -> ClusterSnapshot:
        """The worker's quota as it is now, without in-flight bookkeeping."""
        kueue = self.workers[worker]
        key = (worker, namespace, queue)
        cached = self._room_cache.get(key)
        if cached is not None and cached[0] == kueue.version:
            return cached[1]
        model = kueue.model
        queues = [
            dataclasses.replace(cq, reserved=frozen_map(kueue.usage[name]))
            for name, cq in model.queues.items()
        ]
        snap = snapshot_from_objects(
            worker,
            namespace=namespace,
            queue_name=queue,
            local_queues=model.local_queues,
            cluster_queues=queues,
            flavors=model.flavors.values(),
            active=True,
            order=model.order,
            labels=model.labels,
            taints=model.taints,
        )
        self._room_cache[key] = (kueue.version, snap)
        return snap

    def _wake_sampler(self) -> None:
        """Start the starvation samples if a worker is down and they are not running."""
        if self.reference is None or self._sampling:
            return
        if all(k.up for k in self.workers.values()):
            return
        self._sampling = True
        self._at(self.now, "sample")

    def _sample(self) -> None:
        """While a worker is down: add :data:`STARVE_SAMPLE_S` to ``starved_s`` of every waiting
        workload that a reachable eligible worker has free quota for right now. The samples
        stop when no worker is down or nothing waits (an arrival, a requeue, a restore or
        another outage starts them again)."""
        groups: dict[tuple[Any, ...], list[_Workload]] = {}
        if any(not k.up for k in self.workers.values()):
            for wl in self.workloads:
                if wl.state not in ("queued", "reserved") or wl.winner is not None:
                    continue
                group = (wl.shape, wl.request.namespace, wl.request.queue_name)
                groups.setdefault(group, []).append(wl)
        if not groups:
            self._sampling = False
            return
        for members in groups.values():
            first = members[0]
            eligible = first.outcome.eligible or ()
            reachable = [n for n in eligible if self.workers[n].up]
            if eligible and not reachable:
                for wl in members:
                    if wl.outcome.held_at is None:
                        wl.outcome.held_at = self.now
                continue
            request = first.request
            room = False
            for name in reachable:
                snap = self._room_snapshot(name, request.namespace, request.queue_name)
                if StageContext(request, [snap]).fit(snap).fits_now:
                    room = True
                    break
            if room:
                for wl in members:
                    wl.outcome.starved_s += STARVE_SAMPLE_S
                    wl.outcome.starved_last = self.now
        self._at(self.now + STARVE_SAMPLE_S, "sample")


def simulate(
    topology: SimTopology,
    trace: Trace,
    algorithms: Sequence[AlgorithmChoice],
    *,
    latencies: Latencies | None = None,
    host: PluginHost | None = None,
    policy: ReleasePolicy | None = None,
) -> list[SimResult]:
    """Run every algorithm over the same trace and topology, one after the other."""
    if host is None and (trace.faults or any(a.kind == "pipeline" for a in algorithms)):
        host = PluginHost.load()
    return [
        Simulation(topology, trace, algorithm, latencies=latencies, host=host, policy=policy).run()
        for algorithm in algorithms
    ]
