"""The project's own list-then-watch loop (kopf's ``continuous_watch`` on anyio; why:
``docs/fake-apiserver.md#9-client-facts``).

:func:`list_watch` runs until cancelled and pushes typed events into an anyio memory object
stream (it never yields from inside a cancel scope):

1. LIST (all pages); every item is sent as an :class:`ObjectEvent` of type ``LISTED``, then a
   :class:`Listed` marker with the list's resourceVersion and the keys listed (a consumer drops
   what it holds and was not listed: objects deleted while nobody watched).
2. WATCH from that resourceVersion with ``allowWatchBookmarks``, a server-side
   ``timeoutSeconds`` **and** a client-side timeout, and an inactivity deadline pushed forward
   by every line (event or bookmark). A :class:`Watching` event tells that a stream is open.
3. When the stream ends, on the inactivity deadline, on ``ClientPayloadError`` or a connection
   error: watch again from the last resourceVersion seen (events and bookmarks). On 410 (an
   ``ERROR`` event or the HTTP status): go back to 1 (re-list).
4. Failures send a :class:`Disconnected` event and wait with exponential backoff (per stream,
   reset by the next successful list or event) on an injectable clock, or as long as the
   server's ``Retry-After`` says. A stream that stayed open at least ``healthy_stream``
   seconds and then ended or was cut is routine (a proxy or the server closing it; client-go's
   reflector draws the same line at 1 s): it resets the backoff and is watched again at once,
   without a :class:`Disconnected`; only a re-watch that fails too reports one. So a server
   that sends no bookmarks does not make quiet streams wait ever longer, and one cut stream
   does not mark the cluster disconnected.
5. A :class:`RetryNow` shared by the streams of one cluster cuts their backoff short: when one
   of them gets through again, or when someone who knows better (Kueue reporting the cluster
   ``Active`` again) says the server is back, every stream waiting out a delay tries at once
   instead of up to ``maximum`` seconds later. A try that fails again waits the next delay.

:class:`ObjectCache` applies these events to a dict of objects, as the mirrors do (optionally
through an ingest transform that keeps only what its readers use, and a re-list replacing the
contents at once at its marker).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from dispatcher.k8s.client import KubeApi, selector_query, transport_failures
from dispatcher.k8s.clock import SYSTEM_CLOCK, Clock
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.resources import ResourceRef

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

EventType = Literal["LISTED", "ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class ObjectEvent:
    """One object: listed (``LISTED``) or changed (``ADDED``, ``MODIFIED``, ``DELETED``)."""

    type: EventType
    object: Obj

    @property
    def key(self) -> Key:
        """``(namespace, name)`` of the object."""
        return object_key(self.object)

    @property
    def resource_version(self) -> str:
        """The object's resourceVersion."""
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class Listed:
    """A LIST completed: every listed object was sent before this marker."""

    resource_version: str
    keys: frozenset[Key]


@dataclass(frozen=True)
class Watching:
    """A watch stream is open from ``resource_version``."""

    resource_version: str


@dataclass(frozen=True)
class Disconnected:
    """A list or watch failed; the loop retries after ``retry_in`` seconds."""

    error: str
    status: int
    retry_in: float


WatchItem = ObjectEvent | Listed | Watching | Disconnected


def object_key(obj: Obj) -> Key:
    """``(namespace, name)`` of an object."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def key_text(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of an object (``/name`` when cluster-scoped): the work-queue key."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


@dataclass(frozen=True)
class BackoffPolicy:
    """Exponential backoff: ``initial * factor**(n-1)``, at most ``maximum`` seconds."""

    initial: float = 1.0
    factor: float = 2.0
    maximum: float = 60.0


@dataclass
class Backoff:
    """Retry delays of one stream."""

    policy: BackoffPolicy = field(default_factory=BackoffPolicy)
    failures: int = 0

    def next_delay(self) -> float:
        """Count a failure and return the delay before the next attempt."""
        self.failures += 1
        delay = self.policy.initial * self.policy.factor ** (self.failures - 1)
        return float(min(self.policy.maximum, delay))

    def reset(self) -> None:
        """A success: the next failure waits ``initial`` again."""
        self.failures = 0


@dataclass(frozen=True)
class WatchSettings:
    """Timeouts of the list-then-watch loop, in seconds.

    ``server_timeout`` is the watch's ``timeoutSeconds``; the client gives up on a stream after
    ``server_timeout + client_margin``; ``inactivity_timeout`` (None: off) ends a stream that
    sent nothing (not even a bookmark) for that long; ``connect_timeout`` bounds connecting;
    ``list_timeout`` bounds one LIST page; a stream open at least ``healthy_stream`` seconds
    ended normally even when it was cut (no backoff, no :class:`Disconnected`).
    """

    server_timeout: int = 300
    client_margin: float = 30.0
    inactivity_timeout: float | None = 150.0
    connect_timeout: float = 10.0
    list_timeout: float = 60.0
    page_size: int = 500
    healthy_stream: float = 1.0
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)


class RetryNow:
    """A signal that cuts short the backoff of every stream waiting on it (item 5 above).

    A stream takes a :meth:`ticket` when its request fails and pauses with it: a :meth:`fire`
    after that ticket ends the pause, even one that came before the pause began (a peer
    reconnected while this stream was still reporting its failure). Firing with nobody waiting
    does nothing.
    """

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.fired = 0
        """How often the signal fired."""

    def ticket(self) -> int:
        """Taken at a failure: what :meth:`pause` compares with."""
        return self.fired

    def fire(self) -> None:
        """End every pause whose ticket was taken before now."""
        self.fired += 1
        event, self._event = self._event, anyio.Event()
        event.set()

    async def pause(self, clock: Clock, seconds: float, ticket: int) -> bool:
        """Wait ``seconds`` on ``clock`` unless the signal fired after ``ticket`` was taken or
        fires meanwhile; True when it cut the pause short."""
        if self.fired != ticket:
            return True
        event = self._event
        woken = False
        async with anyio.create_task_group() as group:

            async def sleep() -> None:
                await clock.sleep(seconds)
                group.cancel_scope.cancel()

            async def wake() -> None:
                nonlocal woken
                await event.wait()
                woken = True
                group.cancel_scope.cancel()

            group.start_soon(sleep)
            group.start_soon(wake)
        return woken


async def _pause(
    clock: Clock, seconds: float, retry: RetryNow | None, ticket: int, path: str
) -> None:
    if retry is None:
        await clock.sleep(seconds)
    elif await retry.pause(clock, seconds, ticket):
        log.info("%s: retrying before the backoff ended (the cluster is reachable again)", path)


class _Expired(Exception):
    """410: re-list."""


class _WatchState:
    def __init__(self, resource_version: str) -> None:
        self.resource_version = resource_version
        self.events = 0  # object events of the current stream
        self.lines = 0  # lines of any kind (bookmarks too) of the current stream
        self.quiet = False  # the current stream ended on the inactivity deadline
        self.opened_at: float | None = None  # when the current stream was opened

    def lasted(self, clock: Clock, at_least: float) -> bool:
        """The current stream was open for ``at_least`` seconds."""
        return self.opened_at is not None and clock.monotonic() - self.opened_at >= at_least


async def list_watch(
    api: KubeApi,
    resource: ResourceRef,
    send: MemoryObjectSendStream[WatchItem],
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    settings: WatchSettings | None = None,
    clock: Clock = SYSTEM_CLOCK,
    retry: RetryNow | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """List then watch ``resource`` forever, sending :data:`WatchItem` s to ``send``.

    ``namespace`` None watches all namespaces (or a cluster-scoped kind). With ``tg.start``, the
    task reports started after the first successful LIST has been sent. ``retry`` (shared by the
    streams of one cluster) cuts a backoff delay short when it fires. Returns only when the
    receiving side is closed; closes ``send`` on exit.
    """
    settings = settings or WatchSettings()
    backoff = Backoff(settings.backoff)
    started = False
    path = resource.path(namespace)
    selectors = selector_query(label_selector, field_selector)
    async with send:
        try:
            while True:
                try:
                    resource_version = await _list(
                        api, resource, namespace, selectors, settings, send
                    )
                except ApiError as error:
                    await _failed(send, error, backoff, clock, retry, "list", path)
                    continue
                backoff.reset()
                if not started:
                    task_status.started()
                    started = True
                state = _WatchState(resource_version)
                while True:
                    state.opened_at = None
                    try:
                        await _watch_once(api, path, selectors, settings, state, send, clock)
                    except _Expired:
                        log.info(
                            "watch %s: resourceVersion %s expired, re-listing",
                            path,
                            state.resource_version,
                        )
                        break
                    except ApiError as error:
                        healthy = state.lasted(clock, settings.healthy_stream)
                        if state.events or healthy:
                            backoff.reset()
                        state.events = 0
                        if healthy:
                            log.info("watch %s: stream cut (%s), watching again", path, error)
                            continue
                        await _failed(send, error, backoff, clock, retry, "watch", path)
                        continue
                    if state.lasted(clock, settings.healthy_stream):
                        backoff.reset()  # a routine end, bookmarks or not
                    elif state.lines == 0 and not state.quiet:
                        # The server closed an empty stream at once: do not spin on it.
                        ticket = retry.ticket() if retry is not None else 0
                        await _pause(clock, backoff.next_delay(), retry, ticket, path)
                    elif state.events:
                        backoff.reset()
                    state.events = 0
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("watch %s: the receiver is gone", path)


async def _failed(
    send: MemoryObjectSendStream[WatchItem],
    error: ApiError,
    backoff: Backoff,
    clock: Clock,
    retry: RetryNow | None,
    what: str,
    path: str,
) -> None:
    ticket = retry.ticket() if retry is not None else 0
    delay = backoff.next_delay()
    if error.retry_after is not None:
        # The server said when to come back (429/503 Retry-After, e.g. a kube-apiserver whose
        # storage is still initialising): that pause, as client-go keeps it, neither stretched
        # by our backoff nor shortened by the signal.
        delay = error.retry_after
        retry = None
    log.warning("%s %s failed (%s); retrying in %.1fs", what, path, error, delay)
    await send.send(Disconnected(str(error), error.status, delay))
    await _pause(clock, delay, retry, ticket, path)


async def _list(
    api: KubeApi,
    resource: ResourceRef,
    namespace: str | None,
    selectors: list[tuple[str, str]],
    settings: WatchSettings,
    send: MemoryObjectSendStream[WatchItem],
) -> str:
    listed = await api.list(
        resource,
        namespace,
        label_selector=dict(selectors).get("labelSelector"),
        field_selector=dict(selectors).get("fieldSelector"),
        page_size=settings.page_size,
        request_timeout=settings.list_timeout,
    )
    keys = []
    for obj in listed.items:
        event = ObjectEvent("LISTED", obj)
        keys.append(event.key)
        await send.send(event)
    await send.send(Listed(listed.resource_version, frozenset(keys)))
    return listed.resource_version


def _lines(buffer: bytearray) -> Iterator[bytes]:
    while True:
        end = buffer.find(b"\n")
        if end < 0:
            return
        line = bytes(buffer[:end])
        del buffer[: end + 1]
        if line.strip():
            yield line


async def _watch_once(
    api: KubeApi,
    path: str,
    selectors: list[tuple[str, str]],
    settings: WatchSettings,
    state: _WatchState,
    send: MemoryObjectSendStream[WatchItem],
    clock: Clock,
) -> None:
    """One watch request; returns when the stream ends cleanly or goes quiet."""
    query = [
        *selectors,
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", state.resource_version),
        ("timeoutSeconds", str(settings.server_timeout)),
    ]
    timeout = aiohttp.ClientTimeout(
        total=settings.server_timeout + settings.client_margin,
        sock_connect=settings.connect_timeout,
    )
    try:
        response = await api.open("GET", path, query=query, request_timeout=timeout)
    except ApiError as error:
        if error.gone:
            raise _Expired from error
        raise
    inactivity = settings.inactivity_timeout
    state.lines = 0
    state.quiet = False
    state.opened_at = clock.monotonic()
    try:
        with transport_failures():
            await send.send(Watching(state.resource_version))
            buffer = bytearray()
            while True:
                with anyio.CancelScope(
                    deadline=anyio.current_time() + inactivity if inactivity else math.inf
                ) as scope:
                    chunk = await response.content.readany()
                if scope.cancelled_caught:
                    log.info("watch %s: nothing for %.1fs, watching again", path, inactivity)
                    state.quiet = True
                    return
                if not chunk:
                    return  # the server ended the stream (timeoutSeconds or shutdown)
                buffer.extend(chunk)
                for line in _lines(buffer):
                    state.lines += 1
                    await _handle(line, state, send)
    finally:
        response.release()


async def _handle(line: bytes, state: _WatchState, send: MemoryObjectSendStream[WatchItem]) -> None:
    try:
        event = json.loads(line)
        kind = event["type"]
        obj = event["object"]
    except (ValueError, KeyError, TypeError) as error:
        raise ApiError(0, "BadWatchEvent", "a watch line is not a watch event") from error
    if not isinstance(obj, dict):
        raise ApiError(0, "BadWatchEvent", "a watch event has no object")
    if kind == "ERROR":
        status = ApiError.from_body(int(obj.get("code") or 500), json.dumps(obj))
        if status.gone or status.reason in ("Expired", "Gone"):
            raise _Expired
        raise status
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    if kind == "BOOKMARK":
        if version:
            state.resource_version = version
        return
    if kind not in ("ADDED", "MODIFIED", "DELETED"):
        log.warning("watch: ignoring an event of unknown type %r", kind)
        return
    await send.send(ObjectEvent(kind, obj))
    # Only once the event is delivered: a cancelled send is seen again after a re-watch.
    if version:
        state.resource_version = version
    state.events += 1


Transform = Callable[[Obj], Obj]
"""An ingest transform (client-go's informer ``TransformFunc``): what a cache keeps of an object.
It must be pure (not change its argument) and accept any JSON object."""

Listener = Callable[[ObjectEvent | Listed], None]
"""Told of every change of a cache's contents, after it is applied: an ``ADDED``, ``MODIFIED``
or ``DELETED`` event (as transformed), or a :class:`Listed` marker (the contents were replaced
by a re-list at once). ``LISTED`` events change nothing until their marker."""


class ObjectCache:
    """Objects by ``(namespace, name)``, kept by applying :data:`WatchItem` s in order.

    ``synced`` turns True at the first :class:`Listed`; ``connected`` is False between a
    :class:`Disconnected` and the next list, stream or event.

    ``transform`` (None: keep objects whole) is applied to every object before it is kept,
    whatever the event type. A re-list is atomic: its ``LISTED`` objects are staged, and the
    contents are replaced at its :class:`Listed` marker (what was neither listed nor in the
    marker's keys is dropped), so a reader between the first ``LISTED`` event and the marker
    sees the old contents, and ``listeners`` see the re-list as one change. A staged list that
    is cut short (any other item before its marker) is dropped.
    """

    health_changes = 0
    """How often the ``synced`` or ``connected`` of any cache changed, in total: a reader that
    derives something from them (a mirror's health) recomputes it only when this moved."""

    def __init__(self, transform: Transform | None = None) -> None:
        self.objects: dict[Key, Obj] = {}
        self.transform = transform
        self.listeners: list[Listener] = []
        self.synced = False
        self.connected = False
        self.streaming = False
        """A watch stream is open now (its :class:`Watching` arrived; not after a list alone)."""
        self.resource_version = ""
        self.lists = 0
        self._listing: dict[Key, Obj] | None = None

    def apply(self, item: WatchItem) -> WatchItem:
        """Apply one event; returns it as applied (its object transformed)."""
        if isinstance(item, ObjectEvent):
            if self.transform is not None:
                item = ObjectEvent(item.type, self.transform(item.object))
            if not self.connected:
                self._health(self.synced, True)
            if item.type == "LISTED":
                if self._listing is None:
                    self._listing = {}
                self._listing[item.key] = item.object
                return item
            self._listing = None
            if item.type == "DELETED":
                self.objects.pop(item.key, None)
            else:
                self.objects[item.key] = item.object
            if item.resource_version:
                self.resource_version = item.resource_version
            self._notify(item)
        elif isinstance(item, Listed):
            listing = self._listing or {}
            self._listing = None
            objects = {key: obj for key, obj in self.objects.items() if key in item.keys}
            objects.update((key, obj) for key, obj in listing.items() if key in item.keys)
            self.objects = objects
            self._health(True, True)
            self.streaming = False
            self.resource_version = item.resource_version
            self.lists += 1
            self._notify(item)
        elif isinstance(item, Watching):
            self._listing = None
            self._health(self.synced, True)
            self.streaming = True
        else:
            self._listing = None
            self._health(self.synced, False)
            self.streaming = False
        return item

    def _health(self, synced: bool, connected: bool) -> None:
        if synced != self.synced or connected != self.connected:
            self.synced, self.connected = synced, connected
            ObjectCache.health_changes += 1

    def _notify(self, item: ObjectEvent | Listed) -> None:
        for listener in list(self.listeners):
            listener(item)

    def get(self, name: str, namespace: str = "") -> Obj | None:
        """One object, or None."""
        return self.objects.get((namespace, name))

    def items(self) -> list[Obj]:
        """All objects, sorted by key."""
        return [self.objects[key] for key in sorted(self.objects)]
