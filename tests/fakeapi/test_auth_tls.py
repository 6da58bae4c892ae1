"""HTTPS, certificates, kubeconfig and bearer-token authentication of the fake API server.

docs/fake-apiserver.md F26 (certificates), F27 (kubeconfig), F28 (authentication), F29 (plain HTTP),
and contract C62 (the kubeconfig form Kueue accepts for workers). Clients are
``kubernetes_asyncio`` built from the generated kubeconfig; raw requests use aiohttp with the
cluster's CA, so that what is checked is the wire behaviour.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import re
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException

from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.fake_apiserver.kubeconfig import dump
from dispatcher_sandbox.fake_apiserver.tls import new_ca

HEALTH_PATHS = ("/version", "/healthz", "/livez", "/readyz")


def _ca_context(cluster: FakeCluster) -> ssl.SSLContext:
    assert cluster.ca_pem is not None
    return ssl.create_default_context(cadata=cluster.ca_pem.decode("ascii"))


@pytest.fixture
async def session(cluster: FakeCluster) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session that trusts only the cluster's CA (and sends no token by itself)."""
    connector = aiohttp.TCPConnector(ssl=_ca_context(cluster))
    async with aiohttp.ClientSession(connector=connector) as http:
        yield http


def _kubeconfig_with(cluster: FakeCluster, **changes: Any) -> dict[str, Any]:
    """A copy of the cluster's kubeconfig with ``server``/``ca``/``token`` replaced."""
    kubeconfig = json.loads(json.dumps(cluster.kubeconfig))
    entry = kubeconfig["clusters"][0]["cluster"]
    if "server" in changes:
        entry["server"] = changes["server"]
    if "ca_pem" in changes:
        entry["certificate-authority-data"] = base64.b64encode(changes["ca_pem"]).decode()
    if "token" in changes:
        kubeconfig["users"][0]["user"]["token"] = changes["token"]
    return kubeconfig


async def _namespaces(kubeconfig: dict[str, Any]) -> list[str]:
    api_client = await config.new_client_from_config_dict(kubeconfig)
    async with api_client:
        result = await client.CoreV1Api(api_client).list_namespace()
    return sorted(ns.metadata.name for ns in result.items)


# --- F26: certificates -------------------------------------------------------------------------


async def test_f26_kubernetes_asyncio_verifies_tls_with_the_inline_ca(
    cluster: FakeCluster,
) -> None:
    """F26/F27: the generated kubeconfig works over verified HTTPS."""
    assert cluster.url.startswith("https://127.0.0.1:")
    assert await _namespaces(cluster.kubeconfig) == ["default", "kube-public", "kube-system"]


async def test_f26_a_client_trusting_another_ca_fails_with_an_ssl_error(
    cluster: FakeCluster,
) -> None:
    """F26: TLS is really verified: a kubeconfig with a foreign CA cannot connect."""
    foreign = _kubeconfig_with(cluster, ca_pem=new_ca("someone-else").cert_pem)
    with pytest.raises(aiohttp.ClientConnectorCertificateError) as caught:
        await _namespaces(foreign)
    assert isinstance(caught.value, aiohttp.ClientSSLError)
    assert isinstance(caught.value.certificate_error, ssl.SSLCertVerificationError)


async def test_f26_a_client_without_any_ca_fails_against_system_roots(
    cluster: FakeCluster,
) -> None:
    """F26: the serving certificate is not trusted by default (it chains to the sandbox CA)."""
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context())
    async with aiohttp.ClientSession(connector=connector) as http:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await http.get(f"{cluster.url}/version")


async def _peer_certificate(port: int, ca: ssl.SSLContext, server_hostname: str) -> dict[str, Any]:
    """Handshake with hostname verification; return the verified peer certificate."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ca, server_hostname=server_hostname
    )
    try:
        peer = writer.get_extra_info("peercert")
    finally:
        writer.close()
        await writer.wait_closed()
    assert isinstance(peer, dict)
    del reader
    return peer


def _sans(peer: dict[str, Any]) -> set[tuple[str, str]]:
    return {(kind, value.strip()) for kind, value in peer["subjectAltName"]}


@pytest.mark.parametrize("server_hostname", ["127.0.0.1", "localhost"], ids=["ip", "localhost"])
async def test_f26_serving_certificate_has_sans_for_127_0_0_1_and_localhost(
    cluster: FakeCluster, server_hostname: str
) -> None:
    """F26: hostname verification passes for both names clients use on loopback."""
    peer = await _peer_certificate(cluster.port, _ca_context(cluster), server_hostname)
    sans = _sans(peer)
    assert ("IP Address", "127.0.0.1") in sans
    assert ("DNS", "localhost") in sans


async def test_f26_hostname_verification_fails_for_a_name_not_in_the_sans(
    cluster: FakeCluster,
) -> None:
    """F26: the certificate names only the configured hosts."""
    with pytest.raises(ssl.SSLCertVerificationError, match=r"Hostname mismatch|doesn't match"):
        await _peer_certificate(cluster.port, _ca_context(cluster), "worker-1.example")


async def test_f26_extra_host_names_become_sans() -> None:
    """F26: configured host names (e.g. a kind-like ``<cluster>-control-plane``) are SANs too."""
    async with FakeCluster("w1", extra_hosts=["w1-control-plane", "10.1.2.3"]) as fake:
        peer = await _peer_certificate(fake.port, _ca_context(fake), "w1-control-plane")
    sans = _sans(peer)
    assert ("DNS", "w1-control-plane") in sans
    assert ("IP Address", "10.1.2.3") in sans
    assert ("DNS", "localhost") in sans


async def test_f26_kubeconfig_with_localhost_server_verifies(cluster: FakeCluster) -> None:
    """F26: a kubeconfig pointing at ``https://localhost:<port>`` verifies against the SANs."""
    kubeconfig = _kubeconfig_with(cluster, server=f"https://localhost:{cluster.port}")
    assert "default" in await _namespaces(kubeconfig)


# --- F27 / C62: kubeconfig shape ---------------------------------------------------------------

# Keys Kueue's validateKubeconfig/validateRestConfig rejects or that reference files (C62).
_FORBIDDEN_CLUSTER_KEYS = {"certificate-authority", "insecure-skip-tls-verify", "proxy-url"}
_FORBIDDEN_USER_KEYS = {
    "tokenFile",
    "token-file",
    "exec",
    "auth-provider",
    "username",
    "password",
    "client-certificate",
    "client-key",
}
_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _is_ip_or_dns_1123(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_DNS_1123.match(host))
    return True


async def test_f27_c62_kubeconfig_has_inline_ca_token_https_and_nothing_else(
    cluster: FakeCluster,
) -> None:
    """F27, C62: one cluster/user/context; inline CA, bearer token, https; no file refs,
    no insecure-skip-tls-verify, no exec/auth-provider/basic auth."""
    kubeconfig = cluster.kubeconfig
    assert kubeconfig["apiVersion"] == "v1"
    assert kubeconfig["kind"] == "Config"
    [cluster_entry] = kubeconfig["clusters"]
    [user_entry] = kubeconfig["users"]
    [context_entry] = kubeconfig["contexts"]
    assert kubeconfig["current-context"] == context_entry["name"]
    assert context_entry["context"]["cluster"] == cluster_entry["name"]
    assert context_entry["context"]["user"] == user_entry["name"]

    server = cluster_entry["cluster"]["server"]
    assert server == f"https://127.0.0.1:{cluster.port}"
    host = server.removeprefix("https://").rsplit(":", 1)[0]
    assert _is_ip_or_dns_1123(host)
    assert set(cluster_entry["cluster"]) == {"server", "certificate-authority-data"}
    assert not _FORBIDDEN_CLUSTER_KEYS & set(cluster_entry["cluster"])

    assert set(user_entry["user"]) == {"token"}
    assert not _FORBIDDEN_USER_KEYS & set(user_entry["user"])
    assert user_entry["user"]["token"] == cluster.token
    assert len(cluster.token) >= 32

    # The CA data is base64 PEM of a CA certificate, the one that signed the serving cert.
    ca_pem = base64.b64decode(cluster_entry["cluster"]["certificate-authority-data"])
    assert ca_pem == cluster.ca_pem
    ca_cert = x509.load_pem_x509_certificate(ca_pem)
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True


async def test_f27_tokens_are_random_per_cluster(cluster: FakeCluster) -> None:
    """F27: each cluster has its own token; one cluster's token is refused by another (F28)."""
    async with FakeCluster("other") as other:
        assert other.token != cluster.token
        crossed = _kubeconfig_with(other, token=cluster.token)
        with pytest.raises(ApiException) as caught:
            await _namespaces(crossed)
    assert caught.value.status == 401


async def test_f27_kubeconfig_survives_a_secret_round_trip(cluster: FakeCluster) -> None:
    """F27: the kubeconfig can be stored as-is in a Secret (key ``kubeconfig``) on a fake manager
    cluster and used from there, as Kueue's MultiKueueCluster does."""
    async with FakeCluster("manager") as manager:
        api_client = await config.new_client_from_config_dict(manager.kubeconfig)
        async with api_client:
            core = client.CoreV1Api(api_client)
            await core.create_namespace({"metadata": {"name": "kueue-system"}})
            await core.create_namespaced_secret(
                "kueue-system",
                {
                    "metadata": {"name": "worker1-secret"},
                    "stringData": {"kubeconfig": dump(cluster.kubeconfig)},
                },
            )
            secret = await core.read_namespaced_secret("worker1-secret", "kueue-system")
    stored = yaml.safe_load(base64.b64decode(secret.data["kubeconfig"]))
    assert stored == cluster.kubeconfig
    assert "default" in await _namespaces(stored)


# --- F28: authentication -----------------------------------------------------------------------

_BAD_AUTH = {
    "no-header": {},
    "wrong-token": {"Authorization": "Bearer not-the-token"},
    "empty-bearer": {"Authorization": "Bearer "},
    "basic-auth": {"Authorization": "Basic YWRtaW46YWRtaW4="},
    # Non-ASCII text: must be a 401, not a crash in the token comparison.
    "non-ascii-token": {"Authorization": "Bearer t\u00f6ken"},
}


@pytest.mark.parametrize("headers", list(_BAD_AUTH.values()), ids=list(_BAD_AUTH))
@pytest.mark.parametrize(
    "path", ["/api/v1/namespaces", "/apis", "/version", "/healthz", "/no/such/path"]
)
async def test_f28_requests_without_the_token_get_401_status(
    cluster: FakeCluster,
    session: aiohttp.ClientSession,
    headers: dict[str, str],
    path: str,
) -> None:
    """F28: 401 with a ``Status`` body (reason Unauthorized) for every path, health included
    (anonymous health is off by default)."""
    async with session.get(f"{cluster.url}{path}", headers=headers) as response:
        assert response.status == 401
        assert response.content_type == "application/json"
        body = await response.json()
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["reason"] == "Unauthorized"
    assert body["code"] == 401


async def _raw_status(cluster: FakeCluster, authorization: bytes) -> bytes:
    """The status line of a hand-written HTTPS request (arbitrary header bytes)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", cluster.port, ssl=_ca_context(cluster), server_hostname="127.0.0.1"
    )
    try:
        writer.write(
            b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Authorization: " + authorization + b"\r\n\r\n"
        )
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    return status_line


@pytest.mark.parametrize(
    "authorization",
    [b"Bearer t\xf6ken", b"Bearer \xff\xfe", b"Bearer t\xc3\xb6ken"],
    ids=["latin-1", "invalid-utf-8", "utf-8"],
)
async def test_f28_non_ascii_token_bytes_get_401(
    cluster: FakeCluster, authorization: bytes
) -> None:
    """F28: whatever bytes the header carries, a wrong token is a 401, never a 500."""
    assert (await _raw_status(cluster, authorization)).startswith(b"HTTP/1.1 401 ")
    token = cluster.token.encode()
    assert (await _raw_status(cluster, b"Bearer " + token)).startswith(b"HTTP/1.1 200 ")


async def test_f28_writes_without_the_token_change_nothing(
    cluster: FakeCluster, session: aiohttp.ClientSession
) -> None:
    """F28: an unauthenticated POST is refused before it reaches the store."""
    before = cluster.store.resource_version
    async with session.post(
        f"{cluster.url}/api/v1/namespaces", json={"metadata": {"name": "sneaky"}}
    ) as response:
        assert response.status == 401
    assert cluster.store.resource_version == before
    assert cluster.object("", "namespaces", "sneaky") is None


async def test_f28_the_right_token_is_accepted_on_raw_requests(
    cluster: FakeCluster, session: aiohttp.ClientSession
) -> None:
    """F28: ``Authorization: Bearer <token>`` (scheme case-insensitive) is all it takes."""
    for scheme in ("Bearer", "bearer"):
        headers = {"Authorization": f"{scheme} {cluster.token}"}
        async with session.get(f"{cluster.url}/version", headers=headers) as response:
            assert response.status == 200
            assert (await response.json())["major"] == "1"


async def test_f28_kubernetes_asyncio_with_a_wrong_token_gets_api_exception_401(
    cluster: FakeCluster,
) -> None:
    """F28: what the controller sees with a revoked token."""
    with pytest.raises(ApiException) as caught:
        await _namespaces(_kubeconfig_with(cluster, token="revoked"))
    assert caught.value.status == 401
    body = json.loads(caught.value.body)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Unauthorized", 401)


async def test_f28_anonymous_health_opens_only_version_and_health_endpoints() -> None:
    """F28: with ``anonymous_health=True`` /version, /healthz, /livez, /readyz answer without a
    token; everything else still needs one."""
    async with FakeCluster("anon", anonymous_health=True) as fake:
        connector = aiohttp.TCPConnector(ssl=_ca_context(fake))
        async with aiohttp.ClientSession(connector=connector) as http:
            for path in HEALTH_PATHS:
                async with http.get(f"{fake.url}{path}") as response:
                    assert response.status == 200, path
            async with http.get(f"{fake.url}/version") as response:
                assert (await response.json())["major"] == "1"
            async with http.get(f"{fake.url}/healthz") as response:
                assert await response.text() == "ok"
            for path in ("/api", "/apis", "/api/v1/namespaces", "/api/v1/namespaces/default"):
                async with http.get(f"{fake.url}{path}") as response:
                    assert response.status == 401, path


# --- F29: plain HTTP ---------------------------------------------------------------------------


async def test_f29_plain_http_is_an_explicit_option_and_still_needs_the_token() -> None:
    """F29: ``tls=False`` serves http, its kubeconfig has no CA data, and the token is still
    required."""
    async with FakeCluster("plain", tls=False) as fake:
        assert fake.url == f"http://127.0.0.1:{fake.port}"
        assert fake.ca_pem is None
        cluster_entry = fake.kubeconfig["clusters"][0]["cluster"]
        assert cluster_entry == {"server": fake.url}
        assert "default" in await _namespaces(fake.kubeconfig)
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{fake.url}/api/v1/namespaces") as response,
        ):
            assert response.status == 401
            assert (await response.json())["reason"] == "Unauthorized"


async def test_f29_default_is_https(cluster: FakeCluster) -> None:
    """F29: HTTPS is the default; a plain-HTTP request to the TLS port does not get an answer."""
    assert cluster.tls is True
    assert cluster.scheme == "https"
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"http://127.0.0.1:{cluster.port}/version"):
                pass
