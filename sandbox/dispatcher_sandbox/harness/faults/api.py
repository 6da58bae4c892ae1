"""Helpers of the manager-API fault tests (test_api_faults.py): a burst of small Jobs (and the
names of the Workloads Kueue makes for them), an incremental placement tracker, a hook that
answers 409 to each workload's first write attempt, and readers of what the dispatcher wrote and
where the copies went."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from dispatcher.app.manager import Manager
from dispatcher.controller.nominator import Nominator
from dispatcher.controller.workqueue import WorkQueue
from dispatcher.k8s.errors import ApiError
from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.environment import Environment
from dispatcher_sandbox.fake_apiserver.admission import AdmissionRequest, Denied
from dispatcher_sandbox.fake_apiserver.errors import conflict
from dispatcher_sandbox.fake_apiserver.faults import JournalEntry
from dispatcher_sandbox.fake_apiserver.server import FakeCluster
from dispatcher_sandbox.harness.scenario import FIELD_MANAGER, Nomination, on_status_writes
from dispatcher_sandbox.kube_client import WORKLOADS
from dispatcher_sandbox.kueue_emulator.jobs import workload_name_for_job

Obj = dict[str, Any]

WORKERS = ("worker-a100", "worker-h100", "worker-cpu")
STATUS_WRITE = re.compile(r"/workloads/([^/]+)/status$")


def small_cpu_jobs(prefix: str, count: int) -> list[WorkloadLine]:
    """``count`` suspended Jobs of 100m CPU and 256Mi each, as a user submits them (all of them
    fit on worker-cpu alone: 50 CPU and 125Gi of its 128 CPU / 512Gi quota; the manager's quota
    is 352 CPU / 2304Gi).

    Jobs, not bare Workloads: Kueue's MultiKueue rejects a Workload no Job owns (C22, "No
    multikueue adapter found"); the emulated Job integration makes each Job's Workload.
    """
    return [
        WorkloadLine.model_validate(
            {
                "name": f"{prefix}-{i}",
                "namespace": "team-b",
                "count": 1,
                "requests": {"cpu": "100m", "memory": "256Mi"},
            }
        )
        for i in range(count)
    ]


def workload_names(created: list[Obj]) -> set[str]:
    """The manager Workload names Kueue's Job integration gives the created Jobs
    (``job-<name>-<hash>``)."""
    return {workload_name_for_job(o["metadata"]["name"], o["metadata"]["uid"]) for o in created}


def workload_name_pattern(job: str) -> str:
    """A regular expression for the name of the Workload of Job ``job`` before it exists (its
    hash suffix depends on the Job's uid)."""
    return f"job-{re.escape(job)}-[0-9a-f]{{5}}"


@dataclass
class PlacementTracker:
    """Follows the emulated Kueue's manager informer event by event (no full-cache copies, which
    cost O(workloads) per change) and records when each Workload got ``status.clusterName``."""

    placed: dict[str, str] = field(default_factory=dict)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def install(self, env: Environment) -> None:
        """Subscribe to the emulator's manager connection and read what is cached already."""
        informer = env.kueue.manager.conn.cache(WORKLOADS)
        for obj in list(informer.objects.values()):
            self._see(obj)
        env.kueue.manager.conn.subscribe(self._listen)

    def _listen(self, resource: object, kind: str, obj: Obj) -> None:
        if resource == WORKLOADS and kind in ("ADDED", "MODIFIED"):
            self._see(obj)

    def _see(self, obj: Obj) -> None:
        cluster = (obj.get("status") or {}).get("clusterName")
        name = (obj.get("metadata") or {}).get("name")
        if cluster and name and name not in self.placed:
            self.placed[str(name)] = str(cluster)
            changed, self._changed = self._changed, anyio.Event()
            changed.set()

    async def wait_for(self, names: set[str], within: float) -> None:
        """Wait until every name in ``names`` has a ``clusterName``."""
        with anyio.fail_after(within):
            while not names <= self.placed.keys():
                await self._changed.wait()


@dataclass
class FirstAttemptConflicts:
    """A validating hook on the manager: the first status write of the dispatcher's field
    manager on each Workload is refused with the API server's own 409 Conflict answer (as if
    Kueue had written the Workload just before); later writes are recorded as admitted."""

    field_manager: str = FIELD_MANAGER
    attempts: Counter[str] = field(default_factory=Counter)
    refused: int = 0
    writes: list[Nomination] = field(default_factory=list)

    def install(self, cluster: FakeCluster) -> None:
        """Add the hook to ``cluster`` (after Kueue's own hooks)."""
        on_status_writes(cluster, "test-first-attempt-conflict", self._check)

    def _check(self, request: AdmissionRequest) -> None:
        if request.field_manager != self.field_manager:
            return
        self.attempts[request.name] += 1
        if self.attempts[request.name] == 1:
            self.refused += 1
            stale = conflict(request.group, request.resource, request.name)
            raise Denied(stale.message, code=409)
        status = (request.object or {}).get("status") or {}
        clusters = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
        self.writes.append(Nomination(request.namespace or "", request.name, clusters))


def write_counts(writes: list[Nomination]) -> Counter[str]:
    """Admitted nomination writes per Workload name."""
    return Counter(w.name for w in writes)


def contradicting(writes: list[Nomination], placed: dict[str, str]) -> list[str]:
    """Workloads with a written (non-empty) nomination that excludes where they were admitted."""
    return sorted({w.name for w in writes if w.clusters and placed.get(w.name) not in w.clusters})


async def wait_drained(queue: WorkQueue, within: float) -> None:
    """Wait until the work queue holds no key, not even a delayed one (polled: the queue has no
    change notification)."""
    await wait_until(lambda: not len(queue) and not queue.delayed, within)


def status_writes_by_workload(entries: list[JournalEntry], user_agent: str) -> Counter[str]:
    """HTTP status PATCHes per Workload name sent by one client (any answer)."""
    counts: Counter[str] = Counter()
    for entry in entries:
        match = STATUS_WRITE.search(entry.path)
        if match and entry.method == "PATCH" and entry.user_agent.startswith(user_agent):
            counts[match.group(1)] += 1
    return counts


def answers_by_client(entries: list[JournalEntry], codes: tuple[int, ...]) -> Counter[str]:
    """Requests answered with one of ``codes``, as "<code> to <client>" (the user agent up to
    the slash)."""
    return Counter(
        f"{e.status} to {e.user_agent.split('/')[0]}" for e in entries if e.status in codes
    )


async def wait_leading(manager: Manager, within: float = 30) -> Nominator:
    """Wait until the dispatcher leads, its manager caches are synced and every worker is
    Connected (polled: a steady state to inject faults into); returns its nomination loop."""

    def steady() -> bool:
        registry = manager.registry
        if registry is None or manager.nominator is None or not registry.synced:
            return False
        states = registry.states()
        return set(states) == set(WORKERS) and all(s.phase == "Connected" for s in states.values())

    await wait_until(steady, within)
    assert manager.nominator is not None
    return manager.nominator


@dataclass(frozen=True)
class Retry:
    """One failed reconcile of the nomination loop and the delay it chose before retrying."""

    key: str
    status: int  # HTTP status; 0: no answer (the client's timeout, a refused connection)
    retry_after: float | None  # the server's Retry-After, as the client parsed it
    delay: float


class RetryLog(logging.Handler):
    """Collects the nomination loop's "reconcile ... failed ...; retrying in" warnings with their
    arguments. Attached to the nominator's own logger, it sees each record before the root
    handlers (where the production redaction renders the message and drops the arguments)."""

    LOGGER = "dispatcher.controller.nominator"

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.retries: list[Retry] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record when it is a failed reconcile with an API error."""
        if not str(record.msg).startswith("reconcile %s failed"):
            return
        if not isinstance(record.args, tuple) or len(record.args) != 3:
            return
        key, error, delay = record.args
        if isinstance(error, ApiError):
            self.retries.append(Retry(str(key), error.status, error.retry_after, float(delay)))  # type: ignore[arg-type]  # a number

    def __enter__(self) -> RetryLog:
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *_: object) -> None:
        logging.getLogger(self.LOGGER).removeHandler(self)

    async def __aenter__(self) -> RetryLog:
        return self.__enter__()

    async def __aexit__(self, *_: object) -> None:
        self.__exit__()


async def wait_until(predicate: Callable[[], bool], within: float) -> None:
    """Wait until ``predicate()`` holds (polled: for counters without a change notification)."""
    with anyio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - in-process state without a change event
            await anyio.sleep(0.05)
