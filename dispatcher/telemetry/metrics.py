"""The dispatcher's Prometheus series, defined once, recorded through a typed facade.

Instruments are OpenTelemetry instruments read by the Prometheus exporter into an explicit
:class:`prometheus_client.CollectorRegistry`: the exporter adds the ``_total`` and unit
suffixes, scope labels and ``target_info`` are switched off, so the series look like Kueue's
(docs/metrics.md lists them as exported).
Every series carries ``replica_role`` (``leader``, ``follower`` or ``standalone``) as Kueue's do.
Gauges are observable: a removed cluster's series disappear with :meth:`Metrics.forget_cluster`.
``docs/metrics.md`` is generated from :data:`SERIES` (``scripts/gen_metrics_docs.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

from dispatcher.algorithms.model import RejectionReason

__all__ = [
    "DECISION_LATENCY_BUCKETS",
    "ERROR_KINDS",
    "PREFIX",
    "SERIES",
    "TIME_TO_ADMISSION_BUCKETS",
    "ConnectionState",
    "ErrorKind",
    "Metrics",
    "ReplicaRole",
    "Series",
]

PREFIX = "multikueue_dispatcher_"
"""Prefix of every series (Kueue owns ``kueue_*`` and ``multikueue_*``)."""

ReplicaRole = Literal["leader", "follower", "standalone"]
"""Kueue's ``replica_role`` values: ``standalone`` when leader election is off."""

ErrorKind = Literal[
    "api",
    "watch",
    "kubeconfig",
    "decision",
    "plugin",
    "write",
    "write_conflict",
    "event",
    "unexpected",
]
"""Values of the ``kind`` label of ``multikueue_dispatcher_errors_total``."""

ERROR_KINDS: dict[ErrorKind, str] = {
    "api": "a reconcile failed on a manager API error other than its status write (retried "
    "with backoff, never sooner than a Retry-After)",
    "watch": "a list or watch request of a manager or worker resource failed (one per failed "
    "attempt, retried with backoff); a stream that stayed open and was cut is watched again "
    "at once and not counted, nor is an optional resource a cluster does not serve (the "
    "manager's LocalQueues answering 403 or 404)",
    "kubeconfig": "a worker's kubeconfig Secret was refused (missing, not valid, or insecure, "
    "contract C62), once per Secret content: the worker is unusable until the Secret changes",
    "decision": "a decision timed out or raised (the workload keeps its nomination)",
    "plugin": "a plugin stage failed and was skipped for one decision",
    "write": "a nomination write (status.nominatedClusterNames) failed with an error answer or "
    "no answer, other than a lost race (retried with backoff)",
    "write_conflict": "a nomination write lost a race (409, or 422 because Kueue set "
    "clusterName meanwhile): the workload is decided again on fresh data",
    "event": "an Event could not be recorded",
    "unexpected": "a reconcile raised an exception nobody foresaw (a bug): logged with its "
    "traceback, the workload retried with backoff",
}
"""What each error kind counts (``docs/metrics.md`` lists it)."""

DECISION_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Seconds; decisions are in-memory computations over cached snapshots."""

TIME_TO_ADMISSION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Seconds; up to Kueue's Incremental round (5 min) and beyond."""
PREDICTED_START_ERROR_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Seconds (the error's size; its sign is the ``direction`` label)."""


class ConnectionState(StrEnum):
    """State of the connection to one worker cluster (``state`` label)."""

    CONNECTING = "connecting"
    """Kubeconfig accepted; the first list of the mirrors has not finished."""
    CONNECTED = "connected"
    """Mirrors synced and watching."""
    DISCONNECTED = "disconnected"
    """Was connected or connecting; requests fail, reconnecting with backoff."""
    UNUSABLE = "unusable"
    """The kubeconfig Secret is missing or refused (contract C62); nothing is tried until it
    changes."""


@dataclass(frozen=True)
class Series:
    """One series family as exported (the documentation row and the instrument definition)."""

    instrument: str
    """OpenTelemetry instrument name (exported name without the suffixes)."""
    kind: Literal["counter", "gauge", "histogram"]
    unit: str
    """UCUM unit: ``s`` adds ``_seconds``; ``1`` adds nothing."""
    labels: tuple[str, ...]
    """Labels besides ``replica_role``, in documentation order."""
    description: str

    @property
    def name(self) -> str:
        """The family name as Prometheus shows it."""
        name = self.instrument + ("_seconds" if self.unit == "s" else "")
        return name + ("_total" if self.kind == "counter" else "")

    @property
    def all_labels(self) -> tuple[str, ...]:
        """Every label of the series, ``replica_role`` last."""
        return (*self.labels, "replica_role")


NOMINATIONS = Series(
    PREFIX + "nominations",
    "counter",
    "1",
    ("cluster_queue", "cluster", "algorithm"),
    "Clusters nominated: one per cluster written to status.nominatedClusterNames; algorithm "
    "is the pipeline, or 'copy-holds-quota' for a nomination written back to the worker whose "
    "copy already holds quota.",
)
DECISION_LATENCY = Series(
    PREFIX + "decision_latency",
    "histogram",
    "s",
    ("cluster_queue", "algorithm"),
    "Time to take one dispatch decision: building the request and the candidate clusters' "
    "snapshots from the caches, and the algorithm pipeline (the wait for the decision lock "
    "excluded); cluster_queue is the workload's ClusterQueue on the manager.",
)
TIME_TO_ADMISSION = Series(
    PREFIX + "time_to_admission",
    "histogram",
    "s",
    ("cluster_queue", "cluster"),
    "Time from quota reservation on the manager to admission on a worker (status.clusterName set).",
)
PREDICTED_WAIT = Series(
    PREFIX + "predicted_wait",
    "gauge",
    "s",
    ("cluster",),
    "The wait predicted (capacity-first's predicted start, minus the time of the decision) by "
    "the latest nomination to the cluster of a workload that could not start there at once.",
)
PREDICTED_START_ERROR = Series(
    PREFIX + "predicted_start_error",
    "histogram",
    "s",
    ("cluster", "direction"),
    "For a workload nominated with a predicted wait: how far its admission on the cluster "
    "(status.clusterName set) was from the predicted start; direction 'late' when it started "
    "after the prediction, 'early' when before.",
)
IN_FLIGHT = Series(
    PREFIX + "in_flight_nominations",
    "gauge",
    "1",
    ("cluster",),
    "Workloads nominated to the cluster whose copy the cluster has not admitted yet.",
)
CONNECTION_STATE = Series(
    PREFIX + "worker_connection_state",
    "gauge",
    "1",
    ("cluster", "state"),
    "1 for the worker cluster's current connection state, 0 for the other states "
    "(connecting, connected, disconnected, unusable).",
)
ERRORS = Series(
    PREFIX + "errors",
    "counter",
    "1",
    ("kind",),
    "Errors by kind: api, watch, kubeconfig, decision, plugin, write, write_conflict, event, "
    "unexpected (docs/metrics.md says what each counts).",
)
FILTERED_CLUSTERS = Series(
    PREFIX + "filtered_clusters",
    "counter",
    "1",
    ("plugin", "reason"),
    "Candidate clusters a filter dropped, one per cluster per decision: plugin is the filter "
    "('active' for clusters that are not active, 'same-name' for those holding a Workload or "
    "Job of the workload's name that is not ours, 'copy-lost' for those where its admitted "
    "copy just vanished, 'hints' for those the workload's placement "
    "hints or the cluster's taints rule out, '<plugin>:filter' or '<plugin>:restrict' for "
    "a plugin's), reason a code of a fixed set (docs/metrics.md), never free text. As KEP-8692 "
    "plans kueue_dispatcher_filtered_clusters_total.",
)
NO_FEASIBLE_CLUSTER = Series(
    PREFIX + "no_feasible_cluster",
    "counter",
    "1",
    ("cluster_queue", "algorithm"),
    "Decisions in which no candidate cluster passed the filters: nothing is nominated, the "
    "workload is decided again on the next change or resync (and counted again). As KEP-8692 "
    "plans kueue_dispatcher_no_feasible_cluster_total.",
)
QUEUE_DEPTH = Series(
    PREFIX + "queue_depth",
    "gauge",
    "1",
    (),
    "Workload keys waiting in the work queue.",
)
PLUGIN_INFO = Series(
    PREFIX + "plugin_info",
    "gauge",
    "1",
    ("plugin", "distribution", "version"),
    "1 for each loaded plugin (distribution is 'built-in' for the dispatcher's own).",
)
STUCK_WORKLOADS = Series(
    PREFIX + "stuck_workloads",
    "counter",
    "1",
    ("cluster_queue",),
    "Workloads found stuck by the field-manager pitfall: a worker admitted the copy but Kueue "
    "cannot set status.clusterName while our field manager owns status.nominatedClusterNames "
    "(contract C43).",
)
STUCK_EVICTIONS = Series(
    PREFIX + "stuck_evictions",
    "counter",
    "1",
    ("cluster_queue",),
    "Manager Workloads found stuck in an eviction: evicted longer than stuck_after_seconds, "
    "still holding the manager's quota, and no copy of them left on any worker, so Kueue has "
    "nothing to copy the Job's status from and never releases the quota (contract C93).",
)
STUCK_EVICTION_RELEASES = Series(
    PREFIX + "stuck_eviction_releases",
    "counter",
    "1",
    ("cluster_queue",),
    "Stuck evictions the opt-in stuck_eviction_release policy released: the manager Job's "
    "status.active and status.ready set to 0, so that Kueue finishes the eviction (contract "
    "C93).",
)
LEFTOVER_JOBS = Series(
    PREFIX + "leftover_jobs",
    "counter",
    "1",
    ("cluster_queue", "cluster"),
    "Workloads admitted on a worker whose Job of their name is a leftover of ours that runs "
    "another Workload (its prebuilt-workload-name label): MultiKueue syncs the workload's "
    "status from that Job and never creates the workload's own, so it never runs until that "
    "Job is deleted (contract C68). Counted once per workload, after stuck_after_seconds.",
)
GPU_TYPE_MISMATCHES = Series(
    PREFIX + "gpu_type_mismatches",
    "counter",
    "1",
    ("cluster", "kind"),
    "Workloads admitted on a GPU flavor whose type (its node label) they do not require "
    "(kind=required) or, requiring none, do not prefer (kind=preferred): a worker flavor or "
    "MultiKueueCluster mislabelled, or a worker ClusterQueue that offers several types.",
)
EVENT_LOOP_TASKS = Series(
    PREFIX + "event_loop_tasks",
    "gauge",
    "1",
    (),
    "asyncio tasks alive in the event loop that serves /metrics, counted at scrape time (0 when "
    "scraped outside an event loop); flat over time when no task leaks (docs/soak.md).",
)

UNPLACEABLE_QUOTA = Series(
    PREFIX + "unplaceable_quota",
    "gauge",
    "1",
    ("cluster_queue", "flavor", "resource"),
    "Manager quota held by unplaceable workloads (quota reserved on the manager, no worker "
    "that could run them reachable; docs/outage.md), per ClusterQueue, flavor and resource, in "
    "the resource's unit (cores, bytes, devices). Series of a ClusterQueue without such "
    "workloads are not exported.",
)
UNPLACEABLE_WORKLOADS = Series(
    PREFIX + "unplaceable_workloads",
    "gauge",
    "1",
    ("cluster_queue",),
    "Unplaceable workloads per ClusterQueue of the manager (docs/outage.md).",
)
UNPLACEABLE_ACTIONS = Series(
    PREFIX + "unplaceable_actions",
    "counter",
    "1",
    ("cluster_queue", "action"),
    "What the opt-in unplaceable_release policy did: action 'release' (deactivated a workload "
    "to release its manager quota) or 'restore' (reactivated one it released).",
)

SERIES: tuple[Series, ...] = (
    NOMINATIONS,
    DECISION_LATENCY,
    TIME_TO_ADMISSION,
    PREDICTED_WAIT,
    PREDICTED_START_ERROR,
    IN_FLIGHT,
    CONNECTION_STATE,
    ERRORS,
    FILTERED_CLUSTERS,
    NO_FEASIBLE_CLUSTER,
    QUEUE_DEPTH,
    PLUGIN_INFO,
    STUCK_WORKLOADS,
    STUCK_EVICTIONS,
    STUCK_EVICTION_RELEASES,
    LEFTOVER_JOBS,
    GPU_TYPE_MISMATCHES,
    EVENT_LOOP_TASKS,
    UNPLACEABLE_QUOTA,
    UNPLACEABLE_WORKLOADS,
    UNPLACEABLE_ACTIONS,
)
"""Every series the facade registers."""


class Metrics:
    """Typed facade over the dispatcher's instruments.

    One instance per process (tests build their own): it owns a :class:`MeterProvider` whose
    only reader renders into :attr:`registry`; serve that registry at ``/metrics``. Recording
    methods are cheap and never raise for valid label values. Call :meth:`shutdown` at exit.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        replica_role: ReplicaRole = "standalone",
        service_name: str = "multikueue-dispatcher",
    ) -> None:
        """Create the instruments; ``registry`` defaults to a fresh ``CollectorRegistry``."""
        self.registry = registry if registry is not None else CollectorRegistry()
        """The registry to serve at ``/metrics``."""
        self._role: ReplicaRole = replica_role
        reader = PrometheusMetricReader(
            disable_target_info=True, scope_info_enabled=False, registry=self.registry
        )
        self._provider = MeterProvider(
            metric_readers=[reader],
            resource=Resource.create({"service.name": service_name}),
            shutdown_on_exit=False,
        )
        meter = self._provider.get_meter("multikueue_dispatcher")
        self._in_flight: dict[str, int] = {}
        self._predicted_wait: dict[str, float] = {}
        self._connection: dict[str, ConnectionState] = {}
        self._queue_depth = 0
        self._plugins: set[tuple[str, str, str]] = set()
        self._unplaceable_quota: dict[tuple[str, str, str], int] = {}
        self._unplaceable_counts: dict[str, int] = {}

        def counter(series: Series) -> Counter:
            return meter.create_counter(
                series.instrument, unit=series.unit, description=series.description
            )

        def histogram(series: Series, buckets: tuple[float, ...]) -> Histogram:
            return meter.create_histogram(
                series.instrument,
                unit=series.unit,
                description=series.description,
                explicit_bucket_boundaries_advisory=buckets,
            )

        self._nominations = counter(NOMINATIONS)
        self._errors = counter(ERRORS)
        self._filtered = counter(FILTERED_CLUSTERS)
        self._no_feasible = counter(NO_FEASIBLE_CLUSTER)
        self._stuck = counter(STUCK_WORKLOADS)
        self._stuck_evictions = counter(STUCK_EVICTIONS)
        self._stuck_eviction_releases = counter(STUCK_EVICTION_RELEASES)
        self._leftover_jobs = counter(LEFTOVER_JOBS)
        self._gpu_mismatches = counter(GPU_TYPE_MISMATCHES)
        self._unplaceable_actions = counter(UNPLACEABLE_ACTIONS)
        self._decision_latency = histogram(DECISION_LATENCY, DECISION_LATENCY_BUCKETS)
        self._time_to_admission = histogram(TIME_TO_ADMISSION, TIME_TO_ADMISSION_BUCKETS)
        self._start_error = histogram(PREDICTED_START_ERROR, PREDICTED_START_ERROR_BUCKETS)
        for series, callback in (
            (PREDICTED_WAIT, self._observe_predicted_wait),
            (IN_FLIGHT, self._observe_in_flight),
            (CONNECTION_STATE, self._observe_connection),
            (QUEUE_DEPTH, self._observe_queue_depth),
            (PLUGIN_INFO, self._observe_plugins),
            (EVENT_LOOP_TASKS, self._observe_event_loop_tasks),
            (UNPLACEABLE_QUOTA, self._observe_unplaceable_quota),
            (UNPLACEABLE_WORKLOADS, self._observe_unplaceable_workloads),
        ):
            meter.create_observable_gauge(
                series.instrument,
                callbacks=[callback],
                unit=series.unit,
                description=series.description,
            )

    # -- state ------------------------------------------------------------------------------

    @property
    def replica_role(self) -> ReplicaRole:
        """The ``replica_role`` label put on every series from now on."""
        return self._role

    def set_replica_role(self, role: ReplicaRole) -> None:
        """Switch the ``replica_role`` label (for example ``follower`` → ``leader``)."""
        self._role = role

    # -- counters and histograms ------------------------------------------------------------

    def nominated(self, clusters: Iterable[str], *, cluster_queue: str, algorithm: str) -> None:
        """Count one nomination per cluster in ``clusters`` (one written decision).

        ``algorithm`` names the pipeline, by convention its algorithm names joined with ``+``.
        """
        for cluster in clusters:
            self._nominations.add(
                1,
                {
                    "cluster_queue": cluster_queue,
                    "cluster": cluster,
                    "algorithm": algorithm,
                    "replica_role": self._role,
                },
            )

    def observe_decision_latency(
        self, seconds: float, *, cluster_queue: str, algorithm: str
    ) -> None:
        """Record how long one decision took."""
        self._decision_latency.record(
            seconds,
            {"cluster_queue": cluster_queue, "algorithm": algorithm, "replica_role": self._role},
        )

    @contextmanager
    def decision_timer(self, *, cluster_queue: str, algorithm: str) -> Iterator[None]:
        """Time the ``with`` block as one decision (recorded even when it raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe_decision_latency(
                time.perf_counter() - start, cluster_queue=cluster_queue, algorithm=algorithm
            )

    def observe_time_to_admission(
        self, seconds: float, *, cluster_queue: str, cluster: str
    ) -> None:
        """Record the time from quota reservation to admission on ``cluster``."""
        self._time_to_admission.record(
            seconds,
            {"cluster_queue": cluster_queue, "cluster": cluster, "replica_role": self._role},
        )

    def predicted_wait(self, cluster: str, seconds: float) -> None:
        """Set the wait predicted by the latest nomination to ``cluster`` that had to wait."""
        self._predicted_wait[cluster] = seconds

    def observe_predicted_start_error(self, seconds: float, *, cluster: str) -> None:
        """Record admission time minus predicted start of one workload on ``cluster`` (its
        size, and whether it was late or early)."""
        self._start_error.record(
            abs(seconds),
            {
                "cluster": cluster,
                "direction": "late" if seconds >= 0 else "early",
                "replica_role": self._role,
            },
        )

    def error(self, kind: ErrorKind) -> None:
        """Count one error of ``kind``."""
        self._errors.add(1, {"kind": kind, "replica_role": self._role})

    def filtered_cluster(self, *, plugin: str, reason: RejectionReason) -> None:
        """Count one candidate cluster dropped by the filter ``plugin`` for ``reason``.

        ``plugin`` is a stage name of the configured pipeline (a bounded set); ``reason`` a
        code, never a filter's text, so the series' cardinality stays bounded.
        """
        self._filtered.add(
            1, {"plugin": plugin, "reason": reason.value, "replica_role": self._role}
        )

    def no_feasible_cluster(self, *, cluster_queue: str, algorithm: str) -> None:
        """Count one decision in which no candidate cluster passed the filters."""
        self._no_feasible.add(
            1,
            {"cluster_queue": cluster_queue, "algorithm": algorithm, "replica_role": self._role},
        )

    def stuck_workload(self, *, cluster_queue: str) -> None:
        """Count one workload found stuck by the field-manager pitfall (contract C43)."""
        self._stuck.add(1, {"cluster_queue": cluster_queue, "replica_role": self._role})

    def stuck_eviction(self, *, cluster_queue: str) -> None:
        """Count one manager Workload found stuck in an eviction (contract C93)."""
        self._stuck_evictions.add(1, {"cluster_queue": cluster_queue, "replica_role": self._role})

    def stuck_eviction_release(self, *, cluster_queue: str) -> None:
        """Count one stuck eviction the opt-in policy released (contract C93)."""
        self._stuck_eviction_releases.add(
            1, {"cluster_queue": cluster_queue, "replica_role": self._role}
        )

    def leftover_job(self, *, cluster_queue: str, cluster: str) -> None:
        """Count one workload admitted on ``cluster`` where a leftover Job of ours runs in
        place of its own (contract C68)."""
        self._leftover_jobs.add(
            1, {"cluster_queue": cluster_queue, "cluster": cluster, "replica_role": self._role}
        )

    def gpu_type_mismatch(self, *, cluster: str, kind: Literal["required", "preferred"]) -> None:
        """Count one workload admitted on ``cluster`` on a GPU type it does not require or
        prefer (``kind``)."""
        self._gpu_mismatches.add(1, {"cluster": cluster, "kind": kind, "replica_role": self._role})

    def unplaceable_action(
        self, action: Literal["release", "restore"], *, cluster_queue: str
    ) -> None:
        """Count one release or restore of the unplaceable_release policy."""
        self._unplaceable_actions.add(
            1, {"cluster_queue": cluster_queue, "action": action, "replica_role": self._role}
        )

    # -- gauges -----------------------------------------------------------------------------

    def set_unplaceable(
        self, quota: Mapping[tuple[str, str, str], int], counts: Mapping[str, int]
    ) -> None:
        """Set the quota unplaceable workloads hold, per ``(cluster_queue, flavor, resource)``
        in milli-units, and their number per ClusterQueue (replacing the previous values)."""
        self._unplaceable_quota = dict(quota)
        self._unplaceable_counts = dict(counts)

    def set_in_flight(self, cluster: str, count: int) -> None:
        """Set the number of nominations to ``cluster`` not yet admitted there."""
        self._in_flight[cluster] = count

    def set_connection_state(self, cluster: str, state: ConnectionState) -> None:
        """Set the connection state of the worker ``cluster``."""
        self._connection[cluster] = state

    def forget_cluster(self, cluster: str) -> None:
        """Drop the gauge series of a removed worker cluster (counters keep their totals)."""
        self._in_flight.pop(cluster, None)
        self._connection.pop(cluster, None)
        self._predicted_wait.pop(cluster, None)

    def set_queue_depth(self, depth: int) -> None:
        """Set the number of keys waiting in the work queue."""
        self._queue_depth = depth

    def add_plugin_info(self, plugin: str, *, distribution: str, version: str) -> None:
        """Export ``plugin_info = 1`` for a loaded plugin (``distribution`` ``built-in`` for
        ours)."""
        self._plugins.add((plugin, distribution, version))

    def _observe_predicted_wait(self, options: CallbackOptions) -> Iterable[Observation]:
        role = self._role
        return [
            Observation(seconds, {"cluster": cluster, "replica_role": role})
            for cluster, seconds in sorted(self._predicted_wait.items())
        ]

    def _observe_in_flight(self, options: CallbackOptions) -> Iterable[Observation]:
        role = self._role
        return [
            Observation(count, {"cluster": cluster, "replica_role": role})
            for cluster, count in sorted(self._in_flight.items())
        ]

    def _observe_connection(self, options: CallbackOptions) -> Iterable[Observation]:
        role = self._role
        return [
            Observation(
                1 if state is current else 0,
                {"cluster": cluster, "state": state.value, "replica_role": role},
            )
            for cluster, current in sorted(self._connection.items())
            for state in ConnectionState
        ]

    def _observe_unplaceable_quota(self, options: CallbackOptions) -> Iterable[Observation]:
        role = self._role
        return [
            Observation(
                amount / 1000,
                {"cluster_queue": cq, "flavor": flavor, "resource": resource, "replica_role": role},
            )
            for (cq, flavor, resource), amount in sorted(self._unplaceable_quota.items())
        ]

    def _observe_unplaceable_workloads(self, options: CallbackOptions) -> Iterable[Observation]:
        role = self._role
        return [
            Observation(count, {"cluster_queue": cq, "replica_role": role})
            for cq, count in sorted(self._unplaceable_counts.items())
        ]

    def _observe_queue_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._queue_depth, {"replica_role": self._role})]

    def _observe_plugins(self, options: CallbackOptions) -> Iterable[Observation]:
        role = self._role
        return [
            Observation(
                1,
                {"plugin": plugin, "distribution": dist, "version": ver, "replica_role": role},
            )
            for plugin, dist, ver in sorted(self._plugins)
        ]

    def _observe_event_loop_tasks(self, options: CallbackOptions) -> Iterable[Observation]:
        # The exporter runs the callbacks in the scraping thread: the /metrics handler runs in
        # the event loop, so the running loop is the process's loop.
        try:
            tasks = len(asyncio.all_tasks(asyncio.get_running_loop()))
        except RuntimeError:
            tasks = 0
        return [Observation(tasks, {"replica_role": self._role})]

    def shutdown(self) -> None:
        """Shut the meter provider down (the registry keeps its last rendering out)."""
        self._provider.shutdown()
