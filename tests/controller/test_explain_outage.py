"""Issue 17: ``explain`` with a worker down answers from one connection attempt per worker,
never a retry loop toward it, and names the cause of a starved workload (the unplaceable
holders of its ClusterQueue's quota).

``explain`` runs as its own process (as an operator runs it). Its wait is structural: the worker
mirrors of ``explain`` are built with a deadline-bounded connect and list and a retry backoff of
an hour (:func:`~dispatcher.app.checks.explain_watch_settings`), and the counting test has the
down worker's address accept and drop every connection, counting them: at most one per watched
resource. The elapsed time is printed for the record (``-s``), never asserted.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import yaml
from anyio.abc import SocketStream

from dispatcher.app.checks import NO_RETRY, explain_watch_settings
from dispatcher.k8s.resources import SECRETS
from dispatcher_sandbox.harness.controller import NS, World, world
from dispatcher_sandbox.harness.scenario import b64, run_cli_process
from dispatcher_sandbox.harness.unplaceable import (
    PENDING_STATUS,
    W2_LOOPS,
    add,
    allowed_only,
    holding,
    local_queue,
    reserved_status,
)


async def starved_world(env: World) -> None:
    """An H100-only workload holding the manager's GPU quota, and a workload pending behind it
    with "insufficient unused quota"; Kueue reports w2 (the H100 worker) inactive."""
    await local_queue(env)
    await add(env, holding("h100", "w2"), reserved_status())
    await add(env, holding("starved", "w1"), PENDING_STATUS)
    await env.set_active("w2", False)


async def explain(env: World, tmp_path: Path, name: str) -> tuple[str, float]:
    kubeconfig = tmp_path / "manager.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(env.manager.kubeconfig))
    started = time.monotonic()
    code, out, err = await run_cli_process(
        ["explain", f"default/{name}", "--kubeconfig", str(kubeconfig)]
    )
    elapsed = time.monotonic() - started
    assert code == 0, out + err
    return out, elapsed


def test_explains_wait_is_one_bounded_attempt_per_worker() -> None:
    """The structure the bound rests on: connect and first list bounded by the deadline, and a
    failed one retried only after an hour (far beyond the command)."""
    settings = explain_watch_settings(1.5)
    assert (settings.connect_timeout, settings.list_timeout) == (1.5, 1.5)
    assert settings.backoff is NO_RETRY
    assert NO_RETRY.initial >= 3600.0


async def test_explain_with_the_worker_api_down_names_it_and_the_holders(tmp_path: Path) -> None:
    """w2's API server is down (a closed loopback port): explain reports it unreachable after
    one attempt, the H100 workload as unplaceable waiting for w2, and the starved workload as
    waiting behind default/h100."""
    async with world(decide=allowed_only) as env:
        await starved_world(env)
        await env.workers["w2"].down()
        holder_out, holder_took = await explain(env, tmp_path, "h100")
        starved_out, starved_took = await explain(env, tmp_path, "starved")
    print(f"\nexplain with w2 down: {holder_took:.2f}s (holder), {starved_took:.2f}s (starved)")
    w2 = next(line for line in holder_out.splitlines() if line.startswith("  worker w2:"))
    assert w2.startswith("  worker w2: unreachable: ")
    assert w2.endswith("(one attempt within 1s, not retried)")
    assert (
        "unplaceable: holds quota on the manager (1 cpu in flavor default-flavor, 8 "
        "nvidia.com/gpu in flavor default-flavor in ClusterQueue cq) and no reachable worker "
        "can run it; eligible workers unreachable: w2 (never reached, so not filtered)"
    ) in holder_out.splitlines()
    assert (
        "waits for manager quota in ClusterQueue cq (or its cohort) held by 1 workload(s) that "
        "no reachable worker can run: default/h100 (waiting for w2)"
    ) in starved_out.splitlines()


async def test_explain_makes_one_connection_attempt_per_resource_to_a_dead_worker(
    tmp_path: Path,
) -> None:
    """w2's address accepts every connection and drops it at once (an API server dying under
    load): explain connects at most once per resource its mirror watches, never again."""
    accepted = 0

    async def drop(stream: SocketStream) -> None:
        nonlocal accepted
        accepted += 1
        await stream.aclose()

    async with world(decide=allowed_only) as env:
        await starved_world(env)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        config = dict(env.workers["w2"].kubeconfig)
        config["clusters"] = [
            {**c, "cluster": {**c["cluster"], "server": f"https://127.0.0.1:{port}"}}
            for c in config["clusters"]
        ]
        await env.api.request(
            "PATCH",
            SECRETS.path(NS, "w2-kubeconfig"),
            body={"data": {"kubeconfig": b64(yaml.safe_dump(config))}},
            content_type="application/merge-patch+json",
        )
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, drop)
            out, took = await explain(env, tmp_path, "starved")
            group.cancel_scope.cancel()
    print(f"\nexplain with w2 dropping connections: {took:.2f}s, {accepted} connection(s)")
    assert 1 <= accepted <= W2_LOOPS, out
    assert "default/h100 (waiting for w2)" in out
