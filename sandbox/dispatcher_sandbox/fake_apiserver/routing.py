"""From a request path to its answer: health, discovery, or a resource URL's verb (F1–F3).

:class:`Router` is the API port's one route. It resolves a resource URL to a
:class:`~.objects.Target`, hands it to the resource handlers or to the watch, and turns their
errors (:class:`~.errors.ApiError`, a hook's :class:`~.admission.Denied`) into ``Status``
answers, noting every 422 in :data:`.records.REJECTIONS`.
"""

from __future__ import annotations

from aiohttp import web

from dispatcher_sandbox.fake_apiserver import discovery
from dispatcher_sandbox.fake_apiserver.admission import Denied
from dispatcher_sandbox.fake_apiserver.app import error_response, json_response
from dispatcher_sandbox.fake_apiserver.errors import ApiError
from dispatcher_sandbox.fake_apiserver.handlers import ResourceHandlers, read_body
from dispatcher_sandbox.fake_apiserver.objects import Target, truthy
from dispatcher_sandbox.fake_apiserver.records import REJECTIONS, Rejection
from dispatcher_sandbox.fake_apiserver.registry import Registry
from dispatcher_sandbox.fake_apiserver.state import ClusterState
from dispatcher_sandbox.fake_apiserver.watch import WatchHandler

_NOT_FOUND = "the server could not find the requested resource"


def resolve_target(registry: Registry, group: str, version: str, rest: list[str]) -> Target:
    """What the path after ``/api/v1`` or ``/apis/{group}/{version}`` addresses (404 if
    nothing): a collection, an object or its status, in a namespace or not."""
    if not registry.group_versions().get(group) or version not in (
        registry.group_versions().get(group) or []
    ):
        raise ApiError(404, _NOT_FOUND)
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] == "status"):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise ApiError(404, _NOT_FOUND)
    resource = registry.lookup(group, version, rest[0])
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and not (sub == "status" and resource.status_subresource):
        raise ApiError(404, _NOT_FOUND)
    if namespace is not None and not resource.namespaced:
        raise ApiError(404, _NOT_FOUND)
    if resource.namespaced and namespace is None and name is not None:
        raise ApiError(404, _NOT_FOUND)
    return Target(resource, version, namespace, name, sub)


class Router:
    """The route of one cluster's API port."""

    def __init__(
        self, cluster: ClusterState, handlers: ResourceHandlers, watch: WatchHandler
    ) -> None:
        self.cluster = cluster
        self.handlers = handlers
        self.watch = watch

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        """The answer to any request that passed the middlewares."""
        try:
            return await self._route(request)
        except ApiError as error:
            self._note_rejection(request, error)
            return error_response(error)
        except Denied as denied:
            refusal = ApiError(denied.code, denied.message)
            self._note_rejection(request, refusal)
            return error_response(refusal)

    def _note_rejection(self, request: web.Request, error: ApiError) -> None:
        if error.code == 422:
            REJECTIONS.append(
                Rejection(
                    cluster=self.cluster.name,
                    expected=self.cluster.rejections_expected,
                    user_agent=request.headers.get("User-Agent", ""),
                    method=request.method,
                    path=request.path,
                    message=error.message,
                )
            )

    async def _route(self, request: web.Request) -> web.StreamResponse:
        registry = self.cluster.registry
        parts = [p for p in request.path.split("/") if p]
        if request.path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if parts == ["version"]:
            return json_response(discovery.version_info())
        is_discovery = parts[:1] in (["api"], ["apis"]) and len(parts) <= (
            2 if parts[0] == "api" else 3
        )
        if request.method != "GET" and is_discovery:
            raise ApiError(405, f"the server does not allow this method on {request.path}")
        if parts == ["api"]:
            return json_response(discovery.api_versions(self.cluster.host, self.cluster.port))
        if parts == ["apis"]:
            return json_response(discovery.api_group_list(registry))
        if parts == ["api", "v1"]:
            return json_response(discovery.resource_list(registry, "", "v1"))
        if len(parts) == 2 and parts[0] == "apis":
            return json_response(discovery.api_group(registry, parts[1]))
        if len(parts) == 3 and parts[0] == "apis":
            return json_response(discovery.resource_list(registry, parts[1], parts[2]))
        if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
            target = resolve_target(registry, "", "v1", parts[2:])
        elif len(parts) >= 4 and parts[0] == "apis":
            target = resolve_target(registry, parts[1], parts[2], parts[3:])
        else:
            raise ApiError(
                404, f"the server could not find the requested resource ({request.path})"
            )
        return await self._serve(request, target)

    async def _serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        handlers = self.handlers
        method = request.method
        if target.name is None:
            if method == "GET":
                if truthy(request.query.get("watch")):
                    return await self.watch.serve(request, target)
                return json_response(handlers.collection(request, target))
            if method == "POST" and target.subresource is None:
                if target.resource.namespaced and target.namespace is None:
                    raise ApiError(405, "create requires a namespace in the URL")
                obj, status = handlers.create(request, target, await read_body(request))
                return json_response(obj, status)
            raise ApiError(405, f"the server does not allow this method on {request.path}")
        if method == "GET":
            return json_response(handlers.get(target))
        if method == "PUT":
            return json_response(handlers.update(request, target, await read_body(request)))
        if method == "PATCH":
            raw = await request.read()
            obj, status = handlers.patch(request, target, raw)
            return json_response(obj, status)
        if method == "DELETE" and target.subresource is None:
            raw = await request.read()
            return json_response(handlers.delete(request, target, raw))
        raise ApiError(405, f"the server does not allow this method on {request.path}")
