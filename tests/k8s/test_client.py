"""KubeApi against a fake cluster: typed helpers, paging, error translation, timeouts."""

from __future__ import annotations

import base64
from pathlib import Path

import aiohttp
import anyio
import pytest
import yaml

from dispatcher.k8s.client import (
    KubeApi,
    client_from_kubeconfig_file,
    close_client,
)
from dispatcher.k8s.errors import ApiError, ApiUnreachable
from dispatcher.k8s.kubeconfig import kubeconfig_from_secret
from dispatcher.k8s.resources import CLUSTER_QUEUES, KUEUE_GROUP, KUEUE_VERSION, SECRETS, WORKLOADS
from dispatcher_sandbox.fake_apiserver import FakeCluster

NS = "default"


async def test_custom_objects_secrets_and_events(cluster: FakeCluster, api: KubeApi) -> None:
    for i in range(5):
        await api.create(
            WORKLOADS,
            {
                "metadata": {"name": f"wl-{i}", "namespace": NS, "labels": {"i": str(i % 2)}},
                "spec": {},
            },
            NS,
        )
    await api.create(CLUSTER_QUEUES, {"metadata": {"name": "cq"}, "spec": {}})
    listed = await api.list(WORKLOADS, NS, page_size=2)  # three pages
    assert [o["metadata"]["name"] for o in listed.items] == [f"wl-{i}" for i in range(5)]
    assert listed.resource_version
    odd = await api.list_custom_objects(
        KUEUE_GROUP, KUEUE_VERSION, "workloads", NS, label_selector="i=1"
    )
    assert [o["metadata"]["name"] for o in odd.items] == ["wl-1", "wl-3"]
    one = await api.get_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads", "wl-0", NS)
    assert one["metadata"]["name"] == "wl-0"
    cq = await api.get_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "cq")
    assert cq["metadata"]["name"] == "cq"
    cqs = await api.list_custom_objects(
        KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", namespaced=False
    )
    assert [o["metadata"]["name"] for o in cqs.items] == ["cq"]

    # A kubeconfig Secret as the registry reads it.
    text = yaml.safe_dump(cluster.kubeconfig)
    await api.create(
        SECRETS,
        {
            "metadata": {"name": "worker-1", "namespace": NS},
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
        },
        NS,
    )
    [secret] = (await api.list_secrets(NS)).items
    assert kubeconfig_from_secret(secret).server == cluster.url
    assert (await api.get_secret(NS, "worker-1"))["metadata"]["name"] == "worker-1"

    event = await api.create_event(
        NS,
        {
            "metadata": {"generateName": "wl-0.", "namespace": NS},
            "involvedObject": {"kind": "Workload", "name": "wl-0", "namespace": NS},
            "reason": "Nominated",
            "message": "worker-1",
            "type": "Normal",
        },
    )
    assert event["reason"] == "Nominated"


async def test_errors_are_translated(cluster: FakeCluster, api: KubeApi) -> None:
    with pytest.raises(ApiError) as missing:
        await api.get(WORKLOADS, "nope", NS)
    assert missing.value.not_found
    assert missing.value.reason == "NotFound"
    cluster.faults.error(429, verbs=("list",), count=1, retry_after=3)
    with pytest.raises(ApiError) as throttled:
        await api.list(WORKLOADS, NS)
    assert (throttled.value.status, throttled.value.retry_after) == (429, 3.0)


@pytest.mark.parametrize(
    ("message", "raised"),
    [
        pytest.param("Connection closed.", ApiUnreachable, id="closed-under-read"),
        pytest.param("something else", RuntimeError, id="any-other-runtime-error"),
    ],
)
async def test_a_body_read_on_a_closed_connection_is_unreachable(
    cluster: FakeCluster,
    api: KubeApi,
    monkeypatch: pytest.MonkeyPatch,
    message: str,
    raised: type[Exception],
) -> None:
    """aiohttp's bare ``RuntimeError("Connection closed.")`` (a body read after the connection
    was closed under it) is a transport failure like a reset connection; any other
    ``RuntimeError`` is a bug and is not disguised as one."""

    async def closed(self: aiohttp.ClientResponse) -> bytes:
        raise RuntimeError(message)

    monkeypatch.setattr(aiohttp.ClientResponse, "read", closed)
    with pytest.raises(raised) as caught:
        await api.list(WORKLOADS, namespace="default")
    if raised is ApiUnreachable:
        assert caught.value.status == 0
        assert "Connection closed." in str(caught.value)


async def test_every_request_is_bounded_by_its_timeout(cluster: FakeCluster, api: KubeApi) -> None:
    """A hung server (latency fault) does not hang the client
    (``docs/fake-apiserver.md#9-client-facts``)."""
    cluster.faults.latency(30.0, verbs=("get",), count=1)
    with anyio.fail_after(5):
        with pytest.raises(ApiUnreachable, match="timed out"):
            await api.request("GET", WORKLOADS.path(NS, "x"), request_timeout=0.3)


async def test_a_cluster_that_is_down_is_unreachable(cluster: FakeCluster, api: KubeApi) -> None:
    await cluster.down()
    try:
        with pytest.raises(ApiUnreachable):
            await api.list(WORKLOADS, NS)
    finally:
        await cluster.up()
    assert (await api.list(WORKLOADS, NS)).items == []


async def test_the_operators_own_kubeconfig_file(cluster: FakeCluster, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cluster.kubeconfig))
    client = await client_from_kubeconfig_file(str(path))
    try:
        assert "gitVersion" in await KubeApi(client).request("GET", "/version")
    finally:
        await close_client(client)


async def test_close_completes_in_a_cancelled_scope(cluster: FakeCluster) -> None:
    """Shielded cleanup (``docs/fake-apiserver.md#9-client-facts``): filterwarnings=error fails the
    test on an unclosed client."""
    api = await KubeApi.from_kubeconfig(cluster.kubeconfig)
    await api.request("GET", "/version")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await api.close()
    assert api.api_client.rest_client.pool_manager.closed
