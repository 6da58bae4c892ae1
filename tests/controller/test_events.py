"""Issue 15: the background Event recorder (:mod:`dispatcher.controller.events`), counted.

The recorder is driven with an in-memory API that records each request and can be told to fail
one; nothing is timed. ``record`` never makes a request; repeats are aggregated: into the queued
Event while it waits (no request), into the sent Event by a merge patch of its count, anew after
that Event expired (404); a full queue drops and counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import pytest

from dispatcher.controller.events import EventRecorder
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.ratelimit import TokenBucket
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS


@dataclass
class MemoryApi:
    """The two calls the recorder makes, recorded; ``fail`` answers the next ones with it."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    fail: list[int] = field(default_factory=list)

    def _answer(self) -> None:
        if self.fail:
            status = self.fail.pop(0)
            raise ApiError(status, "NotFound" if status == 404 else "Failure", "failed")

    async def create(
        self, resource: object, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self.calls.append(("create", str(body["metadata"]["name"]), dict(body)))
        self._answer()
        return body

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method.lower(), path.rsplit("/", 1)[-1], dict(kwargs["body"])))
        self._answer()
        return {}


def workload(name: str = "job") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}}


def recorder(api: MemoryApi, **kwargs: Any) -> EventRecorder:
    clock = iter(float(t) for t in range(1_000, 100_000))
    return EventRecorder(lambda: cast(KubeApi, api), now=lambda: next(clock), **kwargs)


async def test_record_makes_no_request_and_flush_sends_once_per_event() -> None:
    api = MemoryApi()
    events = recorder(api)
    events.record(workload("a"), "Nominated", "to w1", "Normal")
    events.record(workload("b"), "Nominated", "to w1", "Normal")
    assert (api.calls, len(events)) == ([], 2)
    await events.flush()
    assert [(verb, body["involvedObject"]["name"]) for verb, _, body in api.calls] == [
        ("create", "a"),
        ("create", "b"),
    ]
    assert (events.created, len(events)) == (2, 0)


@pytest.mark.parametrize(
    ("script", "requests", "counts"),
    [
        pytest.param(
            ["record", "record", "record", "flush"], ["create"], [3], id="queued-repeats-fold-in"
        ),
        pytest.param(
            ["record", "flush", "record", "flush"],
            ["create", "patch"],
            [1, 2],
            id="sent-then-patched",
        ),
        pytest.param(
            ["record", "flush", "record", "record", "flush"],
            ["create", "patch"],
            [1, 3],
            id="patch-carries-every-repeat",
        ),
        pytest.param(
            ["record", "flush", "expire", "record", "flush"],
            ["create", "patch", "create"],
            [1, 1],
            id="expired-event-is-created-anew",
        ),
    ],
)
async def test_repeats_are_aggregated(
    script: list[str], requests: list[str], counts: list[int]
) -> None:
    """``counts``: the ``count`` each create or successful patch carried."""
    api = MemoryApi()
    events = recorder(api)
    for step in script:
        if step == "record":
            events.record(workload(), "Unplaceable", "no reachable worker", "Warning")
        elif step == "expire":
            api.fail.append(404)
        else:
            await events.flush()
    assert [verb for verb, _, _ in api.calls] == requests
    sent = [body.get("count") for verb, _, body in api.calls]
    if "expire" in script:
        sent = [sent[0], sent[2]]  # the patch answered 404
    assert sent == counts
    names = {name for _, name, _ in api.calls}
    assert len(names) == len([r for r in requests if r == "create"])


@pytest.mark.parametrize(
    ("other", "separate"),
    [
        pytest.param(("job", "Unplaceable", "another message", "Warning"), True, id="message"),
        pytest.param(("job", "QuotaReleased", "no reachable worker", "Warning"), True, id="reason"),
        pytest.param(("other", "Unplaceable", "no reachable worker", "Warning"), True, id="object"),
        pytest.param(("job", "Unplaceable", "no reachable worker", "Normal"), True, id="type"),
        pytest.param(("job", "Unplaceable", "no reachable worker", "Warning"), False, id="same"),
    ],
)
async def test_what_makes_an_event_distinct(
    other: tuple[str, str, str, str], separate: bool
) -> None:
    api = MemoryApi()
    events = recorder(api)
    events.record(workload(), "Unplaceable", "no reachable worker", "Warning")
    name, reason, message, kind = other
    events.record(workload(name), reason, message, kind)
    assert (len(events), events.aggregated) == ((2, 0) if separate else (1, 1))


async def test_a_full_queue_drops_and_counts_without_waiting() -> None:
    api = MemoryApi()
    events = recorder(api, capacity=3)
    for i in range(5):
        events.record(workload(f"w{i}"), "Nominated", "to w1", "Normal")
    # A repeat of a queued Event still folds in when the queue is full.
    events.record(workload("w0"), "Nominated", "to w1", "Normal")
    assert (len(events), events.dropped, events.aggregated, api.calls) == (3, 2, 1, [])
    await events.flush()
    assert [body["involvedObject"]["name"] for _, _, body in api.calls] == ["w0", "w1", "w2"]
    assert api.calls[0][2]["count"] == 2


async def test_a_failed_request_is_counted_and_the_next_events_go_out() -> None:
    api = MemoryApi(fail=[500])
    events = recorder(api)
    events.record(workload("a"), "Nominated", "to w1", "Normal")
    events.record(workload("b"), "Nominated", "to w1", "Normal")
    await events.flush()
    assert (events.failed, events.created, len(api.calls)) == (1, 1, 2)
    # The failed one was not remembered as sent: its repeat is a new Event, not a patch.
    events.record(workload("a"), "Nominated", "to w1", "Normal")
    await events.flush()
    assert [verb for verb, _, _ in api.calls] == ["create", "create", "create"]


async def test_the_senders_send_side_by_side_and_flush_waits_for_them() -> None:
    """With two senders, two requests are in flight at once (each held until both started),
    again after the queue ran dry once; ``flush`` returns only when both answered."""

    class Held(MemoryApi):
        def __init__(self) -> None:
            super().__init__()
            self.in_flight = 0
            self.most = 0
            self.both = anyio.Event()

        async def create(
            self, resource: object, body: dict[str, Any], namespace: str | None = None
        ) -> dict[str, Any]:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if self.in_flight == 2:
                self.both.set()
            with anyio.fail_after(10):
                await self.both.wait()
            self.in_flight -= 1
            return await super().create(resource, body, namespace)

    api = Held()
    events = recorder(api, senders=2)
    async with anyio.create_task_group() as group:
        group.start_soon(events.run)
        for burst in range(2):
            api.both = anyio.Event()
            events.record(workload(f"a{burst}"), "Nominated", "to w1", "Normal")
            events.record(workload(f"b{burst}"), "Nominated", "to w1", "Normal")
            with anyio.fail_after(10):
                await events.flush()
            assert (api.most, api.in_flight, events.created) == (2, 0, 2 * (burst + 1))
        group.cancel_scope.cancel()


class CountingBucket(TokenBucket):
    """A token bucket that never waits and counts the tokens taken."""

    def __init__(self) -> None:
        super().__init__(1.0, 1)
        self.taken = 0

    async def acquire(self) -> None:
        self.taken += 1


async def test_events_have_a_rate_limit_of_their_own() -> None:
    """With a limiter, the recorder's requests take its tokens, none of the manager client's (as
    controller-runtime's recorder, whose clientset has its own token bucket): a burst's Events
    do not slow its status writes. A replaced manager client gets a new view."""
    async with FakeCluster("events-limit", resources=KUEUE_SHORT_FORMS) as cluster:
        writes, events_bucket = CountingBucket(), CountingBucket()
        first = await KubeApi.from_kubeconfig(cluster.kubeconfig, name="manager", limiter=writes)
        second = await KubeApi.from_kubeconfig(cluster.kubeconfig, name="manager", limiter=writes)
        current = [first]
        async with first, second:
            events = EventRecorder(lambda: current[0], limiter=events_bucket)
            for name in ("a", "b", "c"):
                events.record(workload(name), "Nominated", "to w1", "Normal")
            await events.flush()
            current[0] = second
            events.record(workload("d"), "Nominated", "to w1", "Normal")
            await events.flush()
            assert (events.created, events_bucket.taken, writes.taken) == (4, 4, 0)
            listed = await first.request("GET", "/api/v1/namespaces/default/events")
        assert sorted(e["involvedObject"]["name"] for e in listed["items"]) == ["a", "b", "c", "d"]
        assert writes.taken == 1  # the GET above: the manager client's own limiter still applies


async def test_without_a_limiter_events_share_the_manager_clients() -> None:
    async with FakeCluster("events-shared", resources=KUEUE_SHORT_FORMS) as cluster:
        shared = CountingBucket()
        api = await KubeApi.from_kubeconfig(cluster.kubeconfig, name="manager", limiter=shared)
        async with api:
            events = EventRecorder(lambda: api)
            events.record(workload("a"), "Nominated", "to w1", "Normal")
            await events.flush()
        assert (events.created, shared.taken) == (1, 1)
