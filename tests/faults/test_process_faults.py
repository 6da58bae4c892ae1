"""Issue 8, fault-injection suite: "process kill -9 mid-burst, and leader kill with two replicas
-> idempotent recovery, handover time measured".

The sandbox (fake API servers, emulated Kueue) runs in the test's event loop; the dispatcher runs
as real ``python -m dispatcher run`` OS processes against the manager's kubeconfig, and is
killed with SIGKILL: nothing released, nothing flushed, the Lease left held. The figures
(restart recovery, leader handover) go to the suite's table (tests/faults/conftest.py).

Contract points: C48 (a nomination is written with the resourceVersion it was based on, so a
restarted or new leader never contradicts one Kueue acted on), nothing living only in memory
(README, *Operations*: the in-flight ledger is rebuilt from current nominations), and leader
election (README, *Operations*: one writer at a time; a killed leader's Lease expires after
``leader_election.lease_duration_seconds``, docs/configuration.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.harness.faults.process import (
    LEASE_ENV,
    LEASE_SECONDS,
    DispatcherProcess,
    LeaseLog,
    ReplicaRecorder,
    assert_no_tokens,
    contradictions,
    stop_all,
)
from dispatcher_sandbox.harness.scenario import (
    FIELD_MANAGER,
    NominationRecorder,
    by_job,
    cluster_of,
    cpu_jobs,
    nominated,
    placed_all,
)

pytestmark = pytest.mark.faults

# The sandbox's emulated Kueue admits about 1-2 workloads a second on a loaded 2-CPU machine: a
# burst of 24 keeps each test under a minute. The burst is submitted while the dispatcher runs,
# so the kill lands in the middle of it.
BURST = 24
KILL_AFTER_WRITES = 5


def _dispatched(names: set[str]) -> Any:
    """Predicate: every Job has a Workload nominated somewhere or admitted."""

    def check(workloads: list[dict[str, Any]]) -> bool:
        found = by_job(workloads)
        return all(n in found and (cluster_of(found[n]) or nominated(found[n])) for n in names)

    return check


async def _placed_or_fail(env: Any, names: set[str], writes_of: Any, within: float) -> Any:
    try:
        return by_job(await env.wait_for_manager(placed_all(names), within=within))
    except TimeoutError:
        stuck = {
            w["metadata"]["name"]: (nominated(w), writes_of(w["metadata"]["name"]))
            for w in await env.workloads()
            if not cluster_of(w)
        }
        pytest.fail(f"{len(stuck)} not admitted (current nomination, our writes): {stuck}")


async def _assert_each_admitted_once(env: Any, final: dict[str, Any], writes_of: Any) -> int:
    """One copy per workload across the workers, none contradicting; returns duplicates."""
    assert not contradictions(final, writes_of)
    copies = await env.copies_by_workload()
    assert sorted(copies) == sorted(w["metadata"]["name"] for w in final.values())
    duplicates = sum(1 for where in copies.values() if len(where) > 1)
    assert duplicates == 0, {n: w for n, w in copies.items() if len(w) > 1}
    for workload in final.values():
        assert copies[workload["metadata"]["name"]] == [cluster_of(workload)]
    assert env.kueue.manager.admitted() == len(final)
    return duplicates


async def test_kill9_mid_burst_then_restart_dispatches_each_workload_once(
    tmp_path: Path, crds_dir: Path, figures: Any
) -> None:
    """kill -9 of the dispatcher process mid-burst (24 CPU jobs), then a new process: every
    workload ends admitted exactly once (one copy across the workers), no nomination we wrote
    contradicts where it was admitted, duplicates 0. Figures: restart -> /readyz, restart ->
    all dispatched (nominated or admitted), restart -> all admitted."""
    lines = cpu_jobs("kill9", BURST)
    names = {line.name for line in lines}
    recorder = NominationRecorder()
    processes: list[DispatcherProcess] = []
    async with environment(
        tmp_path, default_topology(), crds=crds_dir, run_dispatcher=False
    ) as env:
        recorder.install(env.sandbox.manager)
        try:
            first = DispatcherProcess.start(env, tmp_path, "first")
            processes.append(first)
            await first.wait_ready(within=60)
            async with anyio.create_task_group() as burst:
                burst.start_soon(env.submit, lines)
                await recorder.wait_for_writes(KILL_AFTER_WRITES, within=60)
                await first.kill9()
            written_before = len(recorder.writes)
            assert first.proc.returncode == -9
            assert written_before < BURST, "the kill came too late to be mid-burst"

            second = DispatcherProcess.start(env, tmp_path, "second")
            processes.append(second)
            restarted = second.started_at
            ready = await second.wait_ready(within=60) - restarted
            await env.wait_for_manager(_dispatched(names), within=50)
            dispatched = anyio.current_time() - restarted
            final = await _placed_or_fail(env, names, recorder.of, within=50)
            admitted = anyio.current_time() - restarted
            duplicates = await _assert_each_admitted_once(env, final, recorder.of)
            extra_copies = env.kueue.manager.dispatched() - env.kueue.manager.admitted()
        finally:
            await stop_all(processes)
        assert_no_tokens(env, processes)
    print(
        f"killed after {written_before}/{BURST} nomination writes; {len(recorder.writes)} in "
        f"all; restart -> ready {ready:.2f}s, -> all dispatched {dispatched:.2f}s, "
        f"-> all admitted {admitted:.2f}s; extra copies {extra_copies:.0f}"
    )
    figures.record("kill -9: workloads admitted", len(final), "")
    figures.record("kill -9: nomination writes before the kill", written_before, "")
    figures.record("kill -9: duplicates", duplicates, "")
    figures.record("kill -9: restart -> /readyz", ready, "s")
    figures.record("kill -9: restart -> all dispatched", dispatched, "s")
    figures.record("kill -9: restart -> all admitted", admitted, "s")


async def test_leader_kill9_hands_over_to_the_other_replica(
    tmp_path: Path, crds_dir: Path, figures: Any
) -> None:
    """Two replicas as processes with leader election (3 s Lease): the leader is killed with
    SIGKILL mid-burst (its Lease stays held); the follower takes over once the Lease expires.
    Only one replica writes at a time (the follower wrote nothing before the kill, the killed
    leader nothing after the new leader's first write, which follows its Lease acquisition),
    every workload admitted once, duplicates 0. Figures: kill -> new holder in the Lease,
    kill -> first write of the new leader, kill -> all admitted."""
    lines = cpu_jobs("handover", BURST)
    names = {line.name for line in lines}
    a_writes = ReplicaRecorder(field_manager=f"{FIELD_MANAGER}-a")
    b_writes = ReplicaRecorder(field_manager=f"{FIELD_MANAGER}-b")
    lease = LeaseLog()

    def writes_of(name: str) -> list[tuple[str, ...]]:
        return a_writes.of(name) + b_writes.of(name)

    processes: list[DispatcherProcess] = []
    async with environment(
        tmp_path, default_topology(), crds=crds_dir, run_dispatcher=False
    ) as env:
        for hook in (a_writes, b_writes, lease):
            hook.install(env.sandbox.manager)
        try:
            replicas = {}
            for name in ("a", "b"):
                replicas[name] = DispatcherProcess.start(
                    env,
                    tmp_path,
                    f"replica-{name}",
                    leader_election=True,
                    extra_args=(
                        "--identity",
                        f"replica-{name}",
                        "--field-manager",
                        f"{FIELD_MANAGER}-{name}",
                    ),
                    extra_env=LEASE_ENV,
                )
                processes.append(replicas[name])
                if name == "a":
                    # a first, so that it is the leader.
                    await lease.wait_for_holder("replica-a", within=60)
            for process in processes:
                await process.wait_ready(within=60)  # followers are ready while idle
            async with anyio.create_task_group() as burst:
                burst.start_soon(env.submit, lines)
                await a_writes.wait_for_writes(KILL_AFTER_WRITES, within=60)
                assert not b_writes.writes, "the follower wrote while the leader was alive"
                killed = await replicas["a"].kill9()
            written_before = len(a_writes.writes)
            assert written_before < BURST, "the kill came too late to be mid-burst"

            took_over = await lease.wait_for_holder("replica-b", within=30, after=killed)
            await b_writes.wait_for_writes(1, within=30)
            first_write = b_writes.times[0]
            await env.wait_for_manager(_dispatched(names), within=50)
            dispatched = anyio.current_time() - killed
            final = await _placed_or_fail(env, names, writes_of, within=50)
            recovered = anyio.current_time() - killed
            duplicates = await _assert_each_admitted_once(env, final, writes_of)
        finally:
            await stop_all(processes)
        assert_no_tokens(env, processes)
    # One writer at a time: a's writes all precede b's Lease and b's first write.
    assert first_write >= took_over
    assert all(t < first_write for t in a_writes.times), "the old leader wrote after handover"
    assert [h for _, h in lease.holders if h].count("replica-a") >= 1
    assert len(a_writes.writes) + len(b_writes.writes) >= BURST
    handover, first_write_after = took_over - killed, first_write - killed
    print(
        f"leader killed after {written_before}/{BURST} writes; new holder after "
        f"{handover:.2f}s, its first write after {first_write_after:.2f}s, all admitted after "
        f"{recovered:.2f}s (lease {LEASE_SECONDS:.0f}s); writes a={len(a_writes.writes)} "
        f"b={len(b_writes.writes)}"
    )
    # Generous bound (the lease duration, its retry period, and a loaded machine).
    assert handover <= LEASE_SECONDS + 10
    figures.record("leader kill: lease duration", LEASE_SECONDS, "s")
    figures.record("leader kill: kill -> new holder in the Lease", handover, "s")
    figures.record("leader kill: kill -> first write of the new leader", first_write_after, "s")
    figures.record("leader kill: kill -> all dispatched", dispatched, "s")
    figures.record("leader kill: kill -> all admitted", recovered, "s")
    figures.record("leader kill: duplicates", duplicates, "")
