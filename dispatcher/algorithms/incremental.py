"""incremental: Kueue's Incremental dispatcher, re-created (contract C58–C61).

Rounds of ``step_size`` clusters: the first round nominates the first ``step_size`` candidates;
whenever a round has stood for ``round_timeout_seconds`` without admission, the next
``step_size`` candidates are **appended**. Nominations are never withdrawn until admission or
eviction (which clears them, so the next round starts from the head of the list again). The
candidate list is the MultiKueueConfig order (Kueue ≥ 0.19 with the default gate) or alphabetical
(older Kueue). The round start is the time the nomination last changed (the dispatcher recovers
it from the API after a restart, where Kueue's in-memory round timer starts the next round at
once); a request with no nomination age at all starts the next round at once.

One deliberate difference: Kueue also nominates disconnected clusters (wasting a slot for a whole
round, C61); here inactive clusters are skipped, as for every algorithm of this project.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dispatcher.algorithms.base import AlgorithmSpec
from dispatcher.algorithms.model import MAX_NOMINATED_CLUSTERS, ClusterSnapshot, DispatchRequest
from dispatcher.algorithms.stages import Selection, StageContext, Stages

__all__ = ["INCREMENTAL", "IncrementalOptions", "IncrementalSelector"]

ROUND_TIMEOUT_SECONDS = 300.0
"""Kueue's hard-coded ``incrementalDispatcherRoundTimeout`` (5 minutes)."""


class IncrementalOptions(BaseModel):
    """Options of ``incremental``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step_size: int = Field(
        3,
        ge=1,
        le=MAX_NOMINATED_CLUSTERS,
        description="Clusters added per round (Kueue's `incrementalDispatcherConfig.stepSize`).",
    )
    round_timeout_seconds: float = Field(
        ROUND_TIMEOUT_SECONDS,
        gt=0,
        description="How long a round stands before the next one (Kueue: 5 minutes, fixed).",
    )
    order: Literal["config", "alphabetical"] = Field(
        "config",
        description="Candidate order: MultiKueueConfig order (Kueue ≥ 0.19) or alphabetical "
        "(Kueue ≤ 0.18, or gate `MultiKueueIncrementalDispatcherRespectConfigOrder` off).",
    )


@dataclass(frozen=True, slots=True)
class IncrementalSelector:
    """Append ``step_size`` clusters per round of ``round_timeout_seconds``."""

    step_size: int = 3
    round_timeout_seconds: float = ROUND_TIMEOUT_SECONDS
    order: Literal["config", "alphabetical"] = "config"
    name: str = "incremental"

    def select(
        self, request: DispatchRequest, ranked: Sequence[ClusterSnapshot], ctx: StageContext
    ) -> Selection:
        """Keep the round running, or start the next one."""
        if self.order == "config":
            candidates = sorted(ranked, key=lambda c: (c.order, c.name))
        else:
            candidates = sorted(ranked, key=lambda c: c.name)
        alive = {c.name for c in candidates}
        current = tuple(n for n in request.nominated if n in alive)
        timeout = self.round_timeout_seconds
        age = request.nomination_age
        if current and age is not None and age < timeout:
            return Selection(current, f"round running: {timeout - age:.0f}s left", timeout - age)
        rest = [c.name for c in candidates if c.name not in current]
        if not rest:
            if not current:
                return Selection((), "no more workers")
            return Selection(current, "no more workers to add", timeout)
        room = MAX_NOMINATED_CLUSTERS - len(current)
        added = tuple(rest[: min(self.step_size, room)])
        nominate = (*current, *added)
        label = "first round" if not current else "next round"
        return Selection(nominate, f"{label}: adding {', '.join(added)}", timeout)


def _build(options: IncrementalOptions) -> Stages:
    return Stages(
        selector=IncrementalSelector(
            step_size=options.step_size,
            round_timeout_seconds=options.round_timeout_seconds,
            order=options.order,
        )
    )


INCREMENTAL = AlgorithmSpec(
    name="incremental",
    summary="Kueue's Incremental: add step_size clusters per 5-minute round, in config order.",
    options=IncrementalOptions,
    build=_build,
)
