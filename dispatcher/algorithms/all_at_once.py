"""all-at-once: Kueue's default dispatcher, re-created (contract C56–C57).

Nominates every cluster of the MultiKueueConfig that is currently connected and active, sorted
alphabetically; each worker's Kueue then queues its copy and the first to admit wins. Capacity,
queues and GPU types are not looked at. The nomination is recomputed whenever the set of active
clusters changes; there is no timer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dispatcher.algorithms.base import AlgorithmSpec, NoOptions
from dispatcher.algorithms.model import MAX_NOMINATED_CLUSTERS, ClusterSnapshot, DispatchRequest
from dispatcher.algorithms.stages import Selection, StageContext, Stages

__all__ = ["ALL_AT_ONCE", "AllAtOnceSelector"]


@dataclass(frozen=True, slots=True)
class AllAtOnceSelector:
    """Every surviving cluster, sorted by name (at most 20)."""

    name: str = "all-at-once"

    def select(
        self, request: DispatchRequest, ranked: Sequence[ClusterSnapshot], ctx: StageContext
    ) -> Selection:
        """Nominate all active clusters alphabetically."""
        names = tuple(sorted(c.name for c in ranked))[:MAX_NOMINATED_CLUSTERS]
        if not names:
            return Selection((), "no active cluster")
        return Selection(names, f"all {len(names)} active clusters")


def _build(options: NoOptions) -> Stages:
    return Stages(selector=AllAtOnceSelector())


ALL_AT_ONCE = AlgorithmSpec(
    name="all-at-once",
    summary="Kueue's AllAtOnce: nominate every active cluster at once.",
    options=NoOptions,
    build=_build,
)
