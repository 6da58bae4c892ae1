"""Issue 17: workloads that hold the manager's quota while no worker that could run them is
reachable ("unplaceable"), the workloads starved behind them, and the opt-in release policy.

The world has no Kueue emulation: the test writes the manager Workloads' status as Kueue would
(quota reserved with an admission, or pending with "insufficient unused quota") and Kueue's
verdict on a worker (the MultiKueueCluster's ``Active`` condition). The pipeline stand-in keeps
the active clusters a workload's ``test/allowed`` label names (a GPU-type filter in miniature).
Every count is of reconciles, Events, writes and gauge samples, never of time; the policy's
patience runs on a clock the test moves.
"""

from __future__ import annotations

import datetime
import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dispatcher.clusters.activeness import DEFAULT_STALE_GRACE_SECONDS as GRACE
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.outage import (
    RELEASED_AT,
    RELEASED_FOR,
    RELEASES,
    Placement,
    Released,
    release_backoff,
    release_due,
)
from dispatcher.k8s.resources import EVENTS, WORKLOADS
from dispatcher.telemetry.metrics import Metrics
from dispatcher_sandbox.fake_apiserver import handlers as fakeapi_handlers
from dispatcher_sandbox.fake_apiserver import server as fakeapi_server
from dispatcher_sandbox.harness.controller import (
    MERGE,
    FakeClock,
    World,
    world,
)
from dispatcher_sandbox.harness.unplaceable import (
    PENDING_STATUS,
    W2_LOOPS,
    add,
    allowed_only,
    holding,
    local_queue,
    reserved_status,
)
from dispatcher_sandbox.metrics_text import samples_of

Obj = dict[str, Any]
PATIENCE = 60.0
BASE = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class Now:
    """The loop's wall clock, moved by the test (the policy's patience runs on it)."""

    def __init__(self) -> None:
        self.value = 1_800_000_000.0

    def __call__(self) -> float:
        return self.value


async def events(env: World, reason: str, name: str | None = None) -> list[str]:
    """Messages of the Events of ``reason`` (on ``name``), once the recorder sent its queue."""
    await env.loop.events.flush()
    found = await env.api.list(EVENTS, "default")
    return [
        str(e.get("message"))
        for e in found.items
        if e.get("reason") == reason
        and (name is None or (e.get("involvedObject") or {}).get("name") == name)
    ]


async def counts(env: World, reason: str, name: str) -> list[int]:
    """The ``count`` of each Event of ``reason`` on ``name`` (aggregated repeats)."""
    await env.loop.events.flush()
    found = await env.api.list(EVENTS, "default")
    return [
        int(e.get("count") or 0)
        for e in found.items
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == name
    ]


def workload_of(env: World, name: str) -> Obj:
    found = env.mirrors.manager.cache("workloads").get(name, "default")
    assert found is not None, name
    return found


def is_active(env: World, name: str) -> bool:
    return (workload_of(env, name).get("spec") or {}).get("active") is not False


async def evict_released(env: World, name: str) -> None:
    """What Kueue does with a deactivated Workload: evicted, its quota released."""
    await env.api.request(
        "PATCH",
        WORKLOADS.path("default", name) + "/status",
        body={
            "status": {
                "admission": None,
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": "The workload is deactivated",
                        "lastTransitionTime": "2026-01-01T00:01:00Z",
                    },
                    {
                        "type": "Evicted",
                        "status": "True",
                        "reason": "Deactivated",
                        "message": "The workload is deactivated",
                        "lastTransitionTime": "2026-01-01T00:01:00Z",
                    },
                ],
            }
        },
        content_type=MERGE,
    )


def policy(enabled: bool = True, patience: float = PATIENCE) -> ControllerConfig:
    return ControllerConfig(
        resync_seconds=3600.0,
        sync_grace_seconds=10.0,
        unplaceable_release=enabled,
        unplaceable_patience_seconds=patience,
    )


# --- pure parts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("placement", "unplaceable"),
    [
        pytest.param(Placement(("w1",)), False, id="a-reachable-eligible-worker"),
        pytest.param(Placement(("w1",), ("w2",)), False, id="reachable-and-unreachable-eligible"),
        pytest.param(Placement((), ("w2",)), True, id="only-an-unreachable-eligible-worker"),
        pytest.param(Placement((), (), ("w2",)), True, id="only-a-never-reached-worker"),
        pytest.param(Placement(), False, id="no-worker-could-run-it-even-if-all-reachable"),
        pytest.param(Placement((), (), (), ("w2",)), False, id="nominated-but-nothing-eligible"),
    ],
)
def test_placement_is_unplaceable_only_when_an_outage_explains_it(
    placement: Placement, unplaceable: bool
) -> None:
    assert placement.unplaceable is unplaceable


@pytest.mark.parametrize(
    ("releases", "factor"),
    [
        pytest.param(0, 1, id="first-release-after-the-patience"),
        pytest.param(1, 2, id="second-after-twice"),
        pytest.param(2, 4, id="third-after-four-times"),
        pytest.param(10, 32, id="capped-at-32-times"),
    ],
)
def test_release_backoff_grows_with_every_release(releases: int, factor: int) -> None:
    assert release_backoff(PATIENCE, releases) == PATIENCE * factor
    # The wait runs from the last restore when that is later than the start of the outage.
    state = Released(None, ("w2",), releases, restored_at=500.0)
    assert release_due(state, 100.0, 500.0, PATIENCE) == PATIENCE * factor


# --- seeing it ---------------------------------------------------------------------------------


async def test_unplaceable_holder_is_exported_and_named_once_and_starved_workloads_name_it() -> (
    None
):
    """w2 (the only worker an H100 workload may use) is reported inactive by Kueue: the workload
    becomes unplaceable: one ``Unplaceable`` Event naming w2 (not one per reconcile), the gauges
    show the quota it holds; a workload pending with "insufficient unused quota" in the same
    ClusterQueue gets one ``BlockedByUnplaceable`` Event naming it. When w2 is back, the gauges
    are empty again."""
    metrics = Metrics(registry=CollectorRegistry())
    async with world(decide=allowed_only, config=policy(enabled=False)) as env:
        env.metrics = metrics
        await local_queue(env)
        await env.start_dispatcher()
        await add(env, holding("h100", "w2"), reserved_status())
        await env.wait(lambda: env.nominated("h100") == ("w2",) and env.idle("h100"))
        # Pending for quota before anything is unplaceable (as on real Kueue, where the
        # scheduler writes its message once): no Event yet, but it is named as soon as the
        # holder becomes unplaceable.
        await add(env, holding("early", "w1"), PENDING_STATUS)
        await env.wait(lambda: env.idle("early"))
        assert await events(env, "BlockedByUnplaceable", "early") == []

        await env.set_active("w2", False)
        await env.wait(lambda: "default/h100" in env.loop.outage.holders and env.idle("h100"))
        assert await events(env, "Unplaceable", "h100") == [
            "holds quota on the manager (1 cpu in flavor default-flavor, 8 nvidia.com/gpu in "
            "flavor default-flavor in ClusterQueue cq) but no reachable worker can run it; "
            "eligible workers unreachable: w2"
        ]
        samples = samples_of(generate_latest(metrics.registry).decode())
        quota = {
            (labels["cluster_queue"], labels["flavor"], labels["resource"]): value
            for labels, value in samples["multikueue_dispatcher_unplaceable_quota"]
        }
        assert quota == {
            ("cq", "default-flavor", "cpu"): 1.0,
            ("cq", "default-flavor", "nvidia.com/gpu"): 8.0,
        }
        assert [v for _, v in samples["multikueue_dispatcher_unplaceable_workloads"]] == [1.0]
        await env.wait(lambda: "default/early" in env.loop.outage.starved and env.idle("early"))
        assert len(await events(env, "BlockedByUnplaceable", "early")) == 1

        # Reconciled again for no new reason: no second Event.
        env.loop.queue.add("default/h100")
        await env.wait(lambda: env.idle("h100"))
        assert len(await events(env, "Unplaceable", "h100")) == 1

        await add(env, holding("starved", "w1", gpus=8), PENDING_STATUS)
        plain = (
            "waits for manager quota in ClusterQueue cq (or its cohort) held by 1 workload(s) "
            "that no reachable worker can run: default/h100 (waiting for w2)"
        )

        def starved_seen() -> bool:
            record = env.loop.records.get("default/starved")
            return record is not None and record.starved_message == plain

        await env.wait(lambda: starved_seen() and env.idle("starved"))
        # (Created before Kueue's status is written, it may first count as not tried yet.)
        assert plain in await events(env, "BlockedByUnplaceable", "starved")
        # Queued behind it, not tried by Kueue yet (no QuotaReserved condition, as real Kueue
        # leaves them), requesting the same GPUs: named too, saying so.
        await env.api.create(WORKLOADS, holding("queued", "w1"), namespace="default")
        await env.wait(lambda: "default/queued" in env.loop.outage.starved and env.idle("queued"))
        [queued] = await events(env, "BlockedByUnplaceable", "queued")
        assert queued.endswith(
            "default/h100 (waiting for w2); Kueue has not tried it yet: it is queued behind "
            "workloads short of the same quota"
        )

        await env.set_active("w2", True)
        await env.wait(
            lambda: not env.loop.outage.holders and env.idle("h100", "starved", "early", "queued")
        )
        samples = samples_of(generate_latest(metrics.registry).decode())
        assert samples.get("multikueue_dispatcher_unplaceable_quota", []) == []
        # Re-evaluated: nothing blocks them any more.
        assert not env.loop.outage.starved
        assert env.loop.releases == 0  # the policy is off
        assert is_active(env, "h100")
    metrics.shutdown()


async def test_a_workers_reachability_change_reevaluates_only_the_workloads_it_can_change() -> None:
    """Six workloads hold quota, three may run only on w2, three only on w1. Kueue reports w2
    inactive: only the three w2 workloads are reconciled (a counting guard against a fleet-wide
    rescan per event); the w1 ones are not touched. (When w2 is back, every workload waiting
    for a worker is decided again: w2 may be a better place for any of them.)"""
    async with world(decide=allowed_only, config=policy(enabled=False)) as env:
        await env.start_dispatcher()
        names = {f"gpu-{i}": "w2" for i in range(3)} | {f"cpu-{i}": "w1" for i in range(3)}
        for name, allowed in names.items():
            await add(env, holding(name, allowed), reserved_status())
        await env.wait(
            lambda: all(env.nominated(n) == (w,) for n, w in names.items()) and env.idle(*names)
        )
        before = dict(env.reconciles)

        await env.set_active("w2", False)
        await env.wait(lambda: len(env.loop.outage.holders) == 3 and env.idle(*names))
        after = {n: env.reconciles[f"default/{n}"] - before[f"default/{n}"] for n in names}
        assert {n: after[n] > 0 for n in names} == {n: w == "w2" for n, w in names.items()}

        await env.set_active("w2", True)
        await env.wait(lambda: not env.loop.outage.holders and env.idle(*names))


# --- the release policy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "released"),
    [
        pytest.param("w1.w2", False, id="another-eligible-worker-is-reachable"),
        pytest.param("w1", False, id="its-only-eligible-worker-is-reachable"),
        pytest.param("w2", True, id="its-only-eligible-worker-is-down"),
        pytest.param("none", False, id="no-worker-could-ever-run-it"),
    ],
)
async def test_the_policy_releases_only_unplaceable_workloads(allowed: str, released: bool) -> None:
    """With the policy on and its patience over, w2 down: only a workload no reachable worker
    can run, and that w2 could run, is deactivated; every other one is left alone."""
    now = Now()
    async with world(decide=allowed_only, config=policy(), now=now) as env:
        await env.start_dispatcher()
        await add(env, holding("job", allowed), reserved_status())
        await env.wait(lambda: env.idle("job"))
        await env.set_active("w2", False)
        await env.wait(lambda: env.idle("job"))
        now.value += PATIENCE
        env.loop.queue.add("default/job")  # the patience's timer, fired
        await env.wait(lambda: env.idle("job"))
        assert (not is_active(env, "job")) is released
        assert env.loop.releases == int(released)
        if released:
            annotations = workload_of(env, "job")["metadata"]["annotations"]
            assert (annotations[RELEASED_FOR], annotations[RELEASES]) == ("w2", "1")
            assert RELEASED_AT in annotations
            assert len(await events(env, "QuotaReleased", "job")) == 1


async def test_the_policy_is_off_by_default() -> None:
    """The default configuration never deactivates anything, however long the outage."""
    now = Now()
    assert ControllerConfig().unplaceable_release is False
    async with world(decide=allowed_only, now=now) as env:
        await env.start_dispatcher()
        await add(env, holding("job", "w2"), reserved_status())
        await env.wait(lambda: env.idle("job"))
        await env.set_active("w2", False)
        await env.wait(lambda: "default/job" in env.loop.outage.holders and env.idle("job"))
        now.value += 100 * PATIENCE
        env.loop.queue.add("default/job")
        await env.wait(lambda: env.idle("job"))
        assert is_active(env, "job")
        assert env.loop.releases == 0


async def release_now(env: World, now: Now, name: str, wait: float) -> None:
    now.value += wait
    env.loop.queue.add(f"default/{name}")
    await env.wait(lambda: env.idle(name))


@pytest.mark.parametrize(
    "seconds_per_stamp",
    [
        pytest.param(1, id="created-seconds-apart-oldest-first"),
        pytest.param(0, id="created-in-one-second-by-uid"),
    ],
)
async def test_restore_oldest_first_and_the_next_release_waits_longer(
    monkeypatch: pytest.MonkeyPatch, seconds_per_stamp: int
) -> None:
    """Three unplaceable workloads are released after the patience; when w2 is back they are
    restored in Kueue's queue order (C94): creation order, or, created within one second, UID
    order (here the UIDs rise in creation order), never name order; w2 down again: a restored
    workload is not released again after one patience but after twice that."""
    ticks = itertools.count()
    monkeypatch.setattr(  # the fake API's clock: one stamp per call, so creation order shows
        fakeapi_server,
        "_now",
        lambda: (BASE + datetime.timedelta(seconds=seconds_per_stamp * next(ticks))).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
    )
    uids = itertools.count(1)
    monkeypatch.setattr(  # UIDs that rise with each object created, unlike the names below
        fakeapi_handlers, "uuid", SimpleNamespace(uuid4=lambda: f"{next(uids):08x}-0000-4000")
    )
    now = Now()
    async with world(decide=allowed_only, config=policy(), now=now) as env:
        await env.start_dispatcher()
        names = ("z-first", "m-second", "a-third")  # created in this order
        for name in names:
            await add(env, holding(name, "w2"), reserved_status())
        await env.wait(lambda: env.idle(*names))
        await env.set_active("w2", False)
        await env.wait(lambda: len(env.loop.outage.holders) == 3 and env.idle(*names))
        now.value += PATIENCE
        for name in names:
            env.loop.queue.add(f"default/{name}")
        await env.wait(lambda: env.loop.releases == 3 and env.idle(*names))
        for name in names:
            await evict_released(env, name)
        await env.wait(lambda: len(env.loop._released) == 3 and env.idle(*names))

        restored: list[str] = []
        original = env.loop._restore

        async def recorded(key: str, workload: Any, reachable: tuple[str, ...]) -> bool:
            done = await original(key, workload, reachable)  # the patch, then its Event
            restored.append(key)
            env.notify()
            return done

        env.loop._restore = recorded  # type: ignore[method-assign]
        await env.set_active("w2", True)
        await env.wait(lambda: len(restored) == 3 and env.idle(*names))
        assert restored == [f"default/{n}" for n in names]
        assert all(is_active(env, n) for n in names)
        assert len(await events(env, "QuotaRestored")) == 3

        # Kueue reserves quota again; w2 goes down again: back-off doubles per release.
        for name in names:
            await env.api.request(
                "PATCH",
                WORKLOADS.path("default", name) + "/status",
                body={"status": reserved_status()},
                content_type=MERGE,
            )
        await env.set_active("w2", False)
        await env.wait(lambda: len(env.loop.outage.holders) == 3 and env.idle(*names))
        await release_now(env, now, "z-first", PATIENCE)
        assert is_active(env, "z-first"), "released again after only one patience"
        await release_now(env, now, "z-first", PATIENCE)
        assert not is_active(env, "z-first")
        assert workload_of(env, "z-first")["metadata"]["annotations"][RELEASES] == "2"


async def test_a_worker_blinking_at_the_edge_never_flaps_the_policy() -> None:
    """w2 blinks (inactive, active again) many times, each outage shorter than the patience:
    the workload is never released; no restore either; and each blink's Event is one per
    change, not one per reconcile."""
    now = Now()
    async with world(decide=allowed_only, config=policy(), now=now) as env:
        await env.start_dispatcher()
        await add(env, holding("job", "w2"), reserved_status())
        await env.wait(lambda: env.idle("job"))
        for _ in range(5):
            await env.set_active("w2", False)
            await env.wait(lambda: "default/job" in env.loop.outage.holders and env.idle("job"))
            await release_now(env, now, "job", PATIENCE - 1.0)
            await env.set_active("w2", True)
            await env.wait(lambda: not env.loop.outage.holders and env.idle("job"))
        assert is_active(env, "job")
        assert (env.loop.releases, env.loop.restores) == (0, 0)
        # One occurrence per blink; the recorder aggregates the repeats into one Event.
        assert await counts(env, "Unplaceable", "job") == [5]


async def test_a_workload_the_user_deactivated_is_never_restored() -> None:
    """A deactivated workload without our annotation (a user's) stays deactivated when every
    worker is reachable."""
    async with world(decide=allowed_only, config=policy()) as env:
        obj = holding("mine", "w2")
        obj["spec"]["active"] = False
        await add(env, obj, PENDING_STATUS)
        await env.start_dispatcher()
        await env.set_active("w2", False)
        await env.set_active("w2", True)
        await env.wait(lambda: env.idle("mine"))
        await env.loop.restore_ready()
        assert not is_active(env, "mine")
        assert env.loop.restores == 0
        assert await events(env, "QuotaRestored") == []


async def test_a_mirror_blink_inside_the_stale_grace_releases_nothing() -> None:
    """Our own mirror of w2 is refused three times for 3 s of the 5 s stale grace (two failed
    re-watches, 1 s + 2 s of backoff: the hysteresis edge the watch loop can reach) with the
    policy at its most eager (patience 0): w2 stays a candidate throughout, so the workload is
    never unplaceable, never released and not even reconciled again."""
    clock = FakeClock()
    now = Now()
    async with world(decide=allowed_only, config=policy(patience=0.0), clock=clock, now=now) as env:
        await env.start_dispatcher()
        await add(env, holding("job", "w2"), reserved_status())
        await env.wait(lambda: env.nominated("job") == ("w2",) and env.idle("job"))
        worker = env.mirrors.workers["w2"]
        reconciles = env.reconciles["default/job"]
        for _ in range(3):
            # Healthy streams between blinks: every stream open before the clock moves (a
            # stream opened after the advance is not healthy when it is cut, and its loop backs
            # off longer than this test counts on; seen once in CI).
            await env.wait(lambda: worker.mirror is not None and worker.mirror.streaming)
            await clock.advance(2.0)
            await env.workers["w2"].down()
            await env.wait(lambda: worker.stale_since is not None)
            started = worker.stale_since
            await clock.wait_for(lambda: clock.sleepers >= W2_LOOPS + 1)  # loops + grace timer
            sleeps = clock.sleeps
            await clock.advance(1.0)  # first retry: refused again
            await clock.wait_for(lambda s=sleeps: clock.sleeps >= s + W2_LOOPS)
            await env.workers["w2"].up()
            await clock.advance(2.0)  # second retry: connects
            await env.wait(lambda: worker.connected)
            assert started is not None
            assert clock.now - started == 3.0 < GRACE
            now.value += 3.0
            await env.wait(lambda: env.idle("job"))
        assert env.reconciles["default/job"] == reconciles
        assert not env.loop.outage.holders
        assert (env.loop.releases, is_active(env, "job")) == (0, True)
        assert await events(env, "Unplaceable") == []


async def test_a_reason_that_only_counts_seconds_records_one_event() -> None:
    """While w2 is lost, the decision's reason says for how long ("Disconnected for 12s"): a
    workload decided again every few seconds still gets one ``NotNominated`` Event, not one per
    decision (seen on real Kueue: 88 Events for 4 workloads in two minutes)."""
    async with world(decide=allowed_only, config=policy(enabled=False)) as env:
        await env.start_dispatcher()
        await add(env, holding("job", "w2"), reserved_status())
        await env.wait(lambda: env.idle("job"))
        record = env.loop.records["default/job"]
        await env.set_active("w2", False)
        await env.wait(lambda: env.idle("job"))
        workload = workload_of(env, "job")
        first = env.loop._event_once(workload, record, "NotNominated", "w2: lost for 5s", "Warning")
        again = env.loop._event_once(
            workload, record, "NotNominated", "w2: lost for 12s", "Warning"
        )
        other = env.loop._event_once(
            workload, record, "NotNominated", "w2: lost for 12s; w1: full", "Warning"
        )
        assert (first, again, other) == (True, False, True)
