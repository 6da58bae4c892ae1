"""batch/v1 Jobs in the fake API server, through kubernetes_asyncio (issue 3, scope 6).

Kueue's batch/Job integration is the way users submit MultiKueue work (contract C28 step 2, C33,
S18, S55), so the fake serves Jobs as a built-in kind: discovery, CRUD, selectors, watch and the
status subresource. No schema is enforced (a built-in kind, as Secrets or Leases).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient, ApiException

pytestmark = pytest.mark.anyio

MERGE = "application/merge-patch+json"


def job(name: str, namespace: str = "default", *, queue: str | None = "user-queue") -> Any:
    """A suspended Job as users submit to Kueue."""
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "suspend": True,
            "managedBy": "kueue.x-k8s.io/multikueue",
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


async def test_s55_jobs_are_discoverable_in_batch_v1_with_status(api: ApiClient) -> None:
    groups = await client.ApisApi(api).get_api_versions()
    batch = {g.name: g for g in groups.groups}["batch"]
    assert batch.preferred_version.group_version == "batch/v1"
    resources = await client.BatchV1Api(api).get_api_resources()
    by_name = {r.name: r for r in resources.resources}
    assert by_name["jobs"].kind == "Job"
    assert by_name["jobs"].namespaced is True
    assert "jobs/status" in by_name


async def test_s55_job_crud_and_field_selectors(api: ApiClient) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job("default", job("a"))
    assert created.metadata.uid
    assert created.metadata.generation == 1
    assert created.spec.suspend is True
    assert created.spec.managed_by == "kueue.x-k8s.io/multikueue"
    await batch.create_namespaced_job("default", job("b", queue=None))

    listed = await batch.list_namespaced_job("default", field_selector="metadata.name=a")
    assert [j.metadata.name for j in listed.items] == ["a"]
    queued = await batch.list_job_for_all_namespaces(
        label_selector="kueue.x-k8s.io/queue-name=user-queue"
    )
    assert [j.metadata.name for j in queued.items] == ["a"]

    await batch.delete_namespaced_job("a", "default")
    with pytest.raises(ApiException) as missing:
        await batch.read_namespaced_job("a", "default")
    assert missing.value.status == 404


async def test_c28_status_subresource_is_isolated_from_spec(api: ApiClient) -> None:
    """Kueue's adapter unsuspends through the Job and mirrors status through /status only."""
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job("c"))
    status = {"status": {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}}
    patched = await batch.patch_namespaced_job_status("c", "default", status, _content_type=MERGE)
    assert patched.status.succeeded == 2
    assert patched.metadata.generation == 1  # a status write is not a spec change

    spec_patch = {"spec": {"suspend": False}, "status": {"succeeded": 0}}
    unsuspended = await batch.patch_namespaced_job("c", "default", spec_patch, _content_type=MERGE)
    assert unsuspended.spec.suspend is False
    assert unsuspended.status.succeeded == 2  # status ignored on the main resource
    assert unsuspended.metadata.generation == 2


async def test_s18_watch_sees_job_changes(api: ApiClient) -> None:
    batch = client.BatchV1Api(api)
    listed = await batch.list_namespaced_job("default")
    seen: list[tuple[str, str]] = []
    stream = watch.Watch()
    with anyio.fail_after(10):
        await batch.create_namespaced_job("default", job("d"))
        async with stream.stream(
            batch.list_namespaced_job,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        ) as events:
            async for event in events:
                seen.append((event["type"], event["object"].metadata.name))
                if event["type"] == "ADDED":
                    await batch.delete_namespaced_job("d", "default")
                if event["type"] == "DELETED":
                    break
    assert seen == [("ADDED", "d"), ("DELETED", "d")]
