"""Clients for the manager and worker clusters, and a small typed wrapper over them.

- :func:`client_from_kubeconfig` builds an ``ApiClient`` from a kubeconfig dict **after**
  validating it (kubernetes_asyncio runs ``exec`` plugins otherwise) and inside error
  handling (a bad CA fails at construction with ``ssl.SSLError``).
- :func:`client_from_kubeconfig_file` is for the dispatcher's own connection to the manager
  cluster from one file (the operator's own credentials, not a Secret); the full search
  (``--kubeconfig``, ``$KUBECONFIG``, in-cluster, ``~/.kube/config``) is
  :mod:`dispatcher.k8s.loading`.
- :class:`KubeApi` wraps one ``ApiClient``: every call has an explicit timeout (without
  ``_request_timeout`` kubernetes_asyncio waits forever), bodies are plain dicts, and
  errors come out as :class:`~dispatcher.k8s.errors.ApiError`.

One ``KubeApi`` per cluster, long-lived, closed explicitly: :meth:`KubeApi.close` runs shielded
and bounded, so it completes even in a cancelled scope.

The kubernetes_asyncio and anyio facts behind these rules, and their tests:
``docs/fake-apiserver.md#9-client-facts``.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import importlib.metadata
import json
import ssl
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import anyio
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from dispatcher.k8s.errors import ApiError, ApiUnreachable
from dispatcher.k8s.kubeconfig import BAD, KubeconfigError, validate_kubeconfig
from dispatcher.k8s.loading import manager_client, resolve_manager_connection
from dispatcher.k8s.ratelimit import TokenBucket
from dispatcher.k8s.resources import EVENTS, SECRETS, ResourceRef
from dispatcher.k8s.transport import settle_transport

Obj = dict[str, Any]
Query = Sequence[tuple[str, str]]


def _version() -> str:
    # Not ``dispatcher.__version__``: the root package imports the plugin layer (above k8s).
    try:
        return importlib.metadata.version("multikueue-dispatcher")
    except importlib.metadata.PackageNotFoundError:
        return "0"


USER_AGENT = f"multikueue-dispatcher/{_version()}"
DEFAULT_TIMEOUT = 30.0
CLOSE_TIMEOUT = 5.0

# Transport failures: no HTTP answer at all.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    asyncio.TimeoutError,
    OSError,
)
_CLOSED_UNDER_READ = "Connection closed."


def closed_under_read(error: BaseException) -> bool:
    """Whether ``error`` is aiohttp's bare ``RuntimeError("Connection closed.")``: a response
    body read after its connection was closed under it (aiohttp >= 3.10.6; seen on a watch
    stream against real kube-apiserver). A transport failure like the others, though not an
    :class:`aiohttp.ClientError`; any other ``RuntimeError`` is a bug and is not caught."""
    return type(error) is RuntimeError and str(error) == _CLOSED_UNDER_READ


@contextlib.contextmanager
def transport_failures() -> Iterator[None]:
    """Raise a transport failure under the block (:data:`TRANSPORT_ERRORS`, or a read on a
    connection closed under it, :func:`closed_under_read`) as its :class:`ApiUnreachable`
    (:func:`translate`); anything else passes unchanged."""
    try:
        yield
    except TRANSPORT_ERRORS as error:
        raise translate(error) from error
    except RuntimeError as error:
        if not closed_under_read(error):
            raise
        raise translate(error) from error


async def client_from_kubeconfig(
    config: Mapping[str, Any],
    *,
    user_agent: str = USER_AGENT,
    temp_file_path: str | None = None,
) -> ApiClient:
    """A new ``ApiClient`` for a kubeconfig dict from a Secret, validated first (C62).

    Raises :class:`~dispatcher.k8s.kubeconfig.KubeconfigError`: the validation's reasons, or
    ``BadKubeConfig`` when kubernetes_asyncio cannot load it (for example CA data that is not a
    certificate). The caller owns the client and must close it.
    """
    valid = validate_kubeconfig(config)
    try:
        api: ApiClient = await k8s_config.new_client_from_config_dict(
            valid.config, context=valid.context, temp_file_path=temp_file_path
        )
    except ssl.SSLError as error:
        raise KubeconfigError(
            BAD, f"clusters: the TLS configuration cannot be loaded ({error.reason or 'SSL'})"
        ) from None
    except (ConfigException, ValueError, TypeError, binascii.Error, OSError) as error:
        # Messages of the loader may quote credentials: report the class only.
        raise KubeconfigError(
            BAD, f"kubeconfig: cannot be loaded ({type(error).__name__})"
        ) from None
    settle_transport(api)
    api.user_agent = user_agent
    return api


async def client_from_kubeconfig_file(
    path: str, *, context: str | None = None, user_agent: str = USER_AGENT
) -> ApiClient:
    """A client from the operator's own kubeconfig file (as ``run --kubeconfig FILE``), not
    validated: it is trusted like kubectl's (it may use exec plugins, for example). Raises
    :class:`~dispatcher.k8s.errors.ManagerConfigError`."""
    return await manager_client(resolve_manager_connection(path, context), user_agent=user_agent)


async def close_client(api: ApiClient, within: float = CLOSE_TIMEOUT) -> None:
    """Close an ``ApiClient`` shielded from cancellation and bounded by ``within`` seconds."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(within):
        await api.close()


def _timeout(value: float | aiohttp.ClientTimeout) -> aiohttp.ClientTimeout:
    if isinstance(value, aiohttp.ClientTimeout):
        return value
    return aiohttp.ClientTimeout(total=value)


def translate(error: BaseException) -> ApiError:
    """The :class:`ApiError` for a kubernetes_asyncio or transport exception."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, ApiException):
        return ApiError.from_body(
            int(error.status or 0), error.body, error.headers, str(error.reason or "")
        )
    if isinstance(error, asyncio.TimeoutError):
        return ApiUnreachable("request timed out")
    return ApiUnreachable(f"{type(error).__name__}: {error}")


@dataclass(frozen=True)
class ObjectList:
    """The items of a (complete, all pages) LIST and the list's resourceVersion."""

    items: list[Obj]
    resource_version: str


class KubeApi:
    """One cluster's API: raw JSON requests with explicit timeouts and translated errors.

    ``request_timeout`` is the default total timeout of a request in seconds.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        request_timeout: float = DEFAULT_TIMEOUT,
        name: str = "",
        limiter: TokenBucket | None = None,
    ):
        self.api_client = api_client
        self.request_timeout = request_timeout
        self.name = name
        self.limiter = limiter

    async def throttle(self) -> None:
        """Wait for the client-side rate limit (``qps``/``burst``) before a request."""
        if self.limiter is not None:
            await self.limiter.acquire()

    def limited_by(self, limiter: TokenBucket | None, name: str) -> KubeApi:
        """A view of this cluster's API with a rate limit of its own: the same connection pool
        and timeout, requests counted against ``limiter`` instead of this one's.

        As controller-runtime's event recorder, whose clientset gets a token bucket of its own
        from the same settings: the Events of a burst do not take the status writes' tokens.
        Closing the view closes the shared client: close only the original.
        """
        return KubeApi(
            self.api_client, request_timeout=self.request_timeout, name=name, limiter=limiter
        )

    @classmethod
    async def from_kubeconfig(
        cls,
        config: Mapping[str, Any],
        *,
        request_timeout: float = DEFAULT_TIMEOUT,
        name: str = "",
        limiter: TokenBucket | None = None,
    ) -> KubeApi:
        """Validate ``config`` and build a client (:func:`client_from_kubeconfig`)."""
        return cls(
            await client_from_kubeconfig(config),
            request_timeout=request_timeout,
            name=name,
            limiter=limiter,
        )

    async def close(self) -> None:
        """Close the client (shielded, bounded): safe in ``finally`` of a cancelled task."""
        await close_client(self.api_client)

    async def __aenter__(self) -> KubeApi:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- raw requests ----------------------------------------------------------------------

    async def open(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str | None = None,
        request_timeout: float | aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send a request and return the unread response (for watch streams).

        Raises :class:`ApiError` for a non-2xx answer (the response is then released) and
        :class:`ApiUnreachable` for transport failures. The caller must release the response.
        """
        await self.throttle()
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            response: aiohttp.ClientResponse = await self.api_client.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=_timeout(
                    self.request_timeout if request_timeout is None else request_timeout
                ),
            )
        except ApiException as error:
            raise translate(error) from error
        except TRANSPORT_ERRORS as error:
            raise translate(error) from error
        if not 200 <= response.status <= 299:
            try:
                with transport_failures():
                    raw = await response.read()
            except ApiUnreachable:
                raw = b""
            finally:
                response.release()
            raise ApiError.from_body(response.status, raw, response.headers, response.reason or "")
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """Send a request and return the JSON answer (a dict)."""
        response = await self.open(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            request_timeout=request_timeout,
        )
        try:
            with transport_failures():
                raw = await response.read()
        finally:
            response.release()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError as error:
            raise ApiError(response.status, "BadResponse", "the answer is not JSON") from error
        if not isinstance(answer, dict):
            raise ApiError(response.status, "BadResponse", "the answer is not a JSON object")
        return answer

    # --- typed helpers ---------------------------------------------------------------------

    async def get(self, resource: ResourceRef, name: str, namespace: str | None = None) -> Obj:
        """GET one object (404 raises :class:`ApiError` with ``not_found``)."""
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        request_timeout: float | None = None,
    ) -> ObjectList:
        """LIST every page of a collection (``namespace`` None: all namespaces)."""
        items: list[Obj] = []
        token = ""
        while True:
            query = selector_query(label_selector, field_selector)
            query.append(("limit", str(page_size)))
            if token:
                query.append(("continue", token))
            page = await self.request(
                "GET", resource.path(namespace), query=query, request_timeout=request_timeout
            )
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return ObjectList(items, str(meta.get("resourceVersion") or ""))

    async def create(self, resource: ResourceRef, body: Obj, namespace: str | None = None) -> Obj:
        """POST a new object."""
        return await self.request("POST", resource.path(namespace), body=body)

    async def replace(
        self, resource: ResourceRef, name: str, body: Obj, namespace: str | None = None
    ) -> Obj:
        """PUT an object (optimistic concurrency through ``metadata.resourceVersion``)."""
        return await self.request("PUT", resource.path(namespace, name), body=body)

    async def get_custom_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> Obj:
        """GET a custom object (cluster-scoped when ``namespace`` is None)."""
        ref = ResourceRef(group, version, plural, namespaced=namespace is not None)
        return await self.get(ref, name, namespace)

    async def list_custom_objects(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        namespaced: bool = True,
    ) -> ObjectList:
        """LIST custom objects (``namespace`` None: all namespaces, or a cluster-scoped kind when
        ``namespaced`` is False)."""
        ref = ResourceRef(group, version, plural, namespaced=namespaced)
        return await self.list(ref, namespace, label_selector=label_selector)

    async def get_secret(self, namespace: str, name: str) -> Obj:
        """GET a Secret (``data`` values are base64)."""
        return await self.get(SECRETS, name, namespace)

    async def list_secrets(
        self, namespace: str, *, label_selector: str | None = None
    ) -> ObjectList:
        """LIST the Secrets of a namespace."""
        return await self.list(SECRETS, namespace, label_selector=label_selector)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        """POST a core/v1 Event."""
        return await self.create(EVENTS, body, namespace)


def selector_query(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    """Query parameters for optional label and field selectors."""
    query: list[tuple[str, str]] = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query
