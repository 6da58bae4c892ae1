"""Watch streams (F14–F19, F55, F57): initial events, history replay, bookmarks, timeouts.

A watch registers with the store and replays history in one synchronous step (no event can fall
between), then streams until its ``timeoutSeconds``, until the client goes away, or until a test
closes it (:meth:`.server.FakeCluster.drop_watches`, ``down()``, ``stop()``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from aiohttp import web

from dispatcher_sandbox.fake_apiserver.app import journal_request
from dispatcher_sandbox.fake_apiserver.errors import ApiError
from dispatcher_sandbox.fake_apiserver.objects import Obj, Target, render_view, selection, truthy
from dispatcher_sandbox.fake_apiserver.state import ClusterState
from dispatcher_sandbox.fake_apiserver.store import Event, Expired, Watcher

log = logging.getLogger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def watch_type(event: Event, matches: Callable[[Obj], bool]) -> str | None:
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


async def write_event(response: web.StreamResponse, kind: str, obj: Obj) -> None:
    """One watch event: a JSON line."""
    line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")) + "\n"
    await response.write(line.encode())


class WatchHandler:
    """The watches of one cluster (``GET`` of a collection with ``watch=true``)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster

    async def serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        """Answer one watch request with a chunked stream of events."""
        store = self.cluster.store
        matches = selection(request.query, target)
        rv_text = request.query.get("resourceVersion", "")
        initial_events = truthy(request.query.get("sendInitialEvents"))
        bookmarks = truthy(request.query.get("allowWatchBookmarks"))
        timeout_text = request.query.get("timeoutSeconds")
        try:
            since = None if rv_text in ("", "0") or initial_events else int(rv_text)
            timeout = float(timeout_text) if timeout_text else None
        except ValueError as exc:
            raise ApiError(400, f"invalid watch parameter: {exc}") from exc
        watcher = Watcher(target.resource.key, target.namespace, request.path)

        def replay_filter(event: Event) -> bool:
            return watch_type(event, matches) is not None

        expired = False
        replay: list[Event] = []
        faults = self.cluster.faults
        if since is not None and faults.expire_next_watches > 0:
            faults.expire_next_watches -= 1
            expired = True
        else:
            try:
                replay = store.subscribe(watcher, since, replay_filter)
            except Expired:
                expired = True
        initial: list[Obj] = []
        if since is None and not expired:
            initial = [o for o in store.items(target.resource.key, target.namespace) if matches(o)]

        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        journal_request(self.cluster, request, 200)
        try:
            if expired:
                status = ApiError(
                    410,
                    f"too old resource version: {since} ({store.resource_version})",
                    reason="Expired",
                ).body()
                await write_event(response, "ERROR", status)
                await response.write_eof()
                return response
            for obj in initial:
                await write_event(response, "ADDED", render_view(obj, target))
            if initial_events:
                await write_event(
                    response, "BOOKMARK", self._bookmark(target, {INITIAL_EVENTS_END: "true"})
                )
            for event in replay:
                await self._send(response, event, target, matches)
            await self._stream(request, response, watcher, target, matches, timeout, bookmarks)
        except ConnectionResetError:
            # The client went away mid-stream; nothing left to tell it.
            log.debug("watch client disconnected: %s", request.path)
        finally:
            store.unsubscribe(watcher)
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
        next_bookmark = loop.time() + self.cluster.bookmark_interval
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
                    await write_event(response, "BOOKMARK", self._bookmark(target))
                    next_bookmark = now + self.cluster.bookmark_interval
                continue
            if event is None:  # closed by drop_watches, down() or stop()
                if watcher.abrupt and request.transport is not None:
                    request.transport.close()
                    return
                break
            await self._send(response, event, target, matches)
        await response.write_eof()

    def _bookmark(self, target: Target, annotations: dict[str, str] | None = None) -> Obj:
        metadata: Obj = {"resourceVersion": str(self.cluster.store.resource_version)}
        if annotations:
            metadata["annotations"] = annotations
        return {
            "kind": target.resource.kind,
            "apiVersion": target.api_version,
            "metadata": metadata,
        }

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
        kind = watch_type(event, matches)
        if kind is not None:
            await write_event(response, kind, render_view(event.obj, target))
