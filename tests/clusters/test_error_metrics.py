"""The registry's and the mirrors' error kinds of ``multikueue_dispatcher_errors_total``:
``watch`` once per failed list or watch (not for an optional resource a worker does not serve),
``kubeconfig`` once per refused Secret content. Against fake API servers over HTTPS."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from dispatcher.clusters.mirror import Mirror, Watched
from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.resources import (
    LOCAL_QUEUES,
    MULTIKUEUE_CLUSTERS,
    NAMESPACES,
    NODES,
    SECRETS,
)
from dispatcher.k8s.watching import BackoffPolicy, WatchSettings
from dispatcher.telemetry.metrics import Metrics
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS
from dispatcher_sandbox.metrics_text import samples_of

NS = "kueue-system"
FAST = WatchSettings(
    server_timeout=30, inactivity_timeout=None, backoff=BackoffPolicy(0.05, 2, 0.2)
)


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    facade = Metrics(registry=CollectorRegistry())
    yield facade
    facade.shutdown()


def errors(metrics: Metrics) -> dict[str, float]:
    """``multikueue_dispatcher_errors_total`` by kind."""
    found = samples_of(generate_latest(metrics.registry).decode())
    return {
        labels["kind"]: value
        for labels, value in found.get("multikueue_dispatcher_errors_total", [])
    }


@dataclass
class Changes:
    """Wakes waiters on every change a mirror or the registry reports."""

    changed: anyio.Event = field(default_factory=anyio.Event)

    def __call__(self, *_: object) -> None:
        event, self.changed = self.changed, anyio.Event()
        event.set()

    async def wait(self, predicate: Callable[[], bool], within: float = 10) -> None:
        with anyio.fail_after(within):
            while not predicate():
                await self.changed.wait()


async def test_failed_lists_count_as_watch_errors_but_an_unserved_optional_resource_not(
    metrics: Metrics,
) -> None:
    changes = Changes()
    async with (
        FakeCluster("w1", resources=KUEUE_SHORT_FORMS) as worker,
        await KubeApi.from_kubeconfig(worker.kubeconfig, name="w1") as api,
    ):
        failing = worker.faults.error(500, verbs=("list",), path="/localqueues$", count=2)
        forbidden = worker.faults.error(403, verbs=("list",), path="/nodes$")
        mirror = Mirror(
            "w1",
            api,
            {"localqueues": Watched(LOCAL_QUEUES), "nodes": Watched(NODES, optional=True)},
            settings=FAST,
            on_change=changes,
            metrics=metrics,
        )
        async with anyio.create_task_group() as group:
            await group.start(mirror.run)
            # Listed after two failures, and Nodes refused at least twice meanwhile.
            await changes.wait(
                lambda: (
                    mirror.cache("localqueues").synced
                    and "nodes" in mirror.unavailable
                    and forbidden.fired >= 2
                )
            )
            group.cancel_scope.cancel()
    assert failing.fired == 2
    assert mirror.synced
    assert errors(metrics) == {"watch": 2.0}


def _secret(name: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
    }


def _cluster(name: str, secret: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueCluster",
        "metadata": {"name": name},
        "spec": {"clusterSource": {"kubeConfig": {"location": secret, "locationType": "Secret"}}},
    }


@asynccontextmanager
async def registry_on(
    manager: FakeCluster, metrics: Metrics, changes: Changes
) -> AsyncIterator[tuple[KubeApi, ClusterRegistry]]:
    async with await KubeApi.from_kubeconfig(manager.kubeconfig, name="manager") as api:
        await api.create(NAMESPACES, {"metadata": {"name": NS}})
        registry = ClusterRegistry(
            api,
            kueue_namespace=NS,
            watch_settings=FAST,
            reconnect=BackoffPolicy(0.05, 2, 0.2),
            on_change=changes,
            metrics=metrics,
        )
        resync = registry._resync

        def resynced() -> None:  # Secret changes reach no on_change callback: wake on resync
            resync()
            changes()

        registry._resync = resynced  # type: ignore[method-assign]
        async with anyio.create_task_group() as group:
            await group.start(registry.run)
            yield api, registry
            group.cancel_scope.cancel()


async def test_a_refused_kubeconfig_is_counted_once_per_secret_content(metrics: Metrics) -> None:
    changes = Changes()
    async with (
        FakeCluster("manager", resources=KUEUE_SHORT_FORMS) as manager,
        FakeCluster("w1", resources=KUEUE_SHORT_FORMS) as worker,
        registry_on(manager, metrics, changes) as (api, registry),
    ):

        def phase() -> str:
            found = registry.workers.get("w1")
            return found.state.phase if found is not None else ""

        await api.create(SECRETS, _secret("w1-kubeconfig", "{not: [yaml"), namespace=NS)
        # The registry's Secret and MultiKueueCluster watches are separate streams: without
        # this wait the cluster can come first, and its "secret not found" is a refusal too
        # (seen in CI at 3e9ce8f: counted 2).
        await changes.wait(
            lambda: registry.manager.cache("secrets").get("w1-kubeconfig", NS) is not None
        )
        await api.create(MULTIKUEUE_CLUSTERS, _cluster("w1", "w1-kubeconfig"))
        await changes.wait(lambda: phase() == "Unusable")
        assert errors(metrics) == {"kubeconfig": 1.0}
        # Another Secret changes: the registry resyncs, the refused content is not counted again.
        await api.create(SECRETS, _secret("unrelated", "{}"), namespace=NS)
        await changes.wait(
            lambda: registry.manager.cache("secrets").get("unrelated", NS) is not None
        )
        assert errors(metrics) == {"kubeconfig": 1.0}
        # A new refused content (a rotation to another bad kubeconfig) is a new refusal.
        insecure = dict(worker.kubeconfig)
        insecure["users"] = [{"name": "u", "user": {"exec": {"command": "id"}}}]
        await api.replace(
            SECRETS, "w1-kubeconfig", _secret("w1-kubeconfig", yaml.safe_dump(insecure)), NS
        )
        await changes.wait(lambda: "exec" in registry.workers["w1"].state.message)
        assert errors(metrics) == {"kubeconfig": 2.0}
        # A good one connects: nothing more is counted.
        good = _secret("w1-kubeconfig", yaml.safe_dump(worker.kubeconfig))
        await api.replace(SECRETS, "w1-kubeconfig", good, NS)
        await changes.wait(lambda: phase() == "Connected")
        assert errors(metrics) == {"kubeconfig": 2.0}
