"""Backend ``sandbox``: the scenario suite on fake API servers with the emulated Kueue.

Built on :func:`dispatcher_sandbox.environment.environment` with the e2e topology
(``tests/e2e/topology.yaml``, the same Kueue objects as ``manifests/samples``), Kueue's
``clear-nominated-cluster-names`` policy on the manager (as ``hack/kind-e2e.sh`` installs it),
and the real dispatcher run in this event loop with the **same settings file** the kind overlay
deploys (``manifests/overlays/kind/config.yaml``), as two replicas electing a leader like the
Deployment's two pods, except what only makes sense in a pod: the Lease lives in Kueue's
namespace, the probes listen on free loopback ports, logs are text.

Environment controls: a worker is disconnected by taking its fake API server down (connections
cut, the port refuses) and reconnected by bringing it up on the same port; the dispatcher is
restarted by cancelling its task trees and starting new ones (a replica "killed" in
:meth:`SandboxBackend.kill_leader` is cancelled too, but told not to release its Lease, which
then expires as after the real backend's SIGKILL); Kueue's dispatcher is switched by
starting a fresh installation with that ``dispatcherName`` (a restart of Kueue with a new
configuration, and an empty cluster state).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from dispatcher.app.manager import Manager, run_manager
from dispatcher.app.settings import load_settings
from dispatcher.topology import load_topology
from dispatcher_sandbox.environment import DISPATCHER_NAME, Environment, environment
from dispatcher_sandbox.harness.e2e.backend import WORKERS, KubeBackend, KueueMode, Timeouts
from dispatcher_sandbox.harness.e2e.trace import recorder_of
from dispatcher_sandbox.harness.paths import REPO, TESTS
from dispatcher_sandbox.real_kueue.plane import KueueOptions
from dispatcher_sandbox.serve import BUILTIN_DISPATCHERS

ROOT = REPO
TOPOLOGY = TESTS / "e2e" / "topology.yaml"
DISPATCHER_CONFIG = ROOT / "manifests" / "overlays" / "kind" / "config.yaml"
# What differs from the Deployment: two in-process replicas on loopback, their Lease in Kueue's
# namespace (there is no pod namespace).
REPLICAS = 2
LEASE_NAMESPACE = "kueue-system"
IN_PROCESS = {
    "leader_election.enabled": True,
    "leader_election.namespace": LEASE_NAMESPACE,
    "health_address": "127.0.0.1:0",
    "metrics_address": "127.0.0.1:0",
    "log_format": "text",
}


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in the process environment while the settings are read (in-process replicas
    read it as a Pod's container reads its own), as it was afterwards."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class SandboxBackend(KubeBackend):
    """The scenario backend on the sandbox (see the module docstring)."""

    name = "sandbox"
    timeouts = Timeouts(short=60, long=120, quiet=6)

    def __init__(self, directory: Path, crds: Path, kueue_version: str = "v0.19") -> None:
        super().__init__()
        self.kueue_version = kueue_version
        self.name = f"sandbox-{kueue_version}" if kueue_version != "v0.19" else "sandbox"
        self.directory = directory
        self.crds = crds
        self.topology = load_topology(TOPOLOGY)
        self.env: Environment | None = None
        self._stack = contextlib.AsyncExitStack()
        self._group: anyio.abc.TaskGroup | None = None
        self._env_stop: anyio.Event | None = None
        self._env_done: anyio.Event | None = None
        self._replicas: dict[str, tuple[anyio.CancelScope, anyio.Event]] = {}
        self._managers: dict[str, Manager] = {}  # identity → the running replica's manager
        self._generation = 0
        self._dispatcher_env: dict[str, str] = {}
        self.mode: KueueMode = "external"

    async def __aenter__(self) -> SandboxBackend:
        self._group = await self._stack.enter_async_context(anyio.create_task_group())
        await self._start("external")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._stack.__aexit__(exc_type, exc, tb)

    # --- installation -------------------------------------------------------------------------

    async def _start(self, mode: KueueMode) -> None:
        assert self._group is not None
        self._generation += 1
        self.mode = mode
        await self._group.start(self._host, mode, self.directory / f"install-{self._generation}")
        assert self.env is not None
        kubeconfigs = {"manager": self.env.sandbox.manager.kubeconfig} | {
            w: self.env.sandbox.cluster(w).kubeconfig for w in WORKERS
        }
        await self.connect(kubeconfigs, self._group)
        if mode == "external":
            await self._start_dispatcher()

    async def _stop(self) -> None:
        await self._stop_dispatcher()
        await self.disconnect()
        if self._env_stop is not None and self._env_done is not None:
            self._env_stop.set()
            with anyio.fail_after(30):
                await self._env_done.wait()
        self.env = None

    async def _host(
        self,
        mode: KueueMode,
        directory: Path,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Own one installation (its task groups live and end in this task)."""
        stop, done = anyio.Event(), anyio.Event()
        self._env_stop, self._env_done = stop, done
        name = DISPATCHER_NAME if mode == "external" else BUILTIN_DISPATCHERS[mode]
        # The real backend's Kueue runs with workerLostTimeout 15 s (KueueOptions); the same
        # here, so a lost worker is given up at the same moment on both (C29, S13).
        kueue: dict[str, Any] = {
            "version": self.kueue_version,
            "worker_lost_timeout_seconds": float(KueueOptions().worker_lost_timeout.rstrip("s")),
        }
        if mode == "incremental":
            kueue["incremental_step_size"] = 1  # S10: Incremental with stepSize 1
        try:
            async with environment(
                directory,
                self.topology,
                crds=self.crds,
                run_dispatcher=False,
                dispatcher_name=name,
                kueue=kueue,
            ) as env:
                self.env = env
                task_status.started()
                await stop.wait()
        finally:
            done.set()

    # --- the dispatcher -------------------------------------------------------------------------

    async def _start_dispatcher(self) -> None:
        assert self._group is not None
        assert self.env is not None
        with _environment(self._dispatcher_env):
            settings = load_settings(IN_PROCESS, DISPATCHER_CONFIG)
        kubeconfig = self.env.sandbox.kubeconfig_path(self.env.sandbox.manager)
        self._generation += 1

        def started(
            identity: str, manager: Manager, task_status: anyio.abc.TaskStatus[None]
        ) -> None:
            self._managers[identity] = manager
            task_status.started()

        for index in range(REPLICAS):
            identity = f"dispatcher-{index}-g{self._generation}"
            scope, done = anyio.CancelScope(), anyio.Event()
            self._replicas[identity] = (scope, done)

            async def run(
                *,
                identity: str = identity,
                scope: anyio.CancelScope = scope,
                done: anyio.Event = done,
                task_status: anyio.abc.TaskStatus[None],
            ) -> None:
                try:
                    with scope:
                        await run_manager(
                            settings,
                            kubeconfig=kubeconfig,
                            identity=identity,
                            handle_signals=False,
                            on_started=lambda manager: started(identity, manager, task_status),
                        )
                finally:
                    self._managers.pop(identity, None)
                    done.set()

            with anyio.fail_after(30):
                await self._group.start(run)
        await self.leader_identity()

    async def _stop_replica(self, identity: str) -> None:
        scope, done = self._replicas.pop(identity)
        scope.cancel()
        with anyio.fail_after(15):
            await done.wait()

    async def _stop_dispatcher(self) -> None:
        for identity in list(self._replicas):
            await self._stop_replica(identity)

    async def stop_dispatcher(self) -> None:
        await self._stop_dispatcher()

    async def start_dispatcher(self) -> None:
        await self._start_dispatcher()

    async def restart_dispatcher(self) -> None:
        await self._stop_dispatcher()
        await self._start_dispatcher()

    async def set_dispatcher_env(self, env: Mapping[str, str]) -> None:
        self._dispatcher_env = dict(env)
        await self.restart_dispatcher()

    async def leader_identity(self) -> str:
        settings = load_settings(IN_PROCESS, DISPATCHER_CONFIG)
        return await self.lease_holder(
            LEASE_NAMESPACE, settings.leader_election.lease_name, set(self._replicas)
        )

    async def kill_leader(self) -> str:
        """End the leading replica as a SIGKILL ends a process: without releasing its Lease,
        which the other replica takes only once it expires (as on the real backend; a cancel
        that released it made S14's times differ from real Kueue's by the Lease duration)."""
        leader = await self.leader_identity()
        manager = self._managers.get(leader)
        if manager is not None:
            manager.elector.release_on_cancel = False
        await self._stop_replica(leader)
        return leader

    # --- environment controls -------------------------------------------------------------------

    async def disconnect_worker(self, worker: str) -> None:
        assert self.env is not None
        await self.env.sandbox.cluster(worker).down()

    async def reconnect_worker(self, worker: str) -> None:
        assert self.env is not None
        await self.env.sandbox.cluster(worker).up()

    async def use_kueue_dispatcher(self, mode: KueueMode) -> None:
        # A new sandbox, rather than a reset: the scenario's trace ends here all the same
        # (harness.e2e.trace), as the other backends' reset ends it.
        async with recorder_of(self).scenario_end():
            await self._stop()
            await self._start(mode)
