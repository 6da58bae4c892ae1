"""The worker registry: kubeconfig Secrets → supervised mirrors (issue 5 scope 2 and 3).

Everything runs against fake API servers over HTTPS; the registry sees the manager through a
kubernetes_asyncio client, exactly as in production.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client

from dispatcher.clusters.registry import Candidate, ClusterRegistry
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.watching import BackoffPolicy, WatchSettings
from dispatcher.kueue.hints import CLUSTER_TAINTS, Taint
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.harness.registry import FAST, KUEUE, NS, V, mkc, secret
from dispatcher_sandbox.harness.scenario import multikueue_cluster_status
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS


@dataclass
class Env:
    manager: FakeCluster
    workers: dict[str, FakeCluster]
    api: client.ApiClient
    registry: ClusterRegistry
    changes: list[tuple[str, str]]

    async def wait(self, predicate: Callable[[], bool], within: float = 10) -> None:
        """Wait until ``predicate()`` holds, re-checking on every registry change."""
        with anyio.fail_after(within):
            while not predicate():
                await self.changed.wait()

    changed: anyio.Event = field(default_factory=anyio.Event)

    async def create_mkc(self, body: dict[str, Any]) -> None:
        await client.CustomObjectsApi(self.api).create_cluster_custom_object(
            KUEUE, V, "multikueueclusters", body
        )

    async def put_secret(self, body: dict[str, Any]) -> None:
        core = client.CoreV1Api(self.api)
        try:
            await core.create_namespaced_secret(NS, body)
        except client.ApiException as error:
            if error.status != 409:
                raise
            await core.replace_namespaced_secret(body["metadata"]["name"], NS, body)

    async def set_active(self, name: str, active: bool) -> None:
        await client.CustomObjectsApi(self.api).patch_cluster_custom_object_status(
            KUEUE,
            V,
            "multikueueclusters",
            name,
            {"status": multikueue_cluster_status(active, "" if active else "down")},
            _content_type="application/merge-patch+json",
        )


@asynccontextmanager
async def environment(
    worker_names: tuple[str, ...] = ("w1", "w2"), watch_settings: WatchSettings = FAST
) -> AsyncIterator[Env]:
    from kubernetes_asyncio import config

    manager = FakeCluster("manager", resources=KUEUE_SHORT_FORMS)
    workers = {n: FakeCluster(n, resources=KUEUE_SHORT_FORMS) for n in worker_names}
    for cluster in (manager, *workers.values()):
        await cluster.start()
    try:
        api = await config.new_client_from_config_dict(manager.kubeconfig)
        async with api:
            await client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
            manager_api = await KubeApi.from_kubeconfig(manager.kubeconfig, name="manager")
            env: Env
            changes: list[tuple[str, str]] = []

            def on_change(cluster: str, resource: str, item: object) -> None:
                changes.append((cluster, resource))
                event, env.changed = env.changed, anyio.Event()
                event.set()

            registry = ClusterRegistry(
                manager_api,
                kueue_namespace=NS,
                watch_settings=watch_settings,
                reconnect=BackoffPolicy(0.05, 2, 0.2),
                on_change=on_change,
            )
            env = Env(manager, workers, api, registry, changes)
            async with manager_api, anyio.create_task_group() as tg:
                await tg.start(registry.run)
                yield env
                tg.cancel_scope.cancel()
    finally:
        for cluster in (*workers.values(), manager):
            await cluster.stop()


async def test_workers_from_secrets_connect_and_are_candidates() -> None:
    async with environment() as env:
        for name, worker in env.workers.items():
            await env.put_secret(secret(f"{name}-kubeconfig", worker.kubeconfig))
            await env.create_mkc(mkc(name, f"{name}-kubeconfig"))
        await env.wait(
            lambda: (
                all(w.state.phase == "Connected" for w in env.registry.workers.values())
                and len(env.registry.workers) == 2
            )
        )
        assert env.registry.workers["w1"].mirror is not None
        # Candidates need Kueue's view too (C50): Active=True on the MultiKueueCluster.
        await client.CustomObjectsApi(env.api).create_cluster_custom_object(
            KUEUE,
            V,
            "multikueueconfigs",
            {
                "apiVersion": f"{KUEUE}/{V}",
                "kind": "MultiKueueConfig",
                "metadata": {"name": "cfg"},
                "spec": {"clusters": ["w2", "w1"]},
            },
        )
        await client.CustomObjectsApi(env.api).create_cluster_custom_object(
            KUEUE,
            V,
            "admissionchecks",
            {
                "apiVersion": f"{KUEUE}/{V}",
                "kind": "AdmissionCheck",
                "metadata": {"name": "mk"},
                "spec": {
                    "controllerName": "kueue.x-k8s.io/multikueue",
                    "parameters": {"apiGroup": KUEUE, "kind": "MultiKueueConfig", "name": "cfg"},
                },
            },
        )
        await env.set_active("w1", True)
        await env.set_active("w2", False)

        def ready() -> bool:
            found, _ = env.registry.candidates("mk")
            return [(c.name, c.active) for c in found] == [
                ("w2", False),
                ("w1", True),
            ] and "Active=False" in found[0].reason

        await env.wait(ready)
        assert env.registry.multikueue_checks() == {"mk"}
        found, problem = env.registry.candidates("mk")
        assert problem == ""
        assert found[1].labels == {"team": "ml"}
        assert "Active=False" in found[0].reason
        assert (found[1].taints, found[1].taints_error) == ((), "")

        # Issue 18 item 3: a MultiKueueCluster's taints annotation is parsed into its taints; one
        # that cannot be read names the MultiKueueCluster and the field.
        async def annotate(value: str) -> None:
            await client.CustomObjectsApi(env.api).patch_cluster_custom_object(
                KUEUE,
                V,
                "multikueueclusters",
                "w1",
                {"metadata": {"annotations": {CLUSTER_TAINTS.key: value}}},
                _content_type="application/merge-patch+json",  # type: ignore[call-arg]
            )

        def w1() -> Candidate:
            return env.registry.candidates("mk")[0][1]

        await annotate('[{"key": "dedicated", "effect": "NoRun"}]')
        await env.wait(lambda: w1().taints_error != "")
        assert w1().taints_error == (
            f"MultiKueueCluster w1: metadata.annotations[{CLUSTER_TAINTS.key}][0].effect: "
            "'NoRun': one of NoSchedule, PreferNoSchedule, NoExecute"
        )
        assert w1().taints == ()
        await annotate('[{"key": "dedicated", "effect": "NoSchedule"}]')
        await env.wait(lambda: w1().taints != ())
        assert (w1().taints, w1().taints_error) == ((Taint("dedicated", "", "NoSchedule"),), "")

        # Issue 15 (operation count): every decision reads each candidate's verdict; a fresh
        # worker's is reused until an input of it changes, a stale one's (it has a clock in it)
        # is judged at every read.
        judged = env.registry.judged
        for _ in range(10):
            env.registry.candidates("mk")
        assert env.registry.judged == judged, "nothing changed: both verdicts reused"
        await env.set_active("w2", True)
        await env.wait(lambda: all(c.active for c in env.registry.candidates("mk")[0]))
        assert env.registry.judged == judged + 1, "w2's MultiKueueCluster changed, w1 nothing"
        await env.workers["w1"].down()
        await env.wait(lambda: env.registry.workers["w1"].stale_since is not None)
        judged = env.registry.judged
        env.registry.candidates("mk")
        env.registry.candidates("mk")
        assert env.registry.judged == judged + 2, "w1 is stale: judged at each read"


@pytest.mark.parametrize(
    ("make_secret", "location_type", "reason", "message"),
    [
        pytest.param(
            lambda kc: secret(
                "s",
                kc
                | {
                    "users": [
                        {
                            "name": kc["users"][0]["name"],
                            "user": {"exec": {"command": "touch", "args": ["/tmp/pwned"]}},
                        }
                    ]
                },
            ),
            "Secret",
            "InsecureKubeConfig",
            "exec plugins are not allowed",
            id="exec-plugin",
        ),
        pytest.param(
            lambda kc: secret("s", "{not: [yaml"),
            "Secret",
            "BadKubeConfig",
            "not valid YAML",
            id="not-yaml",
        ),
        pytest.param(
            lambda kc: {"metadata": {"name": "s", "namespace": NS}, "data": {"other": "eA=="}},
            "Secret",
            "BadKubeConfig",
            'key "kubeconfig" not found',
            id="missing-key",
        ),
        pytest.param(
            None, "Secret", "BadKubeConfig", 'secret "kueue-system/s" not found', id="no-secret"
        ),
        pytest.param(
            lambda kc: secret("s", kc), "Path", "BadKubeConfig", "Path is not supported", id="path"
        ),
    ],
)
async def test_bad_kubeconfig_marks_only_that_worker_unusable(
    make_secret: Callable[[dict[str, Any]], dict[str, Any]] | None,
    location_type: str,
    reason: str,
    message: str,
) -> None:
    async with environment() as env:
        good = env.workers["w1"]
        await env.put_secret(secret("good", good.kubeconfig))
        await env.create_mkc(mkc("w1", "good"))
        if make_secret is not None:
            await env.put_secret(make_secret(env.workers["w2"].kubeconfig))
        await env.create_mkc(mkc("w2", "s", location_type))
        await env.wait(
            lambda: (
                env.registry.workers.get("w1") is not None
                and env.registry.workers["w1"].state.phase == "Connected"
                and env.registry.workers.get("w2") is not None
                and env.registry.workers["w2"].state.phase == "Unusable"
            )
        )
        state = env.registry.workers["w2"].state
        assert state.reason == reason
        assert message in state.message
        # Never a token in what we report.
        token = env.workers["w2"].token
        assert token not in state.message


async def test_secret_rotation_reconnects_and_deletion_stops() -> None:
    async with environment(("w1",)) as env:
        worker = env.workers["w1"]
        await env.put_secret(secret("s", "{not: [yaml"))
        await env.create_mkc(mkc("w1", "s"))
        await env.wait(
            lambda: (
                env.registry.workers.get("w1") is not None
                and env.registry.workers["w1"].state.phase == "Unusable"
            )
        )
        await env.put_secret(secret("s", worker.kubeconfig))
        await env.wait(lambda: env.registry.workers["w1"].state.phase == "Connected")
        await client.CustomObjectsApi(env.api).delete_cluster_custom_object(
            KUEUE, V, "multikueueclusters", "w1"
        )
        await env.wait(lambda: "w1" not in env.registry.workers)


async def connect_w1(env: Env) -> FakeCluster:
    """Add worker w1 (its Secret and MultiKueueCluster) and wait until it is Connected."""
    worker = env.workers["w1"]
    await env.put_secret(secret("s", worker.kubeconfig))
    await env.create_mkc(mkc("w1", "s"))
    await env.wait(
        lambda: (
            env.registry.workers.get("w1") is not None
            and env.registry.workers["w1"].state.phase == "Connected"
        )
    )
    return worker


async def test_worker_down_then_up() -> None:
    async with environment(("w1",)) as env:
        worker = await connect_w1(env)
        await worker.down()
        await env.wait(lambda: env.registry.workers["w1"].state.phase == "Disconnected")
        await worker.up()
        await env.wait(lambda: env.registry.workers["w1"].state.phase == "Connected")


SLOW = WatchSettings(
    server_timeout=30, inactivity_timeout=None, backoff=BackoffPolicy(3600.0, 2, 3600.0)
)
"""Watch backoff far beyond every deadline here: a stream that reconnects inside one was told to
retry (dispatcher.k8s.watching item 5)."""


@pytest.mark.parametrize(
    ("kueue_active", "retries"),
    [
        pytest.param(True, 1, id="kueue-reports-active-the-streams-retry-now"),
        pytest.param(False, 0, id="kueue-reports-inactive-nothing-retries"),
    ],
)
async def test_kueue_reporting_a_worker_active_ends_our_backoff(
    kueue_active: bool, retries: int
) -> None:
    """Our mirror of w1 lost every stream and waits an hour to retry; the worker is back. Kueue
    reporting it ``Active`` makes the streams try at once (in the CI run at b7c89ad a
    reconnected real worker was nominated 11 s after Kueue reported it Active);
    ``Active=False`` changes nothing."""
    async with environment(("w1",), watch_settings=SLOW) as env:
        worker = await connect_w1(env)
        mirror = env.registry.workers["w1"].mirror
        assert mirror is not None
        await worker.down()
        await env.wait(lambda: env.registry.workers["w1"].state.phase == "Disconnected")
        await worker.up()
        seen = len(env.changes)
        await env.set_active("w1", kueue_active)
        await env.wait(lambda: ("", "multikueueclusters") in env.changes[seen:])
        assert mirror.retry.fired == retries
        if kueue_active:
            await env.wait(lambda: env.registry.workers["w1"].state.phase == "Connected")
        else:
            assert env.registry.workers["w1"].state.phase == "Disconnected"
