"""Stopping the emulation's tasks (``runtime.cancel_and_wait``).

A controller tearing a remote down inside its reconcile waits for the remote's watch tasks. If
the controller itself is cancelled while it waits, the cancellation must reach it: swallowing it
(``contextlib.suppress(CancelledError)`` around ``await task``) left it running and the test
that stopped it hanging, about once in five runs of
``test_multikueue_clusters.py::test_c10_secret_rotation_reconnects_and_deleted_cluster_tears_down``.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from dispatcher_sandbox.kueue_emulator.multikueue.multikueuecluster import RemoteCluster
from dispatcher_sandbox.kueue_emulator.runtime import (
    SystemClock,
    WorkerClientLimit,
    cancel_and_wait,
)


async def _forever() -> None:
    await asyncio.Event().wait()


async def _stubborn(release: asyncio.Event) -> None:
    """Ends only after ``release`` is set, even when cancelled (a slow cleanup)."""
    try:
        await asyncio.Event().wait()
    finally:
        await release.wait()


async def test_children_are_cancelled_and_awaited() -> None:
    children = [asyncio.create_task(_forever()) for _ in range(3)]
    await cancel_and_wait(children)
    assert all(child.cancelled() for child in children)


async def test_the_callers_own_cancellation_reaches_it() -> None:
    release = asyncio.Event()
    child = asyncio.create_task(_stubborn(release))
    await asyncio.sleep(0)  # the child is waiting
    reached: list[str] = []

    async def caller() -> None:
        try:
            await cancel_and_wait([child])
        except asyncio.CancelledError:
            reached.append("cancelled")
            raise
        reached.append("returned")

    outer = asyncio.create_task(caller())
    await asyncio.sleep(0)  # the caller waits for the child's cleanup
    outer.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert reached == ["cancelled"]


async def test_an_error_a_child_ended_with_is_raised() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    child = asyncio.create_task(broken())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="boom"):
        await cancel_and_wait([child])


def _kubeconfig(server: str) -> dict[str, object]:
    return {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }


@pytest.mark.parametrize("how", ["cancelled-while-stopping", "a-watch-ended-with-an-error"])
async def test_a_remote_that_is_stopped_closes_its_client(how: str) -> None:
    # Skipping the close when the stop was interrupted left a connection pool open, reported
    # as an unclosed aiohttp session in the next test (2 in 14 runs of
    # test_multikueue_clusters.py after cancel_and_wait began to pass cancellations on).
    remote = RemoteCluster(
        "worker1",
        "",
        _kubeconfig("http://127.0.0.1:9"),
        "origin",
        lambda *_: None,
        reconnect_base_seconds=1.0,
        limit=WorkerClientLimit(qps=5, burst=10, per_kind=True),
        clock=SystemClock(),
    )
    release = asyncio.Event()
    if how == "cancelled-while-stopping":
        remote._tasks = [asyncio.create_task(_stubborn(release))]
    else:

        async def broken() -> None:
            raise RuntimeError("watch failed")

        remote._tasks = [asyncio.create_task(broken())]
    await asyncio.sleep(0)
    stopping = asyncio.create_task(remote.stop())
    await asyncio.sleep(0)
    if how == "cancelled-while-stopping":
        stopping.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await stopping
    else:
        with pytest.raises(RuntimeError, match="watch failed"):
            await stopping
    with pytest.raises(aiohttp.ClientConnectionError, match="closed"):
        await remote.client.request("GET", "/api")
