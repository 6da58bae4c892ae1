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
        # Per cluster, the ordered workloads and the oldest ``since`` of its current entries:
        # decisions read every candidate cluster, but a nomination changes only one or a few,
        # so the others are not re-sorted (a burst would otherwise be quadratic).
        self._ordered: dict[str, tuple[tuple[QueuedWorkload, ...], float]] = {}
        self._changed: set[str] = set()

    def _touch(self, cluster: str) -> None:
        """``cluster``'s entries changed: its order is rebuilt when next read."""
        self._ordered.pop(cluster, None)
        self._changed.add(cluster)

    def changed(self) -> set[str]:
        """The clusters whose entries changed since the last call (the in-flight gauge
        publishes only those: a write changes one or a few of many)."""
        changed, self._changed = self._changed, set()
        return changed

    def record(self, clusters: tuple[str, ...], workload: QueuedWorkload, now: float) -> None:
        """The workload is now nominated to exactly ``clusters``."""
        for cluster, entries in self._entries.items():
            if cluster not in clusters and entries.pop(workload.key, None) is not None:
                self._touch(cluster)
        for cluster in clusters:
            entries = self._entries.setdefault(cluster, {})
            previous = entries.get(workload.key)
            since = previous.since if previous is not None else now
            entry = InFlightEntry(cluster, workload, since)
            if previous != entry:
                entries[workload.key] = entry
                self._touch(cluster)

    def settle(self, cluster: str, key: str) -> bool:
        """The worker reserved quota for ``key`` (or the copy is gone): drop that entry."""
        if self._entries.get(cluster, {}).pop(key, None) is None:
            return False
        self._touch(cluster)
        return True

    def forget(self, key: str) -> None:
        """Drop ``key`` everywhere (admitted, evicted, deleted, no longer eligible)."""
        for cluster, entries in self._entries.items():
            if entries.pop(key, None) is not None:
                self._touch(cluster)

    def on(self, cluster: str, now: float) -> tuple[QueuedWorkload, ...]:
        """Unexpired in-flight workloads on ``cluster``, oldest first."""
        cached = self._ordered.get(cluster)
        if cached is not None and now - cached[1] <= self.expiry_seconds:
            return cached[0]
        entries = self._entries.get(cluster, {})
        for key, entry in list(entries.items()):
            if now - entry.since > self.expiry_seconds:
                del entries[key]
                self._changed.add(cluster)
        ordered = sorted(entries.values(), key=lambda e: (e.since, e.workload.key))
        oldest = ordered[0].since if ordered else now
        workloads = tuple(e.workload for e in ordered)
        self._ordered[cluster] = (workloads, oldest)
        return workloads

    def holds(self, cluster: str, key: str) -> bool:
        """Whether ``key`` is in flight on ``cluster`` (O(1); expired entries count until
        :meth:`on` drops them)."""
        return key in self._entries.get(cluster, ())

    def clusters_of(self, key: str) -> tuple[str, ...]:
        """Clusters where ``key`` is in flight."""
        return tuple(sorted(c for c, entries in self._entries.items() if key in entries))

    def count(self, cluster: str, now: float | None = None) -> int:
        """How many workloads are in flight on ``cluster`` (unexpired at ``now`` when given)."""
        if now is not None:
            return len(self.on(cluster, now))
        return len(self._entries.get(cluster, {}))

    def clusters(self) -> tuple[str, ...]:
        """Clusters with at least one entry."""
        return tuple(sorted(c for c, entries in self._entries.items() if entries))
