"""Workloads that hold the manager's quota while no worker that could run them is reachable.

A workload is **placeable** when at least one *eligible* worker is reachable: a candidate
cluster the pipeline's filters keep (``Decision.kept``; the pipeline's ``active`` filter drops
every unreachable one). It is **unplaceable** when it holds quota on the manager
(``QuotaReserved=True``, its MultiKueue check ``Pending``, no ``clusterName``), no reachable
worker is eligible, and at least one unreachable worker would be: one the filters keep when
judged on our last mirror of it as if it were reachable, or one we never saw (no mirror yet, so
nothing to judge it by). A workload that no worker could run even with all of them reachable is
not unplaceable (no outage explains it; ``no_feasible_cluster_total`` counts it).

Kueue releases the quota only of a workload admitted on a lost worker (``workerLostTimeout``);
an unplaceable one keeps its manager quota for the whole outage, and everything queued behind
it on the manager (its ClusterQueue, its cohort) waits with "insufficient unused quota". The
:class:`OutageBook` keeps the unplaceable workloads (the quota they hold per flavor and
resource, for the gauges), the workloads starved behind them, and, per worker, the workloads
whose placement that worker's reachability can change, so a worker that goes or comes back
re-evaluates only those.

The opt-in release policy (``unplaceable_release``) is decided by :func:`release_due` and
:func:`restore_due`, pure functions of the annotations the dispatcher writes on the Workloads it
deactivates (``docs/outage.md``).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.kueue.objects import FlavorResource

__all__ = [
    "ANNOTATION_PREFIX",
    "RELEASED_AT",
    "RELEASED_FOR",
    "RELEASES",
    "RESTORED_AT",
    "Holder",
    "OutageBook",
    "Placement",
    "Released",
    "release_backoff",
    "release_due",
    "released_state",
    "requested_resources",
    "starved_on",
    "untried",
]

ANNOTATION_PREFIX = "multikueue-dispatcher.io/"
RELEASED_AT = ANNOTATION_PREFIX + "released-at"
"""On a Workload the dispatcher deactivated: when (RFC 3339). Only such Workloads are restored."""
RELEASED_FOR = ANNOTATION_PREFIX + "released-for"
"""The unreachable eligible workers it waited for at the release, comma-separated."""
RELEASES = ANNOTATION_PREFIX + "releases"
"""How many times the dispatcher released this Workload (the back-off grows with it)."""
RESTORED_AT = ANNOTATION_PREFIX + "restored-at"
"""When the dispatcher last restored it (the back-off runs from there)."""

MAX_BACKOFF_FACTOR = 32
"""The back-off before the n-th release is ``patience * 2**(n-1)``, at most this many times
the patience."""

_INSUFFICIENT = re.compile(r"insufficient unused quota for (\S+) in flavor ([^,;\s]+)")


@dataclass(frozen=True)
class Placement:
    """Where one quota-holding workload could go, by reachability."""

    reachable: tuple[str, ...] = ()
    """Reachable workers the filters keep."""
    unreachable: tuple[str, ...] = ()
    """Unreachable workers the filters keep on our last mirror of them."""
    unknown: tuple[str, ...] = ()
    """Unreachable workers never mirrored (nothing to filter them by)."""
    nominated: tuple[str, ...] = ()

    @property
    def unplaceable(self) -> bool:
        """No reachable eligible worker, and an outage explains it."""
        return not self.reachable and bool(self.unreachable or self.unknown)

    @property
    def waiting_for(self) -> tuple[str, ...]:
        """The unreachable workers that could run it, known ones first."""
        return self.unreachable + self.unknown

    @property
    def workers(self) -> frozenset[str]:
        """Every worker whose reachability can change this placement."""
        return frozenset(self.reachable + self.unreachable + self.unknown + self.nominated)

    def describe(self) -> str:
        """The unreachable eligible workers, for Events and ``explain``."""
        parts = []
        if self.unreachable:
            parts.append(", ".join(self.unreachable))
        if self.unknown:
            parts.append(", ".join(self.unknown) + " (never reached, so not filtered)")
        return "; ".join(parts)


@dataclass(frozen=True)
class Holder:
    """An unplaceable workload and the manager quota it holds."""

    key: str
    cluster_queue: str
    cohort: str
    usage: Mapping[FlavorResource, int]
    waiting_for: tuple[str, ...]
    since: float
    """When it was first found unplaceable (the controller's wall clock)."""
    created: str = ""
    """Its ``metadata.creationTimestamp`` (Kueue's queue order)."""


@dataclass
class OutageBook:
    """Unplaceable holders, starved workloads, and the worker index of placements."""

    holders: dict[str, Holder] = field(default_factory=dict)
    starved: dict[str, str] = field(default_factory=dict)
    """Starved workload key -> its ClusterQueue on the manager: pending for quota that
    unplaceable holders hold."""
    pending_quota: dict[str, str] = field(default_factory=dict)
    """Every workload pending on the manager with "insufficient unused quota" -> its
    ClusterQueue: the ones a new or gone holder of that ClusterQueue (or cohort) may starve or
    free."""
    by_worker: dict[str, set[str]] = field(default_factory=dict)
    _workers_of: dict[str, frozenset[str]] = field(default_factory=dict)

    def index(self, key: str, workers: Iterable[str]) -> None:
        """Remember the workers whose reachability can change ``key``'s placement."""
        new = frozenset(workers)
        old = self._workers_of.get(key, frozenset())
        if new == old:
            return
        for worker in old - new:
            keys = self.by_worker.get(worker)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_worker[worker]
        for worker in new - old:
            self.by_worker.setdefault(worker, set()).add(key)
        if new:
            self._workers_of[key] = new
        else:
            self._workers_of.pop(key, None)

    def affected_by(self, worker: str) -> set[str]:
        """The keys to re-evaluate when ``worker``'s reachability changes."""
        return set(self.by_worker.get(worker, ()))

    def forget(self, key: str) -> Holder | None:
        """Drop everything about ``key``; the holder it was, if it was one."""
        self.index(key, ())
        self.starved.pop(key, None)
        self.pending_quota.pop(key, None)
        return self.holders.pop(key, None)

    def holders_for(self, cluster_queue: str, cohort: str) -> list[Holder]:
        """Holders in ``cluster_queue`` or sharing its ``cohort`` (when it has one), oldest
        first."""
        found = [
            h
            for h in self.holders.values()
            if h.cluster_queue == cluster_queue or (cohort and h.cohort == cohort)
        ]
        return sorted(found, key=lambda h: (h.created, h.key))

    def pending_in(self, cluster_queue: str, cohort: str, cohorts: Mapping[str, str]) -> set[str]:
        """Keys pending for quota whose ClusterQueue is ``cluster_queue`` or shares ``cohort``
        (``cohorts`` maps ClusterQueue names to their cohort)."""
        return {
            key
            for key, cq in self.pending_quota.items()
            if cq == cluster_queue or (cohort and cohorts.get(cq, "") == cohort)
        }

    def quota(self) -> dict[tuple[str, str, str], int]:
        """Held quota per ``(cluster_queue, flavor, resource)``, in milli-units."""
        out: dict[tuple[str, str, str], int] = {}
        for holder in self.holders.values():
            for (flavor, resource), amount in holder.usage.items():
                key = (holder.cluster_queue, flavor, resource)
                out[key] = out.get(key, 0) + amount
        return out

    def counts(self) -> dict[str, int]:
        """Unplaceable workloads per ClusterQueue."""
        out: dict[str, int] = {}
        for holder in self.holders.values():
            out[holder.cluster_queue] = out.get(holder.cluster_queue, 0) + 1
        return out


def starved_on(workload: Mapping[str, Any]) -> list[FlavorResource]:
    """The ``(flavor, resource)`` pairs Kueue says a pending workload lacks unused quota for
    (its ``QuotaReserved=False`` condition: "insufficient unused quota for R in flavor F");
    empty when it is not pending for that reason."""
    for item in (workload.get("status") or {}).get("conditions") or []:
        if item.get("type") == "QuotaReserved" and item.get("status") != "True":
            message = str(item.get("message") or "")
            return [(flavor, resource) for resource, flavor in _INSUFFICIENT.findall(message)]
    return []


def untried(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue has not tried to reserve quota for ``workload`` yet: no ``QuotaReserved``
    condition at all, active, not finished. Real Kueue leaves the workloads queued behind one it
    found short of quota without a condition until it tries them."""
    if (workload.get("spec") or {}).get("active") is False:
        return False
    kinds = {str(c.get("type")) for c in (workload.get("status") or {}).get("conditions") or []}
    return "QuotaReserved" not in kinds and "Finished" not in kinds


def requested_resources(workload: Mapping[str, Any]) -> set[str]:
    """The resources the pod sets of ``workload`` request (containers and init containers)."""
    found: set[str] = set()
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        spec = ((pod_set or {}).get("template") or {}).get("spec") or {}
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            requests = ((container or {}).get("resources") or {}).get("requests") or {}
            found.update(str(r) for r in requests)
    return found


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(moment: float) -> str:
    """RFC 3339, seconds, UTC (the annotations' format)."""
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Released:
    """What the annotations say of a Workload the dispatcher released."""

    released_at: float | None
    """Set while it is released by us (None once restored, or never released)."""
    waiting_for: tuple[str, ...]
    releases: int
    restored_at: float | None


def released_state(workload: Mapping[str, Any]) -> Released:
    """The dispatcher's release annotations of ``workload`` (all empty when it has none)."""
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    try:
        releases = max(0, int(str(annotations.get(RELEASES) or "0")))
    except ValueError:
        releases = 0
    waiting = tuple(w for w in str(annotations.get(RELEASED_FOR) or "").split(",") if w)
    return Released(
        _parse_time(annotations.get(RELEASED_AT)),
        waiting,
        releases,
        _parse_time(annotations.get(RESTORED_AT)),
    )


def release_backoff(patience: float, releases: int) -> float:
    """How long a workload must be unplaceable before its next release: the patience for the
    first, then doubling with every earlier release (at most :data:`MAX_BACKOFF_FACTOR` times
    the patience)."""
    factor: int = min(MAX_BACKOFF_FACTOR, 1 << max(0, releases))
    return patience * factor


def release_due(state: Released, unplaceable_since: float, now: float, patience: float) -> float:
    """Seconds until an unplaceable workload may be released (0 or less: now). The wait runs
    from when it was found unplaceable, or from its last restore when that is later."""
    start = max(unplaceable_since, state.restored_at or unplaceable_since)
    return start + release_backoff(patience, state.releases) - now
