"""The manager's MultiKueue workload controller with an external dispatcher (C20–C41, S1–S12).

The test plays the dispatcher: it writes ``status.nominatedClusterNames`` with its own field
manager (C48) and checks, through the API only, what the emulated Kueue does on the manager and
on the workers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from dispatcher_sandbox.harness.multikueue import (
    CHECK,
    Env,
    check_state,
    cond,
    eventually,
    get_cond,
    start_env,
    ts,
)
from dispatcher_sandbox.kueue_emulator.multikueue import (
    ADMITTED_TOTAL,
    DISPATCHED_TOTAL,
    ORIGIN_LABEL,
)


def _admitted_on(cluster: str) -> Any:
    def predicate(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return status.get("clusterName") == cluster

    return predicate


async def _reserved_and_nominated(env: Env, name: str, clusters: list[str]) -> None:
    await env.create_workload(name)
    await env.reserve_quota(name)
    await env.nominate(name, clusters)
    await env.wait_copies(name, clusters)


async def test_s1_nothing_copied_until_nominated() -> None:
    async with start_env() as env:
        await env.create_workload("wl")
        reserved = await env.reserve_quota("wl")
        await env.seen("wl", reserved["metadata"]["resourceVersion"])
        await env.settle()
        assert await env.copies("wl") == set()
        assert env.controllers.counters.get(DISPATCHED_TOTAL) == 0
        await env.nominate("wl", ["worker2"])
        await env.wait_copies("wl", ["worker2"])


async def test_c32_remote_copy_is_a_clone_with_the_origin_label() -> None:
    async with start_env() as env:
        await env.create_workload("wl")
        local = await env.get("wl")
        assert local is not None
        await env.objects().patch_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "team-a",
            "workloads",
            "wl",
            {"metadata": {"labels": {"kueue.x-k8s.io/job-uid": "123"}, "annotations": {"a": "b"}}},
            _content_type="application/merge-patch+json",
        )
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker1"])
        await env.wait_copies("wl", ["worker1"])
        local = await env.get("wl")
        remote = await env.get("wl", "worker1")
        assert local is not None
        assert remote is not None
        labels = remote["metadata"]["labels"]
        assert labels[ORIGIN_LABEL] == "multikueue"
        assert "kueue.x-k8s.io/job-uid" not in labels
        assert labels["app"] == "wl"
        assert remote["metadata"]["annotations"] == {"a": "b"}
        assert remote["spec"] == local["spec"]
        assert not (remote.get("status") or {}).get("admissionChecks")
        assert env.controllers.counters.get(DISPATCHED_TOTAL, cluster="worker1") == 1
        assert env.controllers.counters.get(DISPATCHED_TOTAL, cluster_queue="cq") == 1


async def test_s4_copies_follow_nomination() -> None:
    async with start_env() as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        await env.nominate("wl", ["worker1", "worker2"])
        await env.wait_copies("wl", ["worker1", "worker2"])
        await env.nominate("wl", ["worker2"])
        await env.wait_copies("wl", ["worker2"])
        assert env.controllers.counters.get(DISPATCHED_TOTAL) == 2


async def test_s5_admission_sets_cluster_name_and_clears_nomination() -> None:
    """C28, C36 and C51: one write sets clusterName, Ready and clears the nomination; one
    ``MultiKueue`` event; the dispatched/admitted counters with their labels."""
    async with start_env(policy_hook=True) as env:
        await _reserved_and_nominated(env, "wl", ["worker1", "worker2"])
        await env.worker_admit("worker2", "wl")
        local = await env.wait_workload("wl", _admitted_on("worker2"))
        status = local["status"]
        assert not status.get("nominatedClusterNames")
        check = check_state(local)
        assert check is not None
        assert check["state"] == "Ready"
        assert check["message"] == 'The workload was admitted on "worker2"'
        await env.wait_copies("wl", ["worker2"])  # C28: the loser's copy is deleted
        events = await env.events("wl")
        assert [e["message"] for e in events if e["reason"] == "MultiKueue"] == [
            'The workload was admitted on "worker2"'
        ]
        counters = env.controllers.counters
        assert counters.get(ADMITTED_TOTAL, cluster="worker2", cluster_queue="cq") == 1
        assert counters.get(ADMITTED_TOTAL, replica_role="standalone") == 1
        assert counters.get(DISPATCHED_TOTAL) == 2


WEBHOOK_DENIAL = (
    'admission webhook "vworkload.kb.io" denied the request: status.clusterName: Invalid value: '
    '"worker1": when setting clusterName it must be one of the nominatedClusterNames'
)


async def test_c18_c28_a_denominated_cluster_that_admitted_cannot_win() -> None:
    """C28 runs before the nomination sync, but C18 has the last word: a copy admitted on a
    cluster that is no longer nominated does not win. Kueue deletes the other copies and tries
    to set ``clusterName`` to the admitting cluster; its webhook refuses (403: the value is not
    in the old nomination), the reconcile fails and is retried with backoff, and nothing moves
    until the nomination names the admitting cluster again (Kueue's ``reconcileGroup`` step 6b
    and ``validateClusterNameUpdate``)."""
    async with start_env(policy_hook=True) as env:
        env.manager.rejections_expected = True  # the webhook's refusal is provoked on purpose
        await _reserved_and_nominated(env, "wl", ["worker1", "worker2"])
        await env.stop_controllers()
        await env.worker_admit("worker1", "wl")
        await env.nominate("wl", ["worker2"])
        await env.start_controllers()
        workloads = env.controllers.workloads

        async def refused_again() -> bool:  # retried (with backoff), refused every time
            denials = [e for e in workloads.status_write_errors if e.message == WEBHOOK_DENIAL]
            return len(denials) >= 3 and all(e.code == 403 for e in denials)

        await eventually(refused_again, what="the admission write refused by the webhook, thrice")
        await env.wait_copies("wl", ["worker1"])  # the other copy goes, the admitted one stays
        local = await env.get("wl")
        assert local is not None
        assert "clusterName" not in local["status"]
        assert local["status"]["nominatedClusterNames"] == ["worker2"]
        assert (check_state(local) or {})["state"] == "Pending"
        assert env.controllers.counters.get(ADMITTED_TOTAL) == 0
        # Once the nomination names the admitting cluster again, the same write goes through.
        await env.nominate("wl", ["worker1"])
        admitted = await env.wait_workload("wl", _admitted_on("worker1"))
        assert not admitted["status"].get("nominatedClusterNames")
        assert (check_state(admitted) or {})["state"] == "Ready"


async def test_s12_manager_restart_is_idempotent() -> None:
    async with start_env() as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        first = await env.get("wl", "worker1")
        await env.stop_controllers()
        await env.start_controllers()
        await env.wait_active()
        await env.settle()
        again = await env.get("wl", "worker1")
        assert first is not None
        assert again is not None
        assert again["metadata"]["uid"] == first["metadata"]["uid"]
        assert env.controllers.counters.get(DISPATCHED_TOTAL) == 0  # nothing re-created


async def test_c24_quota_released_deletes_copies() -> None:
    async with start_env() as env:
        await _reserved_and_nominated(env, "wl", ["worker1", "worker2"])
        await env.release_quota("wl")
        await env.wait_copies("wl", [])


async def test_c21_workload_without_multikueue_check_is_ignored() -> None:
    async with start_env(extra_checks=["other-check"]) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl", checks=[("other-check", "Pending")])
        nominated = await env.nominate("wl", ["worker1"])
        await env.seen("wl", nominated["metadata"]["resourceVersion"])
        await env.settle()
        assert await env.copies("wl") == set()


async def test_c22_unsupported_owner_kind_is_rejected() -> None:
    owner = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "uid": "7e57ab1e-0000-4000-8000-000000000001",
        "controller": True,
    }
    async with start_env() as env:
        await env.create_workload("wl", owners=[owner])
        await env.reserve_quota("wl")
        local = await env.wait_workload(
            "wl", lambda o: (check_state(o) or {}).get("state") == "Rejected"
        )
        check = check_state(local)
        assert check is not None
        assert check["message"] == (
            'No multikueue adapter found for owner kind "example.com/v1, Kind=Widget"'
        )


async def test_c31_no_nomination_sync_unless_check_pending() -> None:
    async with start_env() as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl", checks=[(CHECK, "Retry")])
        nominated = await env.nominate("wl", ["worker1"])
        await env.seen("wl", nominated["metadata"]["resourceVersion"])
        await env.settle()
        assert await env.copies("wl") == set()
        await env.set_checks("wl", [(CHECK, "Pending")])
        await env.wait_copies("wl", ["worker1"])


async def test_c32_waits_for_other_admission_checks_ready() -> None:
    async with start_env(extra_checks=["prov"]) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl", checks=[(CHECK, "Pending"), ("prov", "Pending")])
        nominated = await env.nominate("wl", ["worker1"])
        await env.seen("wl", nominated["metadata"]["resourceVersion"])
        await env.settle()
        assert await env.copies("wl") == set()
        await env.set_checks("wl", [(CHECK, "Pending"), ("prov", "Ready")])
        await env.wait_copies("wl", ["worker1"])


async def test_c23_c32_nominated_cluster_without_client_is_an_error_others_proceed() -> None:
    async with start_env(workers=("worker1", "worker2")) as env:
        await env.workers["worker2"].down()
        await env.wait_condition("multikueueclusters", "worker2", "False", "ClientConnectionFailed")
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker1", "worker2"])
        await env.wait_copies("wl", ["worker1"])

        async def logged() -> bool:
            return any(
                "cluster worker2: no remote client for nominated cluster" in e
                for e in env.controllers.workloads.nomination_errors
            )

        await eventually(logged, what="the no-remote-client error")
        await env.workers["worker2"].up()
        await env.wait_copies("wl", ["worker1", "worker2"])


async def test_c25_c40_s11_remote_finished_finishes_local_and_cleans_up() -> None:
    async with start_env(policy_hook=True) as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", _admitted_on("worker1"))
        await env.worker_condition("worker1", "wl", cond("Finished", True, "Succeeded", at=ts(5)))
        local = await env.wait_workload(
            "wl", lambda o: (get_cond(o, "Finished") or {}).get("status") == "True"
        )
        finished = get_cond(local, "Finished")
        assert finished is not None
        assert finished["reason"] == "Succeeded"
        assert finished["message"] == "Finished by the test"
        assert local["status"]["clusterName"] == "worker1"  # C40: nothing is cleared
        await env.wait_copies("wl", [])  # C40/S11: remote objects are deleted


async def test_c25_remote_out_of_sync_sets_retry() -> None:
    async with start_env(policy_hook=True) as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", _admitted_on("worker1"))
        await env.worker_condition("worker1", "wl", cond("Finished", True, "OutOfSync"))
        local = await env.wait_workload(
            "wl", lambda o: (check_state(o) or {}).get("state") == "Retry"
        )
        assert get_cond(local, "Finished") is None


async def test_c26_remote_eviction_while_ready_sets_retry_and_event() -> None:
    async with start_env(policy_hook=True) as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", _admitted_on("worker1"))
        await env.worker_condition("worker1", "wl", cond("Evicted", True, "Preempted"))
        local = await env.wait_workload(
            "wl", lambda o: (check_state(o) or {}).get("state") == "Retry"
        )
        message = 'Workload evicted on worker cluster: "worker1", resetting for re-admission.'
        check = check_state(local)
        assert check is not None
        assert check["message"].startswith(message)
        events = [e["message"] for e in await env.events("wl") if e["reason"] == "MultiKueue"]
        assert any(m.startswith(message) for m in events)


async def test_s6_worker_eviction_reopens_dispatch() -> None:
    async with start_env(policy_hook=True) as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", _admitted_on("worker1"))
        await env.worker_condition("worker1", "wl", cond("Evicted", True, "Preempted"))
        await env.wait_workload("wl", lambda o: (check_state(o) or {}).get("state") == "Retry")
        # The core evicts on the manager and resets both fields and the checks (C37, C38) ...
        evicted = await env.evict_on_manager("wl")
        assert not evicted["status"].get("clusterName")
        await env.wait_copies("wl", [])  # C24: no reservation, no copies
        # ... requeues and reserves again; the dispatcher now picks the other worker.
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker2"])
        await env.wait_copies("wl", ["worker2"])
        await env.worker_admit("worker2", "wl")
        await env.wait_workload("wl", _admitted_on("worker2"))


async def test_c27_spec_drift_deletes_the_copy() -> None:
    async with start_env() as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        before = await env.get("wl", "worker1")
        assert before is not None
        await env.objects("worker1").patch_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "team-a",
            "workloads",
            "wl",
            {"spec": {"active": False}},
            _content_type="application/merge-patch+json",
        )

        async def recreated() -> bool:
            copy_ = await env.get("wl", "worker1")
            return copy_ is not None and copy_["metadata"]["uid"] != before["metadata"]["uid"]

        await eventually(recreated, what="the drifted copy to be replaced")
        local, copy_ = await env.get("wl"), await env.get("wl", "worker1")
        assert local is not None
        assert copy_ is not None
        assert copy_["spec"] == local["spec"]


async def test_c27_priority_change_is_pushed_not_recreated() -> None:
    async with start_env() as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        before = await env.get("wl", "worker1")
        assert before is not None
        await env.objects().patch_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "team-a",
            "workloads",
            "wl",
            {"spec": {"priority": 7}},
            _content_type="application/merge-patch+json",
        )
        after = await env.wait_workload("wl", lambda o: o["spec"].get("priority") == 7, "worker1")
        assert after["metadata"]["uid"] == before["metadata"]["uid"]


async def test_c41_deleted_workload_removes_copies() -> None:
    async with start_env() as env:
        await _reserved_and_nominated(env, "wl", ["worker1", "worker2"])
        await env.objects().delete_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", "team-a", "workloads", "wl"
        )
        await env.wait_copies("wl", [])


async def test_c41_a_reconcile_that_read_the_workload_before_its_deletion_keeps_it_remembered() -> (
    None
):
    """The DELETED event can arrive while a reconcile that read the Workload alive is running;
    that reconcile must not forget the deleted Workload, or the reconcile the event asked for
    finds nothing and the copies stay (upstream deletes from ``deletedWlCache`` only on the
    deleted path). Here the event's bookkeeping is played before a reconcile of the live one."""
    async with start_env() as env:
        await _reserved_and_nominated(env, "wl", ["worker1", "worker2"])
        controller = env.controllers.workloads
        key = ("team-a", "wl")
        local = controller._local(key)
        assert local is not None
        controller._deleted[key] = local  # what on_manager_change("DELETED") records
        await controller.reconcile_key(key)
        assert key in controller._deleted


async def test_c33_job_hook_runs_only_on_the_winner() -> None:
    calls: list[tuple[str, str]] = []

    async def sync_remote_job(worker: Any, local: dict[str, Any], cluster: str) -> bool:
        calls.append((cluster, local["metadata"]["name"]))
        return False

    async with start_env(policy_hook=True, sync_remote_job=sync_remote_job) as env:
        await _reserved_and_nominated(env, "wl", ["worker1", "worker2"])
        assert calls == []  # C33: only the Workload copy goes to workers at first
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", _admitted_on("worker1"))
        assert calls
        assert {c for c, _ in calls} == {"worker1"}


@pytest.mark.parametrize(
    ("deferred", "expected"),
    [
        pytest.param(True, 2.0, id="deferred-back-after-2s"),
        pytest.param(False, 900.0, id="synced-back-after-worker-lost-timeout"),
    ],
)
async def test_c28_step4_a_deferred_job_sync_comes_back_after_2_seconds(
    deferred: bool, expected: float
) -> None:
    """Kueue's ``syncDeferredRequeueAfter``: while the manager Job is still suspended (its sync
    deferred), the admitted Workload is reconciled again 2 s later, since the Job's unsuspension
    wakes nothing; else after workerLostTimeout."""

    async def sync_remote_job(worker: Any, local: dict[str, Any], cluster: str) -> bool:
        return deferred

    async with start_env(
        policy_hook=True, sync_remote_job=sync_remote_job, worker_lost_timeout_seconds=900.0
    ) as env:
        await _reserved_and_nominated(env, "wl", ["worker1"])
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", _admitted_on("worker1"))
        await env.settle()
        timers = env.controllers.workloads._key_timers
        due, _ = timers[("team-a", "wl")]
        assert (due - env.clock.now()).total_seconds() == expected


async def test_c22_job_owner_not_managed_by_multikueue_is_rejected() -> None:
    async with start_env() as env:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "plain", "namespace": "team-a"},
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
        created = await client.BatchV1Api(env.api).create_namespaced_job(
            "team-a", job, _preload_content=False
        )
        uid = json.loads(await created.read())["metadata"]["uid"]
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "plain", "uid": uid}
        await env.create_workload("wl", owners=[{**owner, "controller": True}])
        await env.reserve_quota("wl")
        local = await env.wait_workload(
            "wl", lambda o: (check_state(o) or {}).get("state") == "Rejected"
        )
        assert (check_state(local) or {})["message"] == (
            "The owner is not managed by Kueue: Expecting spec.managedBy to be "
            '"kueue.x-k8s.io/multikueue" not ""'
        )
        assert await env.copies("wl") == set()
