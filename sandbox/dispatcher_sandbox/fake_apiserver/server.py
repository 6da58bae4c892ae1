"""The fake Kubernetes API server: one instance per emulated cluster (docs/fake-apiserver.md).

Each :class:`FakeCluster` owns its store, resourceVersion counter, watch history, registry,
admission chain, faults and journal, and serves HTTPS with a bearer token on its own port
(F20, F26–F29). It composes the parts: the application and middleware (:mod:`.app`), the
router (:mod:`.routing`) with discovery (:mod:`.discovery`), the resource verbs
(:mod:`.handlers`) and watches (:mod:`.watch`), and the admin endpoint (:mod:`.admin`); the parts
read the cluster through :class:`.state.ClusterState`.
Requirement numbers (F…) in comments are the points of ``docs/fake-apiserver.md``.
"""

from __future__ import annotations

import contextlib
import copy
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from dispatcher_sandbox.fake_apiserver.admin import admin_app
from dispatcher_sandbox.fake_apiserver.admission import AdmissionChain
from dispatcher_sandbox.fake_apiserver.app import bound_port, build_app
from dispatcher_sandbox.fake_apiserver.crds import (
    CRDS,
    crd_status,
    load_crd_documents,
    unserve_version,
)
from dispatcher_sandbox.fake_apiserver.faults import Faults, Journal
from dispatcher_sandbox.fake_apiserver.handlers import ResourceHandlers
from dispatcher_sandbox.fake_apiserver.kubeconfig import build_kubeconfig
from dispatcher_sandbox.fake_apiserver.namespaces import DEFAULT_NAMESPACES
from dispatcher_sandbox.fake_apiserver.objects import Obj, prepare_builtin
from dispatcher_sandbox.fake_apiserver.objects import now as _now
from dispatcher_sandbox.fake_apiserver.records import (
    ISSUED_CREDENTIALS,
    REJECTIONS,
    IssuedCredential,
    Rejection,
    register_credential,
)
from dispatcher_sandbox.fake_apiserver.registry import (
    Registry,
    Resource,
    builtin_resources,
    parse_short_form,
    resource_from_crd,
)
from dispatcher_sandbox.fake_apiserver.routing import Router
from dispatcher_sandbox.fake_apiserver.store import Store
from dispatcher_sandbox.fake_apiserver.tls import issue_serving_certificate, process_ca
from dispatcher_sandbox.fake_apiserver.watch import WatchHandler

__all__ = [
    "ISSUED_CREDENTIALS",
    "REJECTIONS",
    "FakeCluster",
    "IssuedCredential",
    "Rejection",
    "fake_cluster",
    "load_crd_documents",
]


class FakeCluster:
    """One emulated Kubernetes API server (F20, F22).

    Use it as an async context manager, or call :meth:`start` and :meth:`stop`. The ``kubeconfig``
    property is ready once started.
    """

    def __init__(
        self,
        name: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: bool = True,
        token: str | None = None,
        extra_hosts: Iterable[str] = (),
        resources: Iterable[str | Resource] = (),
        crds: Iterable[Mapping[str, Any]] = (),
        crd_paths: Iterable[str | Path] = (),
        history_size: int = 10_000,
        bookmark_interval: float = 1.0,
        admin_port: int | None = 0,
        anonymous_health: bool = False,
        journal_size: int = 5000,
        seed: int = 0,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.tls = tls
        self.token = token or secrets.token_urlsafe(32)
        self.extra_hosts = tuple(extra_hosts)
        self.bookmark_interval = bookmark_interval
        self.anonymous_health = anonymous_health
        self.admin_port = admin_port
        self.registry = Registry(builtin_resources())
        self.store = Store(history_size)
        self.admission = AdmissionChain()
        self.faults = Faults(seed)
        self.journal = Journal(journal_size)
        self.default_field_manager = "unknown"
        # Set by tests that provoke rejected writes on purpose (see REJECTIONS).
        self.rejections_expected = False
        self._router = Router(self, ResourceHandlers(self, seed), WatchHandler(self))
        self._runner: web.AppRunner | None = None
        self._admin_runner: web.AppRunner | None = None
        self._serving_cert = (
            issue_serving_certificate(process_ca(), self.extra_hosts) if tls else None
        )
        self._ssl = self._serving_cert.server_context() if self._serving_cert else None
        register_credential("token", name, self.token)
        if self._serving_cert is not None:
            register_credential("ca-key", "(process CA)", process_ca().key_pem.decode())
            register_credential("serving-key", name, self._serving_cert.key_pem.decode())
        self._up = False
        for spec in resources:
            self.registry.add(parse_short_form(spec) if isinstance(spec, str) else spec)
        for ns in DEFAULT_NAMESPACES:
            self._seed_object("", "namespaces", "v1", {"metadata": {"name": ns}})
        for crd in crds:
            self.add_crd(crd)
        for path in crd_paths:
            for crd in load_crd_documents(Path(path)):
                self.add_crd(crd)

    def now(self) -> str:
        """The cluster's clock: every time stamp it writes (creation, deletion, managedFields,
        CRD conditions). It calls this module's ``_now`` each time, the seam a test patches to
        order the stamps."""
        return _now()

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FakeCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def url(self) -> str:
        """The server URL clients use."""
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        """The admin endpoint's URL (F52), plain HTTP on loopback."""
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def ca_pem(self) -> bytes | None:
        """The CA certificate that signed the serving certificate (None without TLS)."""
        return self._serving_cert.ca_pem if self._serving_cert else None

    @property
    def kubeconfig(self) -> Obj:
        """A kubeconfig with inline CA data and the token (F27)."""
        return build_kubeconfig(self.name, self.url, self.token, self.ca_pem)

    @property
    def is_up(self) -> bool:
        return self._up

    async def start(self) -> None:
        """Listen on the API port (a free one if ``port`` is 0) and on the admin port."""
        await self.up()
        if self.admin_port is not None and self._admin_runner is None:
            self._admin_runner = web.AppRunner(admin_app(self), access_log=None)
            await self._admin_runner.setup()
            site = web.TCPSite(self._admin_runner, "127.0.0.1", self.admin_port)
            await site.start()
            self.admin_port = bound_port(self._admin_runner)

    async def stop(self) -> None:
        """Stop serving (watches end cleanly) and close the admin endpoint."""
        for watcher in self.store.watchers():
            watcher.close(abrupt=False)
        await self._shutdown_api()
        if self._admin_runner is not None:
            await self._admin_runner.cleanup()
            self._admin_runner = None

    async def up(self) -> None:
        """Listen again on the same port with the same CA, token and state (F56)."""
        if self._up:
            return
        app = build_app(self, self._router.dispatch)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self._ssl, reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = bound_port(runner)
        self._up = True

    async def down(self) -> None:
        """Stop listening and cut every open connection, watches included (F56)."""
        for watcher in self.store.watchers():
            watcher.close(abrupt=True)
        await self._shutdown_api()

    async def _shutdown_api(self) -> None:
        self._up = False
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # --- test controls (F52–F57) -------------------------------------------------------------

    def drop_watches(self, path: str = "", *, abrupt: bool = False) -> int:
        """Close open watch streams whose path matches the regular expression ``path`` (F55)."""
        pattern = re.compile(path) if path else None
        dropped = 0
        for watcher in self.store.watchers():
            if pattern is None or pattern.search(watcher.path):
                watcher.close(abrupt=abrupt)
                dropped += 1
        return dropped

    async def wait_for_watches(self, count: int = 1, path: str = "") -> None:
        """Wait until at least ``count`` watches whose path matches ``path`` are open.

        Tests use it, under a deadline, to know a client's watch is established before they
        write the change it should see.
        """
        pattern = re.compile(path) if path else None
        await self.store.wait_for_watchers(
            lambda ws: sum(1 for w in ws if pattern is None or pattern.search(w.path)) >= count
        )

    def expire_next_watches(self, count: int = 1) -> None:
        """The next ``count`` watches resuming from a resourceVersion get 410 Expired (F57)."""
        self.faults.expire_next_watches += count

    def truncate_history(self) -> None:
        """Forget the watch history: every resume from an older resourceVersion gets 410 (F57)."""
        self.store.truncate_history()

    def add_crd(self, crd: Mapping[str, Any]) -> Resource:
        """Register a CustomResourceDefinition and store the CRD object itself (F40)."""
        resource = resource_from_crd(crd)
        self.registry.add(resource)
        body = copy.deepcopy(dict(crd))
        body.setdefault("metadata", {})
        body["status"] = crd_status(body, self.now())
        key = ("", body["metadata"]["name"])
        if self.store.get(CRDS, key) is None:
            self._seed_object("apiextensions.k8s.io", "customresourcedefinitions", "v1", body)
        return resource

    def unserve_version(self, group: str, version: str) -> list[str]:
        """Stop serving ``version`` of the custom resources of ``group`` that serve another
        version too, as an update of each CRD setting that version ``served: false`` would
        (F40): its paths answer 404 and discovery drops it. Returns the plurals changed.

        Used for Kueue v0.20, which keeps ``kueue.x-k8s.io/v1beta1`` in its CRDs unserved.
        """
        return unserve_version(self, group, version)

    def object(
        self, group: str, plural: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """A copy of a stored object, for assertions in tests."""
        stored = self.store.get((group, plural), (namespace or "", name))
        return copy.deepcopy(stored) if stored is not None else None

    def _seed_object(self, group: str, plural: str, version: str, body: Obj) -> None:
        """Create an object at start-up, as the cluster's own components would."""
        resource = self.registry.get(group, plural)
        assert resource is not None
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": self.now(), "generation": 1})
        obj["apiVersion"] = resource.api_version(version)
        obj["kind"] = resource.kind
        if resource.builtin:
            prepare_builtin(resource, obj)
        self.store.write(resource.key, (meta.get("namespace", ""), meta["name"]), obj, "ADDED")


@contextlib.asynccontextmanager
async def fake_cluster(name: str, **options: Any) -> AsyncIterator[FakeCluster]:
    """Start one fake cluster for the duration of a block (F22)."""
    cluster = FakeCluster(name, **options)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()
