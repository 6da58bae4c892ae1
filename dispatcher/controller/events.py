"""Events off the hot path: a bounded background recorder that aggregates repeats.

A reconcile hands an Event to :meth:`EventRecorder.record`, which never blocks and never makes
a request: the Event is queued and one background task (:meth:`EventRecorder.run`) sends it.
Repeats are aggregated the way client-go's event correlator does it, keyed by the involved
object, reason, type and message:

- a repeat of an Event still waiting to be sent only raises its ``count`` (no request at all);
- a repeat of an Event sent less than ``aggregate_seconds`` ago is sent as a JSON merge patch of
  that Event's ``count`` and ``lastTimestamp`` (one request, no new object), or created anew
  when the Event has expired meanwhile (404);
- anything else is a new Event.

The queue holds at most ``capacity`` distinct Events; one more is dropped (counted as an
``event`` error and logged at most once per second of drops) and nothing waits for room. A
failed request is logged and counted, never retried: an Event is advice, and the next decision
for the same reason records it again.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.ratelimit import TokenBucket
from dispatcher.k8s.resources import EVENTS, KUEUE_GROUP, KUEUE_VERSION
from dispatcher.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["EVENT_COMPONENT", "EventRecorder"]

EVENT_COMPONENT = "multikueue-dispatcher"
MERGE_PATCH = "application/merge-patch+json"

_SEQUENCE = itertools.count()

EventKey = tuple[str, str, str, str, str, str]
"""(namespace, involved name, involved uid, reason, type, message)."""


def event_suffix() -> str:
    """A unique Event name suffix, as client-go's recorder makes it (the time in nanoseconds, in
    hex), plus a process-wide sequence number: no system entropy per Event (``uuid4`` reads
    ``os.urandom``, which is slow on some sandboxed kernels)."""
    return f"{time.time_ns():x}{next(_SEQUENCE) % 4096:03x}"


def _stamp(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Pending:
    body: dict[str, Any]
    count: int
    last: float
    name: str | None
    """The Event's name when it aggregates into one already sent (a patch), else None."""


@dataclass
class _Sent:
    name: str
    count: int
    at: float


class EventRecorder:
    """Records core/v1 Events on Workloads from a background task.

    ``api`` returns the client to send with (the manager's, which may be replaced). With a
    ``limiter``, Events are sent through a view of that client limited by it alone
    (:meth:`~dispatcher.k8s.client.KubeApi.limited_by`), so they never take the tokens of the
    status writes. ``now`` is the wall clock of the Event timestamps and of the aggregation
    window.
    """

    def __init__(
        self,
        api: Callable[[], KubeApi],
        *,
        capacity: int = 4096,
        senders: int = 2,
        aggregate_seconds: float = 600.0,
        remember: int = 4096,
        metrics: Metrics | None = None,
        now: Callable[[], float] | None = None,
        limiter: TokenBucket | None = None,
    ) -> None:
        if capacity < 1 or remember < 1 or senders < 1:
            raise ValueError("capacity, remember and senders must be at least 1")
        self.senders = senders
        self._api = api
        self._limiter = limiter
        self._view: tuple[KubeApi, KubeApi] | None = None
        """(the client ``api`` returned, its view limited by ``limiter``), rebuilt when the
        client is replaced."""
        self.capacity = capacity
        self.aggregate_seconds = aggregate_seconds
        self._remember = remember
        self._metrics = metrics
        self._now = now or time.time
        self._pending: OrderedDict[EventKey, _Pending] = OrderedDict()
        self._sent: OrderedDict[EventKey, _Sent] = OrderedDict()
        self._changed = anyio.Event()
        """Set (and replaced) whenever an Event is queued or a request ends."""
        self._sending = 0
        """Requests in flight."""
        self._last_drop_log = -1.0
        self.recorded = 0
        """Calls of :meth:`record`."""
        self.aggregated = 0
        """Calls folded into a queued Event (no request of their own)."""
        self.dropped = 0
        """Events dropped because the queue was full."""
        self.created = 0
        self.patched = 0
        self.failed = 0

    def __len__(self) -> int:
        return len(self._pending)

    def record(self, workload: Mapping[str, Any], reason: str, message: str, kind: str) -> None:
        """Queue an Event of ``kind`` (``Normal`` or ``Warning``) on ``workload``; returns at
        once, without any request."""
        self.recorded += 1
        meta = workload.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        key: EventKey = (
            namespace,
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
            reason,
            kind,
            message,
        )
        now = self._now()
        queued = self._pending.get(key)
        if queued is not None:
            queued.count += 1
            queued.last = now
            self.aggregated += 1
            return
        if len(self._pending) >= self.capacity:
            self._drop(key)
            return
        sent = self._sent.get(key)
        if sent is not None and now - sent.at <= self.aggregate_seconds:
            self._pending[key] = _Pending({}, sent.count + 1, now, sent.name)
        else:
            self._pending[key] = _Pending(
                self._body(meta, reason, message, kind, now), 1, now, None
            )
        self._notify()

    def _drop(self, key: EventKey) -> None:
        self.dropped += 1
        if self._metrics is not None:
            self._metrics.error("event")
        now = time.monotonic()
        if now - self._last_drop_log >= 1.0:
            self._last_drop_log = now
            log.warning(
                "event queue full (%d queued): dropped %s on %s/%s (%d dropped so far)",
                len(self._pending),
                key[3],
                key[0],
                key[1],
                self.dropped,
            )

    @staticmethod
    def _body(
        meta: Mapping[str, Any], reason: str, message: str, kind: str, now: float
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', '')}.{event_suffix()}",
                "namespace": meta.get("namespace", ""),
            },
            "involvedObject": {
                "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
                "kind": "Workload",
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": EVENT_COMPONENT,
            "firstTimestamp": _stamp(now),
            "lastTimestamp": _stamp(now),
            "count": 1,
        }

    async def run(self) -> None:
        """Send queued Events until cancelled, ``senders`` requests at a time."""
        async with anyio.create_task_group() as group:
            for _ in range(self.senders):
                group.start_soon(self._sender)

    def _notify(self) -> None:
        event, self._changed = self._changed, anyio.Event()
        event.set()

    async def _sender(self) -> None:
        while True:
            if self._pending:
                await self._send_one()
            else:
                await self._changed.wait()

    async def flush(self) -> None:
        """Send every queued Event now (in this task), and wait for the requests the senders
        have in flight; for shutdown and tests."""
        while self._pending or self._sending:
            if self._pending:
                await self._send_one()
            else:
                await self._changed.wait()

    async def _send_one(self) -> None:
        key, pending = self._pending.popitem(last=False)
        self._sending += 1
        try:
            name = await self._send(key, pending)
        finally:
            self._sending -= 1
            self._notify()
        if name is not None:
            self._sent[key] = _Sent(name, pending.count, pending.last)
            self._sent.move_to_end(key)
            while len(self._sent) > self._remember:
                self._sent.popitem(last=False)

    def _client(self) -> KubeApi:
        api = self._api()
        if self._limiter is None:
            return api
        if self._view is None or self._view[0] is not api:
            self._view = (api, api.limited_by(self._limiter, f"{api.name}-events"))
        return self._view[1]

    async def _send(self, key: EventKey, pending: _Pending) -> str | None:
        namespace = key[0]
        api = self._client()
        try:
            if pending.name is not None:
                try:
                    await api.request(
                        "PATCH",
                        EVENTS.path(namespace, pending.name),
                        body={"count": pending.count, "lastTimestamp": _stamp(pending.last)},
                        content_type=MERGE_PATCH,
                    )
                    self.patched += 1
                    return pending.name
                except ApiError as error:
                    if error.status != 404:
                        raise
                    # Expired (Events have a TTL): this occurrence becomes a new Event.
                    self._sent.pop(key, None)
                    meta = {"name": key[1], "namespace": namespace, "uid": key[2]}
                    pending.body = self._body(meta, key[3], key[5], key[4], pending.last)
                    pending.count = 1
            body = pending.body
            body["count"] = pending.count
            body["lastTimestamp"] = _stamp(pending.last)
            await api.create(EVENTS, body, namespace=namespace)
            self.created += 1
            return str(body["metadata"]["name"])
        except ApiError as error:
            self.failed += 1
            log.warning("could not record event %s on %s/%s: %s", key[3], namespace, key[1], error)
            if self._metrics is not None:
                self._metrics.error("event")
            return None
