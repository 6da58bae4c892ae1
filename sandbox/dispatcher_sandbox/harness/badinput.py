"""Helpers of the bad-input catalogue: a dispatcher over a manager *without* Kueue's CRD schema
(so objects the real API would refuse can reach the nomination loop), CLI capture, and the
kubeconfig mutations of the catalogue."""

from __future__ import annotations

import base64
import contextlib
import io
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.cli import main as cli_main
from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.nominator import Nominator
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.resources import (
    ADMISSION_CHECKS,
    EVENTS,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    SECRETS,
    WORKLOADS,
)
from dispatcher.k8s.watching import BackoffPolicy, WatchSettings
from dispatcher.telemetry.metrics import Metrics
from dispatcher.topology import multikueue_admission_check
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.harness.scenario import multikueue_cluster_status
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS
from dispatcher_sandbox.metrics_text import samples_of

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
NS = "kueue-system"
FAST = WatchSettings(
    server_timeout=30, inactivity_timeout=None, backoff=BackoffPolicy(0.05, 2, 0.2)
)
MERGE = "application/merge-patch+json"


# --- objects ---------------------------------------------------------------------------------


def container(requests: Mapping[str, Any]) -> Obj:
    return {"name": "main", "image": "busybox", "resources": {"requests": dict(requests)}}


def pod_set(requests: Mapping[str, Any], *, count: Any = 1, name: str = "main") -> Obj:
    return {
        "name": name,
        "count": count,
        "template": {"spec": {"containers": [container(requests)]}},
    }


def workload(name: str, pod_sets: Sequence[Obj], namespace: str = "default") -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queueName": "user-queue", "podSets": list(pod_sets)},
    }


def multikueue_check(state: str, message: str, name: str = "multikueue") -> Obj:
    """A manager Workload's MultiKueue admission check entry in ``state``."""
    return {
        "name": name,
        "state": state,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def multikueue_config(name: str, clusters: Sequence[str]) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "MultiKueueConfig",
        "metadata": {"name": name},
        "spec": {"clusters": list(clusters)},
    }


def multikueue_cluster(name: str, location: str, location_type: str = "Secret") -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "MultiKueueCluster",
        "metadata": {"name": name},
        "spec": {
            "clusterSource": {"kubeConfig": {"location": location, "locationType": location_type}}
        },
    }


def kubeconfig_secret(name: str, data: Mapping[str, Any], namespace: str = NS) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig_data(config: Mapping[str, Any]) -> dict[str, str]:
    return {"kubeconfig": b64(yaml.safe_dump(dict(config)))}


QUOTA_RESERVED_PENDING = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "reserved on the manager",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
    "admissionChecks": [
        {
            "name": "multikueue",
            "state": "Pending",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


# --- the kubeconfig mutations ------------------------------------------------------------------


def mutate_kubeconfig(kind: str, base: Mapping[str, Any]) -> dict[str, str] | None:
    """Secret ``data`` for one bad-kubeconfig case built from a valid kubeconfig ``base``;
    None: no Secret at all."""
    config: Obj = yaml.safe_load(yaml.safe_dump(dict(base)))
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]
    if kind == "missing":
        return None
    if kind == "key-missing":
        return {"config": kubeconfig_data(config)["kubeconfig"]}
    if kind == "not-yaml":
        return {"kubeconfig": b64("apiVersion: v1\nclusters: [unclosed\n  - : :\n")}
    if kind == "contexts":
        context = config["contexts"][0]
        config["contexts"].append({"name": "other", "context": dict(context["context"])})
        config.pop("current-context", None)
    elif kind == "exec":
        user["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "id"}}
    elif kind == "auth-provider":
        user["user"] = {"auth-provider": {"name": "oidc", "config": {"client-id": "x"}}}
    elif kind == "token-file":
        user["user"] = {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    elif kind == "insecure-tls":
        cluster.pop("certificate-authority-data", None)
        cluster["insecure-skip-tls-verify"] = True
    elif kind == "ca-file":
        cluster.pop("certificate-authority-data", None)
        cluster["certificate-authority"] = "/etc/kubernetes/pki/ca.crt"
    elif kind == "basic-auth":
        user["user"] = {"username": "admin", "password": "hunter2"}
    elif kind == "http":
        cluster["server"] = cluster["server"].replace("https://", "http://")
    else:
        raise ValueError(kind)
    return kubeconfig_data(config)


# --- CLI ---------------------------------------------------------------------------------------


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``multikueue-dispatcher ARGV`` in-process: exit code, stdout, stderr. It calls
    ``anyio.run``: from async code call it in a worker thread."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(argv)
    return code, out.getvalue(), err.getvalue()


class LogCapture(logging.Handler):
    """Every log record's message (module-scoped fixtures cannot use ``caplog``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @contextlib.contextmanager
    def installed(self) -> Iterator[LogCapture]:
        root = logging.getLogger()
        root.addHandler(self)
        try:
            yield self
        finally:
            root.removeHandler(self)


class RegistryChanges:
    """Wakes waiters on every worker state change of any :class:`ClusterRegistry` in this
    process (the registry reports them through ``_notify``), for tests that cannot pass their
    own callback (the registry of a manager process started by the sandbox)."""

    def __init__(self) -> None:
        self._changed = anyio.Event()

    def _signal(self) -> None:
        event, self._changed = self._changed, anyio.Event()
        event.set()

    @contextlib.contextmanager
    def installed(self) -> Iterator[RegistryChanges]:
        original = ClusterRegistry._notify

        def notify(registry: ClusterRegistry, name: str) -> None:
            original(registry, name)
            self._signal()

        ClusterRegistry._notify = notify  # type: ignore[method-assign, assignment]
        try:
            yield self
        finally:
            ClusterRegistry._notify = original  # type: ignore[method-assign]

    async def wait(self, predicate: Callable[[], bool], within: float = 60) -> None:
        with anyio.fail_after(within):
            while not predicate():
                await self._changed.wait()


# --- a dispatcher over a manager without the CRD schema -----------------------------------------


def first_active(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
    """A pipeline stand-in: nominate the first active cluster."""
    chosen = tuple(s.name for s in snapshots if s.active)[:1]
    return Decision("first-active", chosen, "the first active cluster")


@dataclass
class SchemaLess:
    """A manager and its workers (by default one, ``w1``) served without Kueue's CRD schema,
    the real registry and nomination loop on them (``first_active`` decides by default), and
    a way to wait for the manager."""

    manager: FakeCluster
    api: KubeApi
    registry: ClusterRegistry
    nominator: Nominator
    workers: dict[str, FakeCluster] = field(default_factory=dict)
    changed: anyio.Event = field(default_factory=anyio.Event)
    reconciles: dict[str, int] = field(default_factory=dict)
    recorded: list[tuple[str, str]] = field(default_factory=list)  # Events: (reason, message)

    def notify(self) -> None:
        event, self.changed = self.changed, anyio.Event()
        event.set()

    async def wait(self, predicate: Callable[[], bool], within: float = 30) -> None:
        with anyio.fail_after(within):
            while not predicate():
                await self.changed.wait()

    async def add_workload(self, body: Obj, api: KubeApi | None = None) -> None:
        """Create a Workload and give it the status Kueue gives an eligible one (C49); through
        ``api`` when given (another client than the dispatcher's)."""
        meta = body["metadata"]
        api = api or self.api
        await api.create(WORKLOADS, body, namespace=meta["namespace"])
        await api.request(
            "PATCH",
            WORKLOADS.path(meta["namespace"], meta["name"]) + "/status",
            body={"status": QUOTA_RESERVED_PENDING},
            content_type=MERGE,
        )

    async def workload_status(
        self, name: str, status: Mapping[str, Any], namespace: str = "default"
    ) -> None:
        """Merge-patch the manager Workload's status, as Kueue writes it."""
        await self.api.request(
            "PATCH",
            WORKLOADS.path(namespace, name) + "/status",
            body={"status": dict(status)},
            content_type=MERGE,
        )

    def nominated(self, name: str, namespace: str = "default") -> tuple[str, ...]:
        found = self.registry.manager.cache("workloads").get(name, namespace) or {}
        return tuple((found.get("status") or {}).get("nominatedClusterNames") or ())

    def nominations(self) -> dict[tuple[str, str], float]:
        """``multikueue_dispatcher_nominations_total`` by ``(cluster, algorithm)``."""
        assert self.nominator.metrics is not None
        samples = samples_of(generate_latest(self.nominator.metrics.registry).decode())
        return {
            (labels["cluster"], labels["algorithm"]): value
            for labels, value in samples.get("multikueue_dispatcher_nominations_total", [])
        }

    async def events(self, name: str, namespace: str = "default") -> list[Obj]:
        """The Events on ``name``, once the background recorder sent what it had queued."""
        await self.nominator.events.flush()
        listed = await self.api.list(EVENTS, namespace)
        return [e for e in listed.items if e["involvedObject"]["name"] == name]


async def _worker_cluster(api: KubeApi, name: str, worker: FakeCluster) -> None:
    """Register ``worker`` on the manager as Kueue would see it: Secret, MultiKueueCluster
    reported Active."""
    await api.create(
        SECRETS,
        kubeconfig_secret(f"{name}-kubeconfig", kubeconfig_data(worker.kubeconfig)),
        namespace=NS,
    )
    await api.create(MULTIKUEUE_CLUSTERS, multikueue_cluster(name, f"{name}-kubeconfig"))
    await set_active(api, name, True)


async def set_active(api: KubeApi, name: str, active: bool) -> None:
    """Set the MultiKueueCluster's ``Active`` condition as Kueue reports it."""
    await api.request(
        "PATCH",
        MULTIKUEUE_CLUSTERS.path(None, name) + "/status",
        body={"status": multikueue_cluster_status(active)},
        content_type=MERGE,
    )


@contextlib.asynccontextmanager
async def schema_less_dispatcher(
    decide: Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision] = first_active,
    workers: Sequence[str] = ("w1",),
) -> AsyncIterator[SchemaLess]:
    async with contextlib.AsyncExitStack() as stack:
        manager = await stack.enter_async_context(
            FakeCluster("manager", resources=KUEUE_SHORT_FORMS)
        )
        clusters = {
            name: await stack.enter_async_context(FakeCluster(name, resources=KUEUE_SHORT_FORMS))
            for name in workers
        }
        api = await stack.enter_async_context(
            await KubeApi.from_kubeconfig(manager.kubeconfig, name="manager")
        )
        await api.create(NAMESPACES, {"metadata": {"name": NS}})
        for name, worker in clusters.items():
            await _worker_cluster(api, name, worker)
        await api.create(MULTIKUEUE_CONFIGS, multikueue_config("multikueue", list(workers)))
        await api.create(
            ADMISSION_CHECKS,
            multikueue_admission_check(),
        )
        env: SchemaLess

        def on_change(cluster: str, resource: str, item: Any) -> None:
            env.nominator.on_change(cluster, resource, item)
            env.notify()

        registry = ClusterRegistry(
            api,
            kueue_namespace=NS,
            watch_settings=FAST,
            reconnect=BackoffPolicy(0.05, 2, 0.2),
            on_change=on_change,
        )
        nominator = Nominator(
            registry,
            decide,
            config=ControllerConfig(resync_seconds=0.5, sync_grace_seconds=5.0),
            metrics=Metrics(registry=CollectorRegistry()),
        )
        env = SchemaLess(manager, api, registry, nominator, clusters)
        reconcile = nominator.reconcile

        async def counted(key: str) -> None:
            env.reconciles[key] = env.reconciles.get(key, 0) + 1
            try:
                await reconcile(key)
            finally:
                env.notify()

        nominator.reconcile = counted  # type: ignore[method-assign]
        record_event = nominator._event

        def noted(workload: Obj, reason: str, message: str, kind: str) -> None:
            record_event(workload, reason, message, kind)
            env.recorded.append((reason, message))
            env.notify()

        nominator._event = noted  # type: ignore[method-assign, assignment]
        async with anyio.create_task_group() as group:
            await group.start(registry.run)
            group.start_soon(nominator.run)
            for name in workers:
                await env.wait(
                    lambda n=name: (  # type: ignore[misc]
                        registry.workers.get(n) is not None and registry.workers[n].connected
                    )
                )
            try:
                yield env
            finally:
                group.cancel_scope.cancel()
                assert nominator.metrics is not None
                nominator.metrics.shutdown()
