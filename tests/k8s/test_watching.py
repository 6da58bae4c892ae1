"""The list-then-watch loop against a fake cluster (docs/fake-apiserver.md F55–F57 and section 9).

A consumer applies every event to an :class:`ObjectCache`; tests wait on conditions under
deadlines and finally compare the cache with a fresh LIST.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.resources import CLUSTER_QUEUES, LOCAL_QUEUES, NAMESPACES, WORKLOADS
from dispatcher.k8s.watching import (
    BackoffPolicy,
    Disconnected,
    Listed,
    ObjectCache,
    RetryNow,
    Watching,
    WatchItem,
    WatchSettings,
    list_watch,
)
from dispatcher_sandbox.fake_apiserver import FakeCluster

NS = "default"
DEADLINE = 10.0
FAST = WatchSettings(
    server_timeout=30,
    client_margin=5.0,
    inactivity_timeout=5.0,
    connect_timeout=2.0,
    list_timeout=5.0,
    backoff=BackoffPolicy(initial=0.05, factor=2.0, maximum=0.4),
)
Obj = dict[str, Any]


class Mirror:
    """A cache fed by the loop, with a condition to wait on and a log of every item."""

    def __init__(self) -> None:
        self.cache = ObjectCache()
        self.items: list[WatchItem] = []
        self.changed = anyio.Condition()

    async def consume(self, receive: Any) -> None:
        async with receive:
            async for item in receive:
                self.cache.apply(item)
                self.items.append(item)
                async with self.changed:
                    self.changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(DEADLINE):
            async with self.changed:
                while not predicate():
                    await self.changed.wait()

    def names(self) -> set[str]:
        return {name for _, name in self.cache.objects}

    def has(self, name: str, **fields: Any) -> bool:
        obj = self.cache.get(name, NS)
        return obj is not None and all(obj["spec"].get(k) == v for k, v in fields.items())


@asynccontextmanager
async def mirrored(
    api: KubeApi, settings: WatchSettings = FAST, **options: Any
) -> AsyncIterator[tuple[Mirror, TaskGroup]]:
    mirror = Mirror()
    send, receive = anyio.create_memory_object_stream[WatchItem](100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(mirror.consume, receive)
        with anyio.fail_after(DEADLINE):
            await tg.start(
                functools.partial(list_watch, api, WORKLOADS, send, settings=settings, **options)
            )
        await mirror.wait_for(lambda: mirror.cache.synced)
        yield mirror, tg
        tg.cancel_scope.cancel()


@asynccontextmanager
async def following(api: KubeApi, settings: WatchSettings, **options: Any) -> AsyncIterator[Mirror]:
    """The loop run into a :class:`Mirror` without waiting for its first list (which may fail);
    cancelled on exit."""
    mirror = Mirror()
    send, receive = anyio.create_memory_object_stream[WatchItem](100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(mirror.consume, receive)
        tg.start_soon(
            functools.partial(list_watch, api, WORKLOADS, send, settings=settings, **options)
        )
        yield mirror
        tg.cancel_scope.cancel()


def workload(name: str, labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"queueName": "lq", **spec},
    }


async def create(api: KubeApi, name: str, **options: Any) -> None:
    await api.create(WORKLOADS, workload(name, **options), NS)


async def update(api: KubeApi, name: str, **spec: Any) -> None:
    current = await api.get(WORKLOADS, name, NS)
    current["spec"].update(spec)
    await api.replace(WORKLOADS, name, current, NS)


async def delete(api: KubeApi, name: str) -> None:
    await api.request("DELETE", WORKLOADS.path(NS, name))


async def assert_converged(api: KubeApi, mirror: Mirror, label_selector: str | None = None) -> None:
    """The cache holds exactly what a fresh LIST returns, at the same resourceVersions."""
    fresh = await api.list(WORKLOADS, label_selector=label_selector)

    def versions(items: list[Obj]) -> dict[str, str]:
        return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}

    await mirror.wait_for(lambda: versions(mirror.cache.items()) == versions(fresh.items))


def watch_requests(cluster: FakeCluster) -> int:
    return sum(1 for e in cluster.journal.entries() if e.verb == "watch")


async def test_lists_then_follows_changes(cluster: FakeCluster, api: KubeApi) -> None:
    await create(api, "before")
    async with mirrored(api) as (mirror, _):
        assert mirror.cache.synced
        assert mirror.names() == {"before"}
        await cluster.wait_for_watches(1)
        await create(api, "after")
        await update(api, "before", priority=5)
        await delete(api, "after")
        await create(api, "third")
        await mirror.wait_for(lambda: mirror.has("before", priority=5) and mirror.has("third"))
        await assert_converged(api, mirror)
        assert mirror.cache.lists == 1


@pytest.mark.parametrize("abrupt", [False, True], ids=["clean", "abrupt"])
async def test_survives_dropped_watches(cluster: FakeCluster, api: KubeApi, abrupt: bool) -> None:
    async with mirrored(api) as (mirror, _):
        for round_ in range(3):
            await cluster.wait_for_watches(1)
            assert cluster.drop_watches(abrupt=abrupt) == 1
            # Written while no watch may be open: seen through the re-watch from the last rv.
            await create(api, f"wl-{round_}")
            await mirror.wait_for(lambda r=round_: mirror.has(f"wl-{r}"))
        await assert_converged(api, mirror)
        assert mirror.cache.lists == 1  # resumed from the resourceVersion, no re-list
        failures = [i for i in mirror.items if isinstance(i, Disconnected)]
        if abrupt:
            assert failures  # a cut stream is a failure (ClientPayloadError), with backoff
        else:
            assert not failures  # a clean end is a normal re-watch


class ClosedUnderRead:
    """A watch body whose first read finds its connection closed under it: aiohttp (>= 3.10.6)
    raises a bare ``RuntimeError("Connection closed.")`` then (CI at a44fba7, on real
    kube-apiserver, in the test world's own client)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.raised = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the rest of aiohttp's StreamReader, as it is

    async def readany(self) -> bytes:
        if not self.raised:
            self.raised = True
            raise RuntimeError("Connection closed.")
        data: bytes = await self.inner.readany()
        return data


async def test_a_connection_closed_under_a_read_is_a_cut_stream(
    cluster: FakeCluster, api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first watch's body read fails that way: the stream counts as cut (a ``Disconnected``
    item, retried with backoff from its resourceVersion), not as a crash of the mirror."""
    opened = api.open
    bodies: list[ClosedUnderRead] = []

    async def open_once_closed(method: str, path: str, **options: Any) -> Any:
        response = await opened(method, path, **options)
        if ("watch", "true") in options.get("query", ()) and not bodies:
            bodies.append(ClosedUnderRead(response.content))
            response.content = bodies[0]
        return response

    monkeypatch.setattr(api, "open", open_once_closed)
    async with mirrored(api) as (mirror, _):
        await create(api, "after")
        await mirror.wait_for(lambda: mirror.has("after"))
        [body] = bodies
        assert body.raised
        [failure] = [i for i in mirror.items if isinstance(i, Disconnected)]
        assert "Connection closed." in failure.error
        assert mirror.cache.lists == 1  # resumed from the resourceVersion


async def test_relists_on_410(cluster: FakeCluster, api: KubeApi) -> None:
    await create(api, "stays")
    await create(api, "goes")
    async with mirrored(api) as (mirror, _):
        await cluster.wait_for_watches(1)
        cluster.expire_next_watches(1)
        cluster.drop_watches()
        await delete(api, "goes")
        await create(api, "new")
        await mirror.wait_for(lambda: mirror.cache.lists == 2)
        await assert_converged(api, mirror)
        assert mirror.names() == {"stays", "new"}


async def test_relists_when_history_is_truncated(
    quiet_cluster: FakeCluster, quiet_api: KubeApi
) -> None:
    """The watch's resourceVersion fell out of the history (no bookmark moved it forward): the
    resumed watch gets 410 and the loop re-lists."""
    api, cluster = quiet_api, quiet_cluster
    async with mirrored(api) as (mirror, _):
        await cluster.wait_for_watches(1)
        await create(api, "a")
        await mirror.wait_for(lambda: mirror.has("a"))
        # Another kind moves the server's resourceVersion past the watch's, then history goes.
        await api.create(LOCAL_QUEUES, {"metadata": {"name": "lq"}, "spec": {}}, NS)
        cluster.truncate_history()
        cluster.drop_watches(abrupt=True)
        await mirror.wait_for(lambda: mirror.cache.lists == 2)
        await create(api, "b")
        await assert_converged(api, mirror)


async def test_inactivity_deadline_without_bookmarks(
    quiet_cluster: FakeCluster, quiet_api: KubeApi
) -> None:
    """A server that sends nothing (no bookmarks): the loop re-watches after the inactivity
    deadline instead of waiting on a dead stream."""
    settings = WatchSettings(server_timeout=30, inactivity_timeout=0.2, backoff=FAST.backoff)
    async with mirrored(quiet_api, settings) as (mirror, _):
        # Each stream that went quiet is replaced by a new one (a Watching item each).
        await mirror.wait_for(lambda: sum(isinstance(i, Watching) for i in mirror.items) >= 3)
        assert watch_requests(quiet_cluster) >= 3
        await create(quiet_api, "late")
        await mirror.wait_for(lambda: mirror.has("late"))
        await assert_converged(quiet_api, mirror)
        assert mirror.cache.lists == 1
        assert not [i for i in mirror.items if isinstance(i, Disconnected)]


async def test_cluster_down_then_up(cluster: FakeCluster, api: KubeApi) -> None:
    await create(api, "a")
    async with mirrored(api) as (mirror, _):
        await cluster.wait_for_watches(1)
        await cluster.down()
        await mirror.wait_for(lambda: not mirror.cache.connected)
        failures = sum(1 for i in mirror.items if isinstance(i, Disconnected))
        await mirror.wait_for(
            lambda: sum(1 for i in mirror.items if isinstance(i, Disconnected)) >= failures + 2
        )
        delays = [i.retry_in for i in mirror.items if isinstance(i, Disconnected)]
        assert delays == sorted(delays)  # exponential backoff while it stays down
        await cluster.up()
        await cluster.wait_for_watches(1)
        await create(api, "b")
        await update(api, "a", priority=1)
        await mirror.wait_for(lambda: mirror.has("b") and mirror.has("a", priority=1))
        await assert_converged(api, mirror)


async def test_label_selector(cluster: FakeCluster, api: KubeApi) -> None:
    await create(api, "mine", labels={"team": "a"})
    await create(api, "theirs", labels={"team": "b"})
    async with mirrored(api, label_selector="team=a") as (mirror, _):
        assert mirror.names() == {"mine"}
        await cluster.wait_for_watches(1)
        await create(api, "mine-2", labels={"team": "a"})
        current = await api.get(WORKLOADS, "mine", NS)
        current["metadata"]["labels"] = {"team": "b"}  # leaves the selection: DELETED
        await api.replace(WORKLOADS, "mine", current, NS)
        await mirror.wait_for(lambda: mirror.names() == {"mine-2"})
        await assert_converged(api, mirror, label_selector="team=a")


async def test_every_request_has_both_timeouts(cluster: FakeCluster, api: KubeApi) -> None:
    async with mirrored(api) as (_, _):
        await cluster.wait_for_watches(1)
    [watch] = [e for e in cluster.journal.entries() if e.verb == "watch"]
    assert "timeoutSeconds=30" in watch.query
    assert "allowWatchBookmarks=true" in watch.query


async def test_list_failures_back_off_then_recover(cluster: FakeCluster, api: KubeApi) -> None:
    fault = cluster.faults.error(503, verbs=("list",), count=3)
    async with following(api, FAST) as mirror:
        await mirror.wait_for(lambda: mirror.cache.synced)
    assert fault.fired == 3
    delays = [i.retry_in for i in mirror.items if isinstance(i, Disconnected)]
    assert delays == [0.05, 0.1, 0.2]
    assert {i.status for i in mirror.items if isinstance(i, Disconnected)} == {503}


SLOW = WatchSettings(
    server_timeout=30,
    inactivity_timeout=5.0,
    backoff=BackoffPolicy(initial=3600.0, factor=2.0, maximum=3600.0),
)
"""A backoff far beyond every deadline here: a stream that tries again inside one was told to."""


async def test_retry_now_ends_each_backoff_pause_early(cluster: FakeCluster, api: KubeApi) -> None:
    """Two failed lists, each followed by an hour's pause that the signal ends (watching.py
    item 5); without it the stream would not list inside the deadline."""
    fault = cluster.faults.error(503, verbs=("list",), count=2)
    retry = RetryNow()
    async with following(api, SLOW, retry=retry) as mirror:
        for failures in (1, 2):
            await mirror.wait_for(
                lambda n=failures: sum(isinstance(i, Disconnected) for i in mirror.items) == n
            )
            retry.fire()
        await mirror.wait_for(lambda: mirror.cache.synced)
    assert (fault.fired, retry.fired) == (2, 2)
    assert [i.retry_in for i in mirror.items if isinstance(i, Disconnected)] == [3600.0, 3600.0]


async def test_retry_after_is_waited_as_the_server_says(cluster: FakeCluster, api: KubeApi) -> None:
    """A 429 with ``Retry-After: 1`` (kube-apiserver while its storage initialises) is retried
    after 1 s, not after the stream's grown backoff."""
    cluster.faults.error(429, verbs=("list",), count=1, retry_after=1)
    async with following(api, SLOW) as mirror:
        await mirror.wait_for(lambda: mirror.cache.synced)
    assert [(i.status, i.retry_in) for i in mirror.items if isinstance(i, Disconnected)] == [
        (429, 1.0)
    ]


class NeverClock:
    """A clock whose sleeps end only when cancelled."""

    def monotonic(self) -> float:
        return 0.0

    def utcnow(self) -> Any:
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        await anyio.Event().wait()


class InstantClock(NeverClock):
    """A clock whose sleeps end at once."""

    async def sleep(self, seconds: float) -> None:
        await anyio.lowlevel.checkpoint()


RETRY_TICKETS = [
    pytest.param("fire-after-ticket", NeverClock(), True, id="fired-after-the-failure-ends-it"),
    pytest.param("fire-before-ticket", InstantClock(), False, id="fired-before-the-failure-not"),
    pytest.param("no-fire", InstantClock(), False, id="not-fired-waits-the-delay"),
]


@pytest.mark.parametrize(("when", "clock", "cut_short"), RETRY_TICKETS)
async def test_retry_now_counts_fires_after_the_ticket(
    when: str, clock: NeverClock, cut_short: bool
) -> None:
    """A fire between a stream's failure and the start of its pause still ends the pause;
    one from before the failure does not."""
    retry = RetryNow()
    if when == "fire-before-ticket":
        retry.fire()
    ticket = retry.ticket()
    if when == "fire-after-ticket":
        retry.fire()
    with anyio.fail_after(DEADLINE):
        assert await retry.pause(clock, 3600.0, ticket) is cut_short


async def test_one_namespace_and_cluster_scoped_kinds(cluster: FakeCluster, api: KubeApi) -> None:
    await api.create(NAMESPACES, {"metadata": {"name": "other"}})
    other = workload("elsewhere")
    other["metadata"]["namespace"] = "other"
    await api.create(WORKLOADS, other, "other")
    queues = ObjectCache()
    workloads = ObjectCache()
    send_q, receive_q = anyio.create_memory_object_stream[WatchItem](100)
    send_w, receive_w = anyio.create_memory_object_stream[WatchItem](100)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(DEADLINE):
            await tg.start(
                functools.partial(list_watch, api, CLUSTER_QUEUES, send_q, settings=FAST)
            )
            await tg.start(
                functools.partial(list_watch, api, WORKLOADS, send_w, namespace=NS, settings=FAST)
            )
            await cluster.wait_for_watches(2)
            await api.create(CLUSTER_QUEUES, {"metadata": {"name": "cq"}, "spec": {}})
            await create(api, "here")
            async with receive_q, receive_w:
                while queues.get("cq") is None:
                    queues.apply(await receive_q.receive())
                while workloads.get("here", NS) is None:
                    workloads.apply(await receive_w.receive())
        tg.cancel_scope.cancel()
    assert list(queues.objects) == [("", "cq")]
    assert list(workloads.objects) == [(NS, "here")]  # nothing from namespace "other"


STREAM_STATES = [
    pytest.param([], (False, False), id="nothing-yet"),
    pytest.param([Listed("1", frozenset())], (True, False), id="listed-stream-not-open"),
    pytest.param([Listed("1", frozenset()), Watching("1")], (True, True), id="stream-open"),
    pytest.param(
        [Listed("1", frozenset()), Watching("1"), Disconnected("refused", 0, 1.0)],
        (False, False),
        id="cut",
    ),
    pytest.param(
        [Watching("1"), Disconnected("x", 0, 1.0), Listed("2", frozenset())],
        (True, False),
        id="re-listed-stream-not-open-again",
    ),
]


@pytest.mark.parametrize(("items", "expected"), STREAM_STATES)
def test_cache_tells_a_listed_resource_from_an_open_stream(
    items: list[WatchItem], expected: tuple[bool, bool]
) -> None:
    """``connected`` holds once listed; ``streaming`` only while a watch stream is open."""
    cache = ObjectCache()
    for item in items:
        cache.apply(item)
    assert (cache.connected, cache.streaming) == expected
