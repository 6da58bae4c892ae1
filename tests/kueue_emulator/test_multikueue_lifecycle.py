"""Lifecycle rules on the manager: worker lost (C29), orphan GC (C41), events (C51)."""

from __future__ import annotations

from dispatcher_sandbox.harness.multikueue import (
    NS,
    Env,
    check_state,
    cond,
    eventually,
    get_cond,
    start_env,
    workload_body,
)
from dispatcher_sandbox.kueue_emulator.multikueue import ORIGIN_LABEL

TIMEOUT = 60.0


LOST = 'Admitting remote lost, Previously: "Ready"'
GONE = 'Admitting remote no longer exists, Previously: "Ready"'


def _state(obj: dict | None) -> str:
    return str((check_state(obj) or {}).get("state"))


async def test_c29_worker_lost_waits_the_timeout_from_the_loss() -> None:
    """C29 (Kueue's step 6a): an unreachable admitting worker is waited for
    ``workerLostTimeout`` counted from when its connection was lost (not from when the check
    became Ready), then the check is set to Retry, "Admitting remote lost"."""
    async with start_env(policy_hook=True, worker_lost_timeout_seconds=TIMEOUT) as env:
        await _admitted_on_worker1(env)
        env.clock.advance(TIMEOUT / 2)  # Ready for a while before the worker goes away
        await env.workers["worker1"].down()
        await env.wait_condition("multikueueclusters", "worker1", "False", "ClientConnectionFailed")
        env.clock.advance(TIMEOUT / 2)  # a full timeout since Ready, half of it since the loss
        await env.settle()
        assert _state(await env.get("wl")) == "Ready"
        env.clock.advance(TIMEOUT / 2)  # a full timeout since the loss
        local = await env.wait_workload("wl", lambda o: _state(o) == "Retry")
        assert (check_state(local) or {})["message"] == LOST


async def test_s59_brief_disconnect_does_not_evict() -> None:
    """S59: a disconnect shorter than workerLostTimeout leaves the admission alone."""
    async with start_env(policy_hook=True, worker_lost_timeout_seconds=TIMEOUT) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker1"])
        await env.wait_copies("wl", ["worker1"])
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", lambda o: (check_state(o) or {}).get("state") == "Ready")
        await env.workers["worker1"].down()
        await env.wait_condition("multikueueclusters", "worker1", "False", "ClientConnectionFailed")
        env.clock.advance(TIMEOUT / 2)
        await env.workers["worker1"].up()
        await env.wait_condition("multikueueclusters", "worker1", "True", "Active")
        env.clock.advance(TIMEOUT)
        await env.settle()
        local = await env.get("wl")
        assert (check_state(local) or {})["state"] == "Ready"
        assert (local or {})["status"]["clusterName"] == "worker1"


async def test_c41_orphan_gc() -> None:
    async with start_env(gc_interval_seconds=60.0) as env:
        await env.create_workload("kept")
        await env.reserve_quota("kept")
        await env.nominate("kept", ["worker1"])
        await env.wait_copies("kept", ["worker1"])
        worker = env.objects("worker1")

        async def put(name: str, labels: dict[str, str]) -> None:
            body = workload_body(name)
            body["metadata"]["labels"] = labels
            await worker.create_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", NS, "workloads", body
            )

        await put("orphan", {ORIGIN_LABEL: "multikueue"})
        await put("other-origin", {ORIGIN_LABEL: "another-manager"})
        await put("not-ours", {"app": "x"})
        await env.settle()
        assert await env.get("orphan", "worker1") is not None  # only the GC removes it
        env.clock.advance(60.0)

        async def collected() -> bool:
            return await env.get("orphan", "worker1") is None

        await eventually(collected, what="the orphan to be garbage-collected")
        for name in ("kept", "other-origin", "not-ours"):
            assert await env.get(name, "worker1") is not None, name


async def test_c41_gc_removes_copies_left_on_an_unreachable_worker() -> None:
    """S57: copies of a Workload deleted while its worker was down go at the next GC."""
    async with start_env(gc_interval_seconds=60.0) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker1", "worker2"])
        await env.wait_copies("wl", ["worker1", "worker2"])
        await env.workers["worker2"].down()
        await env.wait_condition("multikueueclusters", "worker2", "False", "ClientConnectionFailed")
        await env.objects().delete_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", NS, "workloads", "wl"
        )
        await env.wait_copies("wl", [])  # the reachable worker's copy goes at once
        await env.workers["worker2"].up()
        await env.wait_active(["worker2"])
        assert await env.get("wl", "worker2") is not None
        env.clock.advance(60.0)

        async def collected() -> bool:
            return await env.get("wl", "worker2") is None

        await eventually(collected, what="the GC to remove the leftover copy")


async def _admitted_on_worker1(env: Env) -> None:
    await env.create_workload("wl")
    await env.reserve_quota("wl")
    await env.nominate("wl", ["worker1"])
    await env.wait_copies("wl", ["worker1"])
    await env.worker_admit("worker1", "wl")
    await env.wait_workload("wl", lambda o: (check_state(o) or {}).get("state") == "Ready")


async def test_s60_manager_restart_while_worker_unreachable() -> None:
    async with start_env(policy_hook=True, worker_lost_timeout_seconds=TIMEOUT) as env:
        await _admitted_on_worker1(env)
        await env.stop_controllers()
        await env.workers["worker1"].down()
        await env.start_controllers()
        await env.wait_condition("multikueueclusters", "worker1", "False", "ClientConnectionFailed")
        await env.settle()
        assert (check_state(await env.get("wl")) or {})["state"] == "Ready"
        env.clock.advance(TIMEOUT)
        await env.wait_workload("wl", lambda o: (check_state(o) or {}).get("state") == "Retry")


async def test_s61_c29_reachable_worker_losing_the_admission_retries_at_once() -> None:
    """S61, C29: the admitting worker is reachable but its copy is no longer Admitted: Kueue
    does not wait, it sets Retry at once, "Admitting remote no longer exists" (no clock moves)."""
    async with start_env(policy_hook=True, worker_lost_timeout_seconds=TIMEOUT) as env:
        await _admitted_on_worker1(env)
        await env.worker_condition(
            "worker1",
            "wl",
            cond("QuotaReserved", False, "Pending"),
            cond("Admitted", False, "NoReservation"),
        )
        local = await env.wait_workload("wl", lambda o: _state(o) == "Retry")
        assert (check_state(local) or {})["message"] == GONE
        assert env.elapsed == 0


async def test_c29_reachable_worker_whose_admitted_copy_was_deleted_retries_at_once() -> None:
    """C29: the admitted copy itself is gone from a reachable worker: Retry at once."""
    async with start_env(policy_hook=True, worker_lost_timeout_seconds=TIMEOUT) as env:
        await _admitted_on_worker1(env)
        await env.objects("worker1").delete_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", NS, "workloads", "wl"
        )
        local = await env.wait_workload("wl", lambda o: _state(o) == "Retry")
        assert (check_state(local) or {})["message"] == GONE
        assert env.elapsed == 0


async def test_c37_evicted_on_manager_deactivates_the_admitted_copy() -> None:
    """Evicted on the manager while still reserved: the copy is told, never re-admitted."""
    async with start_env(policy_hook=True) as env:
        await _admitted_on_worker1(env)
        await env.stop_controllers()
        local = await env.get("wl")
        assert local is not None
        status = local["status"]
        status.pop("clusterName", None)  # the core's eviction resets (C37), quota still held
        status["conditions"].append(cond("Evicted", True, "Preempted"))
        for entry in status["admissionChecks"]:
            entry["state"] = "Pending"
        await env.kueue_apply("wl", status)
        await env.start_controllers()
        remote = await env.wait_workload(
            "wl",
            lambda o: (get_cond(o, "DeactivationTarget") or {}).get("status") == "True",
            "worker1",
        )
        target = get_cond(remote, "DeactivationTarget")
        assert target is not None
        assert target["reason"] == "EvictedOnManagerCluster"
        assert target["message"] == "Evicted on manager: Evicted by the test"
        await env.settle()
        local = await env.get("wl")
        assert local is not None
        assert "clusterName" not in local["status"]  # not re-admitted
        assert (check_state(local) or {})["state"] == "Pending"


async def test_c29_worker_whose_kubeconfig_breaks_is_lost_from_then() -> None:
    """C29: a worker whose kubeconfig Secret becomes unusable loses its client; Kueue keeps the
    remote marked disconnected since then (``disconnectCluster``), so the admission is retried
    ``workerLostTimeout`` after the loss (not never, as for a deleted MultiKueueCluster)."""
    async with start_env(policy_hook=True, worker_lost_timeout_seconds=TIMEOUT) as env:
        await _admitted_on_worker1(env)
        await env.put_secret("worker1-kubeconfig", {"kubeconfig": "not: [a kubeconfig"})
        await env.wait_condition("multikueueclusters", "worker1", "False", "InsecureKubeConfig")
        env.clock.advance(TIMEOUT / 2)
        await env.settle()
        assert _state(await env.get("wl")) == "Ready"
        env.clock.advance(TIMEOUT / 2)
        local = await env.wait_workload("wl", lambda o: _state(o) == "Retry")
        assert (check_state(local) or {})["message"] == LOST
