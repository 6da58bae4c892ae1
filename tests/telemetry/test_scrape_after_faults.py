"""Issue 16 "must show": ``/metrics`` after a run with a bad worker, a failing write and a
rejected workload shows each new series with its labels and non-zero values.

Sandbox-backed: fake API servers over HTTPS with the real Kueue v0.19.2 CRDs, the emulated
Kueue, and the real manager process (its HTTP ``/metrics`` endpoint is what is scraped). What
goes wrong, each exactly once or a known number of times:

- worker-h100's kubeconfig Secret is not valid YAML: refused (``kind="kubeconfig"``, once);
- worker-cpu answers the dispatcher's first two LocalQueue lists with 500 (``kind="watch"``,
  twice), then connects;
- the manager answers the dispatcher's first status write with 500 (``kind="write"``, once;
  the write is retried and lands);
- the first reconcile of the CPU Job's Workload raises a RuntimeError, as a bug would
  (``kind="unexpected"``, once; retried);
- a Job that requires H100 GPUs: worker-h100 is unusable, the others offer no H100, so no
  cluster can take it (``filtered_clusters_total`` by filter and reason code,
  ``no_feasible_cluster_total``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from dispatcher.app.manager import Manager
from dispatcher.controller.nominator import Nominator
from dispatcher.k8s.client import USER_AGENT
from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.harness.scenario import (
    H100,
    EventWatch,
    b64,
    by_job,
    cluster_of,
    cpu_jobs,
    gpu_job,
    placed_all,
    replace_secret_data,
    scrape,
    start_replica,
)

pytestmark = pytest.mark.slow

DISPATCHER = f"^{re.escape(USER_AGENT)}$"  # faults for the dispatcher's requests only
ALGORITHM = "gpu-type-affinity+capacity-first"  # the default pipeline


async def test_metrics_after_a_bad_worker_a_failing_write_and_a_rejected_workload(
    tmp_path: Path, crds_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = cpu_jobs("honest-cpu", 1)[0]
    rejected = gpu_job("honest-h100-only", gpus=1, required=H100)
    raised: list[str] = []
    reconcile = Nominator.reconcile

    async def buggy(self: Nominator, key: str) -> None:
        if not raised and key.split("/")[-1].startswith(f"job-{cpu.name}-"):
            raised.append(key)
            raise RuntimeError("a bug nobody foresaw")
        await reconcile(self, key)

    monkeypatch.setattr(Nominator, "reconcile", buggy)
    async with (
        environment(tmp_path, default_topology(), crds=crds_dir, run_dispatcher=False) as env,
        anyio.create_task_group() as group,
    ):
        await replace_secret_data(
            env, "worker-h100", {"kubeconfig": b64("apiVersion: v1\nclusters: [unclosed\n")}
        )
        lists = env.sandbox.cluster("worker-cpu").faults.error(
            500, verbs=("list",), path="/localqueues$", count=2, user_agent=DISPATCHER
        )
        write = env.sandbox.manager.faults.error(
            500,
            verbs=("patch",),
            path="/workloads/[^/]+/status$",
            count=1,
            message="injected",
            user_agent=DISPATCHER,
        )
        events = EventWatch()
        events.install(env.sandbox.manager)
        replica = await start_replica(env, group)
        # Submitted once worker-cpu is through its failing lists, so that every decision sees
        # it (and the reasons it gives are the same in every run).
        await _wait_connected(replica.manager, "worker-cpu")
        await env.submit([cpu, rejected])
        placed = by_job(await env.wait_for_manager(placed_all({cpu.name}), within=60))
        # Logged, counted, then the Event: once it is there, its decision is counted.
        (event,) = await events.wait_for("NotNominated", 1, within=60)
        samples = await scrape(replica.manager)
        final = by_job(await env.workloads())
        group.cancel_scope.cancel()

    assert cluster_of(placed[cpu.name]) in ("worker-a100", "worker-cpu")
    assert event["involvedObject"]["name"].startswith(f"job-{rejected.name}-")
    assert (lists.fired, write.fired, len(raised)) == (2, 1, 1)

    errors = {labels["kind"]: v for labels, v in samples["multikueue_dispatcher_errors_total"]}
    assert {kind: errors.get(kind) for kind in ("kubeconfig", "watch", "write", "unexpected")} == {
        "kubeconfig": 1.0,
        "watch": 2.0,
        "write": 1.0,
        "unexpected": 1.0,
    }
    assert "api" not in errors  # the failed write is a write error, not a reconcile API error

    filtered = {
        (labels["plugin"], labels["reason"]): v
        for labels, v in samples["multikueue_dispatcher_filtered_clusters_total"]
    }
    # worker-h100 is unusable (inactive) for both Jobs; for the H100-only Job worker-a100 offers
    # another GPU type and worker-cpu none.
    assert set(filtered) == {
        ("active", "inactive"),
        ("gpu-type", "gpu_type_mismatch"),
        ("gpu-type", "no_gpu_types"),
    }
    assert all(value > 0 for value in filtered.values())

    rejected_cq = _cluster_queue(final, rejected.name)
    no_feasible = samples["multikueue_dispatcher_no_feasible_cluster_total"]
    assert [labels for labels, _ in no_feasible] == [
        {"cluster_queue": rejected_cq, "algorithm": ALGORITHM, "replica_role": "standalone"}
    ]
    assert no_feasible[0][1] >= 1

    latency = samples["multikueue_dispatcher_decision_latency_seconds_count"]
    queues = {labels["cluster_queue"] for labels, _ in latency}
    assert rejected_cq in queues
    assert "" not in queues  # every decision carries its ClusterQueue


async def _wait_connected(manager: Manager, worker: str, within: float = 30) -> None:
    """Wait until the dispatcher's registry has ``worker`` Connected (polled: the registry of
    a process started by the sandbox takes no callback from the test)."""
    with anyio.fail_after(within):
        while True:
            registry = manager.registry
            state = registry.states().get(worker) if registry is not None else None
            if state is not None and state.phase == "Connected":
                return
            await anyio.sleep(0.05)


def _cluster_queue(workloads: dict[str, Any], job: str) -> str:
    """The manager ClusterQueue that reserved quota for ``job``'s Workload."""
    status = workloads[job].get("status") or {}
    queue = str((status.get("admission") or {}).get("clusterQueue") or "")
    assert queue, status
    return queue
