"""A seeded random mix of short Jobs, run on every backend for the differential comparison
(issue 14: "CI runs it for the S-scenarios and for a seeded random mix (priorities, preemption,
borrowing, short jobs, worker loss)").

The mix (seed :data:`SEED`, 24 Jobs, each running 2-10 s) comes in four waves, each started on
a condition the run reached, never after a fixed time:

A. twelve Jobs: low-priority GPU Jobs for both GPU types, CPU Jobs (some low priority) and two
   Jobs of 10 cpu, which fit a worker only by borrowing from the cohort ``pool`` (the
   ClusterQueue ``spare`` lends 4 cpu on each worker, ``topology.yaml``; C69);
B. once both low-priority A100 Jobs are admitted on worker1 (its two GPUs): a high-priority Job
   for both A100 GPUs, which worker1's Kueue can only admit by preempting them (C26: preemption
   happens on the worker, the manager evicts and requeues, C37, C38), and two high-priority CPU
   Jobs;
C. worker2 lost (once it holds no Job): once Kueue reports it ``Active=False``, five CPU Jobs;
   worker2 comes back once the dispatcher nominated each of them;
D. once worker2 is ``Active`` again: a high-priority Job for all four H100 GPUs and three CPU
   Jobs.

It ends when every Job has finished. What must hold on every backend: each Job ends
``Finished`` with ``status.clusterName`` set on the manager (C40), no Job was ever admitted on
two reachable workers at the same time (a copy on the lost worker counts until the loss
started: Kueue cannot remove it while the worker is away), the preemption and the borrowing
happened, and every Job's trace (``e2e_trace.py``) was recorded. ``scripts/differential.py``
then compares the traces of the sandbox and real runs.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from e2e_backend import A100, H100, NAMESPACE, Backend, cluster_of, condition, is_true
from e2e_trace import recorder_of

from dispatcher.sandbox.topology import WorkloadLine

pytestmark = [pytest.mark.slow, pytest.mark.crds]

SEED = 20260514
BORROWING_CPU = "10"  # more than a worker's nominal 8 cpu, within the 12 it may borrow up to


def line(
    name: str,
    rng: random.Random,
    *,
    cpu: str = "1",
    memory: str = "512Mi",
    gpus: int = 0,
    gpu_type: str | None = None,
    priority: str | None = None,
    run: tuple[float, float] = (2, 5),
) -> WorkloadLine:
    """A one-pod Job for ``team-a/user-queue`` that runs a seeded number of seconds."""
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    data: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "count": 1,
        "requests": requests,
        "runSeconds": rng.randint(int(run[0]), int(run[1])),
    }
    if gpu_type:
        data["gpuType"] = gpu_type
    if priority:
        data["priorityClass"] = priority
    return WorkloadLine.model_validate(data)


def waves(seed: int = SEED) -> dict[str, list[WorkloadLine]]:
    """The mix, wave by wave (see the module docstring); the same for a given seed."""
    rng = random.Random(seed)
    a = [
        line("mix-a-a100-low-0", rng, gpus=1, gpu_type=A100, priority="low", run=(8, 10)),
        line("mix-a-a100-low-1", rng, gpus=1, gpu_type=A100, priority="low", run=(8, 10)),
        line("mix-a-h100-low-0", rng, gpus=1, gpu_type=H100, priority="low", run=(4, 8)),
        line("mix-a-h100-low-1", rng, gpus=1, gpu_type=H100, priority="low", run=(4, 8)),
        line("mix-a-borrow-0", rng, cpu=BORROWING_CPU, memory="1Gi", run=(3, 5)),
        line("mix-a-borrow-1", rng, cpu=BORROWING_CPU, memory="1Gi", run=(3, 5)),
    ]
    a += [
        line(f"mix-a-cpu-{i}", rng, cpu=str(rng.randint(1, 3)), priority=rng.choice(["low", None]))
        for i in range(6)
    ]
    b = [
        line("mix-b-a100-high", rng, gpus=2, gpu_type=A100, priority="high", run=(3, 5)),
        line("mix-b-cpu-high-0", rng, cpu="2", priority="high", run=(2, 4)),
        line("mix-b-cpu-high-1", rng, cpu="2", priority="high", run=(2, 4)),
    ]
    c = [line(f"mix-c-cpu-{i}", rng, run=(2, 4)) for i in range(5)]
    d = [line("mix-d-h100-high", rng, gpus=4, gpu_type=H100, priority="high", run=(2, 4))]
    d += [line(f"mix-d-cpu-{i}", rng, cpu=str(rng.randint(1, 2)), run=(2, 4)) for i in range(3)]
    return {"A": a, "B": b, "C": c, "D": d}


def admitted_intervals(trace: dict[str, Any]) -> list[tuple[float, float, str]]:
    """When each remote copy of a Job was ``Admitted`` on its worker: ``(from, to, worker)``,
    from the trace (``to`` is the copy's next ``Admitted`` change, its removal, or infinity)."""
    out = []
    for worker, events in trace.get("copyConditions", {}).items():
        ends = [e["t"] for e in trace["copies"].get(worker, []) if e["event"] == "disappeared"]
        start: float | None = None
        for event in events:
            if event["type"] != "Admitted":
                continue
            if event["status"] == "True" and start is None:
                start = event["t"]
            elif event["status"] != "True" and start is not None:
                out.append((start, event["t"], worker))
                start = None
        if start is not None:
            later = [t for t in ends if t >= start]
            out.append((start, min(later) if later else float("inf"), worker))
    return out


def reachable(
    intervals: list[tuple[float, float, str]], lost: str, loss_started: float
) -> list[tuple[float, float, str]]:
    """The admitted intervals on reachable workers: on the ``lost`` worker, only what came
    before the loss started (from then on Kueue cannot remove a copy there until the worker is
    back, and the copy's own Kueue may even admit it while its API server shuts down)."""
    out = []
    for start, end, worker in intervals:
        if worker == lost:
            if start >= loss_started:
                continue
            end = min(end, loss_started)
        out.append((start, end, worker))
    return out


def overlapping(intervals: list[tuple[float, float, str]]) -> list[tuple[str, str]]:
    """Pairs of workers whose admitted intervals overlap."""
    found = []
    for i, (start, end, worker) in enumerate(intervals):
        for other_start, other_end, other in intervals[i + 1 :]:
            if other != worker and start < other_end and other_start < end:
                found.append((worker, other))
    return found


LOW_A100 = ("mix-a-a100-low-0", "mix-a-a100-low-1")


def preempted_on_worker1(traces: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The low-priority A100 Jobs whose copy on worker1 was ever ``Preempted`` (from the
    traces, which keep every observed write: the copy may be gone by the time one looks)."""
    return [
        name
        for name in LOW_A100
        if any(
            e["type"] == "Preempted" and e["status"] == "True"
            for trace in traces.get(name, [])
            for e in trace.get("copyConditions", {}).get("worker1", [])
        )
    ]


def test_seeded_waves_are_reproducible_and_sized() -> None:
    first, again = waves(), waves()
    assert [[j.model_dump() for j in w] for w in first.values()] == [
        [j.model_dump() for j in w] for w in again.values()
    ]
    names = [j.name for w in first.values() for j in w]
    assert len(names) == len(set(names)) == 24
    assert all(
        j.run_seconds is not None and 2 <= j.run_seconds <= 10 for w in first.values() for j in w
    )


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        pytest.param([(0, 5, "worker2")], [(0, 5, "worker2")], id="before-the-loss"),
        pytest.param([(8, 20, "worker2")], [(8, 10, "worker2")], id="cut-at-the-loss"),
        pytest.param([(12, 20, "worker2")], [], id="during-the-loss"),
        pytest.param([(12, 20, "worker1")], [(12, 20, "worker1")], id="on-the-other-worker"),
    ],
)
def test_admissions_on_the_lost_worker_end_with_the_loss(
    intervals: list[tuple[float, float, str]], expected: list[tuple[float, float, str]]
) -> None:
    assert reachable(intervals, "worker2", 10) == expected


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        pytest.param([(0, 5, "worker1"), (6, 9, "worker2")], [], id="one-after-the-other"),
        pytest.param(
            [(0, 5, "worker1"), (4, 9, "worker2")], [("worker1", "worker2")], id="overlap"
        ),
        pytest.param([(0, 5, "worker1"), (5, 9, "worker1")], [], id="same-worker-again"),
    ],
)
def test_overlapping_admissions_are_found(
    intervals: list[tuple[float, float, str]], expected: list[tuple[str, str]]
) -> None:
    assert overlapping(intervals) == expected


async def test_seeded_mix_ends_admitted_with_cluster_name_everywhere(backend: Backend) -> None:
    await backend.reset()
    recorder = recorder_of(backend)
    since = recorder.mark()
    mix = waves()
    everything = [j for w in mix.values() for j in w]
    long = backend.timeouts.long

    for job in mix["A"]:
        await backend.submit(job)
    await backend.wait_for(
        lambda: all(
            cluster_of(backend.workload(name)) == "worker1"
            and is_true(backend.copies(name).get("worker1"), "Admitted")
            for name in LOW_A100
        ),
        "both low-priority A100 Jobs admitted on worker1",
        long,
    )

    for job in mix["B"]:
        await backend.submit(job)
    await backend.wait_for(
        lambda: preempted_on_worker1(recorder.export(since)["jobs"]),
        "a low-priority A100 Job preempted on worker1 for the high-priority one",
        long,
    )

    # The loss comes once worker2 holds no Job: the real backend's Job finisher would crash on
    # a status write to the stopped API server (dispatcher/sandbox/real/finisher.py catches only
    # answers of the server, not a refused connection), ending the run.
    await backend.wait_for(
        lambda: not backend.worker_jobs("worker2"), "worker2 holds no Job", 2 * long
    )
    loss_started = recorder.clock()
    await backend.disconnect_worker("worker2")
    try:
        await backend.wait_for(
            lambda: backend.cluster_active("worker2") is False,
            "Kueue reports worker2 Active=False",
            long,
        )
        for job in mix["C"]:
            await backend.submit(job)
        await backend.wait_for(
            lambda: all(any(backend.nominations(j.name)) for j in mix["C"]),
            "the Jobs submitted while worker2 is away nominated",
            long,
        )
    finally:
        await backend.reconnect_worker("worker2")
    await backend.wait_for(
        lambda: backend.cluster_active("worker2") is True,
        "Kueue reports worker2 Active=True again",
        long,
    )

    for job in mix["D"]:
        await backend.submit(job)

    def unfinished() -> list[str]:
        return [j.name for j in everything if not is_true(backend.workload(j.name), "Finished")]

    await backend.wait_for(lambda: not unfinished(), "every Job of the mix finished", 2 * long)

    without_cluster = [j.name for j in everything if cluster_of(backend.workload(j.name)) is None]
    assert not without_cluster, f"Finished without clusterName: {without_cluster}"
    for job in everything:
        reason = (condition(backend.workload(job.name), "Finished") or {}).get("reason")
        assert reason == "Succeeded", (job.name, reason)
    for job in everything:
        if job.gpu_type is not None:
            expected = "worker1" if job.gpu_type == A100 else "worker2"
            assert cluster_of(backend.workload(job.name)) == expected, job.name

    traces = recorder.export(since)["jobs"]
    assert set(traces) == {j.name for j in everything}, "every Job's trace recorded"
    for job in everything:
        [trace] = traces[job.name]
        assert trace["workload"], job.name
        assert trace["remoteCopiesCreated"] >= 1, job.name
        submitted = recorder.submitted_at(job.name, since)
        assert submitted is not None, job.name
        admitted = reachable(admitted_intervals(trace), "worker2", loss_started - submitted)
        assert not overlapping(admitted), (job.name, "admitted on two workers", admitted)
    assert preempted_on_worker1(traces), "a low-priority A100 copy was preempted on worker1"
    for name in ("mix-a-borrow-0", "mix-a-borrow-1"):
        held = [
            q["held"]
            for events in traces[name][0]["quota"].values()
            for q in events
            if q["held"] is not None
        ]
        assert any(p["usage"].get("cpu") == BORROWING_CPU for h in held for p in h["podSets"]), (
            name,
            "10 cpu reserved on a worker of 8: borrowed from the cohort",
        )
