"""Backend ``real``: the scenario suite on real kube-apiserver, etcd and Kueue processes.

Built on :func:`dispatcher_sandbox.real_kueue.topology.real_topology` with the e2e topology
(``tests/e2e/topology.yaml``): a manager and two workers, each its own etcd + kube-apiserver +
garbage collector + Kueue v0.19.2 on loopback, Kueue's ``clear-nominated-cluster-names`` policy
on the manager (as ``hack/kind-e2e.sh`` installs it). The dispatcher runs as **two real
processes** (``multikueue-dispatcher run``, leader election on, the settings file the kind
overlay deploys), as the Deployment's two replicas do.

Environment controls: a worker is disconnected by stopping its kube-apiserver (Kueue and the
dispatcher get refused connections, as with a cluster that went away) and reconnected by
starting it again on the same port over the same etcd; the dispatcher is stopped, started and
restarted as processes (SIGTERM, or SIGKILL for a crash); Kueue's dispatcher is switched by
restarting the manager's Kueue with another Configuration (as a ConfigMap change and rollout
restart do). No pod ever runs: :mod:`dispatcher_sandbox.real_kueue.finisher` writes the Job status
the Job controller would (Kueue's integration tests do the same).

Binaries: ``python -m dispatcher_sandbox.real_kueue.build`` (``.ci/run`` runs it); the backend is
skipped, saying so, where they are missing, except where ``REQUIRE_REAL_BACKEND=1`` (CI) makes
that a failure.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import yaml

from dispatcher.topology import load_topology
from dispatcher_sandbox.harness.e2e.backend import WORKERS, KubeBackend, KueueMode, Timeouts
from dispatcher_sandbox.harness.paths import REPO, TESTS
from dispatcher_sandbox.real_kueue.plane import (
    KueueOptions,
    Process,
    answers_ok,
    free_port,
    wait_until,
)
from dispatcher_sandbox.real_kueue.topology import RealTopology, real_topology
from dispatcher_sandbox.serve import BUILTIN_DISPATCHERS

ROOT = REPO
TOPOLOGY = TESTS / "e2e" / "topology.yaml"
DISPATCHER_CONFIG = ROOT / "manifests" / "overlays" / "kind" / "config.yaml"
OUR_DISPATCHER = "multikueue-dispatcher.io/dispatcher"
REPLICAS = 2
LEASE_NAMESPACE = "default"


class DispatcherReplica:
    """One ``multikueue-dispatcher run`` process."""

    def __init__(
        self,
        directory: Path,
        kubeconfig: Path,
        index: int,
        generation: int,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.identity = f"dispatcher-{index}-g{generation}"
        self.health_port = free_port()
        self.metrics_port = free_port()
        env = (
            os.environ
            | dict(extra_env or {})
            | {
                "DISPATCHER_HEALTH_ADDRESS": f"127.0.0.1:{self.health_port}",
                "DISPATCHER_METRICS_ADDRESS": f"127.0.0.1:{self.metrics_port}",
                "POD_NAMESPACE": LEASE_NAMESPACE,
            }
        )
        self.process = Process(
            f"dispatcher/{self.identity}",
            [
                sys.executable,
                "-m",
                "dispatcher",
                "run",
                f"--kubeconfig={kubeconfig}",
                f"--config={DISPATCHER_CONFIG}",
                f"--identity={self.identity}",
            ],
            directory / f"{self.identity}.log",
            env=env,
        )


class RealBackend(KubeBackend):
    """The scenario backend on real Kueue processes (see the module docstring)."""

    name = "real"
    timeouts = Timeouts(short=60, long=150, quiet=10)

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.topology = load_topology(TOPOLOGY)
        self.running: RealTopology | None = None
        self.replicas: list[DispatcherReplica] = []
        self._generation = 0
        self._dispatcher_env: dict[str, str] = {}
        self._stack = contextlib.AsyncExitStack()
        self._group: anyio.abc.TaskGroup | None = None
        self.mode: KueueMode = "external"

    async def __aenter__(self) -> RealBackend:
        self._group = await self._stack.enter_async_context(anyio.create_task_group())
        self.running = await self._stack.enter_async_context(
            real_topology(
                self.directory / "clusters",
                self.topology,
                dispatcher_name=OUR_DISPATCHER,
                remedy="policy",
            )
        )
        kubeconfigs = {"manager": self.running.plane.manager.kubeconfig} | {
            w: self.running.plane.cluster(w).kubeconfig for w in WORKERS
        }
        await self.connect(kubeconfigs, self._group)
        await self.start_dispatcher()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.stop_dispatcher()
            await self.disconnect()
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._stack.__aexit__(exc_type, exc, tb)

    # --- the dispatcher -------------------------------------------------------------------------

    async def start_dispatcher(self) -> None:
        assert self.running is not None
        self._generation += 1
        kubeconfig = self.running.kubeconfig_path("manager")
        self.replicas = [
            DispatcherReplica(self.directory, kubeconfig, i, self._generation, self._dispatcher_env)
            for i in range(REPLICAS)
        ]
        for replica in self.replicas:
            replica.process.start()
        for replica in self.replicas:
            await self._wait_live(replica)
        await self.leader()

    async def _wait_live(self, replica: DispatcherReplica) -> None:
        url = f"http://127.0.0.1:{replica.health_port}/healthz"
        await wait_until(
            lambda: answers_ok(url), f"{replica.identity} serves /healthz", 60, [replica.process]
        )

    async def leader(self) -> DispatcherReplica:
        """The running replica that holds the Lease (waits until one does)."""
        settings = yaml.safe_load(DISPATCHER_CONFIG.read_text())
        running = {r.identity: r for r in self.replicas if r.process.running}
        identity = await self.lease_holder(
            LEASE_NAMESPACE, settings["leader_election"]["lease_name"], set(running)
        )
        return running[identity]

    async def stop_dispatcher(self) -> None:
        for replica in self.replicas:
            await replica.process.stop(15)
        self.replicas = []

    async def restart_dispatcher(self) -> None:
        await self.stop_dispatcher()
        await self.start_dispatcher()

    async def set_dispatcher_env(self, env: Mapping[str, str]) -> None:
        self._dispatcher_env = dict(env)
        await self.restart_dispatcher()

    async def kill_leader(self) -> str:
        leader = await self.leader()
        leader.process.kill()  # SIGKILL: no release, the Lease expires
        return leader.identity

    async def leader_identity(self) -> str:
        return (await self.leader()).identity

    # --- environment controls -------------------------------------------------------------------

    async def disconnect_worker(self, worker: str) -> None:
        assert self.running is not None
        await self.running.plane.cluster(worker).stop_apiserver()

    async def reconnect_worker(self, worker: str) -> None:
        assert self.running is not None
        await self.running.plane.cluster(worker).start_apiserver()

    async def use_kueue_dispatcher(self, mode: KueueMode) -> None:
        assert self.running is not None
        await self.reset()
        if mode != "external":
            await self.stop_dispatcher()
        name = ({"external": OUR_DISPATCHER} | BUILTIN_DISPATCHERS)[mode]
        options: dict[str, Any] = {"dispatcher_name": name}
        if mode == "incremental":
            options["incremental_step_size"] = 1  # S10: Incremental with stepSize 1
        await self.running.plane.restart_manager_kueue(KueueOptions(**options))
        await self.running.wait_active()
        self.mode = mode
        if mode == "external" and not self.replicas:
            await self.start_dispatcher()
