"""A decision that times out, fails or is withheld (a fail-closed plugin) is retried with the
work queue's exponential backoff, not at ``resync_seconds`` (issue 16); a decision that succeeds
resets the backoff. Counted, not timed: the delays the loop asks the queue for are recorded."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.workqueue import WorkQueue
from dispatcher.k8s.resources import EVENTS
from dispatcher_sandbox.harness.controller import World, keep_or_first, world

KEY = "default/job"
RESYNC = 300.0  # the production default, so a retry "at resync" would be 300 s away


class Scripted:
    """A pipeline stand-in whose n-th call fails as scripted (``fail`` entries), then decides
    like :func:`keep_or_first` (``ok``). A timed-out call blocks its worker thread until
    :meth:`release` (the loop abandons it, as it abandons a hung plugin)."""

    def __init__(self, script: Sequence[str], failure: str) -> None:
        self.script = list(script)
        self.failure = failure
        self.calls = 0
        self.hung = threading.Event()

    def __call__(self, request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        step = self.script[self.calls] if self.calls < len(self.script) else "ok"
        self.calls += 1
        if step == "ok":
            return keep_or_first(request, snapshots)
        if self.failure == "timeout":
            self.hung.wait(timeout=60)
            return keep_or_first(request, snapshots)
        if self.failure == "raises":
            raise RuntimeError("the plugin failed")
        return Decision("scripted", (), "", withheld="tenancy: filter raised RuntimeError")

    def release(self) -> None:
        self.hung.set()


def record_backoff(env: World) -> list[float]:
    """The delays of every rate-limited re-add of the workload (the loop's retries)."""
    delays: list[float] = []
    queue = env.loop.queue
    original = queue.add_rate_limited

    def spy(key: str, *, at_least: float | None = None) -> float:
        delay = original(key, at_least=at_least)
        if key == KEY:
            delays.append(delay)
            env.notify()
        return delay

    queue.add_rate_limited = spy  # type: ignore[method-assign]
    return delays


@pytest.mark.parametrize("failure", ["timeout", "raises", "withheld"])
async def test_failed_decision_is_retried_with_growing_delays_and_reset_on_success(
    failure: str,
) -> None:
    """Three failed decisions are retried after 0.05 s, 0.1 s and 0.2 s (the work queue's
    backoff; before, each waited ``resync_seconds``, 300 s); the fourth succeeds and writes the
    nomination; a failure after that starts the backoff from 0.05 s again."""
    script = ["fail", "fail", "fail", "ok", "fail", "ok"]
    decide = Scripted(script, failure)
    config = ControllerConfig(
        resync_seconds=RESYNC, sync_grace_seconds=10.0, decision_timeout_seconds=0.2
    )
    try:
        async with world(decide=decide, config=config) as env:
            await env.start_dispatcher()
            delays = record_backoff(env)
            await env.add_workload("job")
            await env.wait(lambda: decide.calls >= 4 and env.idle("job"), within=60)
            # The echo of the nomination write asked for no decision (expectations): the next
            # decision comes from a change someone else made (here: the key queued again).
            assert (decide.calls, env.loop.echoes_skipped) == (4, 1)
            env.loop.queue.add(KEY)
            await env.wait(
                lambda: decide.calls >= len(script) and env.idle("job"),
                within=60,
            )
            assert delays == pytest.approx([0.05, 0.1, 0.2, 0.05])
            assert env.nominated("job") == ("w1",)
            assert env.loop.writes == 1
            assert env.loop.queue.failures(KEY) == 0  # the last decision succeeded
            assert decide.calls == len(script)
            if failure == "withheld":
                await env.loop.events.flush()
                events = await env.api.list(EVENTS, "default")
                withheld = [e for e in events.items if e.get("reason") == "DecisionWithheld"]
                # One occurrence per run of withheld decisions with the same reason, not per
                # retry: the first three share one, the fifth follows the Nominated Event. The
                # recorder aggregates the second occurrence into the first Event (count 2).
                assert [e.get("count") for e in withheld] == [2]
    finally:
        decide.release()


def test_retries_in_one_resync_window_of_virtual_time() -> None:
    """How often a decision that always fails is retried within one ``resync_seconds`` window
    (300 s) with the queue's default policy, the one the nomination loop uses (the delays of the
    test above): 18 retries, each at most 30 s apart, where it was retried once at resync."""
    now = [0.0]
    queue = WorkQueue(clock=lambda: now[0])
    retries = 0
    while True:
        delay = queue.add_rate_limited(KEY)
        assert delay <= 30.0
        if now[0] + delay > RESYNC:
            break
        now[0] += delay
        retries += 1
    assert retries == 18


@pytest.mark.parametrize("inline", [True, False], ids=["builtin-pipeline", "third-party"])
async def test_a_builtin_pipeline_decides_on_the_loop_without_a_thread(inline: bool) -> None:
    """Issue 15: a pipeline of built-in stages only (``inline_decisions``) is called on the
    event loop's thread, with no worker-thread hop per decision; any other runs in a thread
    under the decision deadline."""
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        threads.append(threading.get_ident())
        return keep_or_first(request, snapshots)

    config = ControllerConfig(inline_decisions=inline, sync_grace_seconds=10.0)
    async with world(decide=decide, config=config) as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") == ("w1",) and env.idle("job"), within=60)
    assert threads
    assert all((thread == loop_thread) is inline for thread in threads)
    assert env.loop.inline_decisions == (len(threads) if inline else 0)
