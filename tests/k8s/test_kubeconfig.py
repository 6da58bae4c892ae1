"""Kubeconfig validation as Kueue does it (contract C62), and kubeconfigs in Secrets.

Each refused kubeconfig gets a Kueue condition reason and a message naming the field; no message
contains the token.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
import yaml

from dispatcher.k8s.client import KubeApi, client_from_kubeconfig, close_client
from dispatcher.k8s.kubeconfig import (
    KubeconfigError,
    kubeconfig_from_secret,
    validate_kubeconfig,
)
from dispatcher_sandbox.fake_apiserver import FakeCluster, build_kubeconfig, merge_kubeconfigs

TOKEN = "s3cr3t-token-value"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()

Obj = dict[str, Any]


def good() -> Obj:
    """A kubeconfig of the only accepted form: inline CA, bearer token, https, DNS host."""
    return build_kubeconfig("worker-1", "https://worker-1.example.com:6443", TOKEN, b"x")


def secret_of(config: Obj | str | None, key: str = "kubeconfig") -> Obj:
    data: Obj = {}
    if config is not None:
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        data[key] = base64.b64encode(text.encode()).decode()
    return {"metadata": {"name": "worker-1", "namespace": "kueue-system"}, "data": data}


def _with(path: str, value: Any) -> Obj:
    config = good()
    section, field = path.split(".", 1)
    body = "cluster" if section == "clusters" else "user"
    config[section][0][body][field] = value
    return config


def _several_contexts() -> Obj:
    other = build_kubeconfig("worker-2", "https://10.0.0.2:6443", TOKEN, b"x")
    merged = merge_kubeconfigs([good(), other])
    del merged["current-context"]
    return merged


def _without_ca() -> Obj:
    config = good()
    del config["clusters"][0]["cluster"]["certificate-authority-data"]
    return config


CASES = [
    pytest.param(
        secret_of(_with("users.exec", {"command": "touch", "args": ["/tmp/pwned"]})),
        "InsecureKubeConfig",
        "users[0].user.exec: exec plugins are not allowed",
        id="exec",
    ),
    pytest.param(
        secret_of(_with("users.auth-provider", {"name": "gcp"})),
        "InsecureKubeConfig",
        "users[0].user.auth-provider: auth providers are not allowed",
        id="auth-provider",
    ),
    pytest.param(
        secret_of(_with("users.tokenFile", "/var/run/token")),
        "InsecureKubeConfig",
        "users[0].user.tokenFile: token files are not allowed",
        id="token-file",
    ),
    pytest.param(
        secret_of(_with("clusters.insecure-skip-tls-verify", True)),
        "InsecureKubeConfig",
        "clusters[0].cluster.insecure-skip-tls-verify: insecure TLS verification is not allowed",
        id="insecure",
    ),
    pytest.param(
        secret_of(_with("clusters.certificate-authority", "/etc/ca.crt")),
        "InsecureKubeConfig",
        "clusters[0].cluster.certificate-authority: certificate authority files are not "
        "allowed, use certificate-authority-data",
        id="ca-file",
    ),
    pytest.param(
        secret_of(_without_ca()),
        "InsecureKubeConfig",
        "clusters[0].cluster.certificate-authority-data: inline CA data is required",
        id="no-ca-data",
    ),
    pytest.param(
        secret_of(_with("users.username", "admin")),
        "InsecureKubeConfig",
        "users[0].user.username: basic auth is not allowed",
        id="basic-auth",
    ),
    pytest.param(
        secret_of(_with("clusters.server", "http://worker-1.example.com:6443")),
        "InsecureKubeConfig",
        "clusters[0].cluster.server: the server must use https",
        id="http-server",
    ),
    pytest.param(
        secret_of(_with("clusters.server", "https://Bad_Host!:6443")),
        "InsecureKubeConfig",
        "clusters[0].cluster.server: untrusted server endpoint (the host must be an IP address "
        "or a DNS-1123 name)",
        id="bad-host",
    ),
    pytest.param(
        secret_of(good(), key="config"),
        "BadKubeConfig",
        'data.kubeconfig: key "kubeconfig" not found in secret "kueue-system/worker-1"',
        id="missing-key",
    ),
    pytest.param(
        secret_of(f"token: {TOKEN}\n  clusters: [\n"),
        "BadKubeConfig",
        "data.kubeconfig: not valid YAML (line 2, column 11)",
        id="not-yaml",
    ),
    pytest.param(
        secret_of("just a string"),
        "BadKubeConfig",
        "data.kubeconfig: not a kubeconfig (expected a YAML mapping)",
        id="not-a-mapping",
    ),
    pytest.param(
        secret_of(_several_contexts()),
        "BadKubeConfig",
        "current-context: not set, and the kubeconfig has 2 contexts",
        id="several-contexts-no-current",
    ),
    pytest.param(secret_of(good()), None, None, id="ok"),
]


@pytest.mark.parametrize(("secret", "reason", "message"), CASES)
def test_kubeconfig_from_secret(secret: Obj, reason: str | None, message: str | None) -> None:
    if reason is None:
        valid = kubeconfig_from_secret(secret)
        assert valid.context == "worker-1"
        assert valid.server == "https://worker-1.example.com:6443"
        return
    with pytest.raises(KubeconfigError) as caught:
        kubeconfig_from_secret(secret)
    assert (caught.value.reason, caught.value.message) == (reason, message)
    assert TOKEN not in str(caught.value)


def test_a_single_context_needs_no_current_context() -> None:
    config = good()
    del config["current-context"]
    assert validate_kubeconfig(config).context == "worker-1"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda c: c.update({"current-context": "nope"}),
            'current-context: context "nope" not found',
        ),
        (
            lambda c: c["contexts"][0]["context"].update({"cluster": "gone"}),
            'contexts[0].context.cluster: cluster "gone" not found',
        ),
        (
            lambda c: c["contexts"][0]["context"].update({"user": "gone"}),
            'contexts[0].context.user: user "gone" not found',
        ),
        (
            lambda c: c.update({"contexts": [], "current-context": ""}),
            "contexts: no context is defined",
        ),
    ],
    ids=["unknown-current", "missing-cluster", "missing-user", "no-context"],
)
def test_the_current_context_must_resolve(edit: Any, message: str) -> None:
    config = good()
    edit(config)
    with pytest.raises(KubeconfigError) as caught:
        validate_kubeconfig(config)
    assert (caught.value.reason, caught.value.message) == ("BadKubeConfig", message)


@pytest.mark.parametrize("plugin", ["exec", "auth-provider"])
def test_an_empty_plugin_entry_is_refused_too(plugin: str) -> None:
    with pytest.raises(KubeconfigError, match=f"users\\[0\\].user.{plugin}: "):
        validate_kubeconfig(_with(f"users.{plugin}", {}))


def test_ip_hosts_are_accepted() -> None:
    for server in ("https://127.0.0.1:6443", "https://[::1]:6443", "https://kind-control-plane"):
        validate_kubeconfig(_with("clusters.server", server))


async def test_exec_plugins_never_run(tmp_path: Any) -> None:
    """The reason the validation exists: kubernetes_asyncio would run this command."""
    marker = tmp_path / "pwned"
    config = _with(
        "users.exec",
        {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "touch",
            "args": [str(marker)],
        },
    )
    with pytest.raises(KubeconfigError):
        await client_from_kubeconfig(config)
    assert not marker.exists()


async def test_a_bad_ca_is_a_kubeconfig_error() -> None:
    """The SSL context is built eagerly; a CA that is no certificate fails at construction."""
    config = copy.deepcopy(good())
    config["clusters"][0]["cluster"]["certificate-authority-data"] = CA
    with pytest.raises(KubeconfigError) as caught:
        await client_from_kubeconfig(config)
    assert caught.value.reason == "BadKubeConfig"
    assert TOKEN not in str(caught.value)


async def test_a_valid_kubeconfig_reaches_the_fake_cluster(cluster: FakeCluster) -> None:
    api = await client_from_kubeconfig(cluster.kubeconfig)
    try:
        kube = KubeApi(api)
        answer = await kube.request("GET", "/version")
        assert "gitVersion" in answer
    finally:
        await close_client(api)
    assert any(e.path == "/version" and e.status == 200 for e in cluster.journal.entries())
