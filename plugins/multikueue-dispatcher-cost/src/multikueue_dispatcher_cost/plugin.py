"""The ``cost-aware`` algorithm, registered through the ``mkd_register_algorithms`` hook.

It reuses the built-in capacity stages (queue and can-ever-fit filters, the fits-now and
queue-ahead scorers, the capacity-first selector in ``move`` mode) and adds one scorer of its
own: minus the cluster's cost, in the preference tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dispatcher.algorithms import (
    TIER_PREFERENCE,
    AlgorithmSpec,
    ClusterSnapshot,
    DispatchRequest,
    StageContext,
    Stages,
)
from dispatcher.algorithms.capacity_first import (
    CanEverFitFilter,
    CapacityFirstSelector,
    FitsNowScorer,
    QueueAheadScorer,
    QueueFilter,
)
from dispatcher.plugins import hookimpl

__all__ = ["COST_AWARE", "COST_LABEL", "CostAwareOptions", "CostScorer", "mkd_register_algorithms"]

COST_LABEL = "multikueue-dispatcher.io/cost"
"""MultiKueueCluster label holding the cluster's relative cost (a decimal number)."""


class CostAwareOptions(BaseModel):
    """Options of ``cost-aware``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    costs: dict[str, float] = Field(
        default_factory=dict, description="Cost per cluster name; overrides the label."
    )
    cost_label: str = Field(COST_LABEL, description="MultiKueueCluster label with the cost.")
    default_cost: float = Field(1.0, description="Cost of a cluster with no cost configured.")
    spill_after_seconds: float = Field(
        120.0, ge=0, description="Move to the next cheapest cluster after this long unadmitted."
    )
    prefer_fit_now: bool = Field(
        True,
        description="Rank clusters where the workload fits now above cheaper ones where it waits.",
    )


@dataclass(frozen=True, slots=True)
class CostScorer:
    """Scores ``-cost`` (cheaper is better)."""

    costs: dict[str, float] = field(default_factory=dict)
    cost_label: str = COST_LABEL
    default_cost: float = 1.0
    name: str = "cost"
    tier: int = TIER_PREFERENCE
    weight: float = 1.0

    def cost_of(self, cluster: ClusterSnapshot) -> float:
        """The configured cost of ``cluster``."""
        if cluster.name in self.costs:
            return self.costs[cluster.name]
        raw = cluster.labels.get(self.cost_label)
        if raw is None:
            return self.default_cost
        try:
            return float(raw)
        except ValueError:
            return self.default_cost

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Minus the cost."""
        cost = self.cost_of(cluster)
        return -cost, f"cost {cost:g}"


def build_cost_aware(options: CostAwareOptions) -> Stages:
    """The stages of ``cost-aware``."""
    scorers: tuple[Any, ...] = (
        CostScorer(options.costs, options.cost_label, options.default_cost),
        QueueAheadScorer(),
    )
    if options.prefer_fit_now:
        scorers = (FitsNowScorer(), *scorers)
    return Stages(
        filters=(QueueFilter(), CanEverFitFilter()),
        scorers=scorers,
        selector=CapacityFirstSelector(
            patience_seconds=options.spill_after_seconds, on_patience="move", max_clusters=1
        ),
    )


COST_AWARE = AlgorithmSpec(
    name="cost-aware",
    summary="Cheapest cluster where the workload fits; spill over to the next after a while.",
    options=CostAwareOptions,
    build=build_cost_aware,
)


@hookimpl
def mkd_register_algorithms() -> Sequence[AlgorithmSpec[Any]]:
    """Provide ``cost-aware``."""
    return [COST_AWARE]
