"""Cost-aware ordering with spill-over: an example multikueue-dispatcher plugin."""

from __future__ import annotations

from multikueue_dispatcher_cost.plugin import COST_AWARE, CostAwareOptions, CostScorer

__all__ = ["COST_AWARE", "CostAwareOptions", "CostScorer"]
