"""A small Kubernetes REST client and informer for the emulated Kueue controllers.

The Kueue emulation talks to the fake API servers only over HTTPS, through the same kubeconfigs
users get, like the real Kueue does. It deliberately does not use kubernetes_asyncio (that is the
production client of ``dispatcher.k8s``): a second, independent client keeps the fake server
honest. Only what the emulation needs is here: get, list, create, merge patch, server-side apply,
delete, and a list-then-watch informer that re-lists on 410.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import aiohttp

from dispatcher.topology.resources import (
    ADMISSION_CHECKS as ADMISSION_CHECKS,
)
from dispatcher.topology.resources import (
    CLUSTER_QUEUES as CLUSTER_QUEUES,
)
from dispatcher.topology.resources import (
    COHORTS as COHORTS,
)
from dispatcher.topology.resources import (
    CONFIGMAPS as CONFIGMAPS,
)
from dispatcher.topology.resources import (
    EVENTS as EVENTS,
)
from dispatcher.topology.resources import (
    JOBS as JOBS,
)
from dispatcher.topology.resources import (
    KUEUE as KUEUE,
)
from dispatcher.topology.resources import (
    LOCAL_QUEUES as LOCAL_QUEUES,
)
from dispatcher.topology.resources import (
    MULTIKUEUE_CLUSTERS as MULTIKUEUE_CLUSTERS,
)
from dispatcher.topology.resources import (
    MULTIKUEUE_CONFIGS as MULTIKUEUE_CONFIGS,
)
from dispatcher.topology.resources import (
    NAMESPACES as NAMESPACES,
)
from dispatcher.topology.resources import (
    NODES as NODES,
)
from dispatcher.topology.resources import (
    RESOURCE_FLAVORS as RESOURCE_FLAVORS,
)
from dispatcher.topology.resources import (
    SECRETS as SECRETS,
)
from dispatcher.topology.resources import (
    WORKLOAD_PRIORITY_CLASSES as WORKLOAD_PRIORITY_CLASSES,
)
from dispatcher.topology.resources import (
    WORKLOADS as WORKLOADS,
)
from dispatcher.topology.resources import (
    Resource as Resource,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def closed_under_read(error: BaseException) -> bool:
    """Whether ``error`` is aiohttp's bare ``RuntimeError("Connection closed.")``, raised for a
    read after the connection was closed under it (aiohttp >= 3.10.6): a cut stream, to be
    retried like an :class:`aiohttp.ClientError` (the product's own client has the same rule,
    ``dispatcher.k8s.client.closed_under_read``)."""
    return type(error) is RuntimeError and str(error) == "Connection closed."


@contextlib.contextmanager
def _closed_as_connection_error() -> Iterator[None]:
    """Raise a read on a connection closed under it (:func:`closed_under_read`) as the
    :class:`aiohttp.ClientConnectionError` every caller already retries; anything else passes
    unchanged."""
    try:
        yield
    except RuntimeError as error:
        if not closed_under_read(error):
            raise
        raise aiohttp.ClientConnectionError(str(error)) from error


MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class KubeError(Exception):
    """A non-2xx answer, with the Status body."""

    def __init__(self, status: int, body: Obj | str, method: str, path: str) -> None:
        message = body.get("message", "") if isinstance(body, dict) else str(body)
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": body}
        self.message = message


def ssl_context_from_kubeconfig(
    kubeconfig: Mapping[str, Any],
) -> tuple[str, str, ssl.SSLContext | None]:
    """Server URL, token and TLS context of the current context of a kubeconfig.

    Only the form Kueue accepts is supported: inline CA data and a bearer token.
    """
    current = kubeconfig.get("current-context")
    contexts = {c["name"]: c["context"] for c in kubeconfig.get("contexts") or []}
    clusters = {c["name"]: c["cluster"] for c in kubeconfig.get("clusters") or []}
    users = {u["name"]: u["user"] for u in kubeconfig.get("users") or []}
    if current not in contexts:
        raise ValueError("kubeconfig: current-context names no context")
    context = contexts[current]
    cluster = clusters.get(context.get("cluster"))
    user = users.get(context.get("user"))
    if cluster is None or user is None:
        raise ValueError("kubeconfig: the current context names a missing cluster or user")
    server = cluster.get("server", "")
    token = user.get("token")
    if not token:
        raise ValueError("kubeconfig: the user has no token")
    tls: ssl.SSLContext | None = None
    if server.startswith("https://"):
        ca = cluster.get("certificate-authority-data")
        if not ca:
            raise ValueError("kubeconfig: certificate-authority-data is required")
        tls = ssl.create_default_context(cadata=base64.b64decode(ca).decode("ascii"))
    return server, token, tls


class KubeClient:
    """One connection pool to one cluster."""

    def __init__(
        self,
        kubeconfig: Mapping[str, Any],
        *,
        user_agent: str = "kueue-emulator",
        timeout: float = 10.0,
    ) -> None:
        self.server, self._token, self._tls = ssl_context_from_kubeconfig(kubeconfig)
        self._user_agent = user_agent
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _http(self) -> aiohttp.ClientSession:
        if self._closed:
            # A stopped remote may still be referenced by a reconcile in flight: fail like an
            # unreachable cluster instead of opening a pool nobody will close.
            raise aiohttp.ClientConnectionError(f"client for {self.server} is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._tls if self._tls else False),
                headers={
                    "Authorization": f"Bearer {self._token}",
                    "User-Agent": self._user_agent,
                    "Accept": "application/json",
                },
            )
        return self._session

    async def close(self) -> None:
        """Close the connection pool; later requests fail with ``ClientConnectionError``."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request; raises :class:`KubeError` for a non-2xx answer."""
        url = self.server + path + (("?" + urlencode(dict(query))) if query else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._http().request(
            method,
            url,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        ) as response:
            with _closed_as_connection_error():
                raw = await response.read()
            try:
                parsed: Any = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode(errors="replace")
            if response.status >= 300:
                raise KubeError(response.status, parsed or "", method, path)
            return parsed

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            found: Obj = await self.request("GET", resource.path(namespace, name))
        except KubeError as error:
            if error.status == 404:
                return None
            raise
        return found

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
    ) -> Obj:
        """A list (``items`` and ``metadata.resourceVersion``)."""
        query = {"labelSelector": label_selector} if label_selector else None
        listed: Obj = await self.request("GET", resource.path(namespace), query=query)
        return listed

    async def create(self, resource: Resource, body: Obj) -> Obj:
        """POST an object."""
        namespace = body.get("metadata", {}).get("namespace")
        created: Obj = await self.request("POST", resource.path(namespace), body=body)
        return created

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str,
    ) -> Obj:
        """A JSON merge patch (RFC 7386)."""
        patched: Obj = await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            query={"fieldManager": field_manager},
            body=patch,
            content_type=MERGE_PATCH,
        )
        return patched

    async def apply(
        self,
        resource: Resource,
        body: Obj,
        *,
        subresource: str | None = None,
        field_manager: str,
        force: bool = True,
    ) -> Obj | None:
        """Server-side apply of ``body`` (which names the object)."""
        meta = body["metadata"]
        query = {"fieldManager": field_manager}
        if force:
            query["force"] = "true"
        applied: Obj | None = await self.request(
            "PATCH",
            resource.path(meta.get("namespace"), meta["name"], subresource),
            query=query,
            body=body,
            content_type=APPLY_PATCH,
        )
        return applied

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> bool:
        """Delete; False when it was already gone."""
        try:
            await self.request("DELETE", resource.path(namespace, name))
        except KubeError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        timeout_seconds: int = 60,
        label_selector: str | None = None,
    ) -> AsyncIterator[Obj]:
        """The events of one watch request (the caller handles ERROR events)."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        async with self._http().get(
            self.server + resource.path() + "?" + urlencode(query),
            timeout=aiohttp.ClientTimeout(total=timeout_seconds + 10, sock_connect=self._timeout),
        ) as response:
            if response.status >= 300:
                raise KubeError(response.status, await response.text(), "WATCH", resource.path())
            # A read on a connection closed under it (seen on real kube-apiserver, CI at
            # a44fba7) is a cut stream, retried.
            with _closed_as_connection_error():
                async for line in response.content:
                    if line.strip():
                        yield json.loads(line)


class Informer:
    """A list-then-watch cache of one resource in one cluster (all namespaces).

    ``on_change`` is called after every change (synchronously, on the event loop). The loop
    re-lists on 410 Expired and retries with backoff (from ``initial_backoff``, doubling up to
    ``max_backoff``) on connection errors; ``synced`` is set after the first successful list.
    ``label_selector`` restricts the cache to matching objects (list and watch).
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        on_change: Callable[[str, Obj], None] | None = None,
        *,
        watch_timeout: int = 30,
        max_backoff: float = 2.0,
        initial_backoff: float = 0.05,
        label_selector: str | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.on_change = on_change
        self.objects: dict[tuple[str, str], Obj] = {}
        self.synced = asyncio.Event()
        self.connected = False
        self.last_error: str = ""
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self._initial_backoff = initial_backoff
        self.label_selector = label_selector

    @staticmethod
    def key(obj: Obj) -> tuple[str, str]:
        """(namespace, name) of an object."""
        meta = obj.get("metadata", {})
        return (meta.get("namespace", ""), meta.get("name", ""))

    def get(self, name: str, namespace: str = "") -> Obj | None:
        """A cached object (a copy)."""
        found = self.objects.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def items(self) -> list[Obj]:
        """Every cached object (copies)."""
        return [copy.deepcopy(o) for _, o in sorted(self.objects.items())]

    def values(self) -> list[Obj]:
        """Every cached object, in key order, **not copied: read-only**.

        For hot read-only paths (a controller's pass over the whole cache), where
        :meth:`items` would deep-copy every object on every pass. The informer replaces a
        cached object on each change and never modifies one in place, so a caller may keep
        these across awaits (they go stale like copies, never change under it), but must not
        modify them or anything inside them: copy the part it means to change (a patch built
        from an object copies what it takes, or only references it for serialisation).
        """
        return [o for _, o in sorted(self.objects.items())]

    def _notify(self, kind: str, obj: Obj) -> None:
        if self.on_change is not None:
            self.on_change(kind, obj)

    async def run(self) -> None:
        """List, then watch, forever (until cancelled)."""
        backoff = self._initial_backoff
        while True:
            try:
                listed = await self.client.list(self.resource, label_selector=self.label_selector)
                fresh = {self.key(o): o for o in listed.get("items", [])}
                for key, obj in list(self.objects.items()):
                    if key not in fresh:
                        del self.objects[key]
                        self._notify("DELETED", obj)
                for key, obj in fresh.items():
                    if self.objects.get(key) != obj:
                        self.objects[key] = obj
                        self._notify("MODIFIED", obj)
                self.connected = True
                self.last_error = ""
                self.synced.set()
                self._notify("SYNCED", {})
                backoff = self._initial_backoff
                rv = listed["metadata"]["resourceVersion"]
                await self._watch_from(rv)
            except (aiohttp.ClientError, OSError, TimeoutError, KubeError) as error:
                self.connected = False
                self.last_error = str(error) or type(error).__name__
                self._notify("DISCONNECTED", {})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    async def _watch_from(self, rv: str) -> None:
        while True:  # each watch ends after timeoutSeconds; resume from the last resourceVersion
            async for event in self.client.watch(
                self.resource,
                rv,
                timeout_seconds=self._watch_timeout,
                label_selector=self.label_selector,
            ):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return  # re-list
                    raise KubeError(obj.get("code", 500), obj, "WATCH", self.resource.path())
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind == "BOOKMARK":
                    continue
                key = self.key(obj)
                if kind == "DELETED":
                    self.objects.pop(key, None)
                else:
                    self.objects[key] = obj
                self._notify(str(kind), obj)
