"""End to end with the emulated Kueue core on the manager and on every worker (C72, S5, S6, S11).

Nothing is faked here: the manager's core reserves quota and sets the MultiKueue check
``Pending``, the workers' cores admit (and preempt, and run, and finish) the copies, the manager's
core evicts on ``Retry`` and requeues (C37, C38). The test only plays the external dispatcher, or
lets Kueue's built-in dispatchers run (C56, C59).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from dispatcher.topology.runs import HOLD_ANNOTATION, RUN_SECONDS_ANNOTATION
from dispatcher_sandbox.harness.multikueue import (
    CHECK,
    DISPATCHER,
    NS,
    Env,
    check_state,
    eventually,
    get_cond,
    start_env,
)
from dispatcher_sandbox.kube_client import CONFIGMAPS
from dispatcher_sandbox.kueue_emulator.core.workload_controller import HOLD_POLL_SECONDS
from dispatcher_sandbox.kueue_emulator.jobs import workload_name_for_job
from dispatcher_sandbox.kueue_emulator.multikueue import ADMITTED_TOTAL, DISPATCHED_TOTAL
from dispatcher_sandbox.kueue_emulator.runtime import ALL_AT_ONCE, INCREMENTAL


def _true(kind: str) -> Any:
    return lambda o: (get_cond(o, kind) or {}).get("status") == "True"


def _check(state: str) -> Any:
    return lambda o: (check_state(o) or {}).get("state") == state


def _on(cluster: str) -> Any:
    return lambda o: (o.get("status") or {}).get("clusterName") == cluster


async def _submit(
    env: Env, name: str, *, cpu: str = "1", run_seconds: float | None = None, hold: str = ""
) -> None:
    body_annotations = {RUN_SECONDS_ANNOTATION: str(run_seconds)} if run_seconds else None
    if body_annotations and hold:
        body_annotations[HOLD_ANNOTATION] = hold
    await env.create_workload(name, cpu=cpu)
    if body_annotations:
        await env.objects().patch_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            NS,
            "workloads",
            name,
            {"metadata": {"annotations": body_annotations}},
            _content_type="application/merge-patch+json",
        )


async def test_s5_e2e_external_dispatch_admit_run_finish() -> None:
    async with start_env(core=True, policy_hook=True) as env:
        await _submit(env, "wl", run_seconds=30)
        await env.wait_workload("wl", _check("Pending"))  # the manager core reserved quota
        assert await env.copies("wl") == set()  # S1: nothing until nominated
        await env.nominate("wl", ["worker2"], field_manager=DISPATCHER)
        local = await env.wait_workload("wl", _true("Admitted"))  # the manager core, C72
        assert local["status"]["clusterName"] == "worker2"
        assert not local["status"].get("nominatedClusterNames")
        assert (check_state(local) or {})["message"] == 'The workload was admitted on "worker2"'
        remote = await env.get("wl", "worker2")
        assert _true("Admitted")(remote)
        env.clock.advance(30)  # the copy "runs" on worker2, then finishes (C25)
        local = await env.wait_workload("wl", _true("Finished"))
        assert (get_cond(local, "Finished") or {})["reason"] == "Succeeded"
        assert local["status"]["clusterName"] == "worker2"  # C40
        await env.wait_copies("wl", [])  # S11
        assert env.controllers.counters.get(ADMITTED_TOTAL) == 1
        assert env.controllers.counters.get(DISPATCHED_TOTAL) == 1


async def test_a_held_copy_finishes_only_once_its_config_map_exists() -> None:
    # The test world's hold (dispatcher.topology.runs): the worker looks for the ConfigMap once
    # the run time is over, and again on every poll; the copy finishes on the first poll after
    # the ConfigMap was created.
    async with start_env(core=True, policy_hook=True) as env:
        worker = env.worker_cores["worker2"].conn.client
        looked: list[str] = []
        real_get = worker.get

        async def get(resource: Any, name: str, namespace: str | None = None) -> Any:
            if resource == CONFIGMAPS:
                looked.append(name)
            return await real_get(resource, name, namespace)

        worker.get = get  # type: ignore[method-assign]
        await _submit(env, "wl", run_seconds=30, hold="go")
        await env.wait_workload("wl", _check("Pending"))
        await env.nominate("wl", ["worker2"], field_manager=DISPATCHER)
        await env.wait_workload("wl", _true("Admitted"))
        assert looked == []  # not before its run time is over
        env.clock.advance(30)

        async def looked_twice() -> bool:
            # Each poll moves the clock on by one hold poll (the next timer may not be set yet).
            env.clock.advance(HOLD_POLL_SECONDS)
            return len(looked) >= 2

        await eventually(looked_twice, what="two looks for the hold")
        # The first look's reconcile ended before the second began (one loop): it did not finish.
        copy = await env.get("wl", "worker2")
        assert copy is not None
        assert not _true("Finished")(copy), "finished while held"
        assert looked[:2] == ["go", "go"]
        await client.CoreV1Api(env.worker_apis["worker2"]).create_namespaced_config_map(
            NS, {"metadata": {"name": "go", "namespace": NS}}
        )

        async def finished() -> bool:
            env.clock.advance(HOLD_POLL_SECONDS)
            return _true("Finished")(await env.get("wl") or {})

        await eventually(finished, what="the manager Workload Finished once released")
        local = await env.get("wl")
        assert local is not None
        assert (get_cond(local, "Finished") or {})["reason"] == "Succeeded"


async def test_s6_c38_e2e_worker_preemption_reopens_dispatch() -> None:
    """A higher-priority local workload preempts the copy on worker1 (C26, C37, C38)."""
    async with start_env(
        core=True, jobs=True, policy_hook=True, worker_cpu={"worker1": "1"}
    ) as env:
        await _submit(env, "wl")
        await env.wait_workload("wl", _check("Pending"))
        await env.nominate("wl", ["worker1"])
        await env.wait_workload("wl", _true("Admitted"))
        assert (await env.get("wl"))["status"]["clusterName"] == "worker1"  # type: ignore[index]
        # A local Job of worker1's own (with its Workload, priority 1000) takes the cpu.
        await env.create_workload("urgent", priority=1000, cluster="worker1")
        # worker1 evicts the copy; MultiKueue sets Retry; the manager core evicts, resets both
        # fields and the checks, requeues and reserves again (C37, C38).
        evicted = await env.wait_workload("wl", _true("Evicted"))
        assert not evicted["status"].get("clusterName")
        local = await env.wait_workload(
            "wl", lambda o: _check("Pending")(o) and _true("QuotaReserved")(o)
        )
        assert not local["status"].get("clusterName")
        await env.wait_copies("wl", [])
        await env.nominate("wl", ["worker2"])
        await env.wait_workload("wl", lambda o: _on("worker2")(o) and _true("Admitted")(o))


async def test_c56_e2e_all_at_once_three_copies_each_first_admission_wins() -> None:
    workers = ("worker1", "worker2", "worker3")
    async with start_env(workers=workers, core=True, dispatcher_name=ALL_AT_ONCE) as env:
        names = [f"wl-{i}" for i in range(3)]
        for name in names:
            await _submit(env, name)
        for name in names:
            local = await env.wait_workload(name, _true("Admitted"))
            winner = local["status"]["clusterName"]
            assert winner in workers
            assert not local["status"].get("nominatedClusterNames")
            await env.wait_copies(name, [winner])
        counters = env.controllers.counters
        assert counters.get(DISPATCHED_TOTAL) == 9  # every workload made 3 copies
        assert counters.get(ADMITTED_TOTAL) == 3


async def test_c59_e2e_incremental_moves_on_when_the_first_cluster_cannot_admit() -> None:
    async with start_env(
        core=True,
        dispatcher_name=INCREMENTAL,
        incremental_step_size=1,
        incremental_round_seconds=300.0,
        worker_cpu={"worker1": "0"},  # worker1 can never admit it
    ) as env:
        await _submit(env, "wl")
        await env.wait_workload(
            "wl", lambda o: (o.get("status") or {}).get("nominatedClusterNames") == ["worker1"]
        )
        await env.wait_copies("wl", ["worker1"])
        copy_ = await env.wait_workload(
            "wl", lambda o: (get_cond(o, "QuotaReserved") or {}).get("status") == "False", "worker1"
        )
        assert not _true("Admitted")(copy_)
        for _ in range(3):  # the next round (re-armed if the clock moved before the timer)
            env.clock.advance(300.0)
            try:
                await env.wait_workload("wl", _on("worker2"), deadline=1.0)
                break
            except AssertionError:
                continue
        local = await env.wait_workload("wl", lambda o: _on("worker2")(o) and _true("Admitted")(o))
        await env.wait_copies("wl", ["worker2"])
        assert (check_state(local, CHECK) or {})["state"] == "Ready"


def _job(name: str, run_seconds: float) -> dict[str, Any]:
    """A suspended Job for a MultiKueue manager (C87: ``spec.managedBy``)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": {RUN_SECONDS_ANNOTATION: str(run_seconds)},
        },
        "spec": {
            "parallelism": 1,
            "suspend": True,
            "managedBy": "kueue.x-k8s.io/multikueue",
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


async def _read_job(env: Env, name: str, cluster: str | None = None) -> dict[str, Any] | None:
    api = env.api if cluster is None else env.worker_apis[cluster]
    try:
        response = await client.BatchV1Api(api).read_namespaced_job(
            name, NS, _preload_content=False
        )
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    if response.status == 404:  # not raised without preloading
        return None
    found: dict[str, Any] = json.loads(await response.read())
    return found


async def test_c33_e2e_job_runs_only_on_the_winning_worker() -> None:
    """AllAtOnce copies the Workload everywhere, but the Job only goes to the winner (C33)."""
    async with start_env(
        core=True, jobs=True, dispatcher_name=ALL_AT_ONCE, worker_cpu={"worker1": "0"}
    ) as env:
        created = await client.BatchV1Api(env.api).create_namespaced_job(
            NS, _job("train", 30), _preload_content=False
        )
        uid = json.loads(await created.read())["metadata"]["uid"]
        name = workload_name_for_job("train", uid)
        await env.wait_copies(name, ["worker1", "worker2"])  # AllAtOnce: a copy everywhere
        local = await env.wait_workload(name, lambda o: _on("worker2")(o) and _true("Admitted")(o))
        assert local["metadata"]["ownerReferences"][0]["kind"] == "Job"

        async def remote_job() -> bool:
            return await _read_job(env, "train", "worker2") is not None

        await eventually(remote_job, what="the Job on the winning worker")
        env.clock.advance(30)  # the worker's Job "runs", then its Workload finishes (C25)
        await env.wait_workload(name, _true("Finished"))

        async def mirrored() -> bool:
            job = await _read_job(env, "train")
            conditions = ((job or {}).get("status") or {}).get("conditions") or []
            return any(
                c.get("type") == "Complete" and c.get("status") == "True" for c in conditions
            )

        await eventually(mirrored, what="the worker Job's status mirrored on the manager Job")
        await env.wait_copies(name, [])  # C40: remote objects are deleted ...

        async def remote_job_gone() -> bool:
            return await _read_job(env, "train", "worker2") is None

        await eventually(remote_job_gone, what="the worker Job to be deleted")
        job_posts = [
            e
            for e in env.workers["worker1"].journal.entries()
            if e.method == "POST" and "/jobs" in e.path
        ]
        assert job_posts == []  # ... and no Job ever reached the losing worker


async def test_c39_e2e_rejected_check_resets_and_deletes_copies() -> None:
    """C53 step 5: the MultiKueue check set to Rejected resets clusterName and the nomination."""
    async with start_env(core=True, policy_hook=True) as env:
        await _submit(env, "wl")
        await env.wait_workload("wl", _check("Pending"))
        await env.nominate("wl", ["worker1"])
        await env.wait_workload("wl", _true("Admitted"))
        await env.set_checks("wl", [(CHECK, "Rejected")])
        local = await env.wait_workload("wl", lambda o: _true("Evicted")(o))
        assert (get_cond(local, "Evicted") or {})["reason"] == "DeactivatedDueToAdmissionCheck"
        assert local["spec"]["active"] is False
        assert not local["status"].get("clusterName")
        assert not local["status"].get("nominatedClusterNames")
        await env.wait_copies("wl", [])


async def test_c37_e2e_preemption_on_the_manager_requeues_and_cleans_up() -> None:
    """A higher-priority Workload preempts on the manager (S22): the copy goes, no re-admission.

    The worker deactivates its copy in two writes (``spec.active=false``, then the eviction);
    with Kueue's 1 s batch period (C20) MultiKueue sees both at once and syncs the evicted
    Job's status (C26) instead of taking the first write for spec drift (C27)."""
    async with start_env(
        core=True, jobs=True, policy_hook=True, manager_cpu="1", batch_period_seconds=1.0
    ) as env:
        await _submit(env, "wl")
        await env.wait_workload("wl", _check("Pending"))
        await env.nominate("wl", ["worker1"])
        await env.wait_workload("wl", _true("Admitted"))
        await env.create_workload("vip", priority=1000)  # a Job's Workload, priority 1000
        local = await env.wait_workload(
            "wl", lambda o: _true("Evicted")(o) and not _true("QuotaReserved")(o)
        )
        assert (get_cond(local, "Evicted") or {})["reason"] == "Preempted"
        assert not local["status"].get("clusterName")
        await env.wait_copies("wl", [])
        await env.wait_workload("vip", _check("Pending"))
        await env.nominate("vip", ["worker2"])
        await env.wait_workload("vip", lambda o: _on("worker2")(o) and _true("Admitted")(o))
        await env.settle()
        local = await env.get("wl")
        assert local is not None
        assert not local["status"].get("clusterName")
        admitted = [
            e
            for e in await env.events("wl")
            if e["message"].startswith("The workload was admitted")
        ]
        assert len(admitted) == 1
        assert env.controllers.counters.get(ADMITTED_TOTAL) == 2


FOREIGN_JOB_REFUSED = (
    'remote object is not owned by MultiKueue: expected "kueue.x-k8s.io/multikueue-origin"='
    '"multikueue" on *v1.PartialObjectMetadata "team-a/wl"'
)


async def test_c33_a_same_named_job_without_our_origin_keeps_the_admission_stuck() -> None:
    """C33, issue 14 item 11: worker1 already has a Job named like the manager's, without this
    manager's origin label. Kueue's workload reconciler checks the remote Job's ownership before
    it syncs the Job and records the admission (``ValidateRemoteObjectOwnership``); the check
    fails, the reconcile is retried with backoff, and the admission never lands while that Job
    is there. The foreign Job is not touched; once it is gone, Kueue creates its own and admits."""
    async with start_env(core=True, jobs=True, policy_hook=True) as env:
        foreign = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "wl", "namespace": NS, "labels": {"owner": "someone-else"}},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}],
                    }
                },
            },
        }
        await client.BatchV1Api(env.worker_apis["worker1"]).create_namespaced_job(NS, foreign)
        await _submit(env, "wl")
        await env.wait_workload("wl", _check("Pending"))
        await env.nominate("wl", ["worker1"])
        await env.wait_workload("wl", _true("Admitted"), "worker1")  # the copy is admitted
        workloads = env.controllers.workloads

        async def refused_again() -> bool:
            return sum(FOREIGN_JOB_REFUSED in e for e in workloads.ownership_errors) >= 3

        await eventually(refused_again, what="the foreign Job refused three times")
        local = await env.get("wl")
        assert local is not None
        assert "clusterName" not in local["status"]
        assert (check_state(local) or {})["state"] == "Pending"
        assert not _true("Admitted")(local)
        remote_job = await _read_job(env, "wl", "worker1")
        assert remote_job is not None
        assert remote_job["metadata"]["labels"] == {"owner": "someone-else"}  # untouched
        assert env.controllers.counters.get(ADMITTED_TOTAL) == 0
        await client.BatchV1Api(env.worker_apis["worker1"]).delete_namespaced_job("wl", NS)
        await env.wait_workload("wl", lambda o: _on("worker1")(o) and _true("Admitted")(o))
        ours = await _read_job(env, "wl", "worker1")
        assert ours is not None
        assert ours["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
