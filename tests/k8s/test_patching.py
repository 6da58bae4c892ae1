"""Status writes through dispatcher.k8s.patching (contract C42–C48;
``docs/fake-apiserver.md#9-client-facts``).

The fake server's journal (docs/fake-apiserver.md F58) shows what went over the wire: the content
type, the field manager and the query (``force`` only on apply).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.patching import (
    APPLY_PATCH,
    MERGE_PATCH,
    AdmittedMeanwhile,
    Patched,
    apply_status,
    merge_patch_status,
)
from dispatcher.k8s.resources import KUEUE_GROUP, KUEUE_VERSION, WORKLOADS
from dispatcher_sandbox.fake_apiserver import FakeCluster, JournalEntry

NS = "default"
Obj = dict[str, Any]


async def _workload(api: KubeApi, name: str = "wl-a") -> Obj:
    body = {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"queueName": "lq"},
    }
    return await api.create(WORKLOADS, body, NS)


def _nomination(name: str, clusters: list[str]) -> Obj:
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS},
        "status": {"nominatedClusterNames": clusters},
    }


def _status_patches(cluster: FakeCluster) -> list[JournalEntry]:
    return [
        e for e in cluster.journal.entries() if e.method == "PATCH" and e.path.endswith("/status")
    ]


async def test_apply_sends_apply_patch_with_field_manager_and_force(
    cluster: FakeCluster, api: KubeApi
) -> None:
    await _workload(api)
    result = await apply_status(
        api,
        KUEUE_GROUP,
        KUEUE_VERSION,
        NS,
        "workloads",
        "wl-a",
        _nomination("wl-a", ["worker-1"]),
        "multikueue-dispatcher",
    )
    assert isinstance(result, Patched)
    assert result.object["status"]["nominatedClusterNames"] == ["worker-1"]
    [entry] = _status_patches(cluster)
    assert entry.content_type == APPLY_PATCH
    assert entry.field_manager == "multikueue-dispatcher"
    assert "force=" in entry.query
    stored = await api.get(WORKLOADS, "wl-a", NS)
    applied = [
        (m["manager"], m.get("subresource"))
        for m in stored["metadata"]["managedFields"]
        if m["operation"] == "Apply"
    ]
    assert applied == [("multikueue-dispatcher", "status")]


async def test_merge_patch_sends_merge_patch_and_never_force(
    cluster: FakeCluster, api: KubeApi
) -> None:
    await _workload(api)
    body = {"status": {"nominatedClusterNames": ["worker-2"]}}
    result = await merge_patch_status(
        api, KUEUE_GROUP, KUEUE_VERSION, NS, "workloads", "wl-a", body, "multikueue-dispatcher"
    )
    assert isinstance(result, Patched)
    assert result.object["status"]["nominatedClusterNames"] == ["worker-2"]
    [entry] = _status_patches(cluster)
    assert entry.content_type == MERGE_PATCH
    assert "force" not in entry.query  # C47: force on a non-apply patch is a 422
    assert entry.field_manager == "multikueue-dispatcher"


async def test_a_dict_body_without_the_wrapper_is_sent_as_json_patch(
    cluster: FakeCluster, api: KubeApi
) -> None:
    """The reason the wrapper exists (docs/fake-apiserver.md#9-client-facts)."""
    await _workload(api)
    custom = client.CustomObjectsApi(api.api_client)
    with pytest.raises(client.ApiException) as caught:
        await custom.patch_namespaced_custom_object_status(
            KUEUE_GROUP,
            KUEUE_VERSION,
            NS,
            "workloads",
            "wl-a",
            {"status": {"nominatedClusterNames": ["worker-1"]}},
            _request_timeout=10,
        )
    assert 400 <= caught.value.status < 500
    [entry] = _status_patches(cluster)
    assert entry.content_type == "application/json-patch+json"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            422,
            'Workload.kueue.x-k8s.io "wl-a" is invalid: status: Invalid value: "object": '
            "clusterName and nominatedClusterNames are mutually exclusive",
        ),
        (422, "status.clusterName: Invalid value: field is immutable"),
        (409, "Operation cannot be fulfilled: the object has been modified"),
    ],
    ids=["mutually-exclusive", "immutable", "conflict"],
)
async def test_races_with_kueue_are_results_not_errors(
    cluster: FakeCluster, api: KubeApi, code: int, message: str
) -> None:
    await _workload(api)
    fault = cluster.faults.error(code, verbs=("patch",), path=r"/status$", count=2, message=message)
    applied = await apply_status(
        api,
        KUEUE_GROUP,
        KUEUE_VERSION,
        NS,
        "workloads",
        "wl-a",
        _nomination("wl-a", ["worker-1"]),
        "multikueue-dispatcher",
    )
    merged = await merge_patch_status(
        api,
        KUEUE_GROUP,
        KUEUE_VERSION,
        NS,
        "workloads",
        "wl-a",
        {"status": {"nominatedClusterNames": ["worker-1"]}},
    )
    for result in (applied, merged):
        assert isinstance(result, AdmittedMeanwhile)
        assert result.status == code
        assert result.message == message
    assert fault.fired == 2


async def test_other_errors_are_raised(cluster: FakeCluster, api: KubeApi) -> None:
    await _workload(api)
    cluster.faults.error(422, verbs=("patch",), path=r"/status$", message="spec: Required value")
    with pytest.raises(ApiError) as caught:
        await apply_status(
            api,
            KUEUE_GROUP,
            KUEUE_VERSION,
            NS,
            "workloads",
            "wl-a",
            _nomination("wl-a", ["worker-1"]),
            "multikueue-dispatcher",
        )
    assert caught.value.status == 422
    cluster.faults.clear()
    with pytest.raises(ApiError) as missing:
        await merge_patch_status(
            api, KUEUE_GROUP, KUEUE_VERSION, NS, "workloads", "nope", {"status": {}}
        )
    assert missing.value.not_found


async def test_apply_needs_a_field_manager(api: KubeApi) -> None:
    with pytest.raises(ValueError, match="field manager"):
        await apply_status(api, KUEUE_GROUP, KUEUE_VERSION, NS, "workloads", "x", {}, "")
