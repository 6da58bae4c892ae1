"""Helpers of the process-fault tests (issue 8, "process kill -9 mid-burst, and leader kill with
two replicas"): the dispatcher as a real OS process against the in-process sandbox, a Lease
holder log, and a nomination recorder per field manager (one per replica).
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from dispatcher_sandbox.environment import Environment
from dispatcher_sandbox.fake_apiserver.admission import AdmissionRequest, Match, ValidatingHook
from dispatcher_sandbox.fake_apiserver.server import FakeCluster
from dispatcher_sandbox.harness.scenario import (
    NominationRecorder,
    cluster_of,
    free_port,
    on_status_writes,
    run_command,
)

# The short Lease of test_manager_must_show.LEASE, as the process's environment gives it.
LEASE_ENV = {
    "DISPATCHER_LEADER_ELECTION__NAMESPACE": "default",
    "DISPATCHER_LEADER_ELECTION__LEASE_DURATION_SECONDS": "3",
    "DISPATCHER_LEADER_ELECTION__RENEW_DEADLINE_SECONDS": "2",
    "DISPATCHER_LEADER_ELECTION__RETRY_PERIOD_SECONDS": "0.5",
}
LEASE_SECONDS = 3.0


@dataclass
class DispatcherProcess:
    """``python -m dispatcher run`` against the sandbox's manager, output in a log file."""

    proc: subprocess.Popen[bytes]
    health: int
    metrics: int
    log_path: Path
    started_at: float

    @classmethod
    def start(
        cls,
        env: Environment,
        directory: Path,
        name: str,
        *,
        leader_election: bool = False,
        extra_args: tuple[str, ...] = (),
        extra_env: dict[str, str] | None = None,
    ) -> DispatcherProcess:
        """Start one process (logs in ``directory/<name>.log``); stop it with :meth:`stop`."""
        health, metrics = free_port(), free_port()
        kubeconfig = env.sandbox.kubeconfig_path(env.sandbox.manager)
        args = run_command(
            kubeconfig,
            health=health,
            metrics=metrics,
            leader_election=leader_election,
            extra_args=extra_args,
        )
        environ = {
            **{k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")},
            # The in-process replicas' resync (start_replica), not the 300 s default.
            "DISPATCHER_RESYNC_SECONDS": "5",
            **(extra_env or {}),
        }
        log_path = directory / f"{name}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, env=environ)
        return cls(proc, health, metrics, log_path, anyio.current_time())

    def output(self) -> str:
        """What the process logged so far."""
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, within: float) -> float:
        """Poll ``/readyz`` until it answers 200 (the process is external: there is nothing to
        wait on but its probe); returns the time it became ready."""
        url = f"http://127.0.0.1:{self.health}/readyz"
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            with anyio.fail_after(within):
                while True:
                    if self.proc.poll() is not None:
                        raise AssertionError(
                            f"dispatcher exited with {self.proc.returncode}:\n"
                            + self.output()[-3000:]
                        )
                    try:
                        async with session.get(url) as response:
                            if response.status == 200:
                                return anyio.current_time()
                    except (aiohttp.ClientError, TimeoutError):
                        pass
                    await anyio.sleep(0.05)

    async def kill9(self) -> float:
        """SIGKILL (nothing released, nothing flushed) and reap; returns the kill time."""
        killed = anyio.current_time()
        self.proc.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(self.proc.wait, 15)
        return killed

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; idempotent (for ``finally`` blocks)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await anyio.to_thread.run_sync(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await anyio.to_thread.run_sync(self.proc.wait, 15)


def assert_no_tokens(env: Environment, processes: list[DispatcherProcess]) -> None:
    """No bearer token of any sandbox cluster appears in the processes' logs (issue 8,
    security: never log tokens)."""
    for process in processes:
        output = process.output()
        for cluster in env.sandbox.clusters:
            assert cluster.token not in output, f"{cluster.name}'s token in {process.log_path}"


async def stop_all(processes: list[DispatcherProcess]) -> None:
    """Stop every process, shielded from the test's cancellation."""
    with anyio.CancelScope(shield=True):
        for process in processes:
            await process.stop()


@dataclass
class ReplicaRecorder(NominationRecorder):
    """A :class:`NominationRecorder` for one field manager (one replica) with the time of each
    write; several can be installed on one cluster."""

    times: list[float] = field(default_factory=list)

    def install(self, cluster: FakeCluster) -> None:
        """Add the hook (named after the field manager) to ``cluster``."""
        on_status_writes(cluster, f"test-nomination-recorder-{self.field_manager}", self._record)

    def _record(self, request: AdmissionRequest) -> None:
        if request.field_manager == self.field_manager:
            self.times.append(anyio.current_time())
        super()._record(request)


@dataclass
class LeaseLog:
    """Every write of the Lease on the manager: (time, holderIdentity), waitable."""

    lease_name: str = "multikueue-dispatcher"
    holders: list[tuple[float, str]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def install(self, cluster: FakeCluster) -> None:
        """Add the hook to ``cluster``."""
        cluster.admission.add_validating(
            ValidatingHook(
                "test-lease-log",
                Match(resources=("leases",), operations=("CREATE", "UPDATE")),
                self._see,
            )
        )

    def _see(self, request: AdmissionRequest) -> None:
        if request.name != self.lease_name:
            return
        spec = (request.object or {}).get("spec") or {}
        self.holders.append((anyio.current_time(), str(spec.get("holderIdentity") or "")))
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def first_held_by(self, identity: str, after: float = 0.0) -> float | None:
        """When ``identity`` first wrote the Lease as its holder after ``after``."""
        return next((t for t, h in self.holders if h == identity and t >= after), None)

    async def wait_for_holder(self, identity: str, within: float, after: float = 0.0) -> float:
        """Wait until the Lease names ``identity``; returns that write's time."""
        with anyio.fail_after(within):
            while (found := self.first_held_by(identity, after)) is None:
                await self._changed.wait()
        return found


def contradictions(final: dict[str, Any], writes_of: Any) -> list[str]:
    """Workloads with a nomination we wrote that does not contain where they were admitted."""
    found = []
    for name, workload in final.items():
        cluster = cluster_of(workload)
        ours = writes_of(workload["metadata"]["name"])
        if any(n and cluster not in n for n in ours):
            found.append(f"{name}: admitted on {cluster}, nominated {ours}")
    return found
