"""A copy preempted on its worker is replaced, not reused (contract C24, C25, C26, C31, C32), on
every backend.

Kueue evicts and requeues the manager Workload after its worker evicted the copy (C26), but
removes the old copy only at a later reconcile, and only from a worker that is not nominated
(C31/C32); the worker keeps the old copy queued, and with it the Job created at its first
admission. Nominated again before that removal, the worker would later admit the old copy and
run its Job at once, before Kueue records the admission: a short Job then finishes while the
manager Workload never gets ``clusterName`` (C25 finishes it from the finished copy; the seeded
mix saw this on real Kueue v0.19.2). The dispatcher therefore nominates a reset workload only
once its old copy is gone (``Nominator._leftover``), and Kueue creates a fresh copy whose Job
is created in the reconcile that records its admission.

The low-priority Job needs all four H100 GPUs of worker2; a high-priority one for the same GPUs
preempts it there and runs until deleted, so the old copy cannot be admitted again meanwhile.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import (
    H100,
    NAMESPACE,
    ApiBackend,
    cluster_of,
    condition,
    is_false,
    is_true,
    listed_events,
)
from dispatcher_sandbox.harness.e2e.trace import recorder_of

pytestmark = [pytest.mark.slow, pytest.mark.crds]

LOW, HIGH = "leftover-low", "leftover-high"


def gpu_job(name: str, priority: str, run_seconds: float | None) -> WorkloadLine:
    """A one-pod Job for all four H100 GPUs of worker2."""
    data: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "count": 1,
        "requests": {"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": 4},
        "gpuType": H100,
        "priorityClass": priority,
    }
    if run_seconds is not None:
        data["runSeconds"] = run_seconds
    return WorkloadLine.model_validate(data)


async def test_a_copy_preempted_on_its_worker_is_replaced_not_reused(backend: ApiBackend) -> None:
    await backend.reset()
    recorder = recorder_of(backend)
    since = recorder.mark()
    long = backend.timeouts.long

    await backend.submit(gpu_job(LOW, "low", 10))
    await backend.wait_for(
        lambda: cluster_of(backend.workload(LOW)) == "worker2", f"{LOW} admitted on worker2", long
    )
    await backend.submit(gpu_job(HIGH, "high", None))
    # Admitted on the manager too, not only clusterName: the check turns Ready with clusterName
    # (C28 step 3) and the core workload controller writes Admitted after (C72). HIGH is deleted
    # below as soon as LOW's fresh copy waits, which on real Kueue came before that second write
    # once (CI at 593cea4: Admitted on one backend only).
    await backend.wait_for(
        lambda: (
            cluster_of(backend.workload(HIGH)) == "worker2"
            and is_true(backend.workload(HIGH), "Admitted")
        ),
        f"{HIGH} admitted",
        long,
    )

    # C26: the manager evicted and requeued the low Job; it is nominated again later.
    def renominated() -> tuple[float, list[float]] | None:
        """When the low Job was nominated again after its reset, and when its copies left
        worker2 (from the trace, which keeps every observed write)."""
        [trace] = recorder.export(since)["jobs"][LOW]
        resets = [e["t"] for e in trace["checks"] if e["state"] == "Retry"]
        if not resets:
            return None
        again = [e["t"] for e in trace["nominations"] if e["t"] > max(resets) and e["value"]]
        if not again:
            return None
        gone = [e["t"] for e in trace["copies"].get("worker2", []) if e["event"] == "disappeared"]
        return min(again), gone

    nominated_at, gone = await backend.wait_for(
        renominated, f"{LOW} reset (C26) and nominated again", long
    )
    if not gone:  # say which rule wrote it (the dispatcher's Events give its reason)
        low = backend.workload(LOW) or {}
        name = str((low.get("metadata") or {}).get("name", ""))
        said = [e["message"] for e in await listed_events(backend, name, "Nominated")]
        pytest.fail(
            f"{LOW} nominated again at {nominated_at} s while its old copy is on worker2; "
            f"the dispatcher's Nominated Events: {said}"
        )
    assert gone[0] < nominated_at, (gone, nominated_at)

    # HIGH goes once the fresh copy waits on worker2 behind it (QuotaReserved=False, Pending:
    # C13), so that the copy waits on every backend rather than when it happens to arrive late.
    await backend.wait_for(
        lambda: is_false(backend.copies(LOW).get("worker2"), "QuotaReserved"),
        f"{LOW}'s fresh copy pending on worker2 behind {HIGH}",
        long,
    )
    await backend.delete_job(HIGH)
    await backend.wait_for(
        lambda: is_true(backend.workload(LOW), "Finished"), f"{LOW} finished", long
    )
    final = backend.workload(LOW)
    assert cluster_of(final) == "worker2"
    assert (condition(final, "Finished") or {}).get("reason") == "Succeeded"
    [trace] = recorder.export(since)["jobs"][LOW]
    assert trace["remoteCopiesCreated"] == 2, "a fresh copy replaced the preempted one"
