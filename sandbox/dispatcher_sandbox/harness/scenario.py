"""Building blocks for scenario tests on the sandbox: job builders, readers of what the
dispatcher wrote (a recording admission hook, an Event watch), dispatcher replicas run in the
test's event loop, kubeconfig Secret edits and a ``/metrics`` scraper.

Used by the end-to-end and fault-injection suites (tests/e2e_sandbox, tests/faults) and the soak
script; sandbox-only (it drives fake API servers through their Python API).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio
import anyio.abc
import yaml

from dispatcher.app.manager import Manager, run_manager
from dispatcher.app.settings import load_settings
from dispatcher.topology import KUEUE_NAMESPACE, WorkloadLine
from dispatcher_sandbox.environment import DISPATCHER_NAME, Environment, dispatcher_flags
from dispatcher_sandbox.fake_apiserver.admission import (
    AdmissionRequest,
    Denied,
    Match,
    ValidatingHook,
)
from dispatcher_sandbox.fake_apiserver.server import FakeCluster
from dispatcher_sandbox.kube_client import SECRETS
from dispatcher_sandbox.metrics_text import Samples, samples_of

Obj = dict[str, Any]

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
FIELD_MANAGER = "multikueue-dispatcher"


# --- workloads -------------------------------------------------------------------------------


class VirtualClock:
    """Virtual time for code that takes an injected clock (``monotonic``, ``utcnow``, ``sleep``):
    it moves only when a test calls :meth:`advance`.

    ``sleep`` waits until the virtual time reaches its end; ``sleepers`` (parked now) and
    ``sleeps`` (calls so far) let a test know the code under test has parked again before it
    advances the time (:meth:`wait_for_sleepers`).
    """

    def __init__(self) -> None:
        self.now = 1000.0
        self.start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self.sleepers = 0
        self.sleeps = 0
        self._changed = anyio.Condition()

    def monotonic(self) -> float:
        return self.now

    def utcnow(self) -> datetime.datetime:
        return self.start + datetime.timedelta(seconds=self.now - 1000.0)

    async def sleep(self, seconds: float) -> None:
        until = self.now + seconds
        async with self._changed:
            self.sleepers += 1
            self.sleeps += 1
            self._changed.notify_all()
            try:
                while self.now < until:
                    await self._changed.wait()
            finally:
                self.sleepers -= 1
                self._changed.notify_all()

    async def advance(self, seconds: float) -> None:
        async with self._changed:
            self.now += seconds
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], within: float = 30) -> None:
        """Until ``predicate()`` holds after a change of the clock (real-time deadline)."""
        with anyio.fail_after(within):
            async with self._changed:
                while not predicate():
                    await self._changed.wait()

    async def wait_for_sleepers(self, count: int = 1) -> None:
        await self.wait_for(lambda: self.sleepers >= count)


def job_name(workload: Obj) -> str:
    """The Job a manager Workload belongs to (its own name for a bare Workload)."""
    owners = workload["metadata"].get("ownerReferences") or []
    return str(owners[0]["name"]) if owners else str(workload["metadata"]["name"])


def cluster_of(workload: Obj) -> str | None:
    """``status.clusterName`` (None until Kueue admitted it on a worker)."""
    value = (workload.get("status") or {}).get("clusterName")
    return str(value) if value else None


def nominated(workload: Obj) -> tuple[str, ...]:
    """``status.nominatedClusterNames``."""
    return tuple(str(n) for n in (workload.get("status") or {}).get("nominatedClusterNames") or ())


def by_job(workloads: list[Obj]) -> dict[str, Obj]:
    """Manager Workloads by the name of their Job."""
    return {job_name(w): w for w in workloads}


def placed_all(names: set[str]) -> Callable[[list[Obj]], bool]:
    """Predicate: every Job in ``names`` has a Workload with ``clusterName``."""

    def check(workloads: list[Obj]) -> bool:
        found = by_job(workloads)
        return all(n in found and cluster_of(found[n]) for n in names)

    return check


def cpu_jobs(prefix: str, count: int, *, cpu: str = "2", namespace: str = "team-b") -> list[Any]:
    """``count`` small CPU Jobs that run until deleted (they fit on every worker)."""
    return [
        WorkloadLine.model_validate(
            {
                "name": f"{prefix}-{i}",
                "namespace": namespace,
                "count": 1,
                "requests": {"cpu": cpu, "memory": "4Gi"},
            }
        )
        for i in range(count)
    ]


def gpu_job(name: str, *, gpus: int = 1, required: str | None = None, **extra: Any) -> WorkloadLine:
    """A GPU Job; ``preferredGpuTypes`` / ``runSeconds`` may come in ``extra``."""
    data: dict[str, Any] = {
        "name": name,
        "namespace": "team-a",
        "count": 1,
        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus},
    }
    if required is not None:
        data["gpuType"] = required
    data.update(extra)
    return WorkloadLine.model_validate(data)


# --- dispatcher replicas ---------------------------------------------------------------------


@dataclass
class Replica:
    """One dispatcher process run in the test's loop, stoppable on its own."""

    manager: Manager
    scope: anyio.CancelScope
    stopped: anyio.Event
    identity: str | None

    async def kill(self) -> None:
        """Cancel the process's task tree (what cancellation gives, nothing more) and wait."""
        self.scope.cancel()
        with anyio.fail_after(15):
            await self.stopped.wait()


async def start_replica(
    env: Environment,
    group: anyio.abc.TaskGroup,
    *,
    identity: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    release_on_cancel: bool = True,
    dispatcher_name: str = DISPATCHER_NAME,
) -> Replica:
    """Start the real manager process (as ``start_dispatcher`` does) under its own cancel
    scope; ``release_on_cancel=False`` keeps the Lease on cancellation, as a killed process."""
    kubeconfig = env.sandbox.kubeconfig_path(env.sandbox.manager)
    flags = dispatcher_flags(dispatcher_name, overrides or {})
    settings = load_settings(flags, None)
    started = anyio.Event()
    stopped = anyio.Event()
    scope = anyio.CancelScope()
    managers: list[Manager] = []

    def on_started(manager: Manager) -> None:
        # Called before the elector task starts: the setting applies to its first term.
        manager.elector.release_on_cancel = release_on_cancel
        managers.append(manager)
        started.set()

    async def run() -> None:
        try:
            with scope:
                await run_manager(
                    settings,
                    kubeconfig=kubeconfig,
                    identity=identity,
                    handle_signals=False,
                    on_started=on_started,
                )
        finally:
            stopped.set()

    group.start_soon(run)
    with anyio.fail_after(30):
        await started.wait()
    return Replica(managers[0], scope, stopped, identity)


# --- what the dispatcher wrote ----------------------------------------------------------------


@dataclass(frozen=True)
class Nomination:
    """One admitted status write of the dispatcher's field manager on a manager Workload."""

    namespace: str
    name: str
    clusters: tuple[str, ...]


def on_status_writes(
    cluster: FakeCluster, name: str, check: Callable[[AdmissionRequest], None]
) -> None:
    """Call ``check`` on every Workload status write ``cluster`` is about to store: a validating
    hook named ``name``, added after Kueue's own hooks, so it sees what would be stored; a
    ``Denied`` it raises refuses the write."""
    cluster.admission.add_validating(
        ValidatingHook(name, Match(resources=("workloads/status",), operations=("UPDATE",)), check)
    )


@dataclass
class NominationRecorder:
    """A validating hook on the manager (installed last, so it sees what is stored) that
    records every status write of the dispatcher's field manager with its nomination."""

    field_manager: str = FIELD_MANAGER
    writes: list[Nomination] = field(default_factory=list)
    conflicts_to_inject: int = 0
    injected: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def install(self, cluster: FakeCluster) -> None:
        """Add the hook to ``cluster`` (after Kueue's own hooks)."""
        on_status_writes(cluster, "test-nomination-recorder", self._record)

    def _record(self, request: AdmissionRequest) -> None:
        if request.field_manager != self.field_manager:
            return
        if self.injected < self.conflicts_to_inject:
            self.injected += 1
            raise Denied("injected by the test: the object has been modified", code=409)
        status = (request.object or {}).get("status") or {}
        clusters = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
        self.writes.append(Nomination(request.namespace or "", request.name, clusters))
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def of(self, name: str) -> list[tuple[str, ...]]:
        """The nominations written for one Workload, in order."""
        return [w.clusters for w in self.writes if w.name == name]

    async def wait_for_writes(self, count: int, within: float) -> None:
        """Wait until at least ``count`` writes were recorded."""
        with anyio.fail_after(within):
            while len(self.writes) < count:
                await self._changed.wait()


@dataclass
class EventWatch:
    """A validating hook on the manager that sees every Event the dispatcher creates, so a
    test can wait for one (the Event is written after the log line and the metric)."""

    component: str = "multikueue-dispatcher"
    seen: list[Obj] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def install(self, cluster: FakeCluster) -> None:
        """Add the hook to ``cluster``."""
        cluster.admission.add_validating(
            ValidatingHook(
                "test-event-watch", Match(resources=("events",), operations=("CREATE",)), self._see
            )
        )

    def _see(self, request: AdmissionRequest) -> None:
        event = request.object or {}
        if (event.get("source") or {}).get("component") == self.component:
            self.seen.append(event)
            changed, self._changed = self._changed, anyio.Event()
            changed.set()

    def of(self, reason: str) -> list[Obj]:
        """The dispatcher's Events of one reason seen so far."""
        return [e for e in self.seen if e.get("reason") == reason]

    async def wait_for(self, reason: str, count: int, within: float) -> list[Obj]:
        """Wait until ``count`` Events of ``reason`` were created."""
        with anyio.fail_after(within):
            while len(self.of(reason)) < count:
                await self._changed.wait()
        return self.of(reason)


# --- kubeconfig Secrets -----------------------------------------------------------------------


async def worker_secret(env: Environment, worker: str) -> Obj:
    """The manager Secret holding ``worker``'s kubeconfig."""
    found = await env.manager_client.get(SECRETS, f"{worker}-kubeconfig", KUEUE_NAMESPACE)
    assert found is not None
    return found


def decoded_kubeconfig(secret: Obj) -> Obj:
    """The kubeconfig inside a Secret."""
    loaded: Obj = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    return loaded


async def replace_secret_data(env: Environment, worker: str, data: Mapping[str, Any]) -> None:
    """Merge-patch ``data`` into the worker's kubeconfig Secret (``None`` removes a key)."""
    await env.manager_client.merge_patch(
        SECRETS,
        f"{worker}-kubeconfig",
        {"data": dict(data)},
        namespace=KUEUE_NAMESPACE,
        field_manager="test",
    )


def b64(text: str) -> str:
    """Base64 of a text, for Secret data."""
    return base64.b64encode(text.encode()).decode()


# --- /metrics and events ----------------------------------------------------------------------


async def scrape(manager: Manager) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``GET /metrics`` on the manager's metrics address: samples by sample name."""
    host, port = manager.bound.metrics
    async with aiohttp.ClientSession() as session:
        return await scrape_url(session, f"http://{host or '127.0.0.1'}:{port}/metrics")


async def scrape_url(session: aiohttp.ClientSession, url: str) -> Samples:
    """``GET url`` (a Prometheus text exposition): samples by sample name, with labels."""
    async with session.get(url) as response:
        response.raise_for_status()
        return samples_of(await response.text())


def multikueue_cluster_status(active: bool, message: str = "") -> dict[str, Any]:
    """The status Kueue writes on a MultiKueueCluster (C11): ``Active`` True when it is
    connected, False with reason ``ClientConnectionFailed`` otherwise."""
    return {
        "conditions": [
            {
                "type": "Active",
                "status": "True" if active else "False",
                "reason": "Active" if active else "ClientConnectionFailed",
                "message": message or ("Connected" if active else "not connected"),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }


def run_command(
    kubeconfig: os.PathLike[str] | str,
    *,
    health: int,
    metrics: int,
    leader_election: bool = False,
    extra_args: tuple[str, ...] = (),
) -> list[str]:
    """The command line of ``python -m dispatcher run`` against a sandbox manager, as an
    operator writes it: JSON logs, the sandbox's dispatcher name, probes and metrics on the
    given loopback ports."""
    return [
        sys.executable,
        "-m",
        "dispatcher",
        "run",
        "--kubeconfig",
        os.fspath(kubeconfig),
        "--dispatcher-name",
        DISPATCHER_NAME,
        "--leader-election" if leader_election else "--no-leader-election",
        "--health-address",
        f"127.0.0.1:{health}",
        "--metrics-address",
        f"127.0.0.1:{metrics}",
        "--log-format",
        "json",
        *extra_args,
    ]


def free_port() -> int:
    """A free loopback port (for a process that needs its port on the command line)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def dispatcher_events(env: Environment, reason: str | None = None) -> list[Obj]:
    """The dispatcher's Events on the manager (optionally of one reason)."""
    events = await env.manager_client.request("GET", "/api/v1/events")
    return [
        e
        for e in events["items"]
        if (e.get("source") or {}).get("component") == "multikueue-dispatcher"
        and (reason is None or e.get("reason") == reason)
    ]


async def run_cli_process(argv: list[str]) -> tuple[int, str, str]:
    """``python -m dispatcher ARGV`` as its own process, as an operator runs it: exit code,
    stdout, stderr. (In-process, a command's short-lived event loop may end before its TLS
    connections finish closing; a process exits instead.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    done = await anyio.run_process(
        [sys.executable, "-m", "dispatcher", *argv], check=False, env=env
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


REQUIRE_REAL_BACKEND = "REQUIRE_REAL_BACKEND"


def require_real_backend() -> None:
    """Skip the calling test (saying why) when the real control plane's binaries are not
    built; fail instead where ``REQUIRE_REAL_BACKEND=1`` (CI builds them first)."""
    import pytest

    from dispatcher_sandbox.real_kueue.build import missing_reason

    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get(REQUIRE_REAL_BACKEND) == "1":
        pytest.fail(f"{reason} ({REQUIRE_REAL_BACKEND}=1)")
    pytest.skip(reason)


@contextlib.contextmanager
def counting_executor_calls() -> Iterator[Callable[[], int]]:
    """Count the running event loop's ``run_in_executor`` calls (thread-pool hops;
    ``asyncio.to_thread`` goes through it too) while the block runs; yields the count's reader."""
    loop = asyncio.get_running_loop()
    calls = 0
    original = loop.run_in_executor

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    loop.run_in_executor = counting  # type: ignore[method-assign, assignment]
    try:
        yield lambda: calls
    finally:
        del loop.run_in_executor  # the instance attribute: the class's method is back
