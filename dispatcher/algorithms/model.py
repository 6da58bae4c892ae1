"""Inputs and outputs of a dispatch decision: request, cluster snapshots, verdicts, decision.

All types are frozen dataclasses. Algorithms are pure functions of ``(request, snapshots)`` (the
request carries ``now``), so equal inputs give equal decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dispatcher.kueue.admission import ReservingWorkload
from dispatcher.kueue.hints import NO_HINTS, PlacementHints, Taint
from dispatcher.kueue.objects import (
    ClusterQueueView,
    FlavorResource,
    PodSetView,
    ResourceFlavorView,
    frozen_map,
)
from dispatcher.kueue.quantities import add_requests

__all__ = [
    "MAX_NOMINATED_CLUSTERS",
    "REJECTION_REASONS",
    "ClusterSnapshot",
    "Decision",
    "DispatchRequest",
    "QueuedWorkload",
    "Rejection",
    "RejectionReason",
    "ScoreComponent",
    "StageError",
    "Verdict",
]

MAX_NOMINATED_CLUSTERS = 20
"""A MultiKueueConfig lists at most 20 clusters, so a nomination never names more."""


@dataclass(frozen=True, slots=True)
class DispatchRequest:
    """Everything about one manager Workload that a placement decision may use.

    Times are seconds on one clock (the controller passes wall-clock epoch seconds, the simulator
    virtual time); ``now`` is part of the request so decisions are reproducible.
    """

    namespace: str
    name: str
    now: float
    pod_sets: tuple[PodSetView, ...]
    queue_name: str = ""
    priority: int = 0
    required_gpu_types: frozenset[str] | None = None
    """GPU types the workload can run on; ``None`` when it does not constrain the type."""
    preferred_gpu_types: tuple[str, ...] = ()
    """GPU types in order of preference (from the workload's annotation)."""
    queued_at: float | None = None
    """When the workload started waiting for a worker (quota reserved on the manager)."""
    nominated: tuple[str, ...] = ()
    """The current ``status.nominatedClusterNames``."""
    nominated_at: float | None = None
    """When the current nomination was last changed."""
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    name_taken: Mapping[str, str] = field(default_factory=frozen_map)
    """Candidate clusters where this workload can never run because a Workload or Job of its
    name is there and is not a copy of ours, with what holds the name (the same-name guard; the
    controller fills it from its mirrors). Every pipeline drops them, as it drops inactive
    clusters."""
    copy_lost: Mapping[str, str] = field(default_factory=frozen_map)
    """Candidate clusters where this workload's admitted copy vanished a short while ago
    (Kueue's check went ``Retry``, "Admitting remote no longer exists"), with why they are left
    out: a worker whose Kueue had not seen its old Job deleted yet adopts a new copy into it,
    and the garbage collector deletes that copy again (contract C91). The controller fills it
    for ``lost_copy_cooldown_seconds`` from the loss; every pipeline drops them, as it drops
    inactive clusters."""
    max_execution_seconds: int | None = None
    """``spec.maximumExecutionTimeSeconds`` of the Workload (from the Job's
    ``kueue.x-k8s.io/max-exec-time-seconds`` label), if set: how long its copy may run."""
    hints: PlacementHints = NO_HINTS
    """The workload's placement hints (:mod:`dispatcher.kueue.hints`): every pipeline drops the
    clusters a required hint or an untolerated taint rules out (stage ``hints``) and ranks the
    rest by the preferred ones."""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def totals(self) -> Mapping[str, int]:
        """Requests of all pod sets per resource, in milli-units."""
        return add_requests(*(ps.total for ps in self.pod_sets))

    @property
    def waiting_seconds(self) -> float:
        """How long the workload has waited for a worker (0 when unknown)."""
        return 0.0 if self.queued_at is None else max(0.0, self.now - self.queued_at)

    @property
    def nomination_age(self) -> float | None:
        """How long the current nomination has stood, or ``None`` when there is none."""
        if not self.nominated or self.nominated_at is None:
            return None
        return max(0.0, self.now - self.nominated_at)


@dataclass(frozen=True, slots=True)
class QueuedWorkload:
    """A workload that occupies or waits for quota on a worker, seen from the dispatcher.

    Used for two lists of a snapshot: workloads *pending* in the worker's ClusterQueue, and
    *in-flight* nominations (ours, not yet reserved by the worker's Kueue).
    """

    key: str
    priority: int = 0
    pod_sets: tuple[PodSetView, ...] = ()
    max_execution_seconds: int | None = None
    """``spec.maximumExecutionTimeSeconds`` (how long it may run once admitted), if set."""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """A worker cluster as one decision sees it, for the request's namespace and queue."""

    name: str
    active: bool = True
    """Connected and ``Active=True`` on its MultiKueueCluster."""
    inactive_reason: str = ""
    order: int = 0
    """Position in the MultiKueueConfig (ties are broken by this, then by name)."""
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    """Labels of the MultiKueueCluster object (admin hints: GPU types, cost, region …)."""
    cluster_queue: ClusterQueueView | None = None
    """The worker ClusterQueue behind the request's LocalQueue; ``None`` if there is none."""
    flavors: Mapping[str, ResourceFlavorView] = field(default_factory=frozen_map)
    cohort_room: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """Quota the cohort could lend right now, per ``(flavor, resource)``."""
    cohort_limit: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """The most the cohort could ever lend, per ``(flavor, resource)``."""
    pending: tuple[QueuedWorkload, ...] = ()
    """Workloads waiting in that ClusterQueue."""
    in_flight: tuple[QueuedWorkload, ...] = ()
    """Our nominations to this cluster that its Kueue has not reserved yet, oldest first."""
    holders: tuple[ReservingWorkload, ...] = ()
    """The workloads holding quota in that ClusterQueue (ours or not): what a preemption there
    could evict, with their priority and since when they hold it."""
    run_seconds: tuple[float, ...] = ()
    """How long workloads of that ClusterQueue ran (``Admitted`` to ``Finished``), the most
    recent ones the mirror saw, sorted: the statistics a predicted start is made of."""
    gpu_types: frozenset[str] = frozenset()
    """GPU types the cluster offers (learned from flavors or overridden by labels)."""
    taints: tuple[Taint, ...] = ()
    """Taints of the MultiKueueCluster (its ``multikueue-dispatcher.io/cluster-taints``
    annotation): a workload must tolerate them to be placed there."""
    taints_error: str = ""
    """Why the MultiKueueCluster's taints cannot be read (empty: they can). Such a cluster is
    taken for tainted by something no workload tolerates until the annotation is fixed."""
    derived: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    """Cache of values derived from this (immutable) snapshot alone, such as the quota left after
    in-flight deduction; shared by all decisions that use the snapshot. Not part of equality."""


@dataclass(frozen=True, slots=True)
class ScoreComponent:
    """One scorer's contribution to a cluster's rank."""

    scorer: str
    tier: int
    value: float
    weight: float = 1.0
    detail: str = ""


class RejectionReason(StrEnum):
    """Why a filter dropped a cluster, as a code from a fixed set (:data:`REJECTION_REASONS`
    says what each means).

    The ``reason`` label of ``multikueue_dispatcher_filtered_clusters_total`` is one of these,
    never a filter's free text (which names clusters, queues and quantities), so the series'
    cardinality stays bounded: filters times codes.
    """

    INACTIVE = "inactive"
    NO_LOCAL_QUEUE = "no_local_queue"
    CLUSTER_QUEUE_INACTIVE = "cluster_queue_inactive"
    NEVER_FITS = "never_fits"
    GPU_TYPES_CONFLICT = "gpu_types_conflict"
    NO_GPU_TYPES = "no_gpu_types"
    GPU_TYPE_MISMATCH = "gpu_type_mismatch"
    NAME_TAKEN = "name_taken"
    COPY_LOST = "copy_lost"
    PLACEMENT_HINT = "placement_hint"
    TAINTED = "tainted"
    RESTRICTED = "restricted"
    OTHER = "other"


REJECTION_REASONS: Mapping[RejectionReason, str] = {
    RejectionReason.INACTIVE: "not connected, not Active on its MultiKueueCluster, or no such "
    "MultiKueueCluster (the pipeline's own 'active' filter)",
    RejectionReason.NO_LOCAL_QUEUE: "the worker has no LocalQueue of the workload's queue name "
    "with a ClusterQueue behind it",
    RejectionReason.CLUSTER_QUEUE_INACTIVE: "the worker's ClusterQueue behind that LocalQueue is "
    "not active",
    RejectionReason.NEVER_FITS: "bigger than the ClusterQueue's quota plus all it may borrow",
    RejectionReason.GPU_TYPES_CONFLICT: "the pod sets require GPU types that contradict each other",
    RejectionReason.NO_GPU_TYPES: "a GPU type is required and the cluster reports none",
    RejectionReason.GPU_TYPE_MISMATCH: "the cluster offers none of the required GPU types",
    RejectionReason.NAME_TAKEN: "a Workload or Job of the workload's name is on the cluster and "
    "is not a copy of ours: Kueue would never run it there (the pipeline's own 'same-name' "
    "guard)",
    RejectionReason.COPY_LOST: "the workload's admitted copy there vanished a short while ago "
    "(Kueue: 'Admitting remote no longer exists'); left out for lost_copy_cooldown_seconds, as a "
    "worker whose Kueue has not seen its old Job deleted would lose the next copy too (the "
    "pipeline's own 'copy-lost' guard)",
    RejectionReason.PLACEMENT_HINT: "ruled out by one of the workload's placement hints (cluster "
    "names, cluster selector, required cluster affinity; the pipeline's own 'hints' stage)",
    RejectionReason.TAINTED: "the MultiKueueCluster has a NoSchedule or NoExecute taint the "
    "workload does not tolerate, or taints that cannot be read (the pipeline's own 'hints' stage)",
    RejectionReason.RESTRICTED: "left out by a plugin's mkd_restrict_clusters",
    RejectionReason.OTHER: "any other reason: a filter that returned free text (a plugin's "
    "mkd_filter_cluster does)",
}
"""What each :class:`RejectionReason` means (``docs/metrics.md`` lists them)."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """A filter's reason to drop a cluster: the text shown in verdicts and Events, and its code.

    A filter may also return a plain ``str``; its code is then :attr:`RejectionReason.OTHER`.
    """

    text: str
    code: RejectionReason

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the pipeline concluded about one candidate cluster."""

    cluster: str
    kept: bool
    dropped_by: str | None = None
    """The filter that dropped it (``None`` when kept)."""
    reason: str = ""
    scores: tuple[ScoreComponent, ...] = ()
    rank: int | None = None
    """0 for the best kept cluster; ``None`` when dropped."""
    fits_now: bool | None = None
    """Whether the workload fits right now after in-flight deduction (if it was evaluated)."""
    reason_code: RejectionReason | None = None
    """The code of ``reason`` when dropped (``None`` when kept)."""


@dataclass(frozen=True, slots=True)
class StageError:
    """A stage that failed and was skipped for this decision."""

    stage: str
    source: str
    """The plugin (or ``builtin``) that provided the stage."""
    message: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome: whom to nominate now, why, and when to look again."""

    algorithm: str
    nominate: tuple[str, ...]
    """The full nomination to write (not a delta); empty means none."""
    reason: str
    verdicts: tuple[Verdict, ...] = ()
    requeue_after: float | None = None
    """Seconds until the workload should be evaluated again (``None``: on the next event)."""
    errors: tuple[StageError, ...] = ()
    withheld: str = ""
    """Non-empty when a filter of a fail-closed plugin failed: why. Such a decision must not
    be written (``nominate`` is empty and means nothing); the workload keeps whatever
    nomination it has until a later decision succeeds."""
    predictions: Mapping[str, float] = field(default_factory=frozen_map)
    """Predicted start per cluster (epoch seconds, the request's clock) where a stage computed
    one (capacity-first's ``predicted-start``): now where the workload fits now or would
    preempt, later where it must wait."""

    def verdict(self, cluster: str) -> Verdict:
        """The verdict for ``cluster`` (``KeyError`` if it was not a candidate)."""
        for verdict in self.verdicts:
            if verdict.cluster == cluster:
                return verdict
        raise KeyError(cluster)

    @property
    def kept(self) -> tuple[str, ...]:
        """Clusters that passed every filter, best first."""
        ranked = [v for v in self.verdicts if v.kept and v.rank is not None]
        return tuple(v.cluster for v in sorted(ranked, key=lambda v: v.rank or 0))
