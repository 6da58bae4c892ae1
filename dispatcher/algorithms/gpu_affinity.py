"""gpu-type-affinity: keep GPU-type mismatches out, prefer the workload's favourite types.

The request carries the GPU types the workload *requires* (``nodeSelector`` or required node
affinity on the GPU label key, or a per-type extended resource) and those it *prefers* (ordered,
from :data:`~dispatcher.kueue.gputypes.PREFERRED_GPU_TYPES_ANNOTATION`). Snapshots carry the types
each cluster offers (worker ResourceFlavor ``nodeLabels`` or the admin's MultiKueueCluster labels).

The ``gpu-type`` filter drops clusters that offer none of the required types; the
``gpu-preference`` scorer ranks clusters by the best preferred type they offer. On its own the
algorithm nominates the best-ranked cluster; the default pipeline composes it with
``capacity-first``, whose "fits now" tier ranks above preferences, so a preferred but full cluster
loses to a less preferred one where the workload fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dispatcher.algorithms.base import AlgorithmSpec
from dispatcher.algorithms.model import ClusterSnapshot, DispatchRequest, Rejection, RejectionReason
from dispatcher.algorithms.stages import TIER_PREFERENCE, StageContext, Stages
from dispatcher.kueue.gputypes import DEFAULT_GPU_LABEL, DEFAULT_GPU_RESOURCE_PATTERN

__all__ = [
    "GPU_TYPE_AFFINITY",
    "GpuPreferenceScorer",
    "GpuTypeAffinityOptions",
    "GpuTypeFilter",
    "build_gpu_type_affinity",
]


class GpuTypeAffinityOptions(BaseModel):
    """Options of ``gpu-type-affinity``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label_key: str = Field(
        DEFAULT_GPU_LABEL,
        description="Node label key that names the GPU type, in pod templates and in worker "
        "ResourceFlavor `nodeLabels`.",
    )
    resource_pattern: str = Field(
        DEFAULT_GPU_RESOURCE_PATTERN,
        description="Regular expression with a `type` group matching per-type extended resource "
        "names such as `example.com/gpu-h100`.",
    )
    strict: bool = Field(
        True,
        description="Drop clusters that report no GPU type at all when the workload requires one; "
        "`false` keeps them (useful when workers' flavors cannot be read).",
    )
    preference_weight: float = Field(
        1.0,
        ge=0,
        description="Weight of the `gpu-preference` score within the preference tier.",
    )
    spare_gpu_clusters: bool = Field(
        True,
        description="Workloads that ask for no GPU prefer clusters that offer no GPU type, "
        "keeping GPU clusters for GPU work (a preference: a GPU cluster still takes them when "
        "only it fits now).",
    )


@dataclass(frozen=True, slots=True)
class GpuTypeFilter:
    """Drops clusters that offer none of the GPU types the workload requires."""

    strict: bool = True
    name: str = "gpu-type"

    def filter(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> Rejection | None:
        """Drop on a GPU-type mismatch."""
        required = request.required_gpu_types
        if required is None:
            return None
        if not required:
            return Rejection(
                "pod sets require GPU types that contradict each other",
                RejectionReason.GPU_TYPES_CONFLICT,
            )
        if not cluster.gpu_types:
            if not self.strict:
                return None
            return Rejection(
                f"pod sets' node selector requires {', '.join(sorted(required))}; "
                "cluster reports no GPU types",
                RejectionReason.NO_GPU_TYPES,
            )
        if cluster.gpu_types.isdisjoint(required):
            return Rejection(
                f"pod sets' node selector requires {', '.join(sorted(required))}; "
                f"cluster offers {', '.join(sorted(cluster.gpu_types))}",
                RejectionReason.GPU_TYPE_MISMATCH,
            )
        return None


@dataclass(frozen=True, slots=True)
class GpuPreferenceScorer:
    """``(n - i) / n`` for the best preferred type (index ``i`` of ``n``) the cluster offers."""

    weight: float = 1.0
    name: str = "gpu-preference"
    tier: int = TIER_PREFERENCE

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Score the cluster's best preferred GPU type."""
        preferred = request.preferred_gpu_types
        if not preferred:
            return 0.0, "no preference"
        for index, gpu_type in enumerate(preferred):
            if gpu_type in cluster.gpu_types:
                return (len(preferred) - index) / len(preferred), f"offers {gpu_type}"
        return 0.0, "offers no preferred type"


ASKS_FOR_GPUS = "gpu-type-affinity/asks-for-gpus"
"""The :attr:`StageContext.memo` key of :func:`asks_for_gpus` for the decision's request."""


def asks_for_gpus(request: DispatchRequest) -> bool:
    """Whether any pod set requests a GPU resource or names a GPU type."""
    if request.required_gpu_types is not None or request.preferred_gpu_types:
        return True
    return any("gpu" in name.lower() and amount > 0 for name, amount in request.totals.items())


@dataclass(frozen=True, slots=True)
class GpuSparingScorer:
    """1 for a cluster without GPU types when the workload asks for no GPU, else 0."""

    name: str = "spare-gpu-clusters"
    tier: int = TIER_PREFERENCE
    weight: float = 1.0

    def score(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> tuple[float, str]:
        """Prefer CPU-only clusters for CPU-only work."""
        asks = ctx.memo.get(ASKS_FOR_GPUS)
        if asks is None:  # the same for every cluster of the decision
            asks = ctx.memo[ASKS_FOR_GPUS] = asks_for_gpus(request)
        if asks:
            return 0.0, "asks for GPUs"
        if cluster.gpu_types:
            return 0.0, "GPU cluster"
        return 1.0, "no GPUs asked, cluster has none"


def build_gpu_type_affinity(options: GpuTypeAffinityOptions) -> Stages:
    """The stages of ``gpu-type-affinity`` (no selector of its own)."""
    scorers: tuple[Any, ...] = (GpuPreferenceScorer(weight=options.preference_weight),)
    if options.spare_gpu_clusters:
        scorers = (*scorers, GpuSparingScorer())
    return Stages(filters=(GpuTypeFilter(strict=options.strict),), scorers=scorers)


GPU_TYPE_AFFINITY = AlgorithmSpec(
    name="gpu-type-affinity",
    summary="Drop clusters without a required GPU type; rank preferred types first.",
    options=GpuTypeAffinityOptions,
    build=build_gpu_type_affinity,
)
