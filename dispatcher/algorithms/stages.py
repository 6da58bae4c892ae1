"""The three extension points of a pipeline: filter, score, select.

* A :class:`Filter` keeps or drops one cluster and says why it dropped it.
* A :class:`Scorer` gives one cluster a number. Scorers sit in **tiers**: clusters are ranked by
  the weighted sum of the lowest tier first, the next tier only breaks ties, and so on; the
  MultiKueueConfig order and then the cluster name break the remaining ties, so ranking is total
  and deterministic.
* A :class:`Selector` looks at the ranked survivors and decides how many to nominate now, and
  when to look again.

A :class:`Pipeline` runs ``filters → scorers → selector``. It isolates every stage: a stage that
raises, returns a non-finite score, or (selector) names a cluster that is unknown, dropped or
inactive is skipped for that decision and reported in :attr:`Decision.errors`; the other stages
keep working (fail-open). A filter from a source listed in :attr:`Pipeline.fail_closed` is the
exception: when it fails, the decision is withheld (:attr:`Decision.withheld`), since skipping a
filter that enforces a hard rule could nominate a forbidden cluster. The pipeline always drops
inactive clusters first (stage ``active``), then the clusters where a Workload or Job of the
workload's name is not a copy of ours (stage ``same-name``, from
:attr:`DispatchRequest.name_taken`), then the clusters where its admitted copy vanished a short
while ago (stage ``copy-lost``, from :attr:`DispatchRequest.copy_lost`), then the clusters the
workload's placement hints rule out or whose taints it does not tolerate (stage ``hints``); it
ranks by the preferred hints in the preference tier (score component ``hints``), and never
nominates more than :data:`MAX_NOMINATED_CLUSTERS`.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from dispatcher.algorithms.model import (
    MAX_NOMINATED_CLUSTERS,
    ClusterSnapshot,
    Decision,
    DispatchRequest,
    QueuedWorkload,
    Rejection,
    RejectionReason,
    ScoreComponent,
    StageError,
    Verdict,
)
from dispatcher.kueue.admission import (
    EPOCH,
    PendingWorkload,
    ReservingWorkload,
    evaluate_available,
)
from dispatcher.kueue.flavorfit import FitResult, assign_flavors, available_now, capacity_ceiling
from dispatcher.kueue.forecast import MAX_AHEAD, Ahead, Running
from dispatcher.kueue.forecast import predicted_start as forecast_start
from dispatcher.kueue.hints import CLUSTER_TOLERATIONS, tolerated
from dispatcher.kueue.objects import ClusterQueueView, FlavorResource, PodSetView, frozen_map

__all__ = [
    "COPY_LOST_STAGE",
    "DISRUPTION_SCORER",
    "HINTS_STAGE",
    "PREDICTED_START_SCORER",
    "SAME_NAME_STAGE",
    "TIER_BACKLOG",
    "TIER_CAPACITY",
    "TIER_DISRUPTION",
    "TIER_FEASIBILITY",
    "TIER_PREFERENCE",
    "TIER_START",
    "TIER_WAIT",
    "ClusterFit",
    "Disruption",
    "Filter",
    "Pipeline",
    "Scorer",
    "Selection",
    "Selector",
    "StageContext",
    "Stages",
    "TopN",
    "backlog",
    "compose",
    "continue_replay",
]

TIER_FEASIBILITY = 0
"""Tier of "does it fit now" scores: dominates everything else."""
DISRUPTION_SCORER = "least-disruption"
"""The score component of least-disruption placement (its detail names the victims)."""
PREDICTED_START_SCORER = "predicted-start"
"""The score component of the predicted start (its detail gives the predicted wait)."""
TIER_DISRUPTION = 2
"""Tier of what admitting the workload would preempt where it does not fit now (least
disruption): right below "fits now", above everything else."""
TIER_BACKLOG = 5
"""Tier of how far behind Kueue is on a cluster (copies of our nominations it has yet to make):
below "fits now", above preferences, so that a burst drains through every worker's client."""
TIER_PREFERENCE = 10
"""Tier of the workload's and the admin's preferences (GPU type, cost …)."""
TIER_CAPACITY = 20
"""Tier of capacity policies (most free, best fit)."""
TIER_START = 25
"""Tier of the predicted start where the workload must wait (below the capacity policy, which
ranks where it fits now, above the plain count of the queue ahead)."""
TIER_WAIT = 30
"""Tier of expected-wait scores (queue ahead)."""

BUILTIN_SOURCE = "builtin"
SAME_NAME_STAGE = "same-name"
"""The stage name in verdicts of the pipeline's own same-name guard (no algorithm can lose it:
Kueue would never run the workload on such a cluster)."""
COPY_LOST_STAGE = "copy-lost"
"""The stage name in verdicts of the pipeline's own guard against a worker that just lost this
workload's admitted copy (contract C91)."""
HINTS_STAGE = "hints"
"""The stage name, in verdicts and score components, of the pipeline's own placement hints
(:mod:`dispatcher.kueue.hints`): the workload's required hints and the clusters' taints drop
clusters, its preferred affinity and soft taints rank the rest."""


@dataclass(frozen=True, slots=True)
class ClusterFit:
    """How the request fits one cluster, computed once per decision and shared by all stages."""

    fits_now: bool
    """Fits the quota free right now, after deducting in-flight nominations."""
    fits_ever: bool
    """Fits the queue's quota plus everything it could borrow, were the cluster empty."""
    reason: str = ""
    """Why it does not fit now (or ever); empty when it fits now."""
    code: RejectionReason | None = None
    """The code of ``reason`` when it never fits (``None`` when it fits ever)."""
    queued_ahead: int = 0
    """Pending workloads of at least our priority plus in-flight ones that are still queued."""
    free_after: float | None = None
    """Mean fraction of the ceiling left free on the quota we would use (``None``: no fit now)."""
    assignment: FitResult | None = None


LATEST = datetime.datetime.max.replace(tzinfo=datetime.UTC)
"""Queue-order time of a copy not created yet: a copy is created when it is nominated, so it is
newer than every workload already on the worker (none of equal priority is newer than it)."""


@dataclass(frozen=True, slots=True)
class Disruption:
    """What admitting the request on one cluster would cost others, under the worker
    ClusterQueue's own preemption policy (:func:`dispatcher.kueue.admission.evaluate_available`)."""

    mode: Literal["fit", "preempt", "wait"]
    """``fit``: reserves now, no preemption; ``preempt``: reserves once ``victims`` are evicted;
    ``wait``: not now, and nothing there may be preempted for it."""
    victims: tuple[ReservingWorkload, ...] = ()
    """For ``preempt``: the minimal set Kueue's preemption would evict there, in its order."""

    def cost(self, now: float) -> tuple[int, int, float]:
        """How bad the preemption is, smaller first: the highest victim priority, then the
        number of victims, then the seconds of running time they lose (of admitted victims,
        since their quota was reserved)."""
        if not self.victims:
            return (0, 0, 0.0)
        return (
            max(v.priority for v in self.victims),
            len(self.victims),
            sum(_running(v, now) for v in self.victims),
        )

    def describe(self, now: float) -> str:
        """The victims as an Event or ``explain`` shows them."""
        if self.mode != "preempt":
            return "no preemption" if self.mode == "fit" else "nothing there may be preempted"
        shown = ", ".join(
            f"{v.key} (priority {v.priority}"
            + (f", running {_running(v, now):.0f}s)" if v.admitted else ", not admitted)")
            for v in self.victims[:5]
        )
        more = f" and {len(self.victims) - 5} more" if len(self.victims) > 5 else ""
        return f"would preempt {len(self.victims)}: {shown}{more}"


def _running(victim: ReservingWorkload, now: float) -> float:
    if not victim.admitted or victim.reserved_at <= EPOCH:
        return 0.0
    return max(0.0, now - victim.reserved_at.timestamp())


class StageContext:
    """Per-decision state handed to every stage: the request, the candidates and a fit cache."""

    def __init__(self, request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> None:
        """Create the context for one decision."""
        self.request = request
        self.snapshots: Mapping[str, ClusterSnapshot] = frozen_map({s.name: s for s in snapshots})
        self.dropped: dict[str, str] = {}
        """Clusters dropped so far: name → reason."""
        self.memo: dict[str, Any] = {}
        """Scratch space for stages that compute something once per decision."""
        self._fits: dict[str, ClusterFit] = {}
        self._disruptions: dict[str, Disruption] = {}
        self.predictions: dict[str, float | None] = {}
        """Predicted starts computed in this decision, by cluster (epoch seconds; ``None``:
        unknown); the decision carries the known ones (:attr:`Decision.predictions`)."""
        self._shape: tuple[Any, ...] | None = _UNSET

    def shape(self) -> tuple[Any, ...] | None:
        """The request's pod-set shape (:func:`_shape`), computed once per decision."""
        if self._shape is _UNSET:
            self._shape = _shape(self.request.pod_sets)
        return self._shape

    def has_fit(self, cluster: str) -> bool:
        """Whether the fit of ``cluster`` has been computed in this decision."""
        return cluster in self._fits

    def fit(self, cluster: ClusterSnapshot) -> ClusterFit:
        """The request's fit on ``cluster`` (computed on first use, then cached)."""
        cached = self._fits.get(cluster.name)
        if cached is None:
            cached = _compute_fit(self.request, cluster, self.shape())
            self._fits[cluster.name] = cached
        return cached

    def disruption(self, cluster: ClusterSnapshot) -> Disruption:
        """What admitting the request on ``cluster`` would preempt (computed on first use,
        then cached): only where it does not fit now but could ever, and the worker
        ClusterQueue's policy lets it preempt a workload holding quota there."""
        cached = self._disruptions.get(cluster.name)
        if cached is None:
            cached = self._disruptions[cluster.name] = _disruption(self.request, cluster, self)
        return cached

    def fits_somewhere_now(self) -> bool:
        """Whether the request fits now on a candidate still kept (computed once): then where it
        must wait, or would preempt, ranks below anyway, and neither is worked out for a
        score."""
        found = self.memo.get("fits-somewhere-now")
        if found is None:
            found = self.memo["fits-somewhere-now"] = any(
                snap.active and snap.name not in self.dropped and self.fit(snap).fits_now
                for snap in self.snapshots.values()
            )
        return bool(found)

    def predicted_start(self, cluster: ClusterSnapshot) -> float | None:
        """When the request would start on ``cluster`` (epoch seconds): now where it fits now
        or would preempt, else the forecast of :mod:`dispatcher.kueue.forecast` (``None``:
        unknown). Computed on first use, then cached in the decision (and, per pod-set shape
        and priority, in the snapshot)."""
        if cluster.name not in self.predictions:
            self.predictions[cluster.name] = _predicted_start(self.request, cluster, self)
        return self.predictions[cluster.name]


_UNSET: Any = object()


def _predicted_start(
    request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
) -> float | None:
    fit = ctx.fit(cluster)
    if fit.fits_now:
        return request.now
    cq = cluster.cluster_queue
    if cq is None or not fit.fits_ever:
        return None
    if ctx.disruption(cluster).mode == "preempt":
        return request.now
    if not cluster.run_seconds and not _limited_holders(cluster):
        return None  # no run time observed, no limit: no quota there has a known release
    own = request.key in _in_flight_keys(cluster) or request.key in _pending_keys(cluster)
    shape = ctx.shape()
    forecasts: dict[tuple[Any, int], float | None] = cluster.derived.setdefault("forecasts", {})
    key = (shape, request.priority)
    if not own and shape is not None and key in forecasts:
        known = forecasts[key]  # made at an earlier decision on this same snapshot
        return None if known is None else max(request.now, known)
    available, holders = _after_in_flight(request, cluster, cq)
    samples = cluster.run_seconds
    placed = {h.key for h in holders}
    running = [
        Running(
            h.usage,
            request.now if h.reserved_at >= LATEST else h.reserved_at.timestamp(),
            h.max_execution_seconds,
        )
        for h in holders
        if h.key != request.key
    ]
    queued = [p for p in cluster.pending if p.priority >= request.priority and p.key != request.key]
    # An in-flight nomination whose copy is already queued there is in both lists.
    listed = _pending_keys(cluster)
    queued += [
        w
        for w in cluster.in_flight
        if w.key not in placed and w.key not in listed and w.key != request.key
    ]
    if len(queued) > MAX_AHEAD:
        found = None
    else:
        ahead = [Ahead(w.pod_sets, w.max_execution_seconds) for w in queued]
        found = forecast_start(
            request.pod_sets, cq, cluster.flavors, available, request.now, running, ahead, samples
        )
    if not own and shape is not None:
        forecasts[key] = found
    return found


def _disruption(
    request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
) -> Disruption:
    fit = ctx.fit(cluster)
    if fit.fits_now:
        return Disruption("fit")
    cq = cluster.cluster_queue
    if cq is None or not fit.fits_ever or not cq.policy.preempts:
        return Disruption("wait")
    floor = _base_quota(cluster, cq).holders.floor
    if floor is None or floor >= request.priority:
        return Disruption("wait")  # a copy is newer than every holder: only lower priorities
    available, holders = _after_in_flight(request, cluster, cq)
    plan = evaluate_available(
        _preemptor(request.key, cq.name, request.pod_sets, request.priority),
        cq,
        cluster.flavors,
        available,
        [h for h in holders if h.key != request.key],
    )
    if plan.mode == "preempt":
        return Disruption("preempt", plan.victims)
    return Disruption("wait")


def _after_in_flight(
    request: DispatchRequest, cluster: ClusterSnapshot, cq: ClusterQueueView
) -> tuple[dict[FlavorResource, int], list[ReservingWorkload]]:
    """The quota free and the holders once the in-flight workloads (the request aside) are
    placed."""
    if request.key in _in_flight_keys(cluster):
        available, _, holders = _replay_in_flight(cluster, cq, exclude=request.key)
        return available, holders.listed()
    base = _base_quota(cluster, cq)
    return dict(base.after_in_flight), base.holders.listed()


def _preemptor(
    key: str, cq: str, pod_sets: tuple[PodSetView, ...], priority: int
) -> PendingWorkload:
    return PendingWorkload(key, cq, pod_sets, priority, LATEST)


def _shape(pod_sets: Sequence[PodSetView]) -> tuple[Any, ...] | None:
    """A hashable key of what the fit of ``pod_sets`` depends on (None: not hashable)."""
    key = tuple(
        (
            ps.count,
            tuple(sorted(ps.requests.items())),
            ps.min_count,
            tuple(sorted(ps.node_selector.items())),
            ps.required_affinity,
            ps.tolerations,
            ps.resource_names,
        )
        for ps in pod_sets
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _compute_fit(
    request: DispatchRequest, cluster: ClusterSnapshot, shape: tuple[Any, ...] | None = _UNSET
) -> ClusterFit:
    """The fit of ``request`` on ``cluster``. What depends on the request's pod sets alone
    (the flavor assignments against the quota ceiling and against the quota left after the
    in-flight workloads) is computed once per snapshot and pod-set shape (``shape``, of
    :func:`_shape`; computed here when not given): in a burst most requests share a few shapes,
    and a snapshot serves many decisions. The queue ahead of the request depends on its
    priority and is counted per request; the fit with that count is kept per shape and count."""
    if cluster.cluster_queue is None:
        return _fit_uncached(request, cluster)
    derived = cluster.derived
    if shape is _UNSET:
        shape = _shape(request.pod_sets)
    by_priority: dict[Any, ClusterFit] | None = derived.get("fits-by-priority")
    if by_priority is not None:
        # The common case in one lookup: a request of a known shape and priority that is
        # neither in flight nor pending on this cluster (its fit then depends on nothing else).
        hit = by_priority.get((shape, request.priority))
        if (
            hit is not None
            and request.key not in derived["in-flight-keys"]
            and request.key not in derived["pending-keys"]
        ):
            return hit
    if request.key in _in_flight_keys(cluster):
        return _fit_uncached(request, cluster)
    if shape is None:
        return _fit_uncached(request, cluster)
    fits: dict[Any, ClusterFit] = derived.setdefault("fits", {})
    cached = fits.get(shape)
    if cached is None:
        cached = _fit_uncached(request, cluster, count_pending=False)
        fits[shape] = cached
    if not cached.fits_ever:
        return cached
    ahead = _base_quota(cluster, cluster.cluster_queue).queued_in_flight + _pending_ahead(
        cluster, request
    )
    with_ahead: dict[Any, ClusterFit] = derived.setdefault("fits-ahead", {})
    counted = with_ahead.get((shape, ahead))
    if counted is None:
        counted = with_ahead[(shape, ahead)] = dataclasses.replace(cached, queued_ahead=ahead)
    if request.key not in derived["pending-keys"]:
        derived.setdefault("fits-by-priority", {})[(shape, request.priority)] = counted
    return counted


def _pending_ahead(cluster: ClusterSnapshot, request: DispatchRequest) -> int:
    """Pending workloads of at least the request's priority, the request itself aside (a
    bisection of the snapshot's sorted priorities, computed once per snapshot)."""
    priorities = cluster.derived.get("pending-priorities")
    if not isinstance(priorities, list):
        priorities = sorted(p.priority for p in cluster.pending)
        cluster.derived["pending-priorities"] = priorities
        cluster.derived["pending-keys"] = {p.key: p.priority for p in cluster.pending}
    ahead = len(priorities) - bisect.bisect_left(priorities, request.priority)
    own = cluster.derived["pending-keys"].get(request.key)
    if own is not None and own >= request.priority:
        ahead -= 1
    return int(ahead)


def _fit_uncached(
    request: DispatchRequest, cluster: ClusterSnapshot, *, count_pending: bool = True
) -> ClusterFit:
    cq = cluster.cluster_queue
    if cq is None:
        return ClusterFit(
            fits_now=False,
            fits_ever=False,
            reason=f"no LocalQueue {request.namespace}/{request.queue_name} with a ClusterQueue",
            code=RejectionReason.NO_LOCAL_QUEUE,
        )
    base = _base_quota(cluster, cq)
    ceiling = base.ceiling
    ever = assign_flavors(request.pod_sets, cq, cluster.flavors, ceiling)
    if not ever.fits:
        return ClusterFit(
            fits_now=False,
            fits_ever=False,
            reason=f"never fits: {ever.reason}",
            code=RejectionReason.NEVER_FITS,
        )
    available: Mapping[FlavorResource, int]
    if any(other.key == request.key for other in cluster.in_flight):
        available, queued, _ = _replay_in_flight(cluster, cq, exclude=request.key)
    else:
        available, queued = base.after_in_flight, base.queued_in_flight
    if count_pending:
        queued += sum(
            1 for p in cluster.pending if p.priority >= request.priority and p.key != request.key
        )
    now = assign_flavors(request.pod_sets, cq, cluster.flavors, available)
    if not now.fits:
        return ClusterFit(
            fits_now=False,
            fits_ever=True,
            reason=f"does not fit now: {now.reason}",
            queued_ahead=queued,
        )
    fractions = [
        (available.get(key, 0) - used) / ceiling[key]
        for key, used in sorted(now.usage.items())
        if ceiling.get(key, 0) > 0
    ]
    free_after = sum(fractions) / len(fractions) if fractions else 1.0
    return ClusterFit(
        fits_now=True,
        fits_ever=True,
        queued_ahead=queued,
        free_after=free_after,
        assignment=now,
    )


@dataclass(slots=True)
class _Holders:
    """The holders of a snapshot once its in-flight workloads are placed, kept as changes to
    the snapshot's own tuple (copying thousands of holders per decision of a burst would cost
    more than the decision): the in-flight workloads that reserve are added (as they were
    placed; made into holders only when listed), the victims their preemptions claim are gone.
    :meth:`listed` makes the list when it is needed (a preemption or a forecast)."""

    base: tuple[ReservingWorkload, ...]
    cq: str
    gone: set[str] = field(default_factory=set)
    added: list[tuple[QueuedWorkload, Mapping[FlavorResource, int]]] = field(default_factory=list)
    floor: int | None = None
    """A lower bound of the holders' priorities (``None``: no holder)."""

    @classmethod
    def of(cls, cluster: ClusterSnapshot, cq: str) -> _Holders:
        """The snapshot's own holders, nothing placed yet."""
        floor = cluster.derived.get("holder-floor", _UNSET)
        if floor is _UNSET:
            floor = cluster.derived["holder-floor"] = min(
                (h.priority for h in cluster.holders), default=None
            )
        return cls(cluster.holders, cq, floor=floor)

    def copy(self) -> _Holders:
        return _Holders(self.base, self.cq, set(self.gone), list(self.added), self.floor)

    def add(self, workload: QueuedWorkload, usage: Mapping[FlavorResource, int]) -> None:
        self.added.append((workload, usage))
        priority = workload.priority
        self.floor = priority if self.floor is None else min(self.floor, priority)

    def listed(self) -> list[ReservingWorkload]:
        """The holders now."""
        placed = [_in_flight_holder(w, self.cq, usage) for w, usage in self.added]
        if not self.gone:
            return [*self.base, *placed]
        return [h for h in (*self.base, *placed) if h.key not in self.gone]


_Step = tuple[QueuedWorkload, Mapping[FlavorResource, int] | None]
"""One in-flight workload as the base replay placed it: the quota it took when it simply fit,
``None`` when it did not (it stayed queued, or claimed victims)."""


@dataclass(frozen=True, slots=True)
class _BaseQuota:
    ceiling: Mapping[FlavorResource, int]
    after_in_flight: Mapping[FlavorResource, int]
    queued_in_flight: int
    holders: _Holders
    """The holders once the in-flight workloads are placed (not to be changed: copy it)."""
    steps: tuple[_Step, ...] = ()
    """How each in-flight workload was placed, in ledger order (what a later snapshot of the
    cluster continues from, :func:`continue_replay`)."""


@dataclass(frozen=True, slots=True)
class _ReplaySeed:
    replayed: int
    """How many of the snapshot's in-flight workloads the seed already placed."""
    available: Mapping[FlavorResource, int]
    queued: int
    holders: _Holders
    steps: tuple[_Step, ...]
    """How the seed placed those ``replayed`` workloads."""


def _same_spec(a: ClusterQueueView, b: ClusterQueueView) -> bool:
    """Whether two views of a ClusterQueue place a workload alike given the same free quota
    (everything but its accounting: quotas, flavors, cohort, policies)."""
    return a is b or (
        a.name == b.name
        and a.resource_groups == b.resource_groups
        and a.cohort == b.cohort
        and a.policy == b.policy
    )


def continue_replay(snapshot: ClusterSnapshot, previous: ClusterSnapshot) -> bool:
    """Let ``snapshot`` start its in-flight replay where ``previous`` ended; whether it was
    seeded. The result is the full replay's, exactly; only the flavor assignments are saved.

    Two cases continue:

    - *appended*: the same cluster state with in-flight workloads appended (a burst: each
      nomination adds one at the end of the cluster's ledger);
    - *settled*: the ledger lost workloads at its head (their copies reserved quota on the
      worker) and may have gained some at its end, and the queue's free quota now is exactly
      what the previous replay had left once it had placed the lost ones. Every workload kept
      must have simply fit in the previous replay (none queued, none claiming victims): each is
      then placed again into the same free quota, in the same order, alike. This is a worker's
      index changing under a burst: a copy reserves what its nomination counted on, and every
      other in-flight workload there keeps its place.

    Either way the replay then costs one flavor assignment per appended workload instead of one
    per in-flight workload."""
    base = previous.derived.get("base-quota")
    cq = snapshot.cluster_queue
    old, new = previous.in_flight, snapshot.in_flight
    if (
        not isinstance(base, _BaseQuota)
        or cq is None
        or previous.cluster_queue is None
        or snapshot.flavors != previous.flavors
    ):
        return False
    if (
        cq == previous.cluster_queue
        and snapshot.cohort_room == previous.cohort_room
        and (snapshot.holders is previous.holders or snapshot.holders == previous.holders)
        and len(new) >= len(old)
        and all(a is b for a, b in zip(old, new, strict=False))
    ):
        snapshot.derived["replay-seed"] = _ReplaySeed(
            len(old), base.after_in_flight, base.queued_in_flight, base.holders, base.steps
        )
        return True
    if not _same_spec(cq, previous.cluster_queue) or len(base.steps) != len(old):
        return False
    # How many workloads left the head of the ledger: the rest must follow in the same order.
    first = new[0] if new else None
    dropped = next((i for i, w in enumerate(old) if w is first), len(old))
    kept = base.steps[dropped:]
    if len(new) < len(kept) or any(w is not step[0] for w, step in zip(new, kept, strict=False)):
        return False
    free_before = dict(base.after_in_flight)
    placed: list[tuple[QueuedWorkload, Mapping[FlavorResource, int]]] = []
    for workload, usage in kept:
        if usage is None:
            return False  # it queued or claimed victims: its place depends on more than quota
        placed.append((workload, usage))
        for key, amount in usage.items():
            free_before[key] = free_before.get(key, 0) + amount
    if available_now(cq, snapshot.cohort_room) != free_before:
        return False
    holders = _Holders.of(snapshot, cq.name)
    for workload, usage in placed:
        holders.add(workload, usage)
    snapshot.derived["replay-seed"] = _ReplaySeed(len(kept), base.after_in_flight, 0, holders, kept)
    return True


def _base_quota(cluster: ClusterSnapshot, cq: ClusterQueueView) -> _BaseQuota:
    """Request-independent quota figures of a snapshot, computed once and cached on it."""
    cached = cluster.derived.get("base-quota")
    if isinstance(cached, _BaseQuota):
        return cached
    seed = cluster.derived.pop("replay-seed", None)
    steps: list[_Step] = []
    if isinstance(seed, _ReplaySeed):
        available = dict(seed.available)
        holders = seed.holders.copy()
        steps.extend(seed.steps)
        queued = seed.queued + _replay(
            cluster, cq, available, cluster.in_flight[seed.replayed :], None, holders, steps
        )
    else:
        available, queued, holders = _replay_in_flight(cluster, cq, exclude=None, steps=steps)
    base = _BaseQuota(
        ceiling=frozen_map(capacity_ceiling(cq, cluster.cohort_limit)),
        after_in_flight=frozen_map(available),
        queued_in_flight=queued,
        holders=holders,
        steps=tuple(steps),
    )
    cluster.derived["base-quota"] = base
    return base


def _replay_in_flight(
    cluster: ClusterSnapshot,
    cq: ClusterQueueView,
    exclude: str | None,
    steps: list[_Step] | None = None,
) -> tuple[dict[FlavorResource, int], int, _Holders]:
    """Quota left after placing the in-flight workloads in order, how many stay queued, and
    the holders then (and, given ``steps``, how each was placed, appended to it)."""
    available = available_now(cq, cluster.cohort_room)
    holders = _Holders.of(cluster, cq.name)
    queued = _replay(cluster, cq, available, cluster.in_flight, exclude, holders, steps)
    return available, queued, holders


def _replay(
    cluster: ClusterSnapshot,
    cq: ClusterQueueView,
    available: dict[FlavorResource, int],
    workloads: Sequence[QueuedWorkload],
    exclude: str | None,
    holders: _Holders,
    steps: list[_Step] | None = None,
) -> int:
    """Place ``workloads`` in order into ``available`` (consumed); how many stay queued (and,
    given ``steps``, how each was placed, appended to it).

    One that fits becomes a holder. One that does not fit but may preempt (the queue's policy,
    a holder of lower priority) claims its victims as Kueue would: they leave ``holders``, their
    quota is its, so the next decision does not count on the same victims (least disruption
    never plans two preemptions of one workload); and it counts as queued, as its copy does
    once the worker shows it pending (until the preemption is done and it is admitted), so that
    the queue ahead of a later decision does not depend on whether that copy is visible yet."""
    queued = 0
    preempts = cq.policy.preempts
    for other in workloads:
        if other.key == exclude:
            continue
        placed = assign_flavors(other.pod_sets, cq, cluster.flavors, available)
        if placed.fits:
            _consume(available, placed.usage)
            holders.add(other, placed.usage)
            if steps is not None:
                steps.append((other, placed.usage))
            continue
        if steps is not None:
            steps.append((other, None))
        if preempts and holders.floor is not None and holders.floor < other.priority:
            plan = evaluate_available(
                _preemptor(other.key, cq.name, other.pod_sets, other.priority),
                cq,
                cluster.flavors,
                available,
                holders.listed(),
            )
            if plan.mode == "preempt":
                holders.gone.update(v.key for v in plan.victims)
                for victim in plan.victims:
                    _consume(available, {fr: -amount for fr, amount in victim.usage.items()})
                _consume(available, plan.usage)
                holders.add(other, plan.usage)
                queued += 1
                continue
        queued += 1
    return queued


def _in_flight_holder(
    workload: QueuedWorkload, cq: str, usage: Mapping[FlavorResource, int]
) -> ReservingWorkload:
    """An in-flight workload once reserved: the newest holder, not admitted yet."""
    return ReservingWorkload(
        workload.key,
        cq,
        frozen_map(usage),
        workload.priority,
        reserved_at=LATEST,
        queued_at=LATEST,
        admitted=False,
        max_execution_seconds=workload.max_execution_seconds,
    )


def _consume(available: dict[FlavorResource, int], usage: Mapping[FlavorResource, int]) -> None:
    for key, amount in usage.items():
        available[key] = available.get(key, 0) - amount


@runtime_checkable
class Filter(Protocol):
    """Keeps or drops a cluster."""

    @property
    def name(self) -> str:
        """Stage name, shown in verdicts and errors."""
        ...

    def filter(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> str | Rejection | None:
        """Return a reason to drop ``cluster``, or ``None`` to keep it: a :class:`Rejection`
        carries a code of :class:`RejectionReason`; free text counts as ``other``."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """Gives a cluster a number; higher is better.

    A scorer may also define ``applies(request, ctx) -> bool``: when it answers false for a
    decision, the scorer is left out of that decision altogether (no component on any cluster),
    which costs nothing per cluster. The built-in ``least-disruption`` and ``predicted-start``
    apply only when the workload fits now on no kept cluster. An exception from ``applies``
    counts as the scorer's failure (skipped, reported in the decision's errors).
    """

    @property
    def name(self) -> str:
        """Stage name, shown in verdicts and errors."""
        ...

    @property
    def tier(self) -> int:
        """Ranking tier (lower tiers dominate higher ones)."""
        ...

    @property
    def weight(self) -> float:
        """Multiplier of the score within its tier."""
        ...

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> float | tuple[float, str]:
        """Return the score, optionally with a short human-readable detail."""
        ...


@dataclass(frozen=True, slots=True)
class Selection:
    """What a selector decided."""

    nominate: tuple[str, ...]
    reason: str
    requeue_after: float | None = None


@runtime_checkable
class Selector(Protocol):
    """Chooses how many of the ranked clusters to nominate now, and when to look again."""

    @property
    def name(self) -> str:
        """Stage name, shown in verdicts and errors."""
        ...

    def select(
        self, request: DispatchRequest, ranked: Sequence[ClusterSnapshot], ctx: StageContext
    ) -> Selection:
        """Return the nomination; ``ranked`` holds the kept clusters, best first."""
        ...


@dataclass(frozen=True, slots=True)
class TopN:
    """Nominate the ``n`` best-ranked clusters (the fallback selector)."""

    n: int = 1
    name: str = "top-n"

    def select(
        self, request: DispatchRequest, ranked: Sequence[ClusterSnapshot], ctx: StageContext
    ) -> Selection:
        """Nominate the first ``n`` of ``ranked``."""
        chosen = tuple(c.name for c in ranked[: self.n])
        if not chosen:
            return Selection((), "no cluster passed the filters")
        return Selection(chosen, f"best ranked: {', '.join(chosen)}")


@dataclass(frozen=True, slots=True)
class Stages:
    """The stages one algorithm contributes to a pipeline."""

    filters: tuple[Filter, ...] = ()
    scorers: tuple[Scorer, ...] = ()
    selector: Selector | None = None
    source: str = BUILTIN_SOURCE
    """Who provides these stages (a plugin name), for error reports."""


@dataclass(frozen=True)
class Pipeline:
    """An ordered set of stages that turns a request and snapshots into a :class:`Decision`."""

    name: str
    filters: tuple[tuple[Filter, str], ...] = ()
    scorers: tuple[tuple[Scorer, str], ...] = ()
    selector: tuple[Selector, str] = (TopN(), BUILTIN_SOURCE)
    fallback: Selector = field(default_factory=TopN)
    fail_closed: frozenset[str] = frozenset()
    """Sources (plugin names) whose failing filter withholds the decision instead of being
    skipped: for filters that enforce a hard rule (tenancy, compliance)."""

    def decide(self, request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        """Run the pipeline; never raises because of a stage (see the module docstring). A
        failing filter of a ``fail_closed`` source ends it with a withheld decision."""
        unique: dict[str, ClusterSnapshot] = {}
        for snap in snapshots:
            unique.setdefault(snap.name, snap)
        ctx = StageContext(request, tuple(unique.values()))
        errors: list[StageError] = []
        dropped_by: dict[str, str] = {}
        codes: dict[str, RejectionReason] = {}
        alive: list[ClusterSnapshot] = []
        hinted = bool(request.hints)
        for snap in unique.values():
            if not snap.active:
                dropped_by[snap.name] = "active"
                codes[snap.name] = RejectionReason.INACTIVE
                ctx.dropped[snap.name] = snap.inactive_reason or "cluster is not active"
            elif snap.name in request.name_taken:
                dropped_by[snap.name] = SAME_NAME_STAGE
                codes[snap.name] = RejectionReason.NAME_TAKEN
                ctx.dropped[snap.name] = request.name_taken[snap.name]
            elif snap.name in request.copy_lost:
                dropped_by[snap.name] = COPY_LOST_STAGE
                codes[snap.name] = RejectionReason.COPY_LOST
                ctx.dropped[snap.name] = request.copy_lost[snap.name]
            elif (hinted or snap.taints or snap.taints_error) and (
                ruled_out := hint_rejection(request, snap)
            ) is not None:
                dropped_by[snap.name] = HINTS_STAGE
                codes[snap.name] = ruled_out.code
                ctx.dropped[snap.name] = ruled_out.text
            else:
                alive.append(snap)

        for flt, source in self.filters:
            try:
                drops: dict[str, Rejection] = {}
                for snap in alive:
                    reason = flt.filter(request, snap, ctx)
                    if reason is not None:
                        drops[snap.name] = _rejection(reason, flt.name)
            except Exception as exc:
                errors.append(StageError(flt.name, source, _describe(exc)))
                if source in self.fail_closed:
                    # The exception's class only: its message may change from one decision
                    # to the next (a hang's age), and this text is the Event's (recorded
                    # once per distinct text). The full message is in ``errors``.
                    why = (
                        f"filter {flt.name} of fail-closed plugin {source} failed "
                        f"({type(exc).__name__}): no decision until it answers"
                    )
                    return Decision(self.name, (), why, errors=tuple(errors), withheld=why)
                continue
            for name, rejection in drops.items():
                dropped_by[name] = flt.name
                codes[name] = rejection.code
                ctx.dropped[name] = rejection.text
            alive = [s for s in alive if s.name not in drops]

        components: dict[str, list[ScoreComponent]] = {s.name: [] for s in alive}
        if (hinted and request.hints.preferred) or any(s.taints for s in alive):
            for snap in alive:
                value, detail = hint_score(request, snap)
                components[snap.name].append(
                    _component(HINTS_STAGE, TIER_PREFERENCE, value, 1.0, detail)
                )
        for scorer, source in self.scorers:
            try:
                applies = getattr(scorer, "applies", None)
                if applies is not None and not applies(request, ctx):
                    continue
                results: dict[str, ScoreComponent] = {}
                for snap in alive:
                    raw = scorer.score(request, snap, ctx)
                    value, detail = raw if isinstance(raw, tuple) else (raw, "")
                    value = float(value)
                    if not math.isfinite(value):
                        raise ValueError(f"non-finite score {value!r} for {snap.name}")
                    results[snap.name] = _component(
                        scorer.name, scorer.tier, value, float(scorer.weight), str(detail)
                    )
            except Exception as exc:
                errors.append(StageError(scorer.name, source, _describe(exc)))
                continue
            for name, component in results.items():
                components[name].append(component)

        tiers = sorted({c.tier for comps in components.values() for c in comps})

        tier_index = {t: i for i, t in enumerate(tiers)}

        def rank_key(snap: ClusterSnapshot) -> tuple[float | int | str, ...]:
            negated = [0.0] * len(tiers)  # each tier's weighted sum, negated: best first
            for c in components[snap.name]:
                negated[tier_index[c.tier]] -= c.value * c.weight
            return (*negated, snap.order, snap.name)

        ranked = sorted(alive, key=rank_key)
        kept_names = {s.name for s in ranked}

        selector, source = self.selector
        selection: Selection | None = None
        try:
            selection = selector.select(request, ranked, ctx)
            _validate(selection, kept_names)
        except Exception as exc:
            errors.append(StageError(selector.name, source, _describe(exc)))
            selection = None
        if selection is None:
            selection = self.fallback.select(request, ranked, ctx)
            selection = Selection(
                selection.nominate, f"fallback after selector error; {selection.reason}"
            )

        rank_of = {s.name: i for i, s in enumerate(ranked)}
        verdicts = []
        for snap in unique.values():
            fits = ctx.fit(snap).fits_now if ctx.has_fit(snap.name) else None
            if snap.name in rank_of:
                verdicts.append(
                    Verdict(
                        cluster=snap.name,
                        kept=True,
                        scores=tuple(components[snap.name]),
                        rank=rank_of[snap.name],
                        fits_now=fits,
                        reason=ctx.fit(snap).reason if fits is not None else "",
                    )
                )
            else:
                verdicts.append(
                    Verdict(
                        cluster=snap.name,
                        kept=False,
                        dropped_by=dropped_by.get(snap.name),
                        reason=ctx.dropped.get(snap.name, ""),
                        fits_now=fits,
                        reason_code=codes.get(snap.name, RejectionReason.OTHER),
                    )
                )
        reason = selection.reason
        if not selection.nominate and not ranked and ctx.dropped:
            reasons = "; ".join(f"{n}: {r}" for n, r in sorted(ctx.dropped.items()))
            reason = f"no candidate cluster left ({reasons})"
        return Decision(
            algorithm=self.name,
            nominate=selection.nominate,
            reason=reason,
            verdicts=tuple(verdicts),
            requeue_after=selection.requeue_after,
            errors=tuple(errors),
            predictions=frozen_map(
                {name: at for name, at in ctx.predictions.items() if at is not None}
            ),
        )


def _limited_holders(cluster: ClusterSnapshot) -> bool:
    """Whether a holder of ``cluster`` or one of our in-flight workloads there has a
    ``maximumExecutionTimeSeconds`` (derived once per snapshot)."""
    found = cluster.derived.get("limited-holders")
    if found is None:
        found = cluster.derived["limited-holders"] = any(
            h.max_execution_seconds is not None for h in cluster.holders
        ) or any(w.max_execution_seconds is not None for w in cluster.in_flight)
    return bool(found)


def _pending_keys(cluster: ClusterSnapshot) -> frozenset[str]:
    """The keys of ``cluster``'s pending workloads, derived once per snapshot."""
    keys: frozenset[str] | None = cluster.derived.get("pending-key-set")
    if keys is None:
        keys = cluster.derived["pending-key-set"] = frozenset(p.key for p in cluster.pending)
    return keys


def _in_flight_keys(cluster: ClusterSnapshot) -> frozenset[str]:
    """The keys of ``cluster``'s in-flight workloads, derived once per snapshot."""
    keys: frozenset[str] | None = cluster.derived.get("in-flight-keys")
    if keys is None:
        keys = cluster.derived["in-flight-keys"] = frozenset(o.key for o in cluster.in_flight)
    return keys


def hint_rejection(request: DispatchRequest, cluster: ClusterSnapshot) -> Rejection | None:
    """Why the workload's placement hints or the cluster's taints rule ``cluster`` out (the
    pipeline's own ``hints`` stage), or ``None``."""
    if cluster.taints_error:
        return Rejection(
            f"taints cannot be read ({cluster.taints_error}): no workload is placed there "
            "until the annotation is fixed",
            RejectionReason.TAINTED,
        )
    hints = request.hints
    if hints:
        why = hints.excluded_by(cluster.name, cluster.labels)
        if why is not None:
            return Rejection(why, RejectionReason.PLACEMENT_HINT)
    for taint in cluster.taints:
        if taint.effect != "PreferNoSchedule" and not tolerated(taint, hints.tolerations):
            return Rejection(
                f"taint {taint} is not tolerated (hint {CLUSTER_TOLERATIONS.hint})",
                RejectionReason.TAINTED,
            )
    return None


def hint_score(request: DispatchRequest, cluster: ClusterSnapshot) -> tuple[float, str]:
    """The ``hints`` score of a kept cluster: the share of the preferred affinity weight its
    labels match (0 to 1), less 1 for each ``PreferNoSchedule`` taint not tolerated; the detail
    names the terms matched and the taints tolerated or not."""
    hints = request.hints
    parts: list[str] = []
    value = 0.0
    if hints.preferred:
        weight, matched = hints.preference(cluster.labels)
        value = weight / sum(term.weight for term in hints.preferred)
        parts.extend(f"preferred ({term.preference}) +{term.weight}" for term in matched)
        if not matched:
            parts.append("matches no preferred term")
    for taint in cluster.taints:
        if tolerated(taint, hints.tolerations):
            parts.append(f"tolerates taint {taint}")
        else:  # a NoSchedule/NoExecute taint not tolerated was dropped before scoring
            value -= 1.0
            parts.append(f"taint {taint} not tolerated")
    return value, "; ".join(parts)


def backlog(request: DispatchRequest, cluster: ClusterSnapshot) -> int:
    """How many of our nominations to ``cluster`` its Kueue has not reserved yet (its copies
    still to be made or admitted there), the request itself aside."""
    return len(cluster.in_flight) - (1 if request.key in _in_flight_keys(cluster) else 0)


_COMPONENTS: dict[tuple[str, int, float, float, str], ScoreComponent] = {}
_COMPONENTS_MAX = 8192


def _component(scorer: str, tier: int, value: float, weight: float, detail: str) -> ScoreComponent:
    """The :class:`ScoreComponent` of these values, shared: a component is immutable, and most
    scorers give a few distinct values across a fleet (fits or not, a rank, a count), so a
    decision reuses them instead of building one frozen object per cluster and scorer (a
    quarter of a decision's own time at 100 clusters). The table is emptied when it is full."""
    key = (scorer, tier, value, weight, detail)
    found = _COMPONENTS.get(key)
    if found is None:
        if len(_COMPONENTS) >= _COMPONENTS_MAX:
            _COMPONENTS.clear()
        found = _COMPONENTS[key] = ScoreComponent(scorer, tier, value, weight, detail)
    return found


def _rejection(reason: object, stage: str) -> Rejection:
    """A filter's answer as a :class:`Rejection`: free text (or anything else, as text) gets
    the code ``other``, and empty text names the filter."""
    if isinstance(reason, Rejection) and isinstance(reason.code, RejectionReason):
        return reason if reason.text else Rejection(f"dropped by {stage}", reason.code)
    return Rejection(str(reason) or f"dropped by {stage}", RejectionReason.OTHER)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _validate(selection: Selection, kept: set[str]) -> None:
    if not isinstance(selection, Selection):
        raise TypeError(f"selector returned {type(selection).__name__}, not Selection")
    names = selection.nominate
    unknown = [n for n in names if n not in kept]
    if unknown:
        raise ValueError(f"selected clusters that are unknown or dropped: {', '.join(unknown)}")
    if len(set(names)) != len(names):
        raise ValueError("selected a cluster twice")
    if len(names) > MAX_NOMINATED_CLUSTERS:
        raise ValueError(f"selected {len(names)} clusters, more than {MAX_NOMINATED_CLUSTERS}")


def compose(name: str, parts: Sequence[Stages]) -> Pipeline:
    """Chain the stages of several algorithms into one pipeline.

    Filters and scorers are concatenated in order (a stage whose name already appeared is not
    added twice); the selector of the **last** part that has one is used, else :class:`TopN`.
    """
    filters: list[tuple[Filter, str]] = []
    scorers: list[tuple[Scorer, str]] = []
    selector: tuple[Selector, str] = (TopN(), BUILTIN_SOURCE)
    seen: set[tuple[str, str]] = set()
    for part in parts:
        for flt in part.filters:
            if ("filter", flt.name) not in seen:
                seen.add(("filter", flt.name))
                filters.append((flt, part.source))
        for scorer in part.scorers:
            if ("score", scorer.name) not in seen:
                seen.add(("score", scorer.name))
                scorers.append((scorer, part.source))
        if part.selector is not None:
            selector = (part.selector, part.source)
    return Pipeline(name=name, filters=tuple(filters), scorers=tuple(scorers), selector=selector)
