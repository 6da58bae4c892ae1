"""A worker that lost a workload's admitted copy is left out of its next decisions (contract
C29, C91), on every backend.

The copy of an admitted Job is deleted on its worker, which stays reachable: Kueue sets the
MultiKueue check ``Retry`` ("Admitting remote no longer exists") at once (C29), evicts and resets
the manager Workload (C37, C38), which reserves quota again and waits for a nomination. The
dispatcher leaves the worker that lost the copy out of that workload's decisions for
``lost_copy_cooldown_seconds`` (stage ``copy-lost``): a worker back from an outage can delete
every new copy the same way until its Kueue has seen the old Job deleted (C91), which the
deletion here stands in for, the same way on every backend. The Job then runs on the other
worker, and its ``Nominated`` Event names why the first one was left out.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

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


async def test_a_worker_that_lost_the_admitted_copy_is_left_out(backend: ApiBackend) -> None:
    await backend.reset()
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

    await client.CustomObjectsApi(backend.apis[lost]).delete_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "workloads", name
    )
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
