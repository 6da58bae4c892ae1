"""Worker activeness with hysteresis (issue 16): a blip of our own watches shorter than the stale
grace moves no nomination and re-queues nothing; an outage longer than the grace moves the
nominations (within 30 s: at the grace, 5 s); Kueue's ``Active=False`` moves them at once;
recovery is immediate.

The registry (its watch loops' backoff and the grace) runs on a virtual clock that only the test
moves, so a slow machine cannot turn a blip into an outage; the nomination loop is counted
(nominations written, reconciles), never timed. There is no Kueue emulation here: the
MultiKueueCluster stays ``Active=True`` unless the test changes it, as when only the
dispatcher's own streams fail.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from dispatcher.clusters.activeness import DEFAULT_STALE_GRACE_SECONDS
from dispatcher_sandbox.harness.controller import FakeClock, World, world
from dispatcher_sandbox.harness.scenario import run_cli_process

GRACE = DEFAULT_STALE_GRACE_SECONDS
W1_LOOPS = 4  # watch loops of a worker mirror: clusterqueues, localqueues, flavors, workloads


async def nominated_to_w1(env: World) -> tuple[int, int]:
    """Start the dispatcher, get ``job`` nominated to w1 and the loop quiet; returns the
    nominations written and the reconciles of ``job`` so far."""
    await env.start_dispatcher()
    await env.add_workload("job")
    await env.wait(lambda: env.nominated("job") == ("w1",) and env.idle("job"))
    assert env.loop.writes == 1
    return env.loop.writes, env.reconciles["default/job"]


@pytest.mark.parametrize(
    ("failed_rewatches", "stale_seconds"),
    [
        pytest.param(1, 1.0, id="1s-blip-one-failed-rewatch"),
        pytest.param(2, 3.0, id="3s-blip-two-failed-rewatches"),
    ],
)
async def test_blip_shorter_than_the_grace_moves_nothing(
    failed_rewatches: int, stale_seconds: float
) -> None:
    """A 1 s blip (and the issue's two failed re-watches of one resource, 1 s + 2 s of backoff)
    while Kueue keeps the MultiKueueCluster Active: the worker stays a candidate throughout, no
    nomination is written and the workload is not even reconciled again."""
    clock = FakeClock()
    async with world(clock=clock) as env:
        writes, reconciles = await nominated_to_w1(env)
        worker = env.mirrors.workers["w1"]
        await clock.advance(2.0)  # the streams are healthy: a cut alone is routine
        env.workers["w1"].faults.error(
            500, verbs=("watch",), path="clusterqueues$", count=failed_rewatches
        )
        env.workers["w1"].drop_watches("clusterqueues", abrupt=True)
        await env.wait(lambda: worker.stale_since is not None)
        started = worker.stale_since
        assert started == clock.now
        verdict = env.mirrors.activeness("w1")
        assert verdict is not None
        assert verdict.active, verdict
        assert verdict.mirror.startswith("stale for 0.0s of a 5s grace")
        await clock.wait_for(lambda: clock.sleepers >= 2)  # the watch backoff and the grace
        for attempt in range(failed_rewatches):
            sleeps = clock.sleeps
            await clock.advance((1.0, 2.0)[attempt])  # the watch loop's backoff
            if attempt + 1 < failed_rewatches:
                await clock.wait_for(lambda s=sleeps: clock.sleeps > s)  # failed again, parked
        await env.wait(lambda: worker.connected)
        assert clock.now - started == stale_seconds
        assert worker.stale_since is None
        # The grace timer of this blip runs out later and finds the mirror fresh: nothing.
        await clock.advance(2 * GRACE)
        await clock.wait_for(lambda: clock.sleepers == 0)
        assert env.idle("job")
        assert env.nominated("job") == ("w1",)
        assert env.loop.writes == writes
        assert env.reconciles["default/job"] == reconciles
        verdict = env.mirrors.activeness("w1")
        assert verdict is not None
        assert verdict.describe() == "dispatched to (Kueue: Active=True; our mirror: fresh)"


async def test_outage_of_10s_moves_at_the_grace_and_recovers_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 10 s outage of w1 (connections refused) while Kueue still reports it Active: nothing
    moves before the grace; at the grace (5 s, within the issue's 30 s) the nomination moves to
    w2, once; when w1 answers again it is a candidate as soon as our mirror reconnects."""
    caplog.set_level(logging.INFO, logger="dispatcher.clusters.registry")
    clock = FakeClock()
    async with world(clock=clock) as env:
        writes, reconciles = await nominated_to_w1(env)
        worker = env.mirrors.workers["w1"]
        await clock.advance(2.0)
        start = clock.now
        await env.workers["w1"].down()
        await env.wait(lambda: worker.stale_since is not None)
        await clock.wait_for(lambda: clock.sleepers >= W1_LOOPS + 1)

        # Just before the grace runs out: every watch loop retried (refused) and parked again,
        # and still nothing was reconciled or written.
        sleeps = clock.sleeps
        await clock.advance(GRACE - 0.5)
        await clock.wait_for(lambda: clock.sleeps >= sleeps + W1_LOOPS)
        verdict = env.mirrors.activeness("w1")
        assert verdict is not None
        assert verdict.active, verdict
        assert env.idle("job")
        assert (env.loop.writes, env.reconciles["default/job"]) == (writes, reconciles)

        # The grace runs out: w1 is lost for dispatch and the nomination moves, once.
        await clock.advance(0.5)
        await env.wait(lambda: env.nominated("job") == ("w2",) and env.idle("job"))
        moved_after = clock.now - start
        assert moved_after == GRACE
        assert moved_after <= 30.0  # the bound
        assert env.loop.writes == writes + 1
        verdict = env.mirrors.activeness("w1")
        assert verdict is not None
        assert not verdict.active
        assert verdict.reason.startswith("our mirror of it has been Disconnected for 5s")
        assert verdict.kueue == "Active=True"
        lost = [r for r in caplog.records if "not dispatched to until it reconnects" in r.message]
        assert len(lost) == 1
        assert lost[0].levelno == logging.WARNING

        # Back after 10 s: the next retry of our watches reconnects (its backoff, not ours) and
        # w1 counts at once; the workload stays where it is (its pipeline keeps an active
        # nomination): one move in all.
        await clock.advance(10.0 - GRACE)
        await env.workers["w1"].up()
        await clock.advance(60.0)  # past the watch loops' next retry
        await env.wait(lambda: worker.connected)
        verdict = env.mirrors.activeness("w1")
        assert verdict is not None
        assert verdict.active
        await env.wait(lambda: env.idle("job"))
        assert env.nominated("job") == ("w2",)
        assert env.loop.writes == writes + 1


async def test_kueue_inactive_moves_at_once() -> None:
    """Kueue's own verdict has no grace: ``Active=False`` on the MultiKueueCluster moves the
    nomination without the virtual clock moving at all."""
    clock = FakeClock()
    async with world(clock=clock) as env:
        writes, _ = await nominated_to_w1(env)
        before = clock.now
        await env.set_active("w1", False)
        await env.wait(lambda: env.nominated("job") == ("w2",) and env.idle("job"))
        assert clock.now == before
        assert env.loop.writes == writes + 1
        verdict = env.mirrors.activeness("w1")
        assert verdict is not None
        assert verdict.reason == "Kueue reports Active=False (ClientConnectionFailed)"
        assert verdict.mirror == "fresh"


async def test_explain_prints_kueues_view_and_ours_per_worker(tmp_path: Path) -> None:
    """``explain`` shows, under each worker's connection state, whether it is dispatched to and
    both inputs: Kueue's ``Active`` condition and our mirror's freshness (no secret in it)."""
    async with world() as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") == ("w1",) and env.idle("job"))
        await env.set_active("w2", False)
        kubeconfig = tmp_path / "manager.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(env.manager.kubeconfig))
        argv = ["explain", "default/job", "--kubeconfig", str(kubeconfig), "--sync-timeout", "10"]
        code, out, err = await run_cli_process(argv)  # in-process, TLS closes may be cut
    assert code == 0, out + err
    lines = out.splitlines()
    w1 = lines.index("  worker w1: Connected")
    assert lines[w1 + 1] == "    dispatched to (Kueue: Active=True; our mirror: fresh)"
    w2 = lines.index("  worker w2: Connected")
    assert lines[w2 + 1] == (
        "    not dispatched to: Kueue reports Active=False (ClientConnectionFailed) "
        "(Kueue: Active=False (ClientConnectionFailed); our mirror: fresh)"
    )
    assert env.workers["w1"].token not in out
