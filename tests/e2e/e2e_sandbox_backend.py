"""Backend ``sandbox``: the scenario suite on fake API servers with the emulated Kueue.

Built on :func:`dispatcher.sandbox.environment.environment` with the e2e topology
(``tests/e2e/topology.yaml``, the same Kueue objects as ``manifests/samples``), Kueue's
``clear-nominated-cluster-names`` policy on the manager (as ``hack/kind-e2e.sh`` installs it),
and the real dispatcher run in this event loop with the **same settings file** the kind overlay
deploys (``manifests/overlays/kind/config.yaml``), except what only makes sense in a pod: leader
election is off (one replica), the probes listen on free loopback ports, logs are text.

Environment controls: a worker is disconnected by taking its fake API server down (connections
cut, the port refuses) and reconnected by bringing it up on the same port; the dispatcher is
restarted by cancelling its task tree and starting a new one; Kueue's dispatcher is switched by
starting a fresh installation with that ``dispatcherName`` (a restart of Kueue with a new
configuration, and an empty cluster state).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
from e2e_backend import WORKERS, KubeBackend, KueueMode, Timeouts

from dispatcher.app.manager import run_manager
from dispatcher.app.settings import load_settings
from dispatcher.sandbox.environment import DISPATCHER_NAME, Environment, environment
from dispatcher.sandbox.serve import BUILTIN_DISPATCHERS
from dispatcher.sandbox.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = Path(__file__).resolve().parent / "topology.yaml"
DISPATCHER_CONFIG = ROOT / "manifests" / "overlays" / "kind" / "config.yaml"
# What differs from the Deployment: one in-process replica on loopback.
IN_PROCESS = {
    "leader_election.enabled": False,
    "health_address": "127.0.0.1:0",
    "metrics_address": "127.0.0.1:0",
    "log_format": "text",
}


class SandboxBackend(KubeBackend):
    """The scenario backend on the sandbox (see the module docstring)."""

    name = "sandbox"
    timeouts = Timeouts(short=60, long=120, quiet=6)

    def __init__(self, directory: Path, crds: Path) -> None:
        super().__init__()
        self.directory = directory
        self.crds = crds
        self.topology = load_topology(TOPOLOGY)
        self.env: Environment | None = None
        self._stack = contextlib.AsyncExitStack()
        self._group: anyio.abc.TaskGroup | None = None
        self._env_stop: anyio.Event | None = None
        self._env_done: anyio.Event | None = None
        self._dispatcher_scope: anyio.CancelScope | None = None
        self._dispatcher_done: anyio.Event | None = None
        self._generation = 0
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
        kueue: dict[str, Any] = {}
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
        settings = load_settings(IN_PROCESS, DISPATCHER_CONFIG)
        kubeconfig = self.env.sandbox.kubeconfig_path(self.env.sandbox.manager)
        scope, done = anyio.CancelScope(), anyio.Event()
        self._dispatcher_scope, self._dispatcher_done = scope, done

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                with scope:
                    await run_manager(
                        settings,
                        kubeconfig=kubeconfig,
                        handle_signals=False,
                        on_started=lambda _manager: task_status.started(),
                    )
            finally:
                done.set()

        with anyio.fail_after(30):
            await self._group.start(run)

    async def _stop_dispatcher(self) -> None:
        if self._dispatcher_scope is None or self._dispatcher_done is None:
            return
        self._dispatcher_scope.cancel()
        with anyio.fail_after(15):
            await self._dispatcher_done.wait()
        self._dispatcher_scope = self._dispatcher_done = None

    async def stop_dispatcher(self) -> None:
        await self._stop_dispatcher()

    async def start_dispatcher(self) -> None:
        await self._start_dispatcher()

    async def restart_dispatcher(self) -> None:
        await self._stop_dispatcher()
        await self._start_dispatcher()

    # --- environment controls -------------------------------------------------------------------

    async def disconnect_worker(self, worker: str) -> None:
        assert self.env is not None
        await self.env.sandbox.cluster(worker).down()

    async def reconnect_worker(self, worker: str) -> None:
        assert self.env is not None
        await self.env.sandbox.cluster(worker).up()

    async def use_kueue_dispatcher(self, mode: KueueMode) -> None:
        await self._stop()
        await self._start(mode)
