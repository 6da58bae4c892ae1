"""Built-in dispatch algorithms: pure, synchronous functions of (request, snapshots) → decision.

An algorithm is an :class:`AlgorithmSpec`: a name, a pydantic options model and a ``build``
function returning the :class:`Stages` (filters, scorers, selector) it contributes. Algorithms
compose into a :class:`Pipeline`; the default pipeline is :data:`DEFAULT_PIPELINE`.
This package knows nothing of pluggy: ``dispatcher.plugins`` registers these algorithms through
the same hook third-party plugins use.
"""

from __future__ import annotations

from typing import Any

from dispatcher.algorithms.all_at_once import ALL_AT_ONCE
from dispatcher.algorithms.base import AlgorithmSpec, NoOptions
from dispatcher.algorithms.building import (
    queued_workload,
    request_from_workload,
    snapshot_from_objects,
)
from dispatcher.algorithms.capacity_first import CAPACITY_FIRST, CapacityFirstOptions
from dispatcher.algorithms.explain import describe_decision
from dispatcher.algorithms.gpu_affinity import GPU_TYPE_AFFINITY, GpuTypeAffinityOptions
from dispatcher.algorithms.incremental import INCREMENTAL, IncrementalOptions
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
from dispatcher.algorithms.stages import (
    TIER_BACKLOG,
    TIER_CAPACITY,
    TIER_FEASIBILITY,
    TIER_PREFERENCE,
    TIER_WAIT,
    ClusterFit,
    Filter,
    Pipeline,
    Scorer,
    Selection,
    Selector,
    StageContext,
    Stages,
    TopN,
    compose,
)

__all__ = [
    "ALL_AT_ONCE",
    "BUILTIN_ALGORITHMS",
    "CAPACITY_FIRST",
    "DEFAULT_PIPELINE",
    "GPU_TYPE_AFFINITY",
    "INCREMENTAL",
    "MAX_NOMINATED_CLUSTERS",
    "TIER_BACKLOG",
    "TIER_CAPACITY",
    "TIER_FEASIBILITY",
    "TIER_PREFERENCE",
    "TIER_WAIT",
    "AlgorithmSpec",
    "CapacityFirstOptions",
    "ClusterFit",
    "ClusterSnapshot",
    "Decision",
    "DispatchRequest",
    "Filter",
    "GpuTypeAffinityOptions",
    "IncrementalOptions",
    "NoOptions",
    "Pipeline",
    "QueuedWorkload",
    "Rejection",
    "RejectionReason",
    "ScoreComponent",
    "Scorer",
    "Selection",
    "Selector",
    "StageContext",
    "StageError",
    "Stages",
    "TopN",
    "Verdict",
    "compose",
    "describe_decision",
    "queued_workload",
    "request_from_workload",
    "snapshot_from_objects",
]

BUILTIN_ALGORITHMS: tuple[AlgorithmSpec[Any], ...] = (
    CAPACITY_FIRST,
    GPU_TYPE_AFFINITY,
    ALL_AT_ONCE,
    INCREMENTAL,
)
"""The algorithms that ship with the dispatcher."""

DEFAULT_PIPELINE: tuple[str, ...] = ("gpu-type-affinity", "capacity-first")
"""Algorithms composed when settings name none: GPU-type filtering and scoring, then capacity."""
