"""The probe and metrics server: binds (port 0 too), reports where through task_status, answers
/healthz, /readyz (following the injected check) and /metrics (the explicit registry, documented
series with their types), never shows secrets, and stops cleanly when cancelled."""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
import pytest
from prometheus_client import CollectorRegistry

from dispatcher.algorithms.model import RejectionReason
from dispatcher.http import (
    BoundAddresses,
    Check,
    CheckResult,
    format_address,
    parse_address,
    serve_http,
)
from dispatcher.telemetry import SERIES, ConnectionState, Metrics

LOOPBACK = "127.0.0.1:0"


@asynccontextmanager
async def running(
    readiness: Check = lambda: True,
    *,
    registry: CollectorRegistry | None = None,
    health_address: str = LOOPBACK,
    metrics_address: str | None = LOOPBACK,
    **kwargs: Any,
) -> AsyncIterator[BoundAddresses]:
    async with anyio.create_task_group() as tg:
        bound = await tg.start(
            functools.partial(
                serve_http,
                health_address=health_address,
                metrics_address=metrics_address,
                readiness=readiness,
                registry=registry or CollectorRegistry(),
                **kwargs,
            )
        )
        try:
            yield bound
        finally:
            tg.cancel_scope.cancel()


def url(address: tuple[str, int], path: str) -> str:
    return f"http://{format_address(*address)}{path}"


async def get(address: tuple[str, int], path: str, **headers: str) -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url(address, path), headers=headers) as response,
    ):
        return response.status, response.headers["Content-Type"], await response.text()


async def test_binds_port_zero_and_reports_the_real_ports() -> None:
    async with running() as bound:
        assert bound.health[0] == "127.0.0.1"
        assert bound.health[1] > 0
        assert bound.metrics[1] > 0
        assert bound.health[1] != bound.metrics[1]
        assert (await get(bound.health, "/healthz"))[::2] == (200, "ok\n")
        assert (await get(bound.health, "/readyz"))[0] == 200
        assert (await get(bound.metrics, "/metrics"))[0] == 200
        # Each listener serves only its own paths.
        assert (await get(bound.health, "/metrics"))[0] == 404
        assert (await get(bound.metrics, "/healthz"))[0] == 404


async def test_one_listener_without_a_metrics_address() -> None:
    async with running(metrics_address=None) as bound:
        assert bound.health == bound.metrics
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await get(bound.health, path))[0] == 200


async def test_readyz_follows_the_injected_sync_check() -> None:
    state = {"ready": False}
    async with running(lambda: state["ready"]) as bound:
        assert (await get(bound.health, "/readyz"))[::2] == (503, "not ok: check failed\n")
        state["ready"] = True
        assert (await get(bound.health, "/readyz"))[::2] == (200, "ok\n")
        state["ready"] = False
        assert (await get(bound.health, "/readyz"))[0] == 503
        # Liveness is independent of readiness.
        assert (await get(bound.health, "/healthz"))[0] == 200


async def test_readyz_follows_an_async_check_with_detail() -> None:
    results = [
        CheckResult(False, "manager API unreachable"),
        CheckResult(False, "caches not synced"),
        CheckResult(True, "leader"),
    ]
    calls = 0

    async def readiness() -> CheckResult:
        nonlocal calls
        calls += 1
        await anyio.lowlevel.checkpoint()
        return results[calls - 1]

    async with running(readiness) as bound:
        assert (await get(bound.health, "/readyz"))[::2] == (
            503,
            "not ok: manager API unreachable\n",
        )
        assert (await get(bound.health, "/readyz"))[::2] == (503, "not ok: caches not synced\n")
        assert (await get(bound.health, "/readyz"))[::2] == (200, "ok: leader\n")
    assert calls == 3


async def test_liveness_check_decides_healthz() -> None:
    async with running(liveness=lambda: CheckResult(False, "supervisor stalled")) as bound:
        assert (await get(bound.health, "/healthz"))[::2] == (503, "not ok: supervisor stalled\n")


async def test_a_raising_check_shows_no_secret() -> None:
    token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"

    def readiness() -> bool:
        raise PermissionError(f"401 for Authorization: Bearer {token}")

    async with running(readiness) as bound:
        status, _, body = await get(bound.health, "/readyz")
    assert status == 503
    assert body == "not ok: check raised PermissionError\n"
    assert token not in body


async def test_a_hanging_check_times_out() -> None:
    never = anyio.Event()

    async def readiness() -> bool:
        await never.wait()
        return True

    async with running(readiness, check_timeout=0.05) as bound:
        assert (await get(bound.health, "/readyz"))[::2] == (
            503,
            "not ok: check timed out after 0.05s\n",
        )


def type_lines(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


async def test_metrics_scrape_shows_the_documented_series_with_their_types() -> None:
    metrics = Metrics()
    try:
        metrics.nominated(["worker-h100"], cluster_queue="cq-gpu", algorithm="capacity-first")
        metrics.observe_decision_latency(0.002, cluster_queue="cq-gpu", algorithm="capacity-first")
        metrics.observe_time_to_admission(4.0, cluster_queue="cq-gpu", cluster="worker-h100")
        metrics.predicted_wait("worker-h100", 120.0)
        metrics.observe_predicted_start_error(8.0, cluster="worker-h100")
        metrics.set_in_flight("worker-h100", 1)
        metrics.set_connection_state("worker-h100", ConnectionState.CONNECTED)
        metrics.error("api")
        metrics.set_queue_depth(2)
        metrics.add_plugin_info("gpu-type-affinity", distribution="built-in", version="0.1.0")
        metrics.stuck_workload(cluster_queue="cq-gpu")
        metrics.stuck_eviction(cluster_queue="cq-gpu")
        metrics.stuck_eviction_release(cluster_queue="cq-gpu")
        metrics.leftover_job(cluster_queue="cq-gpu", cluster="worker-h100")
        metrics.gpu_type_mismatch(cluster="worker-h100", kind="required")
        metrics.filtered_cluster(plugin="gpu-type", reason=RejectionReason.GPU_TYPE_MISMATCH)
        metrics.no_feasible_cluster(cluster_queue="cq-gpu", algorithm="capacity-first")
        metrics.set_unplaceable({("cq-gpu", "default-flavor", "nvidia.com/gpu"): 2}, {"cq-gpu": 1})
        metrics.unplaceable_action("release", cluster_queue="cq-gpu")
        async with running(registry=metrics.registry) as bound:
            status, content_type, text = await get(bound.metrics, "/metrics")
            _, open_type, open_text = await get(
                bound.metrics, "/metrics", Accept="application/openmetrics-text; version=1.0.0"
            )
    finally:
        metrics.shutdown()
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    assert type_lines(text) == {s.name: s.kind for s in SERIES}
    assert (
        'multikueue_dispatcher_nominations_total{algorithm="capacity-first",'
        'cluster="worker-h100",cluster_queue="cq-gpu",replica_role="standalone"} 1.0'
    ) in text
    assert open_type.startswith("application/openmetrics-text")
    assert open_text.rstrip().endswith("# EOF")


def connect(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=5):
        pass


async def test_stops_cleanly_and_frees_the_ports_even_with_open_connections() -> None:
    session = aiohttp.ClientSession()
    try:
        with anyio.fail_after(10):
            async with running() as bound:
                # The answer leaves a keep-alive connection open in the session's pool.
                response = await session.get(url(bound.health, "/healthz"))
                assert response.status == 200
                await response.read()
    finally:
        await session.close()
    for address in (bound.health, bound.metrics):
        with pytest.raises(ConnectionRefusedError):
            connect(address)


async def test_bind_failure_is_raised_from_start() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.RaisesGroup(pytest.RaisesExc(OSError, match=r"(?i)address already in use")):
            async with running(metrics_address=f"127.0.0.1:{port}"):
                pass


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":8081", ("", 8081)),
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:9443", ("::1", 9443)),
        ("[::]:8081", ("::", 8081)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected
    assert parse_address(format_address(*expected)) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8081", "must be host:port"),
        (":http", "port must be a number"),
        (":70000", "port must be a number"),
        ("::1:8081", "brackets"),
        ("[nope]:1", "not an IPv6 address"),
        ("a/b:1", "not a host name"),
    ],
)
def test_parse_address_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_address(text)
