"""The admin endpoint of a fake cluster (F52 of docs/fake-apiserver.md).

Plain HTTP on 127.0.0.1, on its own port so that a cluster that is "down" can be brought back.
It is not part of discovery and needs the cluster's bearer token. Routes:

| method and path | does |
|---|---|
| ``GET /healthz`` | ``ok`` (no token needed) |
| ``GET /state`` | name, up, port, resourceVersion, open watches |
| ``GET``, ``POST``, ``DELETE /faults``; ``DELETE /faults/{id}`` | faults (F53, F54) |
| ``POST /down`` · ``POST /up`` | stop or resume listening (F56) |
| ``POST /watches/drop`` | ``{"path": regex, "abrupt": bool}``: close open watches (F55) |
| ``POST /watches/expire`` | ``{"count": n}``: the next n resumed watches get 410 (F57) |
| ``POST /history/truncate`` | forget the watch history (F57) |
| ``GET /journal`` · ``DELETE /journal`` | read or clear the request journal (F58) |
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Protocol

from aiohttp import web

from dispatcher_sandbox.fake_apiserver.app import same_token
from dispatcher_sandbox.fake_apiserver.faults import Fault, Faults, Journal
from dispatcher_sandbox.fake_apiserver.store import Store

_FAULT_FIELDS = {
    "kind",
    "verbs",
    "path",
    "count",
    "code",
    "message",
    "retry_after",
    "delay",
    "jitter",
    "probability",
    "user_agent",
    "hold",
}


class Administered(Protocol):
    """What the admin endpoint reads and drives of its cluster (a
    :class:`~dispatcher_sandbox.fake_apiserver.server.FakeCluster`)."""

    name: str
    token: str
    port: int
    store: Store
    faults: Faults
    journal: Journal

    @property
    def is_up(self) -> bool: ...

    async def down(self) -> None: ...

    async def up(self) -> None: ...

    def drop_watches(self, path: str = "", *, abrupt: bool = False) -> int: ...

    def expire_next_watches(self, count: int = 1) -> None: ...

    def truncate_history(self) -> None: ...


def admin_app(cluster: Administered) -> web.Application:
    """The aiohttp application of one cluster's admin endpoint."""

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/healthz":
            response: web.StreamResponse = await handler(request)
            return response
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not same_token(token, cluster.token):
            return web.json_response({"error": "Unauthorized"}, status=401)
        try:
            result: web.StreamResponse = await handler(request)
        except (ValueError, TypeError, KeyError, re.error) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return result

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def state(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "name": cluster.name,
                "up": cluster.is_up,
                "port": cluster.port,
                "resourceVersion": str(cluster.store.resource_version),
                "watches": [w.path for w in cluster.store.watchers()],
            }
        )

    async def list_faults(request: web.Request) -> web.Response:
        return web.json_response([f.to_dict() for f in cluster.faults.list()])

    async def add_fault(request: web.Request) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("a fault is a JSON object")
        unknown = set(body) - _FAULT_FIELDS
        if unknown:
            raise ValueError(
                f"unknown fault fields {sorted(unknown)}; known: {sorted(_FAULT_FIELDS)}"
            )
        body["verbs"] = tuple(body.get("verbs") or ())
        fault = cluster.faults.add(Fault(**body))
        return web.json_response(fault.to_dict(), status=201)

    async def clear_faults(request: web.Request) -> web.Response:
        return web.json_response([f.to_dict() for f in cluster.faults.clear()])

    async def remove_fault(request: web.Request) -> web.Response:
        removed = cluster.faults.remove(int(request.match_info["id"]))
        return web.json_response({"removed": removed}, status=200 if removed else 404)

    async def down(request: web.Request) -> web.Response:
        await cluster.down()
        return web.json_response({"up": False})

    async def up(request: web.Request) -> web.Response:
        await cluster.up()
        return web.json_response({"up": True, "port": cluster.port})

    async def drop_watches(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        dropped = cluster.drop_watches(body.get("path", ""), abrupt=bool(body.get("abrupt")))
        return web.json_response({"dropped": dropped})

    async def expire_watches(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        cluster.expire_next_watches(int(body.get("count", 1)))
        return web.json_response({"pending": cluster.faults.expire_next_watches})

    async def truncate(request: web.Request) -> web.Response:
        cluster.truncate_history()
        return web.json_response({"resourceVersion": str(cluster.store.resource_version)})

    async def journal(request: web.Request) -> web.Response:
        return web.json_response([dataclasses.asdict(e) for e in cluster.journal.entries()])

    async def clear_journal(request: web.Request) -> web.Response:
        cluster.journal.clear()
        return web.json_response({})

    app = web.Application(middlewares=[auth])
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/state", state)
    app.router.add_get("/faults", list_faults)
    app.router.add_post("/faults", add_fault)
    app.router.add_delete("/faults", clear_faults)
    app.router.add_delete("/faults/{id}", remove_fault)
    app.router.add_post("/down", down)
    app.router.add_post("/up", up)
    app.router.add_post("/watches/drop", drop_watches)
    app.router.add_post("/watches/expire", expire_watches)
    app.router.add_post("/history/truncate", truncate)
    app.router.add_get("/journal", journal)
    app.router.add_delete("/journal", clear_journal)
    return app
