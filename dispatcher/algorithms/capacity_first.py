"""capacity-first: nominate the one cluster where the workload fits now, after in-flight deduction.

Ranking, in tiers (see :mod:`dispatcher.algorithms.stages`):

1. ``fits-now``: the workload fits the quota free right now, after the workloads we nominated
   there and Kueue has not reserved yet (in-flight) are deducted. This is what stops a burst from
   over-filling one idle cluster.
1a. ``least-disruption`` (with ``preemption`` not ``ignore``): where the workload does not fit now,
   what admitting it would preempt under that worker ClusterQueue's own policy
   (``withinClusterQueue``, and ``borrowWithinCohort`` for a preemptor that must borrow), the
   in-flight nominations' own preemptions claimed first: ``cheapest`` ranks the clusters where it
   would preempt by cost (highest victim priority, then number of victims, then running time
   lost; the cheapest first) above those where it can only wait; ``avoid`` ranks the clusters
   where it waits without preempting first. A cluster where it fits now ranks above both.
1b. ``backlog`` (with ``spread_backlog`` > 0): a cluster where Kueue has ``spread_backlog`` or
   more of our nominations still in flight (copies it has yet to make through its client of that
   worker, rate limited on Kueue v0.19) ranks below one with fewer, whatever the preferences
   below say; among clusters over the limit, the shortest backlog first. A burst then drains
   through every worker's client instead of queueing behind one.
2. the capacity ``policy``: ``most-free`` (spread: most quota left after placement) or ``best-fit``
   (pack: least quota left);
2b. ``predicted-start`` (with ``predicted_start``): where it must wait, the earliest predicted
   start (:mod:`dispatcher.kueue.forecast`: the holders' expected ends from the run times the
   mirror observed and their ``maximumExecutionTimeSeconds``, the queue ahead replayed);
3. ``queue-ahead``: fewest workloads ahead of it (pending of at least its priority, plus in-flight
   ones that are still waiting);
4. MultiKueueConfig order, then name.

Clusters where the workload could never fit (bigger than nominal quota plus borrowing), or where
its LocalQueue does not exist, are dropped. One cluster is nominated; when the workload is not
admitted within ``patience_seconds`` the nomination moves to, or widens by, the next best cluster.
Unless ``preemption`` is ``ignore``, a nomination never holds two clusters where admitting the
workload would preempt: widening skips them (upstream kueue#8303: a workload copied to several
full workers preempts on each; Kueue v0.20's orchestrated preemption opens one such copy's gate
per five minutes, which a single preempting nomination never waits for).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dispatcher.algorithms.base import AlgorithmSpec
from dispatcher.algorithms.model import (
    MAX_NOMINATED_CLUSTERS,
    ClusterSnapshot,
    DispatchRequest,
    Rejection,
    RejectionReason,
)
from dispatcher.algorithms.stages import (
    DISRUPTION_SCORER,
    PREDICTED_START_SCORER,
    TIER_BACKLOG,
    TIER_CAPACITY,
    TIER_DISRUPTION,
    TIER_FEASIBILITY,
    TIER_START,
    TIER_WAIT,
    Selection,
    StageContext,
    Stages,
    backlog,
)

__all__ = [
    "CAPACITY_FIRST",
    "BacklogScorer",
    "CanEverFitFilter",
    "CapacityFirstOptions",
    "CapacityFirstSelector",
    "CapacityPolicyScorer",
    "FitsNowScorer",
    "LeastDisruptionScorer",
    "PredictedStartScorer",
    "QueueAheadScorer",
    "QueueFilter",
    "build_capacity_first",
]


class CapacityFirstOptions(BaseModel):
    """Options of ``capacity-first``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Literal["most-free", "best-fit"] = Field(
        "most-free",
        description="Among clusters where the workload fits now: `most-free` spreads (most quota "
        "left after placement), `best-fit` packs (least quota left).",
    )
    patience_seconds: float = Field(
        300.0,
        ge=0,
        description="How long a nomination may stand without admission before it moves or widens.",
    )
    on_patience: Literal["move", "widen"] = Field(
        "widen",
        description="When patience runs out: `move` replaces the nomination with the next best "
        "cluster, `widen` adds the next best cluster to it.",
    )
    max_clusters: int = Field(
        3,
        ge=1,
        le=MAX_NOMINATED_CLUSTERS,
        description="Upper bound on the nomination size when widening.",
    )
    preemption: Literal["cheapest", "avoid", "ignore"] = Field(
        "cheapest",
        description="Where the workload fits nowhere now: `cheapest` nominates the cluster where "
        "admitting it preempts the least (lowest-priority, fewest victims, least running time "
        "lost) rather than one where it can only wait; `avoid` prefers a cluster where it waits "
        "without preempting; `ignore` does not look at preemption (and may widen to a second "
        "cluster that would preempt too).",
    )
    predicted_start: bool = Field(
        True,
        description="Where the workload must wait, rank the clusters by when it is predicted "
        "to start (from the run times the dispatcher observed on each worker ClusterQueue and "
        "the workloads' `maximumExecutionTimeSeconds`), earliest first, before the count of "
        "workloads ahead.",
    )
    spread_backlog: int = Field(
        10,
        ge=0,
        description="How many of our nominations Kueue may have yet to copy to one worker before "
        "the next workload that fits elsewhere goes elsewhere, above the GPU preferences and the "
        "capacity policy (a burst drains through every worker's client); `0` turns it off.",
    )


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """Drops clusters without a usable LocalQueue and ClusterQueue for the workload."""

    name: str = "queue"

    def filter(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> Rejection | None:
        """Drop when the worker has no (active) ClusterQueue behind the workload's queue."""
        cq = cluster.cluster_queue
        if cq is None:
            return Rejection(
                f"no LocalQueue {request.namespace}/{request.queue_name} on this cluster",
                RejectionReason.NO_LOCAL_QUEUE,
            )
        if not cq.active:
            return Rejection(
                f"ClusterQueue {cq.name} is not active", RejectionReason.CLUSTER_QUEUE_INACTIVE
            )
        return None


@dataclass(frozen=True, slots=True)
class CanEverFitFilter:
    """Drops clusters where the workload can never fit (bigger than quota plus borrowing)."""

    name: str = "can-ever-fit"

    def filter(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> Rejection | None:
        """Drop when even an empty ClusterQueue (with all it may borrow) cannot hold it."""
        fit = ctx.fit(cluster)
        if fit.fits_ever:
            return None
        return Rejection(fit.reason, fit.code or RejectionReason.NEVER_FITS)


@dataclass(frozen=True, slots=True)
class FitsNowScorer:
    """1 when the workload fits now (after in-flight deduction), else 0."""

    name: str = "fits-now"
    tier: int = TIER_FEASIBILITY
    weight: float = 1.0

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Score feasibility right now."""
        fit = ctx.fit(cluster)
        return (1.0, "fits now") if fit.fits_now else (0.0, fit.reason)


@dataclass(frozen=True, slots=True)
class LeastDisruptionScorer:
    """Where the workload does not fit now: what admitting it would preempt there.

    ``1`` where it fits now. Where it would preempt, between ``0.1`` and ``0.7`` by the rank of
    its cost (:meth:`~dispatcher.algorithms.stages.Disruption.cost`) among the clusters kept in
    this decision, the cheapest highest. Where it can only wait, ``0`` (``cheapest``) or ``0.8``
    (``avoid``). The detail names the victims expected.
    """

    mode: Literal["cheapest", "avoid"] = "cheapest"
    name: str = DISRUPTION_SCORER
    tier: int = TIER_DISRUPTION
    weight: float = 1.0

    def applies(self, request: DispatchRequest, ctx: StageContext) -> bool:
        """Only where the workload fits now nowhere: else a cluster where it fits now ranks
        first whatever this would say (and the selector asks itself when widening)."""
        return not ctx.fits_somewhere_now()

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Score the preemption admitting the workload here would cause."""
        plan = ctx.disruption(cluster)
        if plan.mode == "fit":
            return 1.0, ""
        if plan.mode == "wait":
            return (0.8 if self.mode == "avoid" else 0.0), plan.describe(request.now)
        costs: list[tuple[int, int, float]] | None = ctx.memo.get(self.name)
        if costs is None:
            costs = sorted(
                {
                    found.cost(request.now)
                    for snap in ctx.snapshots.values()
                    if snap.active
                    and snap.name not in ctx.dropped
                    and (found := ctx.disruption(snap)).mode == "preempt"
                }
            )
            ctx.memo[self.name] = costs
        place = costs.index(plan.cost(request.now))
        return 0.7 - 0.6 * place / len(costs), plan.describe(request.now)


@dataclass(frozen=True, slots=True)
class CapacityPolicyScorer:
    """``most-free``: fraction of quota left after placement; ``best-fit``: one minus that."""

    policy: Literal["most-free", "best-fit"] = "most-free"
    tier: int = TIER_CAPACITY
    weight: float = 1.0

    @property
    def name(self) -> str:
        """The policy name."""
        return self.policy

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Score the quota left on the flavors the workload would use (0 when it does not fit)."""
        fit = ctx.fit(cluster)
        if fit.free_after is None:
            return 0.0, "does not fit now"
        left = fit.free_after
        detail = f"{left:.0%} of quota left after placement"
        return (left, detail) if self.policy == "most-free" else (1.0 - left, detail)


@dataclass(frozen=True, slots=True)
class BacklogScorer:
    """``1`` while fewer than ``limit`` of our nominations to the cluster are in flight (Kueue
    has not made or reserved their copies there yet), then ``limit / (1 + backlog)``: clusters
    under the limit tie (the tiers below decide), one over it yields to any under it, and among
    those over it the shortest backlog wins."""

    limit: int = 10
    name: str = "backlog"
    tier: int = TIER_BACKLOG
    weight: float = 1.0

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Score the copies Kueue has yet to make on this cluster."""
        waiting = backlog(request, cluster)
        if waiting < self.limit:
            return 1.0, ""
        return self.limit / (1 + waiting), f"{waiting} nominations not yet copied there"


@dataclass(frozen=True, slots=True)
class PredictedStartScorer:
    """``1 / (1 + wait / 60)`` for the predicted wait in seconds (``1`` where it starts now),
    ``0`` where the forecast is unknown; the detail gives the predicted wait."""

    name: str = PREDICTED_START_SCORER
    tier: int = TIER_START
    weight: float = 1.0

    def applies(self, request: DispatchRequest, ctx: StageContext) -> bool:
        """Only where the workload fits now nowhere (else it starts now where it fits)."""
        return not ctx.fits_somewhere_now()

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Score how soon the workload would start here."""
        at = ctx.predicted_start(cluster)
        if at is None:
            return 0.0, "no predicted start (quota held with no known end, or a long queue)"
        wait = max(0.0, at - request.now)
        if wait < 1.0:
            return 1.0, ""
        return 1.0 / (1.0 + wait / 60.0), f"predicted start in {wait:.0f}s"


@dataclass(frozen=True, slots=True)
class QueueAheadScorer:
    """``1 / (1 + workloads ahead)``: shorter expected wait scores higher."""

    name: str = "queue-ahead"
    tier: int = TIER_WAIT
    weight: float = 1.0

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Score the queue ahead of the workload on this cluster."""
        ahead = ctx.fit(cluster).queued_ahead
        return 1.0 / (1 + ahead), f"{ahead} ahead"


@dataclass(frozen=True, slots=True)
class CapacityFirstSelector:
    """One cluster at a time; after ``patience_seconds`` move or widen to the next best."""

    patience_seconds: float = 300.0
    on_patience: Literal["move", "widen"] = "widen"
    max_clusters: int = 3
    one_preemption: bool = True
    """Never widen to a cluster where admitting the workload would preempt while the
    nomination already holds one (``preemption`` other than ``ignore``)."""
    name: str = "capacity-first"

    def select(
        self, request: DispatchRequest, ranked: Sequence[ClusterSnapshot], ctx: StageContext
    ) -> Selection:
        """Keep, replace, move or widen the nomination."""
        if not ranked:
            return Selection((), "no cluster can take the workload")
        kept = {c.name for c in ranked}
        current = tuple(n for n in request.nominated if n in kept)
        lost = [n for n in request.nominated if n not in kept]
        best = ranked[0]
        patience = self.patience_seconds
        if not request.nominated or not current:
            why = _why(best, ctx, self.one_preemption)
            if lost:
                gone = ", ".join(f"{n} ({ctx.dropped.get(n, 'gone')})" for n in lost)
                why = f"nominated {gone} dropped; {why}"
            return Selection((best.name,), why, patience)
        age = request.nomination_age or 0.0
        if lost:
            return Selection(
                current,
                f"keeping {', '.join(current)}; dropped {', '.join(lost)}",
                max(0.0, patience - age),
            )
        if age < patience:
            return Selection(
                current,
                f"keeping {', '.join(current)}: {patience - age:.0f}s of patience left",
                patience - age,
            )
        others = [c for c in ranked if c.name not in current]
        if not others:
            return Selection(current, "patience ran out but no other cluster is left", patience)
        nxt = others[0]
        shown = self.one_preemption
        if self.on_patience == "move":
            return Selection(
                (nxt.name,),
                f"not admitted after {age:.0f}s on {', '.join(current)}; moving: "
                f"{_why(nxt, ctx, shown)}",
                patience,
            )
        if len(current) >= self.max_clusters:
            return Selection(current, f"already at max_clusters={self.max_clusters}", patience)
        if self.one_preemption:
            preempting = [n for n in current if ctx.disruption(ctx.snapshots[n]).mode == "preempt"]
            if preempting:
                spare = [c for c in others if ctx.disruption(c).mode != "preempt"]
                if not spare:
                    return Selection(
                        current,
                        f"not admitted after {age:.0f}s on {', '.join(current)}; not widening: "
                        f"admitting it on {', '.join(preempting)} already preempts, and on every "
                        "other cluster it would preempt too (one preemption at a time)",
                        patience,
                    )
                nxt = spare[0]
        return Selection(
            (*current, nxt.name),
            f"not admitted after {age:.0f}s on {', '.join(current)}; widening: "
            f"{_why(nxt, ctx, shown)}",
            patience,
        )


def _why(cluster: ClusterSnapshot, ctx: StageContext, disruption: bool = False) -> str:
    fit = ctx.fit(cluster)
    if fit.fits_now:
        return f"{cluster.name}: fits now"
    if disruption:
        plan = ctx.disruption(cluster)
        if plan.mode == "preempt":
            return (
                f"{cluster.name}: fits nowhere now; least disruption here: "
                f"{plan.describe(ctx.request.now)}"
            )
    at = ctx.predictions.get(cluster.name)
    start = f", predicted start in {at - ctx.request.now:.0f}s" if at is not None else ""
    return f"{cluster.name}: fits nowhere now, {fit.queued_ahead} ahead here{start}"


def build_capacity_first(options: CapacityFirstOptions) -> Stages:
    """The stages of ``capacity-first`` for the given options."""
    return Stages(
        filters=(QueueFilter(), CanEverFitFilter()),
        scorers=(
            FitsNowScorer(),
            *(
                (LeastDisruptionScorer(options.preemption),)
                if options.preemption != "ignore"
                else ()
            ),
            *((BacklogScorer(options.spread_backlog),) if options.spread_backlog > 0 else ()),
            CapacityPolicyScorer(options.policy),
            *((PredictedStartScorer(),) if options.predicted_start else ()),
            QueueAheadScorer(),
        ),
        selector=CapacityFirstSelector(
            patience_seconds=options.patience_seconds,
            on_patience=options.on_patience,
            max_clusters=options.max_clusters,
            one_preemption=options.preemption != "ignore",
        ),
    )


CAPACITY_FIRST = AlgorithmSpec(
    name="capacity-first",
    summary="One cluster where the workload fits now (after in-flight deduction); "
    "move or widen after patience.",
    options=CapacityFirstOptions,
    build=build_capacity_first,
)
