"""In-flight capacity: nominations we wrote that the worker's Kueue has not reserved yet.

Between the nomination write and the moment the worker's ClusterQueue status counts the copy,
a burst of decisions would otherwise all see the same idle cluster and over-fill it (issue 4).
Entries leave the ledger when the copy has quota reserved on that worker, when the nomination
no longer names the cluster, when the workload is admitted somewhere or stops being eligible,
or after a safety expiry.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.algorithms.model import QueuedWorkload

__all__ = ["InFlight", "InFlightEntry"]


@dataclass(frozen=True, slots=True)
class InFlightEntry:
    """One nominated workload on one cluster, since ``since`` (seconds)."""

    cluster: str
    workload: QueuedWorkload
    since: float


class InFlight:
    """The ledger, keyed by cluster and workload."""

    def __init__(self, expiry_seconds: float = 600.0) -> None:
        self._entries: dict[str, dict[str, InFlightEntry]] = {}
        self.expiry_seconds = expiry_seconds

    def record(self, clusters: tuple[str, ...], workload: QueuedWorkload, now: float) -> None:
        """The workload is now nominated to exactly ``clusters``."""
        for cluster, entries in self._entries.items():
            if cluster not in clusters:
                entries.pop(workload.key, None)
        for cluster in clusters:
            entries = self._entries.setdefault(cluster, {})
            previous = entries.get(workload.key)
            since = previous.since if previous is not None else now
            entries[workload.key] = InFlightEntry(cluster, workload, since)

    def settle(self, cluster: str, key: str) -> bool:
        """The worker reserved quota for ``key`` (or the copy is gone): drop that entry."""
        return self._entries.get(cluster, {}).pop(key, None) is not None

    def forget(self, key: str) -> None:
        """Drop ``key`` everywhere (admitted, evicted, deleted, no longer eligible)."""
        for entries in self._entries.values():
            entries.pop(key, None)

    def on(self, cluster: str, now: float) -> tuple[QueuedWorkload, ...]:
        """Unexpired in-flight workloads on ``cluster``, oldest first."""
        entries = self._entries.get(cluster, {})
        for key, entry in list(entries.items()):
            if now - entry.since > self.expiry_seconds:
                del entries[key]
        ordered = sorted(entries.values(), key=lambda e: (e.since, e.workload.key))
        return tuple(e.workload for e in ordered)

    def clusters_of(self, key: str) -> tuple[str, ...]:
        """Clusters where ``key`` is in flight."""
        return tuple(sorted(c for c, entries in self._entries.items() if key in entries))

    def count(self, cluster: str) -> int:
        """How many workloads are in flight on ``cluster``."""
        return len(self._entries.get(cluster, {}))

    def clusters(self) -> tuple[str, ...]:
        """Clusters with at least one entry."""
        return tuple(sorted(c for c, entries in self._entries.items() if entries))
