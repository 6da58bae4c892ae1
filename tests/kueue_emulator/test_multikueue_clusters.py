"""MultiKueueCluster connections, AdmissionCheck ``Active`` (C8, C10, C11, C62, S8)."""

from __future__ import annotations

import pytest

from dispatcher_sandbox.fake_apiserver.kubeconfig import build_kubeconfig, dump
from dispatcher_sandbox.harness.multikueue import CHECK, MK_CONFIG, eventually, start_env
from dispatcher_sandbox.kueue_emulator.multikueue.multikueuecluster import (
    KubeconfigError,
    validate_kubeconfig,
)


def _kubeconfig(
    *, server: str = "https://127.0.0.1:6443", cluster: dict | None = None, user: dict | None = None
) -> str:
    config = build_kubeconfig("w", server, "token", b"ca")
    config["clusters"][0]["cluster"].update(cluster or {})
    if user is not None:
        config["users"][0]["user"] = user
    return dump(config)


BAD_KUBECONFIGS = [
    pytest.param(
        _kubeconfig(
            user={"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}
        ),
        "exec plugins are not allowed",
        id="exec",
    ),
    pytest.param(
        _kubeconfig(cluster={"insecure-skip-tls-verify": True}),
        "insecure TLS verification is not allowed for cluster w",
        id="insecure",
    ),
    pytest.param(
        _kubeconfig(user={"tokenFile": "/var/run/secrets/token"}),
        "tokenFile is not allowed",
        id="token-file",
    ),
    pytest.param(
        _kubeconfig(cluster={"certificate-authority": "/etc/ca.crt"}),
        "certificate-authority file paths are not allowed, use certificate-authority-data "
        "for cluster w",
        id="ca-file",
    ),
    pytest.param(
        _kubeconfig(user={"username": "admin", "password": "secret"}),
        "basic auth is not allowed",
        id="basic-auth",
    ),
    pytest.param(
        _kubeconfig(user={"auth-provider": {"name": "oidc"}}),
        "auth providers are not allowed",
        id="auth-provider",
    ),
    pytest.param(
        _kubeconfig(server="https://Not_A_Host:6443"),
        "untrusted server endpoint",
        id="bad-host",
    ),
    pytest.param(
        _kubeconfig(cluster={"server": ""}),
        "server URL is required for cluster w",
        id="no-server",
    ),
    # Measured on real Kueue v0.19.2 (the e2e scenario S15's Secret).
    pytest.param(
        "apiVersion: v1\nkind: Config\nclusters: this is not a kubeconfig\n",
        "failed to parse kubeconfig(apiconfig): json: cannot unmarshal string into Go struct "
        "field Config.clusters of type []v1.NamedCluster",
        id="clusters-not-a-list",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_KUBECONFIGS)
def test_c62_validate_kubeconfig_refuses_what_kueue_refuses(text: str, message: str) -> None:
    with pytest.raises(KubeconfigError) as caught:
        validate_kubeconfig(text)
    assert caught.value.reason == "InsecureKubeConfig"
    assert caught.value.message == message


@pytest.mark.parametrize(
    "server", ["https://10.0.0.1:6443", "https://[::1]:6443", "https://worker-1.example.com"]
)
def test_c62_inline_ca_and_token_with_ip_or_dns_host_is_accepted(server: str) -> None:
    validate_kubeconfig(_kubeconfig(server=server))


async def test_c62_bad_kubeconfig_reasons() -> None:
    """Each bad source gives Active=False with Kueue's reason and message, through the API."""
    cases = {
        "exec": (
            "Secret",
            {"kubeconfig": BAD_KUBECONFIGS[0].values[0]},
            "InsecureKubeConfig",
            "load client config failed: exec plugins are not allowed",
        ),
        "insecure": (
            "Secret",
            {"kubeconfig": BAD_KUBECONFIGS[1].values[0]},
            "InsecureKubeConfig",
            "load client config failed: insecure TLS verification is not allowed for cluster w",
        ),
        "token-file": (
            "Secret",
            {"kubeconfig": BAD_KUBECONFIGS[2].values[0]},
            "InsecureKubeConfig",
            "load client config failed: tokenFile is not allowed",
        ),
        "ca-file": (
            "Secret",
            {"kubeconfig": BAD_KUBECONFIGS[3].values[0]},
            "InsecureKubeConfig",
            "load client config failed: certificate-authority file paths are not allowed, use "
            "certificate-authority-data for cluster w",
        ),
        "missing-key": (
            "Secret",
            {"config": "x"},
            "BadKubeConfig",
            'load client config failed: key "kubeconfig" not found in secret "missing-key"',
        ),
        "missing-secret": (
            "Secret",
            None,
            "BadKubeConfig",
            'load client config failed: secrets "missing-secret" not found',
        ),
        "path": ("Path", None, "BadKubeConfig", None),
    }
    async with start_env(workers=("worker1",)) as env:
        for name, (location_type, data, _, _) in cases.items():
            if data is not None:
                await env.put_secret(name, data)
            await env.create_mkc(name, name, location_type)
        for name, (_, _, reason, message) in cases.items():
            condition = await env.wait_condition("multikueueclusters", name, "False", reason)
            if message is not None:
                assert condition["message"] == message
            else:
                assert "locationType Path is not supported" in condition["message"]


async def test_c10_secret_rotation_reconnects_and_deleted_cluster_tears_down() -> None:
    async with start_env(workers=("worker1", "worker2")) as env:
        mk = env.controllers
        first = mk.clusters.remotes["worker1"]
        # Rotate worker1's Secret to a broken kubeconfig, then to worker2's: reconnects each time.
        await env.put_secret("worker1-kubeconfig", {"kubeconfig": BAD_KUBECONFIGS[0].values[0]})
        await env.wait_condition("multikueueclusters", "worker1", "False", "InsecureKubeConfig")
        assert "worker1" not in mk.clusters.remotes
        await env.put_secret(
            "worker1-kubeconfig", {"kubeconfig": dump(env.workers["worker2"].kubeconfig)}
        )
        await env.wait_condition("multikueueclusters", "worker1", "True", "Active")
        second = mk.clusters.remotes["worker1"]
        assert second is not first
        assert second.client.server == env.workers["worker2"].url
        # Deleting the MultiKueueCluster stops its connection.
        await env.objects().delete_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "multikueueclusters", "worker1"
        )

        async def torn_down() -> bool:
            return "worker1" not in mk.clusters.remotes

        await eventually(torn_down, what="the deleted cluster's connection to stop")


async def test_s8_c11_disconnected_worker_active_false_and_back() -> None:
    async with start_env(workers=("worker1", "worker2")) as env:
        active = await env.condition_of("multikueueclusters", "worker1")
        assert active is not None
        assert (active["status"], active["reason"], active["message"]) == (
            "True",
            "Active",
            "Connected",
        )
        await env.workers["worker1"].down()
        lost = await env.wait_condition(
            "multikueueclusters", "worker1", "False", "ClientConnectionFailed"
        )
        assert lost["message"]
        await env.wait_condition("admissionchecks", CHECK, "True", "SomeActiveClusters")
        await env.workers["worker1"].up()
        await env.wait_condition("multikueueclusters", "worker1", "True", "Active")
        await env.wait_condition("admissionchecks", CHECK, "True", "Active")


async def test_c11_reconnect_backoff_doubles_from_the_configured_base() -> None:
    async with start_env(workers=("worker1",)) as env:
        remote = env.controllers.clusters.remotes["worker1"]
        assert remote.workloads._initial_backoff == env.reconnect_base_seconds
        assert remote.workloads._max_backoff == env.reconnect_base_seconds * 2**6


async def test_c8_admission_check_active_reasons() -> None:
    async with start_env(workers=("worker1", "worker2")) as env:
        condition = await env.wait_condition("admissionchecks", CHECK, "True", "Active")
        assert condition["message"] == "The admission check is active"
        await env.workers["worker2"].down()
        condition = await env.wait_condition("admissionchecks", CHECK, "True", "SomeActiveClusters")
        assert condition["message"] == "Inactive clusters: [worker2]"
        await env.set_config_clusters(["worker1", "worker2", "ghost"])
        await env.wait_condition(
            "admissionchecks",
            CHECK,
            "True",
            "SomeActiveClusters",
            message="Missing clusters: [ghost], Inactive clusters: [worker2]",
        )
        await env.set_config_clusters(["worker2", "ghost"])
        condition = await env.wait_condition("admissionchecks", CHECK, "False", "NoUsableClusters")
        assert condition["message"] == "Missing clusters: [ghost], Inactive clusters: [worker2]"
        await env.objects().delete_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "multikueueconfigs", MK_CONFIG
        )
        condition = await env.wait_condition("admissionchecks", CHECK, "False", "BadConfig")
        assert condition["message"] == (
            "Cannot load the AdmissionChecks parameters: "
            f'multikueueconfigs.kueue.x-k8s.io "{MK_CONFIG}" not found'
        )


async def test_c11_valid_kubeconfig_with_a_wrong_token_fails_to_connect() -> None:
    async with start_env(workers=("worker1",)) as env:
        config = env.workers["worker1"].kubeconfig
        config["users"][0]["user"]["token"] = "not-the-token"
        await env.put_secret("wrong-token", {"kubeconfig": dump(config)})
        await env.create_mkc("impostor", "wrong-token")
        condition = await env.wait_condition(
            "multikueueclusters", "impostor", "False", "ClientConnectionFailed"
        )
        assert "401" in condition["message"]
