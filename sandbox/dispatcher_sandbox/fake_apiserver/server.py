"""The fake Kubernetes API server: one instance per emulated cluster (fake-apiserver-spec).

Each :class:`FakeCluster` owns its store, resourceVersion counter, watch history, registry,
admission chain, faults and journal, and serves HTTPS with a bearer token on its own port
(F20, F26–F29).
Requirement numbers (F…) in comments refer to ``docs/fake-apiserver-spec.md``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime
import json
import logging
import random
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from dispatcher_sandbox.fake_apiserver import managed
from dispatcher_sandbox.fake_apiserver.admission import AdmissionChain, AdmissionRequest, Denied
from dispatcher_sandbox.fake_apiserver.errors import (
    ApiError,
    already_exists,
    conflict,
    invalid,
    invalid_field,
    not_found,
)
from dispatcher_sandbox.fake_apiserver.faults import Faults, Journal, JournalEntry
from dispatcher_sandbox.fake_apiserver.kubeconfig import build_kubeconfig
from dispatcher_sandbox.fake_apiserver.patch import json_patch, merge_patch
from dispatcher_sandbox.fake_apiserver.registry import (
    ALL_VERBS,
    Registry,
    Resource,
    builtin_resources,
    parse_short_form,
    resource_from_crd,
)
from dispatcher_sandbox.fake_apiserver.selectors import (
    field_getters,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from dispatcher_sandbox.fake_apiserver.store import Event, Expired, Store, Watcher
from dispatcher_sandbox.fake_apiserver.tls import issue_serving_certificate, process_ca

log = logging.getLogger(__name__)

JOURNALED = web.RequestKey("journaled", bool)


@dataclass(frozen=True)
class Rejection:
    """A write answered with 422 Invalid (schema, CEL, patch options or an admission hook)."""

    cluster: str
    expected: bool
    user_agent: str
    method: str
    path: str
    message: str


# Every 422 of every fake cluster of this process, so that a test session can prove that a
# component (the Kueue emulation) never had a write rejected except where a test expects it.
REJECTIONS: list[Rejection] = []


@dataclass(frozen=True)
class IssuedCredential:
    """A credential the sandbox minted: a cluster's bearer token (``token``, also the admin
    endpoint's), the shared CA's private key (``ca-key``) or a serving key (``serving-key``)."""

    kind: str
    cluster: str
    value: str


# Every credential the fake clusters of this process issued, in order, each once, so that a
# test session can prove none of them ever reached a log line (issue 8, security).
ISSUED_CREDENTIALS: list[IssuedCredential] = []
_ISSUED_VALUES: set[str] = set()


def _register_credential(kind: str, cluster: str, value: str) -> None:
    if value not in _ISSUED_VALUES:
        _ISSUED_VALUES.add(value)
        ISSUED_CREDENTIALS.append(IssuedCredential(kind, cluster, value))


VERB = web.RequestKey("verb", str)

Obj = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

KUBE_VERSION = {"major": "1", "minor": "34"}
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_STRATEGIC = "application/strategic-merge-patch+json"
_APPLY = "application/apply-patch+yaml"
_APPLY_CBOR = "application/apply-patch+cbor"
_PROTOBUF = "application/vnd.kubernetes.protobuf"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_NAMESPACE_MISMATCH = (
    "the namespace of the provided object does not match the namespace sent on the request"
)
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"

# Fields the server owns; a client cannot set or change them.
_SERVER_METADATA = ("uid", "creationTimestamp", "generation", "resourceVersion", "managedFields")


def _truthy(value: str | None) -> bool:
    """Kubernetes query booleans, as ``kubernetes_asyncio`` renders them too (``True``) (F14)."""
    return value is not None and value.lower() in ("true", "1")


def _same_token(given: str, expected: str) -> bool:
    """Constant-time comparison that also copes with non-ASCII header bytes (F28)."""
    return secrets.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"), expected.encode()
    )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version ordering: GA before beta before alpha, higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type="application/json",
    )


def _error_response(error: ApiError) -> web.Response:
    response = _json_response(error.body(), error.code)
    response.headers.update(error.headers)
    return response


def _strip_without_time(managed_fields: Any) -> Any:
    if not isinstance(managed_fields, list):
        return managed_fields
    return [{k: v for k, v in e.items() if k != "time"} for e in managed_fields]


def _same_object(old: Obj, new: Obj) -> bool:
    """Whether a write changes nothing (F5, F38): equal apart from managedFields times."""

    def norm(obj: Obj) -> Obj:
        out = copy.copy(obj)
        meta = dict(out.get("metadata") or {})
        meta.pop("resourceVersion", None)
        if "managedFields" in meta:
            meta["managedFields"] = _strip_without_time(meta["managedFields"])
        out["metadata"] = meta
        return out

    return norm(old) == norm(new)


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses (F3)."""

    resource: Resource
    version: str
    namespace: str | None  # None: cluster-scoped, or a list across all namespaces
    name: str | None
    subresource: str | None

    @property
    def api_version(self) -> str:
        return self.resource.api_version(self.version)


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
        self._random = random.Random(seed)
        self._runner: web.AppRunner | None = None
        self._admin_runner: web.AppRunner | None = None
        self._serving_cert = (
            issue_serving_certificate(process_ca(), self.extra_hosts) if tls else None
        )
        self._ssl = self._serving_cert.server_context() if self._serving_cert else None
        _register_credential("token", name, self.token)
        if self._serving_cert is not None:
            _register_credential("ca-key", "(process CA)", process_ca().key_pem.decode())
            _register_credential("serving-key", name, self._serving_cert.key_pem.decode())
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
            from dispatcher_sandbox.fake_apiserver.admin import admin_app

            self._admin_runner = web.AppRunner(admin_app(self), access_log=None)
            await self._admin_runner.setup()
            site = web.TCPSite(self._admin_runner, "127.0.0.1", self.admin_port)
            await site.start()
            self.admin_port = _bound_port(self._admin_runner)

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
        app = web.Application(
            middlewares=[self._journal_middleware, self._auth_middleware, self._fault_middleware],
            client_max_size=64 * 1024 * 1024,
        )
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self._ssl, reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = _bound_port(runner)
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
        body["status"] = _crd_status(body)
        key = ("", body["metadata"]["name"])
        if self.store.get(("apiextensions.k8s.io", "customresourcedefinitions"), key) is None:
            self._seed_object("apiextensions.k8s.io", "customresourcedefinitions", "v1", body)
        return resource

    def unserve_version(self, group: str, version: str) -> list[str]:
        """Stop serving ``version`` of the custom resources of ``group`` that serve another
        version too, as an update of each CRD setting that version ``served: false`` would
        (F40): its paths answer 404 and discovery drops it. Returns the plurals changed.

        Used for Kueue v0.20, which keeps ``kueue.x-k8s.io/v1beta1`` in its CRDs unserved.
        """
        changed: list[str] = []
        crds = ("apiextensions.k8s.io", "customresourcedefinitions")
        for resource in self.registry.all():
            if resource.builtin or resource.group != group:
                continue
            if version not in resource.versions or len(resource.versions) < 2:
                continue
            stored = self.store.get(crds, ("", resource.label))
            if stored is None:
                resource.versions = [v for v in resource.versions if v != version]
                resource.schemas.pop(version, None)
            else:
                crd = copy.deepcopy(stored)
                for item in (crd.get("spec") or {}).get("versions") or []:
                    if item.get("name") == version:
                        item["served"] = False
                meta = crd["metadata"]
                meta["generation"] = int(meta.get("generation") or 1) + 1
                self.registry.add(resource_from_crd(crd))
                self.store.write(crds, ("", resource.label), crd, "MODIFIED")
            changed.append(resource.plural)
        return changed

    def object(
        self, group: str, plural: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """A copy of a stored object, for assertions in tests."""
        stored = self.store.get((group, plural), (namespace or "", name))
        return copy.deepcopy(stored) if stored is not None else None

    # --- middlewares -------------------------------------------------------------------------

    @web.middleware
    async def _journal_middleware(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            if not request.get(JOURNALED):
                self._journal(request, status)

    def _journal(self, request: web.Request, status: int) -> None:
        request[JOURNALED] = True
        self.journal.record(
            JournalEntry(
                method=request.method,
                verb=request.get(VERB, ""),
                path=request.path,
                query=request.query_string,
                content_type=request.headers.get("Content-Type", ""),
                field_manager=request.query.get("fieldManager", ""),
                user_agent=request.headers.get("User-Agent", ""),
                status=status,
            )
        )

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # F28: a bearer token on every request, optionally except health and version.
        if self.anonymous_health and request.path in ("/version", "/healthz", "/livez", "/readyz"):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not _same_token(token, self.token):
            return _error_response(ApiError(401, "Unauthorized"))
        return await handler(request)

    @web.middleware
    async def _fault_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        verb = _verb_of(request)
        request[VERB] = verb
        picked = self.faults.pick(verb, request.path, request.headers.get("User-Agent", ""))
        if picked.delay:
            await asyncio.sleep(picked.delay)
        fault = picked.error
        if fault is not None:
            error = ApiError(fault.code, fault.message or f"injected fault {fault.id}")
            if fault.retry_after is not None:
                error.headers["Retry-After"] = str(fault.retry_after)
            return _error_response(error)
        response = await handler(request)
        if picked.hold:
            # The request took effect (a write is stored and its watch event sent); only its
            # answer is late. A client that gives up meanwhile does not undo it.
            await asyncio.sleep(picked.hold)
        return response

    # --- routing -----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except ApiError as error:
            self._note_rejection(request, error)
            return _error_response(error)
        except Denied as denied:
            refusal = ApiError(denied.code, denied.message)
            self._note_rejection(request, refusal)
            return _error_response(refusal)

    def _note_rejection(self, request: web.Request, error: ApiError) -> None:
        if error.code == 422:
            REJECTIONS.append(
                Rejection(
                    cluster=self.name,
                    expected=self.rejections_expected,
                    user_agent=request.headers.get("User-Agent", ""),
                    method=request.method,
                    path=request.path,
                    message=error.message,
                )
            )

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if parts == ["version"]:
            return _json_response(self._version())
        is_discovery = parts[:1] in (["api"], ["apis"]) and len(parts) <= (
            2 if parts[0] == "api" else 3
        )
        if request.method != "GET" and is_discovery:
            raise ApiError(405, f"the server does not allow this method on {request.path}")
        if parts == ["api"]:
            return _json_response(self._api_versions(request))
        if parts == ["apis"]:
            return _json_response(self._api_group_list())
        if parts == ["api", "v1"]:
            return _json_response(self._resource_list("", "v1"))
        if len(parts) == 2 and parts[0] == "apis":
            return _json_response(self._api_group(parts[1]))
        if len(parts) == 3 and parts[0] == "apis":
            return _json_response(self._resource_list(parts[1], parts[2]))
        if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
            target = self._target("", "v1", parts[2:])
        elif len(parts) >= 4 and parts[0] == "apis":
            target = self._target(parts[1], parts[2], parts[3:])
        else:
            raise ApiError(
                404, f"the server could not find the requested resource ({request.path})"
            )
        return await self._serve(request, target)

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        if not self.registry.group_versions().get(group) or version not in (
            self.registry.group_versions().get(group) or []
        ):
            raise ApiError(404, "the server could not find the requested resource")
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (len(rest) == 3 and rest[2] == "status")
        ):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource")
        resource = self.registry.lookup(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not (sub == "status" and resource.status_subresource):
            raise ApiError(404, "the server could not find the requested resource")
        if namespace is not None and not resource.namespaced:
            raise ApiError(404, "the server could not find the requested resource")
        if resource.namespaced and namespace is None and name is not None:
            raise ApiError(404, "the server could not find the requested resource")
        return Target(resource, version, namespace, name, sub)

    async def _serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        method = request.method
        if target.name is None:
            if method == "GET":
                if _truthy(request.query.get("watch")):
                    return await self._watch(request, target)
                return _json_response(self._list(request, target))
            if method == "POST" and target.subresource is None:
                if target.resource.namespaced and target.namespace is None:
                    raise ApiError(405, "create requires a namespace in the URL")
                obj, status = self._create(request, target, await self._body(request))
                return _json_response(obj, status)
            raise ApiError(405, f"the server does not allow this method on {request.path}")
        if method == "GET":
            return _json_response(self._render(self._get(target), target))
        if method == "PUT":
            return _json_response(self._update(request, target, await self._body(request)))
        if method == "PATCH":
            raw = await request.read()
            obj, status = self._patch(request, target, raw)
            return _json_response(obj, status)
        if method == "DELETE" and target.subresource is None:
            raw = await request.read()
            return _json_response(self._delete(request, target, raw))
        raise ApiError(405, f"the server does not allow this method on {request.path}")

    # --- discovery (F1) ----------------------------------------------------------------------

    def _version(self) -> Obj:
        return {
            **KUBE_VERSION,
            "gitVersion": f"v{KUBE_VERSION['major']}.{KUBE_VERSION['minor']}.0-fakeapi",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _api_versions(self, request: web.Request) -> Obj:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
            ],
        }

    def _group_entry(self, group: str, versions: list[str]) -> Obj:
        ordered = sorted(versions, key=_version_priority)
        return {
            "name": group,
            "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered],
            "preferredVersion": {"groupVersion": f"{group}/{ordered[0]}", "version": ordered[0]},
        }

    def _api_group_list(self) -> Obj:
        groups = [
            self._group_entry(group, versions)
            for group, versions in self.registry.group_versions().items()
            if group
        ]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _api_group(self, group: str) -> Obj:
        versions = self.registry.group_versions().get(group)
        if not group or not versions:
            raise ApiError(404, "the server could not find the requested resource")
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(group, versions)}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources = self.registry.in_group_version(group, version)
        if not resources:
            raise ApiError(404, "the server could not find the requested resource")
        entries: list[Obj] = []
        for r in resources:
            entry: Obj = {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(ALL_VERBS),
            }
            if r.short_names:
                entry["shortNames"] = list(r.short_names)
            if r.categories:
                entry["categories"] = list(r.categories)
            entries.append(entry)
            if r.status_subresource:
                entries.append(
                    {
                        "name": f"{r.plural}/status",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        gv = f"{group}/{version}" if group else version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": entries,
        }

    # --- reading -----------------------------------------------------------------------------

    def _render(self, obj: Obj, target: Target) -> Obj:
        """A copy with ``apiVersion`` and ``kind`` of the requested version (F41)."""
        out = copy.deepcopy(obj)
        out["apiVersion"] = target.api_version
        out["kind"] = target.resource.kind
        return out

    def _get(self, target: Target) -> Obj:
        assert target.name is not None
        stored = self.store.get(target.resource.key, (target.namespace or "", target.name))
        if stored is None:
            raise not_found(target.resource.group, target.resource.plural, target.name)
        return stored

    def _filter(self, request: web.Request, target: Target) -> Callable[[Obj], bool]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        getters = field_getters(list(target.resource.field_selectors))
        fields = parse_field_selector(
            request.query.get("fieldSelector"), getters, target.resource.label
        )
        namespace = target.namespace

        def matches(obj: Obj) -> bool:
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                return False
            return labels_match(labels, obj) and fields_match(fields, obj)

        return matches

    def _list(self, request: web.Request, target: Target) -> Obj:
        matches = self._filter(request, target)
        items = [
            self._render(obj, target) if not target.resource.builtin else copy.deepcopy(obj)
            for obj in self.store.items(target.resource.key, target.namespace)
            if matches(obj)
        ]
        if target.resource.builtin:
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return {
            "kind": target.resource.list_kind,
            "apiVersion": target.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": items,
        }

    # --- watch (F14–F19, F55, F57) -----------------------------------------------------------

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        matches = self._filter(request, target)
        rv_text = request.query.get("resourceVersion", "")
        initial_events = _truthy(request.query.get("sendInitialEvents"))
        bookmarks = _truthy(request.query.get("allowWatchBookmarks"))
        timeout_text = request.query.get("timeoutSeconds")
        try:
            since = None if rv_text in ("", "0") or initial_events else int(rv_text)
            timeout = float(timeout_text) if timeout_text else None
        except ValueError as exc:
            raise ApiError(400, f"invalid watch parameter: {exc}") from exc
        watcher = Watcher(target.resource.key, target.namespace, request.path)

        def replay_filter(event: Event) -> bool:
            return self._watch_type(event, matches) is not None

        expired = False
        replay: list[Event] = []
        if since is not None and self.faults.expire_next_watches > 0:
            self.faults.expire_next_watches -= 1
            expired = True
        else:
            try:
                replay = self.store.subscribe(watcher, since, replay_filter)
            except Expired:
                expired = True
        initial: list[Obj] = []
        if since is None and not expired:
            initial = [
                o for o in self.store.items(target.resource.key, target.namespace) if matches(o)
            ]

        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self._journal(request, 200)
        try:
            if expired:
                status = ApiError(
                    410,
                    f"too old resource version: {since} ({self.store.resource_version})",
                    reason="Expired",
                ).body()
                await _write_event(response, "ERROR", status)
                await response.write_eof()
                return response
            for obj in initial:
                await _write_event(response, "ADDED", self._render(obj, target))
            if initial_events:
                await _write_event(
                    response, "BOOKMARK", self._bookmark(target, {INITIAL_EVENTS_END: "true"})
                )
            for event in replay:
                await self._send(response, event, target, matches)
            await self._stream(request, response, watcher, target, matches, timeout, bookmarks)
        except ConnectionResetError:
            # The client went away mid-stream; nothing left to tell it.
            log.debug("watch client disconnected: %s", request.path)
        finally:
            self.store.unsubscribe(watcher)
        return response

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        watcher: Watcher,
        target: Target,
        matches: Callable[[Obj], bool],
        timeout: float | None,  # noqa: ASYNC109 - the watch's own timeoutSeconds
        bookmarks: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        next_bookmark = loop.time() + self.bookmark_interval
        while True:
            now = loop.time()
            waits = [next_bookmark - now] if bookmarks else []
            if deadline is not None:
                waits.append(deadline - now)
            wait = max(0.0, min(waits)) if waits else None
            try:
                event = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                now = loop.time()
                if deadline is not None and now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    await _write_event(response, "BOOKMARK", self._bookmark(target))
                    next_bookmark = now + self.bookmark_interval
                continue
            if event is None:  # closed by drop_watches, down() or stop()
                if watcher.abrupt and request.transport is not None:
                    request.transport.close()
                    return
                break
            await self._send(response, event, target, matches)
        await response.write_eof()

    def _bookmark(self, target: Target, annotations: dict[str, str] | None = None) -> Obj:
        metadata: Obj = {"resourceVersion": str(self.store.resource_version)}
        if annotations:
            metadata["annotations"] = annotations
        return {
            "kind": target.resource.kind,
            "apiVersion": target.api_version,
            "metadata": metadata,
        }

    @staticmethod
    def _watch_type(event: Event, matches: Callable[[Obj], bool]) -> str | None:
        """The event type a filtered watcher sees: objects entering or leaving the selection
        appear as ADDED or DELETED, as with the real watch cache."""
        new_match = matches(event.obj)
        old_match = event.old is not None and matches(event.old)
        if event.type == "DELETED":
            return "DELETED" if old_match else None
        if event.type == "ADDED":
            return "ADDED" if new_match else None
        if new_match and old_match:
            return "MODIFIED"
        if new_match:
            return "ADDED"
        if old_match:
            return "DELETED"
        return None

    async def _send(
        self,
        response: web.StreamResponse,
        event: Event,
        target: Target,
        matches: Callable[[Obj], bool],
    ) -> None:
        if (
            target.namespace is not None
            and event.obj["metadata"].get("namespace") != target.namespace
        ):
            return
        kind = self._watch_type(event, matches)
        if kind is not None:
            await _write_event(response, kind, self._render(event.obj, target))

    # --- writing -----------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> Obj:
        content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        raw = await request.read()
        if content_type == _PROTOBUF:
            raise ApiError(
                415, f'the body of the request was in an unknown format: "{content_type}"'
            )
        try:
            if content_type in ("application/yaml", "application/x-yaml"):
                body = yaml.safe_load(raw)
            else:
                body = json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, f"the request body is not valid JSON or YAML: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return body

    def _field_manager(self, request: web.Request, *, required: bool = False) -> str:
        manager = request.query.get("fieldManager")
        if manager is not None and len(manager) > 128:
            raise invalid_field(
                "PatchOptions",
                "meta.k8s.io",
                "",
                "fieldManager",
                "Too long: may not be more than 128 bytes",
                "FieldValueTooLong",
            )
        if manager:
            return manager
        if required:
            raise invalid_field(
                "PatchOptions",
                "meta.k8s.io",
                "",
                "fieldManager",
                "Required value: is required for apply patch",
                "FieldValueRequired",
            )
        agent = request.headers.get("User-Agent", "")
        return agent.split("/")[0] if agent else self.default_field_manager

    def _check_dry_run(self, request: web.Request) -> None:
        if request.query.get("dryRun"):
            raise ApiError(400, "dryRun is not supported by the sandbox API server")

    def _validate_metadata(self, resource: Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        name = meta.get("name", "")
        kind, group = resource.kind, resource.group
        pattern = _DNS_LABEL if resource.plural == "namespaces" else _DNS_SUBDOMAIN
        limit = 63 if resource.plural == "namespaces" else 253
        if not pattern.match(name) or len(name) > limit:
            raise invalid_field(
                kind,
                group,
                name,
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 '
                f"{'label' if limit == 63 else 'subdomain'} must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
                "FieldValueInvalid",
            )
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            raise invalid_field(
                kind,
                group,
                name,
                "metadata.labels",
                "Invalid value: must be a map",
                "FieldValueInvalid",
            )
        for key, value in labels.items():
            key_name = key.rsplit("/", 1)[-1]
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                raise invalid_field(
                    kind,
                    group,
                    name,
                    "metadata.labels",
                    f'Invalid value: "{value}": a valid label must be an empty string or consist '
                    "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                    "alphanumeric character (at most 63 characters)",
                    "FieldValueInvalid",
                )
            if len(key_name) > 63 or not _QUALIFIED_NAME.match(key_name):
                raise invalid_field(
                    kind,
                    group,
                    name,
                    "metadata.labels",
                    f'Invalid value: "{key}": name part must consist of alphanumeric characters, '
                    "'-', '_' or '.', and must start and end with an alphanumeric character",
                    "FieldValueInvalid",
                )
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, dict) or not all(
            isinstance(v, str) for v in annotations.values()
        ):
            raise invalid_field(
                kind,
                group,
                name,
                "metadata.annotations",
                "Invalid value: annotation values must be strings",
                "FieldValueInvalid",
            )

    def _prepare_builtin(self, resource: Resource, obj: Obj) -> None:
        """Built-in kinds' own defaulting (F21 and the namespace phase)."""
        if resource.key == ("", "secrets"):
            string_data = obj.pop("stringData", None) or {}
            data = dict(obj.get("data") or {})
            for key, value in data.items():
                try:
                    base64.b64decode(value, validate=True)
                except (ValueError, TypeError) as exc:
                    raise invalid_field(
                        "Secret",
                        "",
                        obj["metadata"].get("name", ""),
                        f"data[{key}]",
                        "Invalid value: illegal base64 data",
                        "FieldValueInvalid",
                    ) from exc
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode("ascii")
            if data:
                obj["data"] = data
            obj.setdefault("type", "Opaque")
        elif resource.key == ("", "namespaces"):
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj.setdefault("status", {}).setdefault("phase", "Active")

    def _admit(
        self,
        request: web.Request | None,
        target: Target,
        operation: str,
        old: Obj | None,
        new: Obj,
        manager: str,
        apply_entry: bool,
    ) -> Obj:
        """Mutating hooks, ownership, schema and CEL, validating hooks (F49); returns the final
        object (not yet stored). ``apply_entry``: the write was an apply, so hook changes are
        attributed to the applier's Apply entry."""
        resource = target.resource
        name = new["metadata"].get("name", "")
        review = AdmissionRequest(
            operation=operation,
            group=resource.group,
            version=target.version,
            resource=resource.plural,
            subresource=target.subresource,
            namespace=new["metadata"].get("namespace"),
            name=name,
            object=copy.deepcopy(new),
            old_object=copy.deepcopy(old) if old is not None else None,
            user="sandbox-admin",
            field_manager=manager,
        )
        mutated = self._run_hook(lambda: self.admission.mutate(review)) or new
        schema = resource.schema(target.version)
        structure = schema.root if schema is not None else None
        now = _now()
        if apply_entry:
            if mutated != new:
                mutated = managed.record_update(
                    new,
                    mutated,
                    manager=manager,
                    operation="Apply",
                    api_version=target.api_version,
                    subresource=target.subresource,
                    schema=structure,
                    now=now,
                )
        else:
            mutated = managed.record_update(
                old,
                mutated,
                manager=manager,
                operation="Update",
                api_version=target.api_version,
                subresource=target.subresource,
                schema=structure,
                now=now,
            )
        if schema is not None:
            final, errors = schema.admit(mutated, old)
            if errors:
                from dispatcher_sandbox.fake_apiserver.schema import invalid_message

                message = invalid_message(resource.kind, resource.group, name, errors)
                causes = [
                    {"reason": e.reason, "message": e.message, "field": e.field} for e in errors
                ]
                raise invalid(resource.kind, resource.group, name, message, causes)
        else:
            final = mutated
        validated = AdmissionRequest(
            **{**review.__dict__, "object": copy.deepcopy(final)},
        )
        self._run_hook(lambda: self.admission.validate(validated))
        return final

    @staticmethod
    def _run_hook(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Denied:
            raise
        except Exception as exc:  # F51: fail closed
            log.exception("admission hook failed")
            raise ApiError(500, f"Internal error occurred: admission hook failed: {exc}") from exc

    def _create(self, request: web.Request, target: Target, body: Obj) -> tuple[Obj, int]:
        self._check_dry_run(request)
        manager = self._field_manager(request)
        return self._create_object(request, target, body, manager, apply_body=None)

    def _create_object(
        self,
        request: web.Request | None,
        target: Target,
        body: Obj,
        manager: str,
        apply_body: Obj | None,
        force: bool = False,
    ) -> tuple[Obj, int]:
        resource = target.resource
        self._check_type(target, body)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("resourceVersion"):
            raise invalid_field(
                resource.kind,
                resource.group,
                meta.get("name", ""),
                "metadata.resourceVersion",
                "Invalid value: resourceVersion should not be set on objects to be created",
                "FieldValueInvalid",
            )
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid_field(
                    resource.kind,
                    resource.group,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                    "FieldValueRequired",
                )
            meta["name"] = prefix + "".join(self._random.choice(_GENERATE_CHARS) for _ in range(5))
        namespace = self._check_namespace(target, meta)
        name = meta["name"]
        if self.store.get(resource.key, (namespace, name)) is not None:
            raise already_exists(resource.group, resource.plural, name)
        for field in _SERVER_METADATA:
            meta.pop(field, None)
        meta.pop("deletionTimestamp", None)
        obj["apiVersion"] = target.api_version
        obj["kind"] = resource.kind
        if resource.status_subresource and not resource.builtin:
            obj.pop("status", None)  # F11
        if resource.builtin:
            self._prepare_builtin(resource, obj)
        self._validate_metadata(resource, obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        if apply_body is not None:
            try:
                obj = managed.apply(
                    None,
                    apply_body,
                    manager=manager,
                    api_version=target.api_version,
                    subresource=None,
                    status_subresource=resource.status_subresource,
                    force=force,
                    schema=_structure(resource, target.version),
                    now=_now(),
                )
            except managed.ApplyConflict as exc:  # pragma: no cover - nothing to conflict with
                raise ApiError(409, exc.message, details={"causes": exc.causes}) from exc
            obj["metadata"].update(
                {
                    k: meta[k]
                    for k in ("uid", "creationTimestamp", "generation", "namespace")
                    if k in meta
                }
            )
            obj["apiVersion"], obj["kind"] = target.api_version, resource.kind
        final = self._admit(request, target, "CREATE", None, obj, manager, apply_body is not None)
        if resource.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            try:
                registered = resource_from_crd(final)
            except ValueError as exc:
                raise invalid_field(
                    resource.kind,
                    resource.group,
                    name,
                    "spec",
                    f"Invalid value: {exc}",
                    "FieldValueInvalid",
                ) from exc
            self.registry.add(registered)
            final["status"] = _crd_status(final)
        stored = self.store.write(resource.key, (namespace, name), final, "ADDED")
        return self._render(stored, target), 201

    def _check_type(self, target: Target, body: Obj) -> None:
        api_version = body.get("apiVersion")
        kind = body.get("kind")
        resource = target.resource
        if api_version is not None and api_version != target.api_version:
            raise ApiError(
                400,
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({target.api_version})",
            )
        if kind is not None and kind != resource.kind:
            raise ApiError(
                400,
                f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})",
            )

    def _check_namespace(self, target: Target, meta: Obj) -> str:
        if not target.resource.namespaced:
            meta.pop("namespace", None)
            return ""
        assert target.namespace is not None
        if meta.get("namespace") not in (None, "", target.namespace):
            raise ApiError(
                400,
                _NAMESPACE_MISMATCH,
            )
        meta["namespace"] = target.namespace
        ns = self.store.get(("", "namespaces"), ("", target.namespace))
        if ns is None:
            raise not_found("", "namespaces", target.namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f'{target.resource.plural} "{meta.get("name", "")}" is forbidden: unable to create '
                f"new content in namespace {target.namespace} because it is being terminated",
                reason="Forbidden",
            )
        return target.namespace

    def _update(self, request: web.Request, target: Target, body: Obj) -> Obj:
        self._check_dry_run(request)
        manager = self._field_manager(request)
        resource = target.resource
        assert target.name is not None
        self._check_type(target, body)
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("name") != target.name:
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({target.name})",
            )
        if resource.namespaced and meta.get("namespace") not in (None, "", target.namespace):
            raise ApiError(
                400,
                _NAMESPACE_MISMATCH,
            )
        old = self._get(target)
        body_rv = meta.get("resourceVersion")
        if not body_rv and not resource.builtin:
            raise invalid_field(
                resource.kind,
                resource.group,
                target.name,
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
                "FieldValueInvalid",
            )
        if body_rv and body_rv != old["metadata"]["resourceVersion"]:
            raise conflict(resource.group, resource.plural, target.name)
        if target.subresource == "status":
            new = copy.deepcopy(old)
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(body)
            if resource.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            if resource.builtin:
                self._prepare_builtin(resource, new)
        return self._finish_update(request, target, old, new, manager, apply_entry=False)

    def _finish_update(
        self,
        request: web.Request | None,
        target: Target,
        old: Obj,
        new: Obj,
        manager: str,
        *,
        apply_entry: bool,
    ) -> Obj:
        resource = target.resource
        assert target.name is not None
        new["apiVersion"] = target.api_version
        new["kind"] = resource.kind
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta["generation"] = old_meta.get("generation", 1)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if not apply_entry:
            meta["managedFields"] = copy.deepcopy(old_meta.get("managedFields", []))
        if target.subresource is None:
            self._validate_metadata(resource, new)
        final = self._admit(request, target, "UPDATE", old, new, manager, apply_entry)
        final["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if not final["metadata"].get("managedFields"):
            final["metadata"].pop("managedFields", None)
        if _spec_part(final) != _spec_part(old) or (
            not resource.status_subresource and final.get("status") != old.get("status")
        ):
            final["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        if _same_object(old, final):
            return self._render(old, target)
        key = (target.namespace or "", target.name)
        if meta.get("deletionTimestamp") and not final["metadata"].get("finalizers"):
            deleted = self._remove(resource, key, final)
            return self._render(deleted, target)
        if resource.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self.registry.add(resource_from_crd(final))
        stored = self.store.write(resource.key, key, final, "MODIFIED")
        return self._render(stored, target)

    def _patch(self, request: web.Request, target: Target, raw: bytes) -> tuple[Obj, int]:
        self._check_dry_run(request)
        resource = target.resource
        assert target.name is not None
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        is_apply = content_type == _APPLY
        force_text = request.query.get("force")
        if force_text is not None and not is_apply:
            raise invalid_field(
                "PatchOptions",
                "meta.k8s.io",
                "",
                "force",
                "Forbidden: may not be specified for non-apply patch",
                "FieldValueForbidden",
            )
        if content_type not in (_MERGE, _JSON_PATCH, _STRATEGIC, _APPLY):
            raise ApiError(
                415, f'the body of the request was in an unknown format: "{content_type}"'
            )
        if content_type == _STRATEGIC and not resource.builtin:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{_JSON_PATCH}, {_MERGE}, {_APPLY}, {_APPLY_CBOR}",
            )
        manager = self._field_manager(request, required=is_apply)
        try:
            patch = yaml.safe_load(raw) if is_apply else json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, f"the patch body is not valid: {exc}") from exc
        if is_apply:
            return self._apply(request, target, patch, manager, _truthy(force_text))
        old = self._get(target)
        if content_type == _JSON_PATCH:
            patched = json_patch(old, patch)
        else:
            if not isinstance(patch, dict):
                raise ApiError(400, "a merge patch body must be a JSON object")
            body_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if body_rv and body_rv != old["metadata"]["resourceVersion"]:
                raise conflict(resource.group, resource.plural, target.name)
            patched = merge_patch(old, patch)
        patched_meta = patched.get("metadata")
        if not isinstance(patched_meta, dict):
            raise ApiError(422, "metadata must be an object")
        if patched_meta.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
            raise conflict(resource.group, resource.plural, target.name)
        if patched_meta.get("name") != target.name:
            raise ApiError(400, "the name of the object may not be changed by a patch")
        if target.subresource == "status":
            new = copy.deepcopy(old)
            if "status" in patched:
                new["status"] = patched["status"]
            else:
                new.pop("status", None)
        else:
            new = patched
            if resource.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            if resource.builtin:
                self._prepare_builtin(resource, new)
        return self._finish_update(request, target, old, new, manager, apply_entry=False), 200

    def _apply(
        self, request: web.Request, target: Target, body: Any, manager: str, force: bool
    ) -> tuple[Obj, int]:
        """Server-side apply (F30–F39)."""
        resource = target.resource
        assert target.name is not None
        if not isinstance(body, dict):
            raise ApiError(400, "an apply body must be an object")
        if body.get("apiVersion") != target.api_version or body.get("kind") != resource.kind:
            raise ApiError(
                400,
                f"apiVersion and kind of the apply body ({body.get('apiVersion')}, "
                f"{body.get('kind')}) must match the URL ({target.api_version}, {resource.kind})",
            )
        meta = body.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != target.name:
            raise ApiError(
                400,
                f"metadata.name of the apply body must match the name on the URL ({target.name})",
            )
        if resource.namespaced and meta.get("namespace") not in (None, "", target.namespace):
            raise ApiError(
                400,
                _NAMESPACE_MISMATCH,
            )
        live = self.store.get(resource.key, (target.namespace or "", target.name))
        if live is None:
            if target.subresource is not None:
                raise not_found(resource.group, resource.plural, target.name)
            return self._create_object(request, target, body, manager, apply_body=body, force=force)
        body_rv = meta.get("resourceVersion")
        if body_rv and body_rv != live["metadata"]["resourceVersion"]:
            raise conflict(resource.group, resource.plural, target.name)
        applied = copy.deepcopy(body)
        applied["metadata"] = {
            k: v for k, v in meta.items() if k not in (*_SERVER_METADATA, "namespace", "name")
        }
        applied["metadata"].update({"name": target.name})
        try:
            new = managed.apply(
                live,
                applied,
                manager=manager,
                api_version=target.api_version,
                subresource=target.subresource,
                status_subresource=resource.status_subresource,
                force=force,
                schema=_structure(resource, target.version),
                now=_now(),
            )
        except managed.ApplyConflict as exc:
            raise ApiError(
                409,
                exc.message,
                reason="Conflict",
                details={
                    "name": target.name,
                    "group": resource.group,
                    "kind": resource.plural,
                    "causes": exc.causes,
                },
            ) from exc
        return self._finish_update(request, target, live, new, manager, apply_entry=True), 200

    def _delete(self, request: web.Request, target: Target, raw: bytes) -> Obj:
        self._check_dry_run(request)
        resource = target.resource
        assert target.name is not None
        old = self._get(target)
        options: Obj = {}
        if raw.strip():
            try:
                options = json.loads(raw)
            except ValueError as exc:
                raise ApiError(400, f"invalid DeleteOptions: {exc}") from exc
        preconditions = (options or {}).get("preconditions") or {}
        if preconditions.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
            raise conflict(resource.group, resource.plural, target.name)
        if preconditions.get("uid") not in (None, old["metadata"]["uid"]):
            raise conflict(resource.group, resource.plural, target.name)
        key = (target.namespace or "", target.name)
        review = AdmissionRequest(
            operation="DELETE",
            group=resource.group,
            version=target.version,
            resource=resource.plural,
            subresource=None,
            namespace=target.namespace,
            name=target.name,
            object=None,
            old_object=copy.deepcopy(old),
            user="sandbox-admin",
            field_manager="",
        )
        self._run_hook(lambda: self.admission.validate(review))
        if resource.key == ("", "namespaces"):
            return self._render(self._delete_namespace(old), target)
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return self._render(old, target)
            marked = copy.deepcopy(old)
            marked["metadata"]["deletionTimestamp"] = _now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            return self._render(self.store.write(resource.key, key, marked, "MODIFIED"), target)
        return self._render(self._remove(resource, key, old), target)

    def _remove(self, resource: Resource, key: tuple[str, str], final: Obj) -> Obj:
        """Delete an object; ``final`` is its last state (after its last finalizer went)."""
        deleted = self.store.delete(resource.key, key, final=final)
        assert deleted is not None
        if resource.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            group = deleted["spec"]["group"]
            plural = deleted["spec"]["names"]["plural"]
            self.registry.remove(group, plural)
            self.store.drop_resource((group, plural))
        if resource.namespaced:
            self._finish_namespace(key[0])
        return deleted

    def _delete_namespace(self, ns_obj: Obj) -> Obj:
        """Simplified cascade (F12): objects without finalizers go at once, objects with
        finalizers are marked; the namespace stays ``Terminating`` until it is empty."""
        name = ns_obj["metadata"]["name"]
        marked = copy.deepcopy(ns_obj)
        if not marked["metadata"].get("deletionTimestamp"):
            marked["metadata"]["deletionTimestamp"] = _now()
            marked.setdefault("status", {})["phase"] = "Terminating"
            marked = self.store.write(("", "namespaces"), ("", name), marked, "MODIFIED")
        for resource in self.registry.all():
            if not resource.namespaced:
                continue
            for obj in list(self.store.items(resource.key, name)):
                key = (name, obj["metadata"]["name"])
                if obj["metadata"].get("finalizers"):
                    if not obj["metadata"].get("deletionTimestamp"):
                        updated = copy.deepcopy(obj)
                        updated["metadata"]["deletionTimestamp"] = _now()
                        self.store.write(resource.key, key, updated, "MODIFIED")
                else:
                    self.store.delete(resource.key, key)
        remaining = self._finish_namespace(name)
        return remaining or marked

    def _finish_namespace(self, name: str) -> Obj | None:
        ns = self.store.get(("", "namespaces"), ("", name))
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return None
        for resource in self.registry.all():
            if resource.namespaced and any(True for _ in self.store.items(resource.key, name)):
                return None
        return self.store.delete(("", "namespaces"), ("", name))

    def _seed_object(self, group: str, plural: str, version: str, body: Obj) -> None:
        """Create an object at start-up, as the cluster's own components would."""
        resource = self.registry.get(group, plural)
        assert resource is not None
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": _now(), "generation": 1})
        obj["apiVersion"] = resource.api_version(version)
        obj["kind"] = resource.kind
        if resource.builtin:
            self._prepare_builtin(resource, obj)
        self.store.write(resource.key, (meta.get("namespace", ""), meta["name"]), obj, "ADDED")


def _structure(resource: Resource, version: str) -> Any:
    schema = resource.schema(version)
    return schema.root if schema is not None else None


def _crd_status(crd: Obj) -> Obj:
    names = dict((crd.get("spec") or {}).get("names") or {})
    now = _now()
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": [
            v["name"] for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")
        ],
    }


async def _write_event(response: web.StreamResponse, kind: str, obj: Obj) -> None:
    line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")) + "\n"
    await response.write(line.encode())


def _verb_of(request: web.Request) -> str:
    """The Kubernetes verb of a request, for faults and the journal (F53)."""
    method = request.method
    parts = [p for p in request.path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] not in (["api"], ["apis"]) or not rest:
        return method.lower()  # non-resource request (version, discovery, health): "get"
    if (
        rest[:1] == ["namespaces"]
        and len(rest) >= 3
        and not (len(rest) == 3 and rest[2] == "status")
    ):
        rest = rest[2:]
    is_collection = len(rest) <= 1
    if method == "GET":
        if is_collection:
            return "watch" if _truthy(request.query.get("watch")) else "list"
        return "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("the fake API server is not listening")


def load_crd_documents(path: Path) -> list[Obj]:
    """Every CustomResourceDefinition in a YAML file, or in the ``*.yaml`` files of a folder."""
    files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if path.is_dir() else [path]
    crds: list[Obj] = []
    for file in files:
        # libyaml when present: the Kueue CRD files take ~1 s to parse in pure Python.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for doc in yaml.load_all(file.read_text(), Loader=loader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


@contextlib.asynccontextmanager
async def fake_cluster(name: str, **options: Any) -> AsyncIterator[FakeCluster]:
    """Start one fake cluster for the duration of a block (F22)."""
    cluster = FakeCluster(name, **options)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()
