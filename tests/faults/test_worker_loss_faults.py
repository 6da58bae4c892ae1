"""Issue 8, fault-injection suite: worker loss, on the sandbox (fake API servers over HTTPS, the
emulated Kueue) with the real dispatcher.

Bullet: "a worker refuses connections, then is slow (2 s per request), then returns ->
excluded, re-nominations within 30 s, included again; slowness of one worker never delays
decisions for workloads that don't need it". Points of docs/fake-apiserver.md and the contract: F56
(down: connections refused and open streams cut; up: same port, CA, token and state), F54
(latency on every request), contract C11 (a MultiKueueCluster whose connection is lost is not
Active; the dispatcher leaves out a worker it is not connected to) and scenario S8 (a worker
left out while disconnected, its nominations moved, used again after reconnection).
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

import anyio
import pytest

from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.fake_apiserver.faults import Fault
from dispatcher_sandbox.harness.faults.watch import MirrorChanges, NominationTimes, ReservationTimes
from dispatcher_sandbox.harness.scenario import (
    A100,
    H100,
    by_job,
    cluster_of,
    cpu_jobs,
    gpu_job,
    placed_all,
)

pytestmark = pytest.mark.faults

A100_WORKER = "worker-a100"
SLOW = 2.0  # seconds added to every request worker-a100 serves while slow (the bullet's figure)
RENOMINATE_WITHIN = 30.0  # the bullet's bound
WITHIN = 60.0  # generous deadline for anything else (the machine is shared and loaded)


class Timeline:
    """When each Job was submitted, got quota on the manager, and was first nominated."""

    def __init__(self, env: Any, nominations: NominationTimes, reservations: ReservationTimes):
        self.env = env
        self.nominations = nominations
        self.reservations = reservations
        self.submitted: dict[str, float] = {}

    async def submit(self, lines: list[Any]) -> set[str]:
        """Submit Jobs one by one, noting each one's submission time."""
        for line in lines:
            self.submitted[line.name] = anyio.current_time()
            await self.env.submit([line])
        return {line.name for line in lines}

    async def nominated(self, names: set[str]) -> None:
        """Wait until every Job of ``names`` has been nominated once."""
        await self.nominations.wait_until(
            lambda: all(n in self.nominations.first for n in names), within=WITHIN
        )

    def to_nomination(self, names: set[str]) -> dict[str, float]:
        """Submission -> first nomination, per Job (end to end: Kueue's quota reservation on
        the manager, the dispatcher's watch, its decision and its write)."""
        return {n: self.nominations.first[n] - self.submitted[n] for n in sorted(names)}

    def decision(self, names: set[str]) -> dict[str, float]:
        """Quota reserved on the manager -> first nomination, per Job: the dispatcher's part
        (watch delivery, queueing, decision, write)."""
        return {n: self.nominations.first[n] - self.reservations.first[n] for n in sorted(names)}


def _jobs(prefix: str) -> list[Any]:
    """Jobs that never need worker-a100: CPU Jobs (any worker fits them) and one Job requiring
    an H100 (only worker-h100 fits it; the slow batch's finds it full, the Jobs moved off
    worker-a100 took its last GPUs, and waits there: only its decision is timed)."""
    return [*cpu_jobs(f"{prefix}-cpu", 5, cpu="1"), gpu_job(f"{prefix}-h100", required=H100)]


def _a100(registry: Any) -> Any:
    """worker-a100 as the dispatcher's next decision sees it (a Candidate)."""
    (check,) = registry.multikueue_checks()
    candidates, _ = registry.candidates(check)
    (found,) = [c for c in candidates if c.name == A100_WORKER]
    return found


async def _until(changes: MirrorChanges, predicate: Any, within: float) -> None:
    """Wait until ``predicate()`` holds, re-checking after every change the dispatcher's mirrors
    apply (worker connection states included)."""
    with anyio.fail_after(within):
        while True:
            changed = changes.arm()
            if predicate():
                return
            await changed.wait()


def _summary(values: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}s" for name, value in values.items())


async def test_worker_refuses_then_slow_then_returns(
    tmp_path: Path, crds_dir: Path, figures: Any
) -> None:
    """Issue 8 bullet "a worker refuses connections, then is slow (2 s per request), then
    returns -> excluded, re-nominations within 30 s, included again; slowness of one worker
    never delays decisions for workloads that don't need it" (F56, F54, C11, S8).

    Baseline: CPU Jobs and an H100-only Job (none needs worker-a100) are timed from quota
    reservation to first nomination. Refuses: two A100-preferring Jobs nominated to
    worker-a100 (Kueue's copy creation there hangs, so they stay unadmitted) are re-nominated
    elsewhere within 30 s of worker-a100 going down, and admitted there. Slow: worker-a100 is
    back but answers every request 2 s late; it is left out until the dispatcher's mirror of
    it is connected again and Kueue reports it Active (no nomination names it from down until
    then), then included and used (an A100-only Job is admitted there, slowly). The same kinds
    of Jobs as the baseline are decided as fast as before (each decision well under the 2 s
    one request to worker-a100 would cost), both while the dispatcher reconnects to it and
    once it is connected. Returns: faults cleared, a Job requiring an A100 is admitted on
    worker-a100.
    """
    nominations, reservations = NominationTimes(), ReservationTimes()
    async with environment(tmp_path, default_topology(), crds=crds_dir) as env:
        nominations.install(env.sandbox.manager)
        reservations.install(env.sandbox.manager)
        timeline = Timeline(env, nominations, reservations)
        a100 = env.sandbox.cluster(A100_WORKER)

        # Warm-up: the dispatcher leads, every worker is connected, one Job went through.
        await env.submit(cpu_jobs("warm-up", 1))
        await env.wait_for_manager(placed_all({"warm-up-0"}), within=WITHIN)
        assert env.dispatcher is not None
        assert env.dispatcher.registry is not None
        registry = env.dispatcher.registry
        changes = MirrorChanges(registry)
        await _until(changes, lambda: _a100(registry).active, within=WITHIN)

        # --- baseline ----------------------------------------------------------------------
        baseline_names = await timeline.submit(_jobs("baseline"))
        await timeline.nominated(baseline_names)
        baseline = timeline.decision(baseline_names)
        baseline_e2e = timeline.to_nomination(baseline_names)

        # --- 1. worker-a100 refuses connections ---------------------------------------------
        # Kueue's copy creation on worker-a100 hangs, so the Jobs stay nominated there (not
        # admitted) until the worker goes down.
        a100.faults.add(Fault("latency", verbs=("create",), path="/workloads", delay=120.0))
        prefer = {"preferredGpuTypes": [A100, H100]}
        stranded = await timeline.submit([gpu_job(f"stranded-{i}", **prefer) for i in range(2)])
        await nominations.wait_until(
            lambda: all(nominations.last(n) == (A100_WORKER,) for n in stranded), within=WITHIN
        )
        await a100.down()
        down_at = anyio.current_time()
        await _until(changes, lambda: not _a100(registry).active, within=WITHIN)
        excluded_after = anyio.current_time() - down_at
        excluded_reason = _a100(registry).reason

        def moved() -> bool:
            return all(
                nominations.last(n) and A100_WORKER not in nominations.last(n) for n in stranded
            )

        await nominations.wait_until(moved, within=RENOMINATE_WITHIN)
        renominated_after = anyio.current_time() - down_at
        final = by_job(await env.wait_for_manager(placed_all(stranded), within=WITHIN))
        admitted_after = anyio.current_time() - down_at
        assert {cluster_of(final[n]) for n in stranded} == {"worker-h100"}

        # --- 2. worker-a100 is back, but slow -----------------------------------------------
        a100.faults.clear()
        slow = a100.faults.latency(SLOW)
        # Counts, without delaying anything more, every request the dispatcher makes to
        # worker-a100 beyond its mirror's lists and watches (and API discovery): a decision
        # that read or wrote worker-a100 would show here.
        decision_requests = a100.faults.latency(
            0.0,
            verbs=("get", "create", "update", "patch", "delete"),
            path=r"^/apis/[^/]+/[^/]+/[^/]+|^/api/v1/[^/]+",
            user_agent=r"^multikueue-dispatcher/",
        )
        await a100.up()
        up_at = anyio.current_time()
        included: list[float] = []
        phases: list[str] = []

        async def inclusion() -> None:
            # worker-a100 connected (through 2 s requests) and Kueue reports it Active again.
            await _until(changes, lambda: _a100(registry).active, within=WITHIN)
            included.append(anyio.current_time())
            phases.append(registry.workers[A100_WORKER].state.phase)

        async with anyio.create_task_group() as group:
            group.start_soon(inclusion)
            # Submitted at once, while the dispatcher reconnects to worker-a100.
            reconnecting_names = await timeline.submit(_jobs("reconnecting"))
            await timeline.nominated(reconnecting_names)
        included_after = included[0] - up_at
        reconnecting = timeline.decision(reconnecting_names)
        before_inclusion = sum(nominations.first[n] < included[0] for n in reconnecting_names)
        # Connected when it was included. Not necessarily now: a stream of its mirror may
        # have been cut since (every request to it takes 2 s) and be within the grace that
        # keeps it usable (CI at f84a195 read "Disconnected" here).
        assert phases == ["Connected"]
        # Excluded from the first to the last moment it was unusable: no nomination written
        # between going down and being included again named it.
        named = [
            (name, at - down_at, clusters)
            for name, written in nominations.history.items()
            for at, clusters in written
            if down_at <= at < included[0] and A100_WORKER in clusters
        ]
        assert not named, f"nominated to worker-a100 while it was not usable: {named}"
        # Decided while worker-a100 is connected and every request to it takes 2 s.
        slow_names = await timeline.submit(_jobs("slow"))
        await timeline.nominated(slow_names)
        while_slow = timeline.decision(slow_names)
        slow_e2e = timeline.to_nomination(slow_names)
        # Is worker-a100 used while slow? A Job only it can take (A100 required).
        (slow_a100,) = await timeline.submit([gpu_job("slow-a100", required=A100)])
        placed = by_job(await env.wait_for_manager(placed_all({slow_a100}), within=WITHIN))
        assert cluster_of(placed[slow_a100]) == A100_WORKER
        slow_a100_admitted = anyio.current_time() - timeline.submitted[slow_a100]
        slow_cpu = {n for n in slow_names if "-cpu-" in n}
        placed = by_job(await env.wait_for_manager(placed_all(slow_cpu), within=WITHIN))
        slow_cpu_where = sorted({str(cluster_of(placed[n])) for n in slow_cpu})

        # --- 3. worker-a100 returns to normal -----------------------------------------------
        slow_requests = slow.fired
        a100.faults.clear()
        cleared_at = anyio.current_time()
        returned = await timeline.submit([gpu_job("after-return", required=A100)])
        final = by_job(await env.wait_for_manager(placed_all(returned), within=WITHIN))
        used_after = anyio.current_time() - cleared_at
        assert cluster_of(final["after-return"]) == A100_WORKER
        assert nominations.last("after-return") == (A100_WORKER,)

    affected = [*reconnecting.values(), *while_slow.values()]
    base_max, slow_max = max(baseline.values()), max(affected)
    ratio = median(affected) / median(baseline.values())
    needs_a100 = timeline.decision({slow_a100})[slow_a100]
    print(
        f"\nexcluded {excluded_after:.2f}s after down ({excluded_reason}); re-nominated "
        f"{renominated_after:.2f}s, admitted on worker-h100 {admitted_after:.2f}s after down"
        f"\nback slow: included again {included_after:.2f}s after up; {slow_requests} requests "
        f"delayed {SLOW}s; {before_inclusion} of the reconnecting batch decided before that; "
        f"the slow batch's CPU Jobs admitted on {slow_cpu_where}; an A100 Job nominated to "
        f"worker-a100 and admitted there {slow_a100_admitted:.2f}s after submission"
        f"\ndecision (quota reserved -> nominated): baseline {_summary(baseline)}"
        f"\n  while reconnecting {_summary(reconnecting)}\n  while slow {_summary(while_slow)}"
        f"\n  the A100 Job (needs worker-a100, slow) {needs_a100:.2f}s; median slow/baseline "
        f"{ratio:.2f}"
        f"\nsubmission -> nomination: baseline {_summary(baseline_e2e)}; slow {_summary(slow_e2e)}"
        f"\nworker-a100 used again {used_after:.2f}s after the faults were cleared"
    )
    # Re-nomination within the bullet's 30 s (also enforced by the wait above).
    assert renominated_after <= RENOMINATE_WITHIN
    # Independence: a decision reads only the dispatcher's mirrors (never a worker's API) and
    # writes only to the manager, so a decision for a Job that does not need worker-a100 never
    # waits for one of its 2 s requests: the dispatcher sent worker-a100 nothing but its
    # mirror's lists and watches. (Checked by counting, not by timing the decisions: on a loaded
    # CI machine, at 67ae3dd, they took up to 2.25 s while decisions alone take 0.03-0.10 s.)
    assert decision_requests.fired == 0, (
        f"the dispatcher sent worker-a100 {decision_requests.fired} requests besides its mirror's"
    )
    assert slow_requests > 0, "worker-a100 served no slow request: the slow phase lost its point"

    figures.record("worker loss: excluded after down", excluded_after, "s")
    figures.record("worker loss: re-nomination time", renominated_after, "s")
    figures.record("worker loss: admitted elsewhere after down", admitted_after, "s")
    figures.record("worker loss: included again after up (slow)", included_after, "s")
    figures.record(
        "worker loss: A100 Job admitted on worker-a100 while slow", slow_a100_admitted, "s"
    )
    figures.record("worker loss: used again after faults cleared", used_after, "s")
    figures.record("worker loss: decision latency baseline (max)", base_max, "s")
    figures.record("worker loss: decision latency while slow (max)", slow_max, "s")
    figures.record("worker loss: decision latency slow/baseline (medians)", ratio, "x")
