"""Composition of the emulated Kueue: the manager's and each worker's controllers.

The manager runs the Kueue core (role ``manager``: quota reservation, admission checks), the
batch/Job adapter and the MultiKueue controllers on one connection; every worker runs the core
(role ``worker``) and the Job adapter. Each talks to its fake cluster only over HTTPS through
the cluster's kubeconfig.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatcher_sandbox.kueue_emulator.core import CoreKueue
from dispatcher_sandbox.kueue_emulator.jobs import JobAdapter
from dispatcher_sandbox.kueue_emulator.multikueue import MultiKueueManager
from dispatcher_sandbox.kueue_emulator.runtime import (
    Clock,
    ClusterConnection,
    Counters,
    KueueConfig,
    SystemClock,
    cancel_and_wait,
)

__all__ = ["EmulatedKueue", "ManagerKueue", "WorkerKueue", "run_kueue"]


class WorkerKueue:
    """Kueue on a worker cluster: the core and the Job adapter."""

    def __init__(
        self, name: str, kubeconfig: Mapping[str, Any], config: KueueConfig, clock: Clock
    ) -> None:
        self.name = name
        self.conn = ClusterConnection(name, kubeconfig, [])
        self.core = CoreKueue(self.conn, config, clock, role="worker")
        self.jobs = JobAdapter(self.conn, config, clock, role="worker")

    async def run(self) -> None:
        """Run until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.conn.run())
            group.create_task(self.core.run())
            group.create_task(self.jobs.run())

    async def close(self) -> None:
        """Cancel timers and close the client."""
        self.core.cancel_timers()
        self.jobs.cancel_timers()
        await self.conn.close()


class ManagerKueue:
    """Kueue on the manager cluster: the core, the Job adapter and MultiKueue."""

    def __init__(
        self,
        kubeconfig: Mapping[str, Any],
        config: KueueConfig,
        clock: Clock,
        *,
        reconnect_base_seconds: float = 0.5,
    ) -> None:
        self.conn = ClusterConnection("manager", kubeconfig, [])
        self.core = CoreKueue(self.conn, config, clock, role="manager")
        self.jobs = JobAdapter(self.conn, config, clock, role="manager")
        self.counters = Counters()
        self.multikueue = MultiKueueManager(
            self.conn,
            config,
            clock,
            counters=self.counters,
            sync_remote_job=self.jobs.sync_remote_job,
            remove_remote_job=self.jobs.remove_remote_job,
            reconnect_base_seconds=reconnect_base_seconds,
        )

    async def run(self) -> None:
        """Run until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.conn.run())
            group.create_task(self.core.run())
            group.create_task(self.jobs.run())
            group.create_task(self.multikueue.run())

    async def close(self) -> None:
        """Cancel timers and close the client."""
        self.core.cancel_timers()
        self.jobs.cancel_timers()
        await self.conn.close()

    def dispatched(self) -> float:
        """``multikueue_workloads_dispatched_total`` over every series (C51)."""
        return self.counters.get("multikueue_workloads_dispatched_total")

    def admitted(self) -> float:
        """``multikueue_workloads_admitted_total`` over every series (C51)."""
        return self.counters.get("multikueue_workloads_admitted_total")


@dataclass
class EmulatedKueue:
    """Kueue running on a manager and its workers."""

    manager: ManagerKueue
    workers: dict[str, WorkerKueue] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def run_kueue(
    manager_kubeconfig: Mapping[str, Any],
    worker_kubeconfigs: Mapping[str, Mapping[str, Any]],
    config: KueueConfig | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[EmulatedKueue]:
    """Run the emulated Kueue on a manager and workers for the duration of a block."""
    config = config or KueueConfig()
    clock = clock or SystemClock()
    emulated = EmulatedKueue(
        ManagerKueue(manager_kubeconfig, config, clock),
        {name: WorkerKueue(name, kc, config, clock) for name, kc in worker_kubeconfigs.items()},
    )
    parts: Sequence[ManagerKueue | WorkerKueue] = [emulated.manager, *emulated.workers.values()]
    tasks = [asyncio.create_task(part.run()) for part in parts]
    try:
        yield emulated
    finally:
        await cancel_and_wait(tasks)
        for part in parts:
            await part.close()
