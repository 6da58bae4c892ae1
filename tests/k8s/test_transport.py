"""The clients' HTTP session: the proxy environment read once per client, never per request.

kubernetes_asyncio's session has ``trust_env=True``: aiohttp then reads ``.netrc`` and the proxy
variables in the thread pool on every request. ``settle_transport`` resolves the proxy once,
as client-go's ``ProxyFromEnvironment`` does, and the requests stay on the event loop.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import config as k8s_config

from dispatcher.k8s.client import KubeApi, client_from_kubeconfig, close_client
from dispatcher.k8s.resources import WORKLOADS
from dispatcher.k8s.transport import environment_proxy
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.harness.scenario import counting_executor_calls
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def clean_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of the machine running the tests leaks into them."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@dataclass(frozen=True)
class ProxyCase:
    id: str
    env: dict[str, str]
    server: str
    expected: tuple[str, dict[str, str]] | None


PROXY_CASES = [
    ProxyCase("no-variables", {}, "https://10.1.2.3:6443", None),
    ProxyCase(
        "https-proxy",
        {"HTTPS_PROXY": "http://proxy.corp:3128"},
        "https://10.1.2.3:6443",
        ("http://proxy.corp:3128", {}),
    ),
    ProxyCase(
        "lowercase-variable-counts-too",
        {"https_proxy": "http://proxy.corp:3128"},
        "https://worker.example:6443",
        ("http://proxy.corp:3128", {}),
    ),
    ProxyCase(
        "credentials-become-a-header",
        {"HTTPS_PROXY": "http://user:secret@proxy.corp:3128"},
        "https://10.1.2.3:6443",
        ("http://proxy.corp:3128", {"Proxy-Authorization": "Basic dXNlcjpzZWNyZXQ="}),
    ),
    ProxyCase(
        "only-http-proxy-for-an-https-server",
        {"HTTP_PROXY": "http://proxy.corp:3128"},
        "https://10.1.2.3:6443",
        None,
    ),
    ProxyCase(
        "no-proxy-names-the-host",
        {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "worker.example,other"},
        "https://worker.example:6443",
        None,
    ),
    ProxyCase(
        "no-proxy-names-a-domain",
        {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": ".example"},
        "https://worker.example:6443",
        None,
    ),
    ProxyCase(
        "loopback-v4-is-never-proxied",
        {"HTTPS_PROXY": "http://proxy.corp:3128"},
        "https://127.0.0.1:6443",
        None,
    ),
    ProxyCase(
        "loopback-v6-is-never-proxied",
        {"HTTPS_PROXY": "http://proxy.corp:3128"},
        "https://[::1]:6443",
        None,
    ),
    ProxyCase(
        "localhost-is-never-proxied",
        {"HTTPS_PROXY": "http://proxy.corp:3128"},
        "https://localhost:6443",
        None,
    ),
]


@pytest.mark.parametrize("case", PROXY_CASES, ids=[c.id for c in PROXY_CASES])
def test_environment_proxy(case: ProxyCase, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    assert environment_proxy(case.server) == case.expected


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(
        "transport", resources=KUEUE_SHORT_FORMS, extra_hosts=("apiserver.test",)
    ) as fake:
        yield fake


REQUESTS = 50


async def _requests_in_thread_pool(api: KubeApi) -> int:
    await api.list(WORKLOADS, "default")  # connection set up (TLS handshake) outside the count
    with counting_executor_calls() as calls:
        for _ in range(REQUESTS):
            await api.list(WORKLOADS, "default")
        return calls()


async def test_a_request_makes_no_thread_pool_hop(cluster: FakeCluster) -> None:
    """The operation count the fix is about: 0 executor calls for 50 requests; the same client
    as kubernetes_asyncio builds it makes two per request (the ``.netrc`` lookup and the proxy
    variables), which shows the count would catch a regression."""
    ours = await client_from_kubeconfig(cluster.kubeconfig)
    assert ours.rest_client.pool_manager.trust_env is False
    async with KubeApi(ours) as api:
        assert await _requests_in_thread_pool(api) == 0

    theirs = await k8s_config.new_client_from_config_dict(cluster.kubeconfig)
    assert theirs.rest_client.pool_manager.trust_env is True
    async with KubeApi(theirs) as api:
        assert await _requests_in_thread_pool(api) == 2 * REQUESTS


async def test_the_connection_pool_is_kept(cluster: FakeCluster) -> None:
    """The new session reuses kubernetes_asyncio's connector: its TLS context and pool size."""
    api = await client_from_kubeconfig(cluster.kubeconfig)
    try:
        connector = api.rest_client.pool_manager.connector
        assert connector is not None
        assert not connector.closed
        assert connector.limit == api.configuration.connection_pool_maxsize
        async with KubeApi(api) as kube:
            assert "gitVersion" in await kube.request("GET", "/version")
    finally:
        await close_client(api)
    assert connector.closed


@asynccontextmanager
async def connect_proxy(target_port: int) -> AsyncIterator[tuple[str, list[str]]]:
    """A minimal HTTP CONNECT proxy on loopback that tunnels every request to ``target_port``
    on 127.0.0.1; yields its URL and the ``CONNECT`` targets it was asked for."""
    asked: list[str] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        assert method == "CONNECT"
        asked.append(target)
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target_port)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", asked
    finally:
        server.close()


def _named_server(cluster: FakeCluster) -> dict[str, Any]:
    """``cluster``'s kubeconfig with the server named ``apiserver.test`` (a name no resolver
    knows: only a proxy can reach it)."""
    config = copy.deepcopy(cluster.kubeconfig)
    config["clusters"][0]["cluster"]["server"] = f"https://apiserver.test:{cluster.port}"
    return config


async def test_https_proxy_is_honoured(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTPS_PROXY`` read when the client is built carries every request of that client."""
    port = cluster.port
    async with connect_proxy(port) as (url, asked):
        monkeypatch.setenv("HTTPS_PROXY", url)
        api = await client_from_kubeconfig(_named_server(cluster))
        monkeypatch.delenv("HTTPS_PROXY")  # read once: later changes do not matter
        async with KubeApi(api) as kube:
            assert "gitVersion" in await kube.request("GET", "/version")
            await kube.list(WORKLOADS, "default")
    assert asked == [f"apiserver.test:{port}"]  # one tunnel, kept alive for both requests


async def test_the_kubeconfig_proxy_url_wins(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = cluster.port
    async with connect_proxy(port) as (url, asked):
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # nothing listens there
        config = _named_server(cluster)
        config["clusters"][0]["cluster"]["proxy-url"] = url
        async with KubeApi(await client_from_kubeconfig(config)) as kube:
            assert "gitVersion" in await kube.request("GET", "/version")
    assert asked == [f"apiserver.test:{port}"]


async def test_no_proxy_for_the_host_goes_direct(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loopback server is reached directly although ``HTTPS_PROXY`` names a dead proxy."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    async with KubeApi(await client_from_kubeconfig(cluster.kubeconfig)) as kube:
        assert "gitVersion" in await kube.request("GET", "/version")
