"""Live caches of one cluster's objects, fed by the list-then-watch loop of :mod:`dispatcher.k8s`.

A :class:`Mirror` runs one :func:`~dispatcher.k8s.watching.list_watch` per resource and applies
its events to an :class:`~dispatcher.k8s.watching.ObjectCache`. Decisions read these caches;
nothing asks the API per decision. A resource marked optional (the manager's LocalQueues, which
its RBAC may leave out) that answers 403 or 404 is reported unavailable instead of holding the
mirror in "disconnected". Every other failed list or watch counts as a ``watch`` error.

The streams of one mirror share a :class:`~dispatcher.k8s.watching.RetryNow`: when one of them
gets through after a failure while others are still waiting out their backoff (the cluster is
back), those try again at once; :meth:`Mirror.retry_now` does the same on someone else's word
(Kueue reporting the worker ``Active``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.clock import SYSTEM_CLOCK, Clock
from dispatcher.k8s.resources import ResourceRef
from dispatcher.k8s.watching import (
    Disconnected,
    ObjectCache,
    RetryNow,
    Transform,
    WatchItem,
    WatchSettings,
    list_watch,
)
from dispatcher.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["Mirror", "Watched"]

ChangeCallback = Callable[[str, WatchItem], None]
"""Called with the resource name and the event as the cache applied it (its object
transformed), after the cache applied it."""


@dataclass(frozen=True)
class Watched:
    """One resource a mirror keeps: where it is, which part of it, whether it may be missing,
    and what of each object (``transform``, applied before an object is cached and before the
    change callback sees it; None keeps objects whole; see :mod:`dispatcher.clusters.slim`)."""

    resource: ResourceRef
    namespace: str | None = None
    label_selector: str | None = None
    optional: bool = False
    transform: Transform | None = None


class Mirror:
    """The caches of one cluster."""

    def __init__(
        self,
        name: str,
        api: KubeApi,
        watched: Mapping[str, Watched],
        *,
        settings: WatchSettings | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_change: ChangeCallback | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.name = name
        self.api = api
        self.watched = dict(watched)
        self.caches = {key: ObjectCache(spec.transform) for key, spec in watched.items()}
        self.unavailable: dict[str, str] = {}
        """Optional resources the cluster does not serve us, with the reason."""
        self.last_error = ""
        self._settings = settings or WatchSettings()
        self._clock = clock
        self._on_change = on_change
        self._metrics = metrics
        self.retry = RetryNow()
        """Shared by this mirror's streams: firing it ends their backoff delays."""
        self._failing: set[str] = set()
        """Resources whose last item was a failure."""
        self._health_at = -1
        """:attr:`ObjectCache.health_changes` when ``_listed`` and ``_connected`` were derived
        (every decision reads them for each candidate; they change only with a cache's)."""
        self._listed = False
        self._connected = False

    def retry_now(self) -> None:
        """Make every stream waiting out a backoff delay try again now (no-op when none is
        failing)."""
        if self._failing:
            self.retry.fire()

    @property
    def synced(self) -> bool:
        """Every required resource has been listed at least once."""
        return all(
            cache.synced
            for key, cache in self.caches.items()
            if key not in self.unavailable or not self.watched[key].optional
        )

    @property
    def listed(self) -> bool:
        """Every required resource has been listed at least once (optional ones aside): the
        mirror holds something to decide from, connected or not."""
        if self._health_at != ObjectCache.health_changes:
            self._derive_health()
        return self._listed

    @property
    def connected(self) -> bool:
        """Every required resource's stream is healthy right now."""
        if self._health_at != ObjectCache.health_changes:
            self._derive_health()
        return self._connected

    def _derive_health(self) -> None:
        required = [c for k, c in self.caches.items() if not self.watched[k].optional]
        self._listed = all(cache.synced for cache in required)
        self._connected = all(cache.synced and cache.connected for cache in required)
        self._health_at = ObjectCache.health_changes

    @property
    def streaming(self) -> bool:
        """Every available resource has a watch stream open now (after a list, ``connected``
        holds before the stream is opened)."""
        return all(
            cache.streaming
            for key, cache in self.caches.items()
            if key not in self.unavailable or not self.watched[key].optional
        )

    def cache(self, key: str) -> ObjectCache:
        """The cache of one resource."""
        return self.caches[key]

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch every resource until cancelled; ``started`` once every watch is running."""
        async with anyio.create_task_group() as group:
            for key, spec in self.watched.items():
                send, receive = anyio.create_memory_object_stream[WatchItem](256)
                group.start_soon(self._consume, key, receive)
                group.start_soon(self._watch, spec, send)
            task_status.started()

    async def _watch(self, spec: Watched, send: MemoryObjectSendStream[WatchItem]) -> None:
        await list_watch(
            self.api,
            spec.resource,
            send,
            namespace=spec.namespace,
            label_selector=spec.label_selector,
            settings=self._settings,
            clock=self._clock,
            retry=self.retry,
        )

    async def _consume(self, key: str, receive: MemoryObjectReceiveStream[WatchItem]) -> None:
        cache = self.caches[key]
        spec = self.watched[key]
        async with receive:
            async for item in receive:
                if isinstance(item, Disconnected):
                    self._failing.add(key)
                    self.last_error = f"{spec.resource.plural}: {item.error}"
                    if spec.optional and item.status in (403, 404):
                        if key not in self.unavailable:
                            log.info(
                                "cluster %s: %s unavailable (%s); continuing without it",
                                self.name,
                                spec.resource.plural,
                                item.status,
                                extra={"cluster": self.name},
                            )
                        self.unavailable[key] = item.error
                    elif self._metrics is not None:
                        self._metrics.error("watch")
                else:
                    self.unavailable.pop(key, None)
                    if key in self._failing:
                        # Back after a failure: so is the server, most likely. Streams still
                        # waiting out a delay (their failure may not have reached us yet) retry.
                        self._failing.discard(key)
                        if self._failing:
                            log.info(
                                "cluster %s: %s reachable again; the other streams retry now",
                                self.name,
                                spec.resource.plural,
                                extra={"cluster": self.name},
                            )
                        self.retry.fire()
                item = cache.apply(item)
                if self._on_change is not None:
                    self._on_change(key, item)
