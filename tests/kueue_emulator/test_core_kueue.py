"""The emulated Kueue core on one cluster, driven only through the API.

Each test names the contract point it shows (``docs/kueue-contract.md``): C13–C15
(conditions and ``status.admission``), C37–C39 (eviction, reset of the two dispatcher fields,
rejection), C69 (ClusterQueue status, cohorts), C71 (GPU type through flavor node labels), C72
(the worker-side admission sequence, preemption, queueing, running and finishing). Every write
of the emulation is checked against the real Kueue v0.19.2 CRDs; the autouse fixture of
``tests/conftest.py`` fails a test whose emulator writes were rejected.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dispatcher_sandbox.harness.emulator_env import KueueEnv, get_condition, has, start_env
from dispatcher_sandbox.harness.kueue_builders import (
    A100,
    GPU,
    H100,
    admission_check,
    cluster_queue,
    cohort,
    create,
    local_queue,
    namespace,
    pod_set,
    resource_flavor,
    workload,
)
from dispatcher_sandbox.kueue_emulator.core import sync_admitted_condition
from dispatcher_sandbox.kueue_emulator.runtime import KueueConfig, ManualClock

Obj = dict[str, Any]


def rv_of(obj: Obj) -> str:
    return str(obj["metadata"]["resourceVersion"])


def status_of(obj: Obj) -> Obj:
    found: Obj = obj.get("status") or {}
    return found


def cq_counts(obj: Obj) -> tuple[int, int, int]:
    """(pending, reserving, admitted) of a ClusterQueue or LocalQueue status."""
    s = status_of(obj)
    return (
        int(s.get("pendingWorkloads") or 0),
        int(s.get("reservingWorkloads") or 0),
        int(s.get("admittedWorkloads") or 0),
    )


def counts(pending: int, reserving: int, admitted: int) -> Callable[[Obj], bool]:
    return lambda obj: cq_counts(obj) == (pending, reserving, admitted)


def totals(obj: Obj, field: str) -> dict[tuple[str, str], str]:
    """``{(flavor, resource): total}`` of ``flavorsReservation`` or ``flavorsUsage``."""
    return {
        (f["name"], r["name"]): r["total"]
        for f in status_of(obj).get(field) or []
        for r in f["resources"]
    }


async def basic_queue(env: KueueEnv, cpu: int = 4, **cq_args: Any) -> None:
    await create(
        env.api,
        resource_flavor("default"),
        cluster_queue("cq", {"default": {"cpu": cpu}}, **cq_args),
        local_queue("user-queue", "default", "cq"),
    )


# --- C72: the admission sequence --------------------------------------------------------------


def admission_writes(env: KueueEnv, name: str) -> list[Any]:
    """The emulation's admission-status writes of one Workload (field manager
    ``kueue-admission``), in order."""
    return [
        e
        for e in env.cluster.journal.entries()
        if e.field_manager == "kueue-admission" and e.path.endswith(f"/workloads/{name}/status")
    ]


async def test_item7_worker_reserves_and_admits_in_one_write(kueue_env: KueueEnv) -> None:
    """issue14-7, C72: on a ClusterQueue without admission checks Kueue's scheduler sets
    ``QuotaReserved`` and ``Admitted`` in the reservation write (``prepareWorkload`` syncs
    ``Admitted`` when the workload has every required check: none)."""
    env = kueue_env
    await basic_queue(env)
    since = await env.resource_version()
    await create(env.api, workload("w1", cpu="1"))
    seen: list[Obj] = []
    admitted = await env.wait_workload("w1", has("Admitted"), seen=seen, since=since)
    assert not [o for o in seen if has("QuotaReserved")(o) and not has("Admitted")(o)]
    quota = get_condition(admitted, "QuotaReserved")
    cond = get_condition(admitted, "Admitted")
    assert quota is not None
    assert cond is not None
    assert (quota["reason"], quota["message"]) == (
        "QuotaReserved",
        "Quota reserved in ClusterQueue cq",
    )
    assert (cond["reason"], cond["message"]) == ("Admitted", "The workload is admitted")
    assert cond["lastTransitionTime"] == quota["lastTransitionTime"]
    writes = admission_writes(env, "w1")
    assert len(writes) == 1
    assert writes[0].content_type.startswith("application/apply-patch")  # C42
    assert env.kueue.counters.get("kueue_admitted_workloads_total") == 1


async def test_c72_admit_delay_uses_the_injected_clock(crds_dir: Path) -> None:
    async with start_env(
        crds_dir, kueue_config=KueueConfig(admit_delay_seconds=30, batch_period_seconds=0.005)
    ) as env:
        await basic_queue(env)
        await create(env.api, workload("w1", cpu="1"))
        reserved = await env.wait_workload("w1", has("QuotaReserved"))
        await env.wait_for("clusterqueues", "cq", counts(0, 1, 0))
        assert get_condition(reserved, "Admitted") is None
        start = env.timestamp()
        env.clock.advance(29)
        env.clock.advance(1)
        admitted = await env.wait_workload("w1", has("Admitted"))
        cond = get_condition(admitted, "Admitted")
        assert cond is not None
        assert cond["lastTransitionTime"] > start
        assert cond["lastTransitionTime"] == env.timestamp()


async def test_c15_admission_has_one_assignment_per_pod_set(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await create(
        env.api,
        resource_flavor("default"),
        resource_flavor("h100", gpu_product=H100),
        cluster_queue(
            "cq",
            [{"default": {"cpu": 8, "memory": "16Gi"}}, {"h100": {GPU: 4}}],
        ),
        local_queue("user-queue", "default", "cq"),
        workload(
            "two-sets",
            pod_sets=[
                pod_set("driver", cpu="500m", memory="1Gi"),
                pod_set("workers", count=2, cpu="1", memory="2Gi", gpus=1),
            ],
        ),
    )
    done = await env.wait_workload("two-sets", has("Admitted"))
    assert status_of(done)["admission"] == {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {
                "name": "driver",
                "flavors": {"cpu": "default", "memory": "default"},
                "resourceUsage": {"cpu": "500m", "memory": "1Gi"},
                "count": 1,
            },
            {
                "name": "workers",
                "flavors": {"cpu": "default", "memory": "default", GPU: "h100"},
                "resourceUsage": {"cpu": "2", "memory": "4Gi", GPU: "2"},
                "count": 2,
            },
        ],
    }


# --- C69: ClusterQueue and LocalQueue status -----------------------------------------------------


async def test_c69_flavors_reservation_and_usage(crds_dir: Path) -> None:
    async with start_env(
        crds_dir, kueue_config=KueueConfig(admit_delay_seconds=10, batch_period_seconds=0.005)
    ) as env:
        await basic_queue(env, cpu=4)
        await create(env.api, workload("a", cpu="1500m"))
        await env.wait_workload("a", has("QuotaReserved"))
        env.clock.advance(10)
        await env.wait_workload("a", has("Admitted"))
        # One after the other: created in one second, they would tie and go by UID (C94).
        await create(env.api, workload("b", cpu="2"))
        await env.wait_workload("b", has("QuotaReserved"))
        await create(env.api, workload("c", cpu="1"))
        await env.wait_workload("c", has("QuotaReserved", "False", "Pending"))
        cq = await env.wait_for("clusterqueues", "cq", counts(1, 2, 1))
        assert totals(cq, "flavorsReservation") == {("default", "cpu"): "3500m"}
        assert totals(cq, "flavorsUsage") == {("default", "cpu"): "1500m"}
        active = get_condition(cq, "Active")
        assert active is not None
        assert (active["status"], active["reason"]) == ("True", "Ready")
        lq = await env.wait_for("localqueues", "user-queue", counts(1, 2, 1), "default")
        assert totals(lq, "flavorsReservation") == {("default", "cpu"): "3500m"}
        pending = get_condition(await env.workload("c"), "QuotaReserved")
        assert pending is not None
        assert pending["message"].startswith("couldn't assign flavors to pod set main")
        env.clock.advance(10)
        cq = await env.wait_for("clusterqueues", "cq", counts(1, 2, 2))
        assert totals(cq, "flavorsUsage") == {("default", "cpu"): "3500m"}


async def test_c69_cohort_borrowing_within_limit(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await create(
        env.api,
        resource_flavor("default"),
        cohort("team"),
        cluster_queue(
            "a", {"default": {"cpu": 2}}, cohort="team", borrowing_limits={"default": {"cpu": 1}}
        ),
        cluster_queue("b", {"default": {"cpu": 2}}, cohort="team"),
        local_queue("qa", "default", "a"),
        workload("over-limit", queue="qa", cpu="4"),
        workload("at-limit", queue="qa", cpu="3"),
    )
    await env.wait_workload("at-limit", has("Admitted"))
    never = await env.wait_workload("over-limit", has("QuotaReserved", "False", "Pending"))
    assert "couldn't assign flavors" in (get_condition(never, "QuotaReserved") or {})["message"]
    cq = await env.wait_for("clusterqueues", "a", counts(1, 1, 1))
    reservation = status_of(cq)["flavorsReservation"][0]["resources"][0]
    assert reservation == {"name": "cpu", "total": "3", "borrowed": "1"}


async def test_c69_inactive_cluster_queue_until_its_flavor_exists(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await create(
        env.api,
        cluster_queue("cq", {"missing": {"cpu": 4}}),
        local_queue("user-queue", "default", "cq"),
        workload("w1", cpu="1"),
    )
    cq = await env.wait_for("clusterqueues", "cq", has("Active", "False", "FlavorNotFound"))
    assert "missing" in (get_condition(cq, "Active") or {})["message"]
    blocked = await env.wait_workload("w1", has("QuotaReserved", "False", "Inadmissible"))
    assert (get_condition(blocked, "QuotaReserved") or {})[
        "message"
    ] == "ClusterQueue cq is inactive"
    await env.wait_for("localqueues", "user-queue", has("Active", "False"), "default")
    await create(env.api, resource_flavor("missing"))
    await env.wait_workload("w1", has("Admitted"))
    await env.wait_for("clusterqueues", "cq", has("Active", "True", "Ready"))


async def test_c69_namespace_selector_is_honoured(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await create(
        env.api,
        namespace("team-a", {"team": "a"}),
        namespace("team-b", {"team": "b"}),
        resource_flavor("default"),
        cluster_queue(
            "cq", {"default": {"cpu": 4}}, namespace_selector={"matchLabels": {"team": "a"}}
        ),
        local_queue("lq", "team-a", "cq"),
        local_queue("lq", "team-b", "cq"),
        workload("ok", "team-a", queue="lq", cpu="1"),
        workload("refused", "team-b", queue="lq", cpu="1"),
        workload("no-queue", "team-a", queue="nope", cpu="1"),
    )
    await env.wait_workload("ok", has("Admitted"), "team-a")
    refused = await env.wait_workload(
        "refused", has("QuotaReserved", "False", "Inadmissible"), "team-b"
    )
    assert (get_condition(refused, "QuotaReserved") or {})["message"] == (
        "Workload namespace doesn't match ClusterQueue selector"
    )
    lost = await env.wait_workload(
        "no-queue", has("QuotaReserved", "False", "Inadmissible"), "team-a"
    )
    assert (get_condition(lost, "QuotaReserved") or {})[
        "message"
    ] == "LocalQueue nope doesn't exist"


# --- C71: GPU type ------------------------------------------------------------------------------


async def test_c71_gpu_type_node_labels_select_flavor(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await create(
        env.api,
        resource_flavor("a100", gpu_product=A100),
        resource_flavor("h100", gpu_product=H100),
        cluster_queue("cq", {"a100": {"cpu": 32, GPU: 8}, "h100": {"cpu": 32, GPU: 4}}),
        local_queue("user-queue", "default", "cq"),
        workload("wants-h100", cpu="1", gpus=2, gpu_product=H100),
        workload("any-gpu", cpu="1", gpus=2),
        workload("wants-v100", cpu="1", gpus=1, gpu_product="NVIDIA-V100"),
    )
    h100 = await env.wait_workload("wants-h100", has("Admitted"))
    assert status_of(h100)["admission"]["podSetAssignments"][0]["flavors"] == {
        "cpu": "h100",
        GPU: "h100",
    }
    anything = await env.wait_workload("any-gpu", has("Admitted"))
    assert status_of(anything)["admission"]["podSetAssignments"][0]["flavors"][GPU] == "a100"
    v100 = await env.wait_workload("wants-v100", has("QuotaReserved", "False", "Pending"))
    assert "does not match flavor" in (get_condition(v100, "QuotaReserved") or {})["message"]


async def test_c71_untolerated_taint_skips_flavor(kueue_env: KueueEnv) -> None:
    env = kueue_env
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    await create(
        env.api,
        resource_flavor("reserved", taints=[taint]),
        resource_flavor("default"),
        cluster_queue("cq", {"reserved": {"cpu": 4}, "default": {"cpu": 4}}),
        local_queue("user-queue", "default", "cq"),
        workload("plain", cpu="1"),
        workload("tolerant", cpu="1", tolerations=[{**taint, "operator": "Equal"}]),
    )
    plain = await env.wait_workload("plain", has("Admitted"))
    tolerant = await env.wait_workload("tolerant", has("Admitted"))
    assert status_of(plain)["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "default"}
    assert status_of(tolerant)["admission"]["podSetAssignments"][0]["flavors"] == {
        "cpu": "reserved"
    }


# --- C72: queueing, preemption, running, finishing ----------------------------------------------


async def test_c72_best_effort_fifo_skips_what_does_not_fit(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=4)
    await create(env.api, workload("running", cpu="2"))
    await env.wait_workload("running", has("Admitted"))
    # The head by priority: created in one second at equal priority, the two would tie and go
    # by UID (C94), not by name.
    await create(env.api, workload("a-big", cpu="3", priority=1), workload("b-small", cpu="1"))
    await env.wait_workload("b-small", has("Admitted"))
    await env.wait_workload("a-big", has("QuotaReserved", "False", "Pending"))


async def test_c72_strict_fifo_blocks_behind_the_head(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=4, queueing_strategy="StrictFIFO")
    await create(env.api, workload("running", cpu="2", run_seconds=60))
    await env.wait_workload("running", has("Admitted"))
    # The head by priority: created in one second at equal priority, the two would tie and go
    # by UID (C94), not by name.
    await create(env.api, workload("a-big", cpu="3", priority=1), workload("b-small", cpu="1"))
    await env.wait_workload("a-big", has("QuotaReserved", "False", "Pending"))
    await env.wait_for("clusterqueues", "cq", counts(2, 1, 1))
    assert get_condition(await env.workload("b-small"), "QuotaReserved") is None
    env.clock.advance(60)  # the running workload finishes: the head fits, then the next one
    await env.wait_workload("a-big", has("Admitted"))
    await env.wait_workload("b-small", has("Admitted"))


async def test_c72_higher_priority_is_admitted_first(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=2)
    await create(env.api, workload("running", cpu="2", run_seconds=5))
    await env.wait_workload("running", has("Admitted"))
    await create(
        env.api, workload("a-low", cpu="2", priority=1), workload("b-high", cpu="2", priority=10)
    )
    await env.wait_workload("a-low", has("QuotaReserved", "False", "Pending"))
    await env.wait_workload("b-high", has("QuotaReserved", "False", "Pending"))
    env.clock.advance(5)
    await env.wait_workload("b-high", has("Admitted"))
    assert not has("QuotaReserved")(await env.workload("a-low"))


async def test_c72_lower_priority_preemption(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=4, preemption="LowerPriority")
    await create(
        env.api, workload("low", cpu="3", priority=0), workload("mid", cpu="1", priority=5)
    )
    await env.wait_workload("low", has("Admitted"))
    await env.wait_workload("mid", has("Admitted"))
    await create(env.api, workload("high", cpu="3", priority=10, run_seconds=20))
    evicted = await env.wait_workload("low", has("QuotaReserved", "False"))
    ev = get_condition(evicted, "Evicted")
    pre = get_condition(evicted, "Preempted")
    assert ev is not None
    assert pre is not None
    assert (ev["status"], ev["reason"]) == ("True", "Preempted")
    assert (pre["status"], pre["reason"]) == ("True", "InClusterQueue")
    assert ev["message"].startswith("Preempted to accommodate a workload (UID: ")
    assert ev["message"].endswith("due to prioritization in the ClusterQueue")
    assert "admission" not in status_of(evicted)
    assert status_of(evicted)["schedulingStats"]["evictions"] == [
        {"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}
    ]
    await env.wait_workload("high", has("Admitted"))
    assert has("Admitted")(await env.workload("mid"))  # the minimal victim set: only "low"
    env.clock.advance(20)  # "high" runs 20 s, finishes, and "low" comes back
    back = await env.wait_workload("low", has("Admitted"))
    again = get_condition(back, "Evicted")
    assert again is not None
    assert (again["status"], again["reason"]) == ("False", "QuotaReserved")
    assert again["message"].startswith("Previously: Preempted to accommodate")
    assert (get_condition(back, "Preempted") or {})["status"] == "False"
    assert env.kueue.counters.get("kueue_preempted_workloads_total") == 1


async def test_c72_run_seconds_then_finished(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=2)
    await create(env.api, workload("job", cpu="2", run_seconds=30))
    await env.wait_workload("job", has("Admitted"))
    await create(env.api, workload("next", cpu="2"))
    await env.wait_workload("next", has("QuotaReserved", "False", "Pending"))
    env.clock.advance(29)
    await env.wait_for("clusterqueues", "cq", counts(1, 1, 1))
    assert get_condition(await env.workload("job"), "Finished") is None
    env.clock.advance(1)
    done = await env.wait_workload("job", has("Finished", "True", "Succeeded"))
    assert has("QuotaReserved")(done)  # Kueue keeps the admission of a finished workload
    await env.wait_workload("next", has("Admitted"))
    cq = await env.wait_for("clusterqueues", "cq", counts(0, 1, 1))
    assert totals(cq, "flavorsReservation") == {("default", "cpu"): "2"}


async def test_c72_deleted_workload_releases_quota(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=2)
    await create(env.api, workload("first", cpu="2"))
    await env.wait_workload("first", has("Admitted"))
    await create(env.api, workload("second", cpu="2"))
    await env.wait_workload("second", has("QuotaReserved", "False", "Pending"))
    await env.custom.delete_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "default", "workloads", "first"
    )
    await env.wait_workload("second", has("Admitted"))


def evicted_condition(env: KueueEnv, reason: str) -> Obj:
    return {
        "type": "Evicted",
        "status": "True",
        "reason": reason,
        "message": "evicted by a test",
        "lastTransitionTime": env.timestamp(),
    }


RELEASE_CASES = [
    # (eviction reason, Requeued as released, Requeued once the workload controller saw it)
    pytest.param("Preempted", ("True", "Preempted"), None, id="issue14-6-preempted-requeued"),
    pytest.param(
        "PodsReadyTimeout",
        ("False", "PodsReadyTimeout"),
        ("True", "BackoffFinished"),
        id="issue14-6-timeout-requeued-after-backoff",
    ),
]


@pytest.mark.parametrize(("reason", "released_requeued", "later_requeued"), RELEASE_CASES)
async def test_c13_external_eviction_releases_and_requeues(
    kueue_env: KueueEnv,
    reason: str,
    released_requeued: tuple[str, str],
    later_requeued: tuple[str, str] | None,
) -> None:
    """A Workload without a job owner is released at once (the emulation's stand-in for a job
    integration), with the status Kueue's Job reconciler writes (issue 14 item 6):
    ``Requeued`` True only after a preemption, else False until the workload controller ends
    the backoff (``BackoffFinished``)."""
    env = kueue_env
    await basic_queue(env, cpu=2)
    await create(env.api, workload("w1", cpu="2"))
    await env.wait_workload("w1", has("Admitted"))
    current = await env.workload("w1")
    conditions = [*status_of(current)["conditions"], evicted_condition(env, reason)]
    done = await env.merge_status("workloads", "w1", {"conditions": conditions}, "default")
    seen: list[Obj] = []
    back = await env.wait_workload(
        "w1", has("Evicted", "False", "QuotaReserved"), seen=seen, since=rv_of(done)
    )
    released = [o for o in seen if has("QuotaReserved", "False", "Pending")(o)]
    assert released, "quota must be released before the workload is admitted again"
    first = released[0]
    assert "admission" not in status_of(first)
    admitted_cond = get_condition(first, "Admitted") or {}
    assert (admitted_cond["reason"], admitted_cond["message"]) == (
        "NoReservation",
        "The workload has no reservation",
    )
    requeued = get_condition(first, "Requeued") or {}
    assert (requeued["status"], requeued["reason"]) == released_requeued
    assert requeued["message"] == "evicted by a test"
    if later_requeued is not None:
        flipped = [o for o in seen if has("Requeued", *later_requeued)(o)]
        assert flipped, "the workload controller ends the backoff before it is queued again"
        assert not has("QuotaReserved")(flipped[0]), "not reserved while Requeued=False"
        assert (get_condition(flipped[0], "Requeued") or {})["message"] == (
            "The workload backoff was finished"
        )
    await env.wait_workload("w1", has("Admitted"))
    assert has("QuotaReserved")(back)


async def test_item6_core_leaves_a_job_owned_workload_to_the_job_reconciler(
    kueue_env: KueueEnv,
) -> None:
    """issue14-6: Kueue's core never releases an evicted Workload; for one owned by a Job the
    Job reconciler does, once the Job has no active pods (no Job reconciler runs here)."""
    env = kueue_env
    await basic_queue(env, cpu=2)
    owned = workload("owned", cpu="2")
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "owner",
            "uid": "00000000-0000-0000-0000-000000000001",
            "controller": True,
        }
    ]
    await create(env.api, owned)
    await env.wait_workload("owned", has("Admitted"))
    await create(env.api, workload("next", cpu="2"))
    await env.wait_workload("next", has("QuotaReserved", "False", "Pending"))
    current = await env.workload("owned")
    conditions = [*status_of(current)["conditions"], evicted_condition(env, "Preempted")]
    await env.merge_status("workloads", "owned", {"conditions": conditions}, "default")
    # A pass that sees the new Workload "probe" also saw the eviction (one informer, in order),
    # and a release would have been written in it before "probe" got its pending status.
    await create(env.api, workload("probe", cpu="2"))
    await env.wait_workload("probe", has("QuotaReserved", "False", "Pending"))
    still = await env.workload("owned")
    assert has("QuotaReserved")(still)
    assert has("Evicted")(still)
    assert status_of(still)["admission"]["clusterQueue"] == "cq"
    assert not has("QuotaReserved")(await env.workload("next"))


async def test_c13_conditions_carry_every_required_field(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=1, preemption="LowerPriority")
    await create(env.api, workload("low", cpu="1"))
    await env.wait_workload("low", has("Admitted"))
    await create(env.api, workload("high", cpu="1", priority=1))
    await env.wait_workload("high", has("Admitted"))
    for name in ("low", "high"):
        for cond in status_of(await env.workload(name))["conditions"]:
            assert set(cond) >= {"type", "status", "reason", "message", "lastTransitionTime"}


async def test_c13_hold_and_drain_evicts_with_cluster_queue_stopped(kueue_env: KueueEnv) -> None:
    env = kueue_env
    await basic_queue(env, cpu=2)
    await create(env.api, workload("w1", cpu="1"))
    await env.wait_workload("w1", has("Admitted"))
    await env.custom.patch_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        "cq",
        {"spec": {"stopPolicy": "HoldAndDrain"}},
        _content_type="application/merge-patch+json",
    )
    stopped = await env.wait_workload("w1", has("QuotaReserved", "False", "Inadmissible"))
    assert (get_condition(stopped, "Evicted") or {})["reason"] == "ClusterQueueStopped"
    await env.wait_for("clusterqueues", "cq", has("Active", "False", "Stopped"))
    # issue 14 item 6: released with Requeued=False; the workload controller turns it True when
    # the ClusterQueue runs again, and only then is the workload queued.
    assert has("Requeued", "False", "ClusterQueueStopped")(stopped)
    await env.custom.patch_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        "cq",
        {"spec": {"stopPolicy": "None"}},
        _content_type="application/merge-patch+json",
    )
    seen: list[Obj] = []
    back = await env.wait_workload("w1", has("Admitted"), seen=seen, since=rv_of(stopped))
    restarted = next(o for o in seen if has("Requeued", "True", "ClusterQueueRestarted")(o))
    assert not has("QuotaReserved")(restarted)
    assert (get_condition(restarted, "Requeued") or {})["message"] == (
        "The ClusterQueue was restarted after being stopped"
    )
    assert has("Requeued", "True", "ClusterQueueRestarted")(back)


# --- manager role: admission checks (C37–C39) -----------------------------------------------------


async def manager_queue(env: KueueEnv) -> None:
    await create(
        env.api,
        resource_flavor("default"),
        admission_check("mk-check", config="mk-config"),
        cluster_queue("cq", {"default": {"cpu": 4}}, admission_checks=["mk-check"]),
        local_queue("user-queue", "default", "cq"),
    )
    active = {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": "The admission check is active",
        "lastTransitionTime": env.timestamp(),
    }
    await env.merge_status("admissionchecks", "mk-check", {"conditions": [active]})
    await env.wait_for("clusterqueues", "cq", has("Active", "True"))


def check_of(obj: Obj, name: str = "mk-check") -> Obj:
    for item in status_of(obj).get("admissionChecks") or []:
        if item["name"] == name:
            found: Obj = item
            return found
    raise AssertionError(f"no admission check {name} in {status_of(obj)}")


def set_check(state: str, message: str = "") -> Callable[[Obj], None]:
    def change(status: Obj) -> None:
        for item in status["admissionChecks"]:
            if item["name"] == "mk-check" and item["state"] != state:
                item.update(
                    state=state, message=message, lastTransitionTime=item["lastTransitionTime"]
                )

    return change


async def test_c72_manager_cluster_queue_waits_for_its_admission_check(
    manager_kueue_env: KueueEnv,
) -> None:
    env = manager_kueue_env
    await create(
        env.api,
        resource_flavor("default"),
        cluster_queue("cq", {"default": {"cpu": 4}}, admission_checks=["mk-check"]),
        local_queue("user-queue", "default", "cq"),
        workload("w1", cpu="1"),
    )
    await env.wait_for("clusterqueues", "cq", has("Active", "False", "AdmissionCheckNotFound"))
    await create(env.api, admission_check("mk-check", config="mk-config"))
    await env.wait_for("clusterqueues", "cq", has("Active", "False", "AdmissionCheckInactive"))
    assert not has("QuotaReserved")(await env.workload("w1"))


async def test_c72_manager_initialises_checks_and_admits_when_ready(
    manager_kueue_env: KueueEnv,
) -> None:
    env = manager_kueue_env
    await manager_queue(env)
    await create(env.api, workload("w1", cpu="1"))
    reserved = await env.wait_workload("w1", has("QuotaReserved"))
    check = check_of(reserved)
    assert (check["state"], check["message"]) == ("Pending", "")
    assert get_condition(reserved, "Admitted") is None

    def admitted_on_worker1(status: Obj) -> None:  # what MultiKueue writes (C28)
        set_check("Ready", 'The workload was admitted on "worker1"')(status)
        status["clusterName"] = "worker1"
        status.pop("nominatedClusterNames", None)

    await env.apply_admission_status("w1", admitted_on_worker1)
    admitted = await env.wait_workload("w1", has("Admitted"))
    assert status_of(admitted)["clusterName"] == "worker1"
    cq = await env.wait_for("clusterqueues", "cq", counts(0, 1, 1))
    assert totals(cq, "flavorsUsage") == {("default", "cpu"): "1"}


async def test_c37_retry_evicts_and_resets_both_fields(manager_kueue_env: KueueEnv) -> None:
    env = manager_kueue_env
    await manager_queue(env)
    await create(env.api, workload("w1", cpu="1"))
    await env.wait_workload("w1", has("QuotaReserved"))

    def nominate(status: Obj) -> None:
        status["nominatedClusterNames"] = ["worker1", "worker2"]

    await env.apply_admission_status("w1", nominate)
    # 1. Retry while nominated: evicted, nomination cleared, retryCount 1, requeued, re-reserved.
    retry = await env.apply_admission_status("w1", set_check("Retry", "Workload evicted on worker"))
    seen: list[Obj] = []
    await env.wait_workload(
        "w1",
        lambda o: has("QuotaReserved")(o) and has("Evicted", "False")(o),
        seen=seen,
        since=rv_of(retry),
    )
    evicted = next(o for o in seen if has("Evicted", "True", "AdmissionCheck")(o))
    assert (get_condition(evicted, "Evicted") or {})["message"] == (
        "At least one admission check is false"
    )
    assert "nominatedClusterNames" not in status_of(evicted)
    assert check_of(evicted)["state"] == "Pending"
    assert check_of(evicted)["retryCount"] == 1
    assert check_of(evicted)["message"] == "Reset to Pending after eviction. Previously: Retry"
    assert any(has("QuotaReserved", "False", "Pending")(o) for o in seen)

    # 2. Admitted on worker1 (clusterName set), then Retry: clusterName cleared, retryCount 2.
    def admitted_on_worker1(status: Obj) -> None:
        set_check("Ready", 'The workload was admitted on "worker1"')(status)
        status["clusterName"] = "worker1"

    await env.apply_admission_status("w1", admitted_on_worker1)
    await env.wait_workload("w1", has("Admitted"))
    retry = await env.apply_admission_status("w1", set_check("Retry", "Workload evicted on worker"))
    seen = []
    final = await env.wait_workload(
        "w1",
        lambda o: has("QuotaReserved")(o) and check_of(o).get("retryCount") == 2,
        seen=seen,
        since=rv_of(retry),
    )
    evicted = next(o for o in seen if has("Evicted", "True", "AdmissionCheck")(o))
    assert "clusterName" not in status_of(evicted)
    assert "nominatedClusterNames" not in status_of(evicted)
    assert "clusterName" not in status_of(final)
    assert check_of(final)["state"] == "Pending"
    assert status_of(final)["schedulingStats"]["evictions"] == [
        {"reason": "AdmissionCheck", "underlyingCause": "", "count": 2}
    ]


async def test_c45_merge_patch_gate_clears_a_nomination_owned_by_another_manager(
    crds_dir: Path,
) -> None:
    async with start_env(
        crds_dir,
        role="manager",
        kueue_config=KueueConfig(merge_patch_gate=True, batch_period_seconds=0.005),
    ) as env:
        await manager_queue(env)
        await create(env.api, workload("w1", cpu="1"))
        await env.wait_workload("w1", has("QuotaReserved"))
        # The dispatcher's own field manager owns the nomination (C43's setting).
        await env.custom.patch_namespaced_custom_object_status(
            "kueue.x-k8s.io",
            "v1beta2",
            "default",
            "workloads",
            "w1",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": "w1", "namespace": "default"},
                "status": {"nominatedClusterNames": ["worker1"]},
            },
            field_manager="my-dispatcher",
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        retry = await env.apply_admission_status("w1", set_check("Retry"))
        seen: list[Obj] = []
        await env.wait_workload("w1", has("Evicted", "False"), seen=seen, since=rv_of(retry))
        evicted = next(o for o in seen if has("Evicted", "True")(o))
        assert "nominatedClusterNames" not in status_of(evicted)


async def test_c39_rejected_deactivates(manager_kueue_env: KueueEnv) -> None:
    env = manager_kueue_env
    await manager_queue(env)
    await create(env.api, workload("w1", cpu="1"))
    await env.wait_workload("w1", has("QuotaReserved"))
    rejected = await env.apply_admission_status("w1", set_check("Rejected", "no worker can run it"))
    seen: list[Obj] = []
    final = await env.wait_workload(
        "w1",
        lambda o: o["spec"].get("active") is False and has("QuotaReserved", "False")(o),
        seen=seen,
        since=rv_of(rejected),
    )
    assert any(has("DeactivationTarget", "True", "AdmissionCheck")(o) for o in seen)
    evicted = get_condition(final, "Evicted")
    assert evicted is not None
    assert (evicted["status"], evicted["reason"]) == ("True", "DeactivatedDueToAdmissionCheck")
    assert get_condition(final, "DeactivationTarget") is None
    assert "admission" not in status_of(final)
    assert (get_condition(final, "Requeued") or {})["status"] == "False"
    spec_writes = [
        e
        for e in env.cluster.journal.entries()
        if e.path.endswith("/workloads/w1") and e.method == "PATCH" and e.field_manager == "kueue"
    ]
    assert spec_writes, "deactivation is a spec write (C39)"
    cq = await env.wait_for("clusterqueues", "cq", counts(0, 0, 0))
    assert totals(cq, "flavorsReservation") == {("default", "cpu"): "0"}


# --- issue 14 item 8: `pods` quota; item 9: no preemption to borrow -----------------------------


async def test_item8_pods_quota_is_charged_per_pod(kueue_env: KueueEnv) -> None:
    """issue14-8, C69: a ClusterQueue covering ``pods`` charges each pod set its pod count,
    in ``status.admission`` and in ``flavorsReservation``."""
    env = kueue_env
    await create(
        env.api,
        resource_flavor("default"),
        cluster_queue("cq", {"default": {"cpu": 8, "pods": 3}}),
        local_queue("user-queue", "default", "cq"),
    )
    await create(env.api, workload("two", pod_sets=[pod_set(count=2, cpu="1")]))
    two = await env.wait_workload("two", has("Admitted"))
    [assignment] = status_of(two)["admission"]["podSetAssignments"]
    assert assignment["flavors"] == {"cpu": "default", "pods": "default"}
    assert assignment["resourceUsage"] == {"cpu": "2", "pods": "2"}
    await create(env.api, workload("two-more", pod_sets=[pod_set(count=2, cpu="1")]))
    waiting = await env.wait_workload("two-more", has("QuotaReserved", "False", "Pending"))
    assert "pods" in (get_condition(waiting, "QuotaReserved") or {})["message"]
    await create(env.api, workload("one", pod_sets=[pod_set(count=1, cpu="1")]))
    await env.wait_workload("one", has("Admitted"))
    cq = await env.wait_for("clusterqueues", "cq", counts(1, 2, 2))
    assert totals(cq, "flavorsReservation") == {("default", "cpu"): "3", ("default", "pods"): "3"}
    assert not has("QuotaReserved")(await env.workload("two-more"))


async def test_item9_no_preemption_for_a_request_that_needs_borrowing(
    kueue_env: KueueEnv,
) -> None:
    """issue14-9, C72: queue ``a`` (4 cpu, cohort ``team`` with an idle 4-cpu ``b``) holds a
    low-priority 4-cpu workload. A high-priority 6-cpu one could fit by preempting it and
    borrowing 2, but Kueue v0.19 considers preemption only within nominal quota unless
    ``borrowWithinCohort`` is set: it waits. With ``borrowWithinCohort`` it preempts."""
    env = kueue_env
    await create(
        env.api,
        resource_flavor("default"),
        cluster_queue("a", {"default": {"cpu": 4}}, cohort="team", preemption="LowerPriority"),
        cluster_queue("b", {"default": {"cpu": 4}}, cohort="team"),
        local_queue("qa", "default", "a"),
        workload("low", queue="qa", cpu="4"),
    )
    await env.wait_workload("low", has("Admitted"))
    await create(env.api, workload("high", queue="qa", cpu="6", priority=10))
    waiting = await env.wait_workload("high", has("QuotaReserved", "False", "Pending"))
    message = (get_condition(waiting, "QuotaReserved") or {})["message"]
    assert message.startswith("couldn't assign flavors"), message
    low = await env.workload("low")
    assert has("Admitted")(low)
    assert get_condition(low, "Evicted") is None
    await env.custom.patch_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        "a",
        {
            "spec": {
                "preemption": {
                    "reclaimWithinCohort": "LowerPriority",
                    "borrowWithinCohort": {"policy": "LowerPriority"},
                }
            }
        },
        _content_type="application/merge-patch+json",
    )
    preempted = await env.wait_workload("low", has("Evicted", "True", "Preempted"))
    assert has("Preempted", "True", "InClusterQueue")(preempted)
    await env.wait_workload("high", has("Admitted"))
    cq = await env.wait_for("clusterqueues", "a", counts(1, 1, 1))
    reservation = status_of(cq)["flavorsReservation"][0]["resources"][0]
    assert reservation == {"name": "cpu", "total": "6", "borrowed": "2"}


# --- SyncAdmittedCondition (pure) ---------------------------------------------------------------


def _status(
    reserved: str | None, admitted: str | None, checks: tuple[str, ...] = ()
) -> dict[str, Any]:
    conditions = []
    if reserved is not None:
        conditions.append({"type": "QuotaReserved", "status": reserved, "reason": "x"})
    if admitted is not None:
        conditions.append({"type": "Admitted", "status": admitted, "reason": "x"})
    out: dict[str, Any] = {"conditions": conditions}
    if checks:
        out["admissionChecks"] = [{"name": f"c{i}", "state": s} for i, s in enumerate(checks)]
    return out


SYNC_CASES = [
    # (QuotaReserved, Admitted, check states, v0.20 gate, expected Admitted (status, reason))
    pytest.param("True", None, (), False, ("True", "Admitted"), id="reserved-no-checks"),
    pytest.param("True", None, ("Ready",), False, ("True", "Admitted"), id="reserved-ready"),
    pytest.param("True", None, ("Pending",), False, None, id="v019-checks-pending-no-write"),
    pytest.param(
        "True",
        None,
        ("Pending",),
        True,
        ("False", "UnsatisfiedAdmissionChecks"),
        id="v020-checks-pending",
    ),
    pytest.param("False", "True", (), False, ("False", "NoReservation"), id="released-no-checks"),
    pytest.param(
        "False",
        "True",
        ("Pending",),
        False,
        ("False", "NoReservationUnsatisfiedChecks"),
        id="v019-released-checks-reset",
    ),
    pytest.param(
        "False", "True", ("Pending",), True, ("False", "NoReservation"), id="v020-released"
    ),
    pytest.param("False", None, (), False, None, id="v019-never-admitted-no-write"),
    pytest.param(None, None, (), True, None, id="v020-nothing-yet-no-write"),
]


@pytest.mark.parametrize(("reserved", "admitted", "checks", "gate", "expected"), SYNC_CASES)
def test_sync_admitted_condition_follows_kueue(
    reserved: str | None,
    admitted: str | None,
    checks: tuple[str, ...],
    gate: bool,
    expected: tuple[str, str] | None,
) -> None:
    """``SyncAdmittedCondition`` as used by the reservation (item 7) and the release (item 6)."""
    status = _status(reserved, admitted, checks)
    changed = sync_admitted_condition(status, ManualClock(), observability=gate)
    found = get_condition({"status": status}, "Admitted")
    if expected is None:
        assert not changed
        assert (found or {}).get("status") == admitted
    else:
        assert changed
        assert found is not None
        assert (found["status"], found["reason"]) == expected


async def test_c13_deactivation_target_is_deactivated_and_evicted_in_one_pass(
    kueue_env: KueueEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy marked ``DeactivationTarget`` by the manager (C13 EvictedOnManagerCluster): Kueue
    writes ``spec.active=false`` and its own update event brings the eviction within
    milliseconds. The emulation evicts in the pass that deactivated, so MultiKueue on the
    manager never sees a deactivated copy that is not yet evicted (it would take it for spec
    drift, C27, and delete it with its Job before the Job's status could be copied back)."""
    env = kueue_env
    await basic_queue(env)
    await create(env.api, workload("w1", cpu="1"))
    await env.wait_workload("w1", has("Admitted"))
    passes: dict[str, int] = {}
    core = env.kueue
    deactivate, evict = core._deactivate, core._evict

    async def deactivating(wl: Obj) -> Obj | None:
        passes["deactivate"] = core.reconciles
        return await deactivate(wl)

    async def evicting(wl: Obj, reason: str, message: str, **kwargs: Any) -> None:
        passes.setdefault("evict", core.reconciles)
        await evict(wl, reason, message, **kwargs)

    monkeypatch.setattr(core, "_deactivate", deactivating)
    monkeypatch.setattr(core, "_evict", evicting)

    def target(status: Obj) -> None:
        status.setdefault("conditions", []).append(
            {
                "type": "DeactivationTarget",
                "status": "True",
                "reason": "EvictedOnManagerCluster",
                "message": "Evicted on manager: At least one admission check is false",
                "lastTransitionTime": "2026-12-01T12:00:00Z",
            }
        )

    await env.apply_admission_status("w1", target)
    final = await env.wait_workload("w1", has("Evicted"))
    assert final["spec"]["active"] is False
    assert (get_condition(final, "Evicted") or {})["reason"] == (
        "DeactivatedDueToEvictedOnManagerCluster"
    )
    assert passes["evict"] == passes["deactivate"]


async def three_admitted(env: KueueEnv) -> tuple[str, ...]:
    """The basic queue with three small workloads, each admitted; their names."""
    await basic_queue(env)
    names = ("w1", "w2", "w3")
    for name in names:
        await create(env.api, workload(name, cpu="1"))
    for name in names:
        await env.wait_workload(name, has("Admitted"))
    return names


async def test_reserving_views_are_computed_once_per_object_version(kueue_env: KueueEnv) -> None:
    """Operation count: a pass reads each quota holder's admission once per version of its
    object; a pass over unchanged workloads parses none, a new version of one parses that one,
    and the views are the ones a pass without the memo computes."""
    env = kueue_env
    names = await three_admitted(env)
    kueue = env.kueue
    computed: list[tuple[str, str]] = []
    original = kueue._reserving_view

    def counting(key: tuple[str, str], wl: Obj) -> Any:
        computed.append(key)
        return original(key, wl)

    kueue._reserving_view = counting  # type: ignore[method-assign]
    try:  # synchronous from here on: no pass of the running controller interleaves
        state = kueue._read()
        first = kueue._reserving(state)
        assert [v.key for v in first] == [f"default/{n}" for n in names]
        computed.clear()
        assert kueue._reserving(kueue._read()) == first
        assert computed == []
        w2 = dict(state.workloads[("default", "w2")])
        w2["metadata"] = {**w2["metadata"], "resourceVersion": str(int(rv_of(w2)) + 1000)}
        state.workloads[("default", "w2")] = w2
        del state.workloads[("default", "w1")]
        again = kueue._reserving(state)
        assert computed == [("default", "w2")]
        assert set(kueue._reserving_memo) == {("default", "w2"), ("default", "w3")}
        kueue._reserving_memo = {}
        assert kueue._reserving(state) == again
    finally:
        del kueue._reserving_view


async def test_queue_statuses_group_the_holders_once_per_pass(kueue_env: KueueEnv) -> None:
    """Operation count: the queue-status step finds each quota holder's LocalQueue once a
    pass, not once per LocalQueue (O(holders x queues) before): with 3 holders and 10
    LocalQueues, 3 lookups."""
    env = kueue_env
    names = await three_admitted(env)
    kueue = env.kueue
    looked_up: list[str] = []
    original = kueue._queue_of

    def counting(wl: Obj) -> Any:
        looked_up.append(str(wl["metadata"]["name"]))
        return original(wl)

    async def no_write(*_: Any) -> None:
        return None

    kueue._queue_of = counting  # type: ignore[method-assign]
    kueue._update_queue_status = no_write  # type: ignore[method-assign]
    try:  # synchronous reads, stubbed writes: no pass of the running controller interleaves
        state = kueue._read()
        [(key, lq)] = list(state.local_queues.items())
        for i in range(9):
            state.local_queues[(key[0], f"extra-{i}")] = {
                **lq,
                "metadata": {**lq["metadata"], "name": f"extra-{i}"},
            }
        await kueue._queue_statuses(state)
        assert sorted(looked_up) == sorted(names)
    finally:
        del kueue._queue_of
        del kueue._update_queue_status
