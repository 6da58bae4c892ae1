"""The aiohttp application of a fake cluster's API port, and its middleware (F28, F53, F58).

Three middlewares wrap every request, outermost first: the journal records it with its final
status (F58), auth checks the bearer token (F28), faults inject errors, delays and late answers
(F53, F54). One catch-all route hands the request on (to :class:`.routing.Router`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from dispatcher_sandbox.fake_apiserver.errors import ApiError
from dispatcher_sandbox.fake_apiserver.faults import JournalEntry
from dispatcher_sandbox.fake_apiserver.objects import truthy
from dispatcher_sandbox.fake_apiserver.state import ClusterState

JOURNALED = web.RequestKey("journaled", bool)
VERB = web.RequestKey("verb", str)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY = 64 * 1024 * 1024

# Paths a cluster with ``anonymous_health`` answers without a token.
_ANONYMOUS_PATHS = ("/version", "/healthz", "/livez", "/readyz")


def json_response(body: Any, status: int = 200) -> web.Response:
    """A compact JSON answer."""
    return web.Response(
        status=status,
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type="application/json",
    )


def error_response(error: ApiError) -> web.Response:
    """A ``kind: Status`` failure answer with the error's headers (F8)."""
    response = json_response(error.body(), error.code)
    response.headers.update(error.headers)
    return response


def same_token(given: str, expected: str) -> bool:
    """Constant-time comparison that also copes with non-ASCII header bytes (F28)."""
    return secrets.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"), expected.encode()
    )


def verb_of(request: web.Request) -> str:
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
            return "watch" if truthy(request.query.get("watch")) else "list"
        return "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def journal_request(cluster: ClusterState, request: web.Request, status: int) -> None:
    """Record a request in the journal, once: at its end, or when a watch starts streaming."""
    request[JOURNALED] = True
    cluster.journal.record(
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


class Middleware:
    """The middlewares of one cluster's API port."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster

    @web.middleware
    async def journal(self, request: web.Request, handler: Handler) -> web.StreamResponse:
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
                journal_request(self.cluster, request, status)

    @web.middleware
    async def auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # F28: a bearer token on every request, optionally except health and version.
        cluster = self.cluster
        if cluster.anonymous_health and request.path in _ANONYMOUS_PATHS:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not same_token(token, cluster.token):
            return error_response(ApiError(401, "Unauthorized"))
        return await handler(request)

    @web.middleware
    async def faults(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        verb = verb_of(request)
        request[VERB] = verb
        picked = self.cluster.faults.pick(verb, request.path, request.headers.get("User-Agent", ""))
        if picked.delay:
            await asyncio.sleep(picked.delay)
        fault = picked.error
        if fault is not None:
            error = ApiError(fault.code, fault.message or f"injected fault {fault.id}")
            if fault.retry_after is not None:
                error.headers["Retry-After"] = str(fault.retry_after)
            return error_response(error)
        response = await handler(request)
        if picked.hold:
            # The request took effect (a write is stored and its watch event sent); only its
            # answer is late. A client that gives up meanwhile does not undo it.
            await asyncio.sleep(picked.hold)
        return response


def build_app(cluster: ClusterState, handler: Handler) -> web.Application:
    """The API port's application: the middlewares around one catch-all route to ``handler``."""
    middleware = Middleware(cluster)
    app = web.Application(
        middlewares=[middleware.journal, middleware.auth, middleware.faults],
        client_max_size=MAX_BODY,
    )
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


def bound_port(runner: web.AppRunner) -> int:
    """The port a started runner listens on (the free one picked for port 0)."""
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("the fake API server is not listening")
