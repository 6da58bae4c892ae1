"""A workload whose admitted copy vanished, on every backend: Kueue's eviction that never
finishes (contract C93), the dispatcher's report of it, the release, and the worker that lost
the copy left out of the next decisions (C29, C91).

The copy of an admitted Job is deleted on its worker, which stays reachable. Kueue sets the
MultiKueue check ``Retry`` ("Admitting remote no longer exists") at once (C29) and evicts the
manager Workload (C37), but gives the manager's quota back only once the manager Job shows no
active pods, a count MultiKueue copies from the worker's Job while a copy exists. The test
deletes the copy only once that count shows the pod running on the manager (Kueue copied it):
from then on nothing updates it, and the Workload stays evicted with its quota (C93). That is
what happens in a real deployment whenever a running copy vanishes; before this wait the test
raced the copy of the count (about 100 ms on real Kueue v0.19.2) and failed when the count
came first.

The dispatcher reports it (an ``EvictionStuck`` Warning Event naming the release), the test
releases it as the Event says (the manager Job's ``status.active`` set to 0), Kueue finishes
the eviction and reserves again, and the dispatcher leaves the worker that lost the copy out
of that workload's decisions for ``lost_copy_cooldown_seconds`` (stage ``copy-lost``): a worker
back from an outage can delete every new copy the same way until its Kueue has seen the old
Job deleted (C91), which the deletion here stands in for. The Job then runs on the other
worker, and its ``Nominated`` Event names why the first one was left out.

C93's other case, the copy lost while the manager Job shows no active pods, finishes by itself:
a Job whose pods are refused (its pod template names a ServiceAccount that does not exist,
:func:`dispatcher.topology.runs.pods_refused`) runs with ``status.active`` 0 on its worker and,
once MultiKueue copied that status, on the manager; its copy is deleted, and Kueue releases the
quota at once and places the workload again, with nothing to release by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client

from dispatcher.app.settings import ENV_PREFIX
from dispatcher.kueue.eligibility import ADMITTING_REMOTE_GONE
from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    NAMESPACE,
    ApiBackend,
    admitted_on,
    cluster_of,
    condition,
    is_true,
    listed_events,
    manager_events,
)
from dispatcher_sandbox.harness.e2e.trace import recorder_of

pytestmark = [pytest.mark.slow, pytest.mark.crds]

JOB = "copy-lost"
RELEASE = "copy-lost-release"  # the ConfigMap that lets the Job finish, on the worker it runs on
WORKERS = ("worker1", "worker2")


def held_cpu_job() -> WorkloadLine:
    """A one-pod CPU Job that fits either worker and does not finish before :data:`RELEASE`."""
    data: dict[str, Any] = {
        "name": JOB,
        "namespace": NAMESPACE,
        "count": 1,
        "requests": {"cpu": "1", "memory": "512Mi"},
        "runSeconds": 2,
        "holdUntilConfigMap": RELEASE,
    }
    return WorkloadLine.model_validate(data)


async def manager_job_status(
    backend: ApiBackend, name: str, ready: Callable[[client.V1JobStatus], bool]
) -> client.V1JobStatus:
    """The manager Job ``name``'s status once ``ready`` holds for it. Jobs are not mirrored by
    the backends: read again a few times a second, bounded above."""
    jobs = client.BatchV1Api(backend.apis["manager"])
    with anyio.fail_after(backend.timeouts.long):
        while True:
            job = await jobs.read_namespaced_job_status(name, NAMESPACE)
            if job.status is not None and ready(job.status):
                return job.status
            await anyio.sleep(0.2)


@pytest.mark.parametrize(
    "released_by",
    [
        pytest.param("hand", id="released-by-hand-as-the-event-says"),
        pytest.param("dispatcher", id="released-by-the-opt-in-stuck-eviction-release"),
    ],
)
async def test_a_worker_that_lost_the_admitted_copy_is_left_out(
    backend: ApiBackend, released_by: str
) -> None:
    await backend.reset()
    if released_by == "dispatcher":
        await backend.set_dispatcher_env({f"{ENV_PREFIX}STUCK_EVICTION_RELEASE": "true"})
    try:
        await lost_copy(backend, released_by)
    finally:
        if released_by == "dispatcher":
            await backend.set_dispatcher_env({})


async def lost_copy(backend: ApiBackend, released_by: str) -> None:
    recorder = recorder_of(backend)
    since = recorder.mark()
    long = backend.timeouts.long

    await backend.submit(held_cpu_job())
    admitted = await backend.wait_workload(
        JOB, lambda w: cluster_of(w) in WORKERS and is_true(w, "Admitted"), "admitted", long
    )
    lost = str(cluster_of(admitted))
    [other] = [w for w in WORKERS if w != lost]
    name = str(admitted["metadata"]["name"])

    jobs = client.BatchV1Api(backend.apis["manager"])
    await manager_job_status(backend, JOB, lambda status: (status.active or 0) >= 1)
    await client.CustomObjectsApi(backend.apis[lost]).delete_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "workloads", name
    )

    # C93: evicted, the manager's quota kept, nothing nominated; the dispatcher says so.
    [stuck] = await manager_events(backend, name, "EvictionStuck", long)
    assert "contract C93" in stuck["message"], stuck
    assert f"Job {NAMESPACE}/{JOB}" in stuck["message"], stuck
    assert stuck["type"] == "Warning", stuck
    if released_by == "hand":
        assert f"its admitted copy vanished on {lost}:" in stuck["message"], stuck
        held = backend.workload(JOB) or {}
        assert is_true(held, "Evicted"), held
        assert is_true(held, "QuotaReserved"), held
        assert not held["status"].get("clusterName"), held
        assert not held["status"].get("nominatedClusterNames"), held
        # The release the Event names; Kueue then finishes the eviction and reserves again.
        await jobs.patch_namespaced_job_status(  # type: ignore[call-arg]  # a dict body too
            JOB,
            NAMESPACE,
            {"status": {"active": 0, "ready": 0}},
            _content_type="application/merge-patch+json",
        )
    else:
        assert "(stuck_eviction_release)" in stuck["message"], stuck
        [released] = await manager_events(backend, name, "EvictionReleased", long)
        assert released["type"] == "Normal", released
        assert f"Job {NAMESPACE}/{JOB} to 0" in released["message"], released
    await backend.wait_workload(JOB, admitted_on(other), f"admitted again, on {other}", long)

    [trace] = recorder.export(since)["jobs"][JOB]
    retries = [e for e in trace["checks"] if e["state"] == "Retry"]
    assert [e["message"] for e in retries] == [f'{ADMITTING_REMOTE_GONE}, Previously: "Ready"']
    after = [e["value"] for e in trace["nominations"] if e["t"] > retries[0]["t"] and e["value"]]
    assert after, "nominated again after the Retry"
    assert all(lost not in value for value in after), after
    messages = [e["message"] for e in await listed_events(backend, name, "Nominated")]
    assert any(
        m.startswith(f"nominated [{other}]")
        and f"{lost}: copy-lost: its admitted copy there vanished" in m
        for m in messages
    ), messages

    await backend.release_hold(other, RELEASE)
    await backend.wait_for(lambda: is_true(backend.workload(JOB), "Finished"), "finished", long)
    final = backend.workload(JOB)
    assert cluster_of(final) == other
    assert (condition(final, "Finished") or {}).get("reason") == "Succeeded"


NO_PODS = "copy-lost-no-pods"


async def test_a_copy_lost_while_its_job_has_no_pods_is_released_by_kueue(
    backend: ApiBackend,
) -> None:
    await backend.reset()
    recorder = recorder_of(backend)
    since = recorder.mark()
    long = backend.timeouts.long
    line = {
        "name": NO_PODS,
        "namespace": NAMESPACE,
        "count": 1,
        "requests": {"cpu": "1", "memory": "512Mi"},
        "serviceAccountName": "sandbox-no-such-account",
    }
    await backend.submit(WorkloadLine.model_validate(line))
    admitted = await backend.wait_workload(
        NO_PODS, lambda w: cluster_of(w) in WORKERS and is_true(w, "Admitted"), "admitted", long
    )
    lost = str(cluster_of(admitted))
    [other] = [w for w in WORKERS if w != lost]
    name = str(admitted["metadata"]["name"])

    # MultiKueue copied the worker Job's status once the manager Job was unsuspended: started,
    # no active pods.
    status = await manager_job_status(backend, NO_PODS, lambda s: s.start_time is not None)
    assert not status.active, status
    await client.CustomObjectsApi(backend.apis[lost]).delete_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "workloads", name
    )

    # Kueue evicts, releases the manager's quota by itself and reserves again; the dispatcher
    # places it on the other worker (the lost one is left out, C91).
    await backend.wait_workload(NO_PODS, admitted_on(other), f"admitted again, on {other}", long)
    [trace] = recorder.export(since)["jobs"][NO_PODS]
    retries = [e["t"] for e in trace["checks"] if e["state"] == "Retry"]
    assert len(retries) == 1, trace["checks"]
    released = [
        e["t"]
        for e in trace["conditions"]
        if e["type"] == "QuotaReserved" and e["status"] == "False" and e["t"] >= retries[0]
    ]
    assert released, "the manager's quota released after the Retry"
    assert await listed_events(backend, name, "EvictionStuck") == []
