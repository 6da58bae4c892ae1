"""Kueue's webhook rule on clusterName as a validating hook of the fake server (contract C18)."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient, ApiException

from dispatcher_sandbox.fake_apiserver import FakeCluster, kueue_cluster_name_webhook
from dispatcher_sandbox.harness.kube_builders import KUEUE, V1BETA2, workload

MERGE = "application/merge-patch+json"


async def patch_status(api: ApiClient, name: str, status: dict[str, object]) -> object:
    return await client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        KUEUE, V1BETA2, "default", "workloads", name, {"status": status}, _content_type=MERGE
    )


@pytest.mark.parametrize(
    ("nominated", "cluster", "allowed"),
    [
        pytest.param(["w1", "w2"], "w2", True, id="c18-cluster-among-old-nomination"),
        pytest.param(["w1"], "w2", False, id="c18-cluster-not-nominated"),
        pytest.param([], "w1", False, id="c18-nothing-nominated"),
    ],
)
async def test_c18_cluster_name_must_come_from_the_old_nomination(
    kueue_cluster: FakeCluster,
    kueue_api: ApiClient,
    nominated: list[str],
    cluster: str,
    allowed: bool,
) -> None:
    kueue_cluster.admission.add_validating(kueue_cluster_name_webhook())
    await client.CustomObjectsApi(kueue_api).create_namespaced_custom_object(
        KUEUE, V1BETA2, "default", "workloads", workload("c18")
    )
    if nominated:
        await patch_status(kueue_api, "c18", {"nominatedClusterNames": nominated})
    # Kueue sets clusterName and clears the nomination in one write (C28).
    change = {"clusterName": cluster, "nominatedClusterNames": None}
    if allowed:
        result = await patch_status(kueue_api, "c18", change)
        assert result["status"]["clusterName"] == cluster  # type: ignore[index]
    else:
        with pytest.raises(ApiException) as err:
            await patch_status(kueue_api, "c18", change)
        assert err.value.status == 403  # a webhook denial, as Kueue's controller-runtime sends it
        assert "must be one of the nominatedClusterNames" in json.loads(err.value.body)["message"]


async def test_c18_does_not_judge_other_writes(
    kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    kueue_cluster.admission.add_validating(kueue_cluster_name_webhook())
    await client.CustomObjectsApi(kueue_api).create_namespaced_custom_object(
        KUEUE, V1BETA2, "default", "workloads", workload("other")
    )
    result = await patch_status(kueue_api, "other", {"nominatedClusterNames": ["w1"]})
    assert result["status"]["nominatedClusterNames"] == ["w1"]  # type: ignore[index]
