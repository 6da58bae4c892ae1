"""Instruments for the watch and worker-loss fault tests (issue 8): compare the dispatcher's
mirrors to fresh lists, wake on every mirror change, count the 410 Expired answers a fake API
server gives, and time the dispatcher's first nomination of each Workload.

Imported as a plain module by the tests of this folder (``from faults_watch_kit import ...``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from dispatcher.clusters.mirror import Mirror
from dispatcher.clusters.registry import ClusterRegistry
from dispatcher_sandbox.fake_apiserver.admission import AdmissionRequest
from dispatcher_sandbox.fake_apiserver.server import FakeCluster
from dispatcher_sandbox.fake_apiserver.store import Expired
from dispatcher_sandbox.harness.scenario import FIELD_MANAGER, job_name, on_status_writes
from dispatcher_sandbox.kube_client import KubeClient

Obj = dict[str, Any]


# --- waking on the dispatcher's mirror changes --------------------------------------------------


class MirrorChanges:
    """Wakes a waiter on every event the dispatcher's mirrors apply (all clusters, every
    resource but the manager's Secrets, and every worker connection-state change).

    The registry has no public listener list: this chains onto the callback it was built with
    (the manager's ``_changed``), which it looks up on every event.
    """

    def __init__(self, registry: ClusterRegistry) -> None:
        self.seen = 0
        self._armed: list[anyio.Event] = []
        inner = registry._on_change

        def chained(cluster: str, resource: str, item: Any) -> None:
            if inner is not None:
                inner(cluster, resource, item)
            self.seen += 1
            armed, self._armed = self._armed, []
            for event in armed:
                event.set()

        registry._on_change = chained

    def arm(self) -> anyio.Event:
        """An event set by the next mirror change (arm it before looking at the state); several
        waiters may each hold one."""
        event = anyio.Event()
        self._armed.append(event)
        return event


# --- mirrors against fresh lists ----------------------------------------------------------------


@dataclass
class Observers:
    """One plain API client per cluster, for fresh lists (user agent ``fault-test-observer``)."""

    clusters: Iterable[FakeCluster]
    clients: dict[str, KubeClient] = field(default_factory=dict)

    async def __aenter__(self) -> Observers:
        for cluster in self.clusters:
            self.clients[cluster.name] = KubeClient(
                cluster.kubeconfig, user_agent="fault-test-observer"
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for client in self.clients.values():
            await client.close()


def _versions(objects: Iterable[Obj]) -> dict[tuple[str, str], int]:
    found = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        found[key] = int(meta.get("resourceVersion") or 0)
    return found


def behind(where: str, cached_objects: Iterable[Obj], listed: Obj) -> str:
    """Why a cache is behind a fresh list of its scope ('' when it is not).

    The cache is read right after the list: it may already hold changes made after the list
    (a newer resourceVersion, or an object created later). It is behind when it misses a listed
    object, holds an older version of one, or still holds an object that was gone at the list's
    resourceVersion. (The fake's resourceVersions are integers, so they can be ordered.)
    """
    at = int((listed.get("metadata") or {}).get("resourceVersion") or 0)
    fresh = _versions(listed.get("items") or [])
    cached = _versions(cached_objects)
    missing = sorted(set(fresh) - set(cached))
    gone = sorted(k for k in set(cached) - set(fresh) if cached[k] <= at)
    stale = sorted(k for k in set(fresh) & set(cached) if cached[k] < fresh[k])
    if not (missing or gone or stale):
        return ""
    return (
        f"{where}: {len(cached)} cached / {len(fresh)} listed at {at}; missing {missing[:3]}, "
        f"deleted but cached {gone[:3]}, stale {[(k, cached[k], fresh[k]) for k in stale[:3]]}"
    )


def mirrors(registry: ClusterRegistry) -> dict[str, Mirror | None]:
    """The dispatcher's mirrors by cluster name (None: a worker without a running mirror)."""
    found: dict[str, Mirror | None] = {"manager": registry.manager}
    for name, worker in sorted(registry.workers.items()):
        found[name] = worker.mirror
    return found


async def mirror_differences(registry: ClusterRegistry, observers: Observers) -> list[str]:
    """Every cache of every dispatcher mirror against a fresh LIST of the same scope (names and
    resourceVersions, see :func:`behind`), plus every mirror not connected; empty when all
    caches are up to date.

    Each cache is read right after its own list, without yielding in between, so a change made
    after the list can only make the cache look newer, never older.
    """
    problems: list[str] = []

    async def check(cluster: str, mirror: Mirror, key: str) -> None:
        spec = mirror.watched[key]
        listed = await observers.clients[cluster].list(
            spec.resource,  # type: ignore[arg-type]  # a ResourceRef has the same path()
            spec.namespace,
            label_selector=spec.label_selector,
        )
        problem = behind(f"{cluster}/{key}", mirror.cache(key).objects.values(), listed)
        if problem:
            problems.append(problem)

    async with anyio.create_task_group() as group:
        for cluster, mirror in mirrors(registry).items():
            if mirror is None:
                problems.append(f"{cluster}: no running mirror")
                continue
            if not mirror.connected:
                problems.append(f"{cluster}: mirror not connected ({mirror.last_error})")
            for key in mirror.watched:
                if key not in mirror.unavailable:
                    group.start_soon(check, cluster, mirror, key)
    return problems


async def wait_converged(
    registry: ClusterRegistry, observers: Observers, changes: MirrorChanges, within: float
) -> int:
    """Wait until :func:`mirror_differences` is empty, re-checking after every mirror change;
    returns how many comparisons it took. Fails with the last differences at the deadline."""
    checks = 0
    last: list[str] = []
    try:
        with anyio.fail_after(within):
            while True:
                changed = changes.arm()
                checks += 1
                last = await mirror_differences(registry, observers)
                if not last:
                    return checks
                import os

                if os.environ.get("A2_DEBUG"):
                    print(f"{anyio.current_time():.2f} check {checks}: {last}")
                await changed.wait()
    except TimeoutError:
        pytest.fail(f"mirrors not converged within {within}s: {last}")


# --- 410 Expired accounting ---------------------------------------------------------------------


class ExpiredCount:
    """Counts the watch resumes a fake cluster answers with 410 Expired: those forced by
    ``expire_next_watches`` (read from its counter) and those older than a truncated history
    (counted by wrapping the store's ``subscribe``)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.forced_requested = 0
        self.from_history = 0
        store = cluster.store
        subscribe = store.subscribe

        def counting(*args: Any, **kwargs: Any) -> Any:
            try:
                return subscribe(*args, **kwargs)
            except Expired:
                self.from_history += 1
                raise

        store.subscribe = counting  # type: ignore[method-assign]

    def expire_next(self, count: int) -> None:
        """``expire_next_watches(count)`` on the cluster, counted."""
        self.forced_requested += count
        self.cluster.expire_next_watches(count)

    def served(self) -> int:
        """410 answers so far (call before the cluster's faults are cleared)."""
        forced = self.forced_requested - self.cluster.faults.expire_next_watches
        return forced + self.from_history


# --- when the dispatcher nominated ---------------------------------------------------------------


@dataclass
class NominationTimes:
    """A validating hook on the manager recording when the dispatcher first wrote a non-empty
    nomination for each Workload, and every cluster set it nominated (by Job name)."""

    field_manager: str = FIELD_MANAGER
    first: dict[str, float] = field(default_factory=dict)
    history: dict[str, list[tuple[float, tuple[str, ...]]]] = field(default_factory=dict)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def install(self, cluster: FakeCluster) -> None:
        """Add the hook to ``cluster`` (after Kueue's own hooks)."""
        on_status_writes(cluster, "test-nomination-times", self._record)

    def _record(self, request: AdmissionRequest) -> None:
        if request.field_manager != self.field_manager:
            return
        status = (request.object or {}).get("status") or {}
        clusters = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
        if not clusters:
            return
        now = anyio.current_time()
        name = job_name(request.object or {"metadata": {"name": request.name}})
        self.first.setdefault(name, now)
        self.history.setdefault(name, []).append((now, clusters))
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def last(self, name: str) -> tuple[str, ...]:
        """The last nomination written for ``name`` (empty if none)."""
        written = self.history.get(name) or []
        return written[-1][1] if written else ()

    async def wait_until(self, predicate: Callable[[], bool], within: float) -> None:
        """Wait until ``predicate()`` holds, re-checking after every recorded nomination."""
        with anyio.fail_after(within):
            while not predicate():
                await self._changed.wait()


@dataclass
class ReservationTimes:
    """A validating hook on the manager recording when Kueue reserved quota for each Workload
    (its status write turning ``QuotaReserved`` True), by Job name: the moment the Workload
    starts waiting for the dispatcher's nomination."""

    first: dict[str, float] = field(default_factory=dict)

    def install(self, cluster: FakeCluster) -> None:
        """Add the hook to ``cluster`` (after Kueue's own hooks)."""
        on_status_writes(cluster, "test-reservation-times", self._record)

    def _record(self, request: AdmissionRequest) -> None:
        new = request.object or {}
        if not _reserved(new) or _reserved(request.old_object or {}):
            return
        self.first.setdefault(job_name(new), anyio.current_time())


def _reserved(workload: Obj) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in conditions)
