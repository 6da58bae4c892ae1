"""Object storage, resourceVersions, watch history and fan-out (F5, F15–F19).

All writes happen synchronously on the event loop, so a handler that reads, computes and writes
without awaiting in between is atomic. Watchers get events through unbounded in-memory queues;
a watcher registers and replays history in one synchronous step, so no event can fall between.
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
ResourceKey = tuple[str, str]  # (group, plural)


@dataclass(frozen=True)
class Event:
    """One change, kept in history and sent to matching watchers."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: ResourceKey
    obj: Obj
    old: Obj | None


@dataclass(eq=False)
class Watcher:
    """One open watch stream."""

    resource: ResourceKey
    namespace: str | None
    path: str
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)
    abrupt: bool = False
    closed: bool = False

    def close(self, *, abrupt: bool) -> None:
        """End the stream: cleanly (end of body) or abruptly (connection cut mid-body, F55)."""
        if not self.closed:
            self.closed = True
            self.abrupt = abrupt
            self.queue.put_nowait(None)


class Expired(Exception):
    """The requested resourceVersion is older than the kept history (410, F15)."""


class Store:
    """Objects of one fake cluster, with one monotonic resourceVersion counter (F5)."""

    def __init__(self, history_size: int = 10_000) -> None:
        self._objects: dict[ResourceKey, dict[Key, Obj]] = {}
        self._rv = 1
        self._history: deque[Event] = deque(maxlen=history_size)
        # The oldest resourceVersion from which a watch can still resume.
        self._horizon = 1
        self._watchers: set[Watcher] = set()
        self._watchers_changed = asyncio.Event()

    @property
    def resource_version(self) -> int:
        """The current counter (a list's ``metadata.resourceVersion``)."""
        return self._rv

    def get(self, resource: ResourceKey, key: Key) -> Obj | None:
        """The stored object (not a copy: callers must not mutate it)."""
        return self._objects.get(resource, {}).get(key)

    def items(self, resource: ResourceKey, namespace: str | None = None) -> Iterator[Obj]:
        """Stored objects of a resource, optionally in one namespace, sorted by key."""
        objects = self._objects.get(resource, {})
        for key in sorted(objects):
            if namespace is None or key[0] == namespace:
                yield objects[key]

    def write(self, resource: ResourceKey, key: Key, obj: Obj, event_type: str) -> Obj:
        """Store ``obj`` (ADDED or MODIFIED), bump the counter, emit the event. Returns a copy."""
        self._rv += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        old = self._objects.setdefault(resource, {}).get(key)
        self._objects[resource][key] = obj
        self._emit(Event(self._rv, event_type, resource, obj, old))
        return copy.deepcopy(obj)

    def delete(self, resource: ResourceKey, key: Key, final: Obj | None = None) -> Obj | None:
        """Remove an object, bump the counter and emit DELETED with the final resourceVersion.

        ``final`` is the object's last state when the deletion comes from an update (the last
        finalizer removed); by default the stored object.
        """
        old = self._objects.get(resource, {}).pop(key, None)
        if old is None:
            return None
        self._rv += 1
        final = copy.deepcopy(final if final is not None else old)
        final["metadata"]["resourceVersion"] = str(self._rv)
        self._emit(Event(self._rv, "DELETED", resource, final, old))
        return copy.deepcopy(final)

    def drop_resource(self, resource: ResourceKey) -> list[Obj]:
        """Delete every object of a resource (its CRD was deleted)."""
        return [
            deleted
            for key in list(self._objects.get(resource, {}))
            if (deleted := self.delete(resource, key)) is not None
        ]

    def _emit(self, event: Event) -> None:
        self._history.append(event)
        if len(self._history) == self._history.maxlen:
            self._horizon = self._history[0].rv - 1
        for watcher in list(self._watchers):
            if watcher.resource == event.resource and not watcher.closed:
                watcher.queue.put_nowait(event)

    def truncate_history(self) -> None:
        """Forget all history: every resume from an older resourceVersion gets 410 (F57)."""
        self._history.clear()
        self._horizon = self._rv

    def subscribe(
        self,
        watcher: Watcher,
        since: int | None,
        replay_filter: Callable[[Event], bool],
    ) -> list[Event]:
        """Register a watcher; return the history events after ``since`` (F15).

        ``since`` None means "from now". Raises :class:`Expired` if ``since`` is older than the
        kept history.
        """
        replay: list[Event] = []
        if since is not None:
            if since < self._horizon:
                raise Expired(since)
            replay = [e for e in self._history if e.rv > since and e.resource == watcher.resource]
            replay = [e for e in replay if replay_filter(e)]
        self._watchers.add(watcher)
        self._notify_watchers_changed()
        return replay

    def unsubscribe(self, watcher: Watcher) -> None:
        """Forget a watcher."""
        self._watchers.discard(watcher)
        self._notify_watchers_changed()

    def _notify_watchers_changed(self) -> None:
        changed, self._watchers_changed = self._watchers_changed, asyncio.Event()
        changed.set()

    async def wait_for_watchers(self, predicate: Callable[[list[Watcher]], bool]) -> None:
        """Wait until ``predicate(open watchers)`` holds (tests bound this with a deadline)."""
        while not predicate(self.watchers()):
            await self._watchers_changed.wait()

    def watchers(self) -> list[Watcher]:
        """Open watchers."""
        return list(self._watchers)
