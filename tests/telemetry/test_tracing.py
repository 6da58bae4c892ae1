"""Traces: a no-op tracer unless configured; spans reach an injected exporter, and an OTLP/HTTP
collector over loopback when an endpoint is set."""

from __future__ import annotations

import anyio
import pytest
from aiohttp import web
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dispatcher.telemetry import (
    ATTR_WORKLOAD,
    SPAN_RECONCILE,
    TelemetryError,
    setup_tracing,
    traces_url,
)


def test_no_endpoint_means_no_op() -> None:
    tracing = setup_tracing(None)
    assert not tracing.enabled
    with tracing.tracer.start_as_current_span(SPAN_RECONCILE) as span:
        assert not span.is_recording()
    tracing.shutdown()


def test_spans_reach_an_injected_exporter() -> None:
    exporter = InMemorySpanExporter()
    tracing = setup_tracing(None, exporter=exporter, service_version="0.1.0")
    with tracing.tracer.start_as_current_span(SPAN_RECONCILE) as span:
        span.set_attribute(ATTR_WORKLOAD, "team-a/job-1")
    tracing.shutdown()
    (finished,) = exporter.get_finished_spans()
    assert finished.name == "dispatcher.reconcile"
    assert finished.attributes == {"kueue.workload": "team-a/job-1"}
    assert finished.resource.attributes["service.name"] == "multikueue-dispatcher"
    assert finished.resource.attributes["service.version"] == "0.1.0"


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://otel-collector:4318", "http://otel-collector:4318/v1/traces"),
        ("https://otel-collector:4318/", "https://otel-collector:4318/v1/traces"),
        ("http://gateway/otlp/v1/traces", "http://gateway/otlp/v1/traces"),
    ],
)
def test_traces_url(endpoint: str, url: str) -> None:
    assert traces_url(endpoint) == url


@pytest.mark.parametrize("endpoint", ["otel-collector:4318", "grpc://c:4317", "http://"])
def test_bad_endpoint_is_refused(endpoint: str) -> None:
    with pytest.raises(TelemetryError, match="must be an http"):
        setup_tracing(endpoint)


async def test_spans_are_exported_over_otlp_http(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    received: list[tuple[str, str, bytes]] = []

    async def collect(request: web.Request) -> web.Response:
        received.append((request.path, request.content_type, await request.read()))
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        tracing = setup_tracing(f"http://127.0.0.1:{port}")
        assert tracing.enabled
        with tracing.tracer.start_as_current_span(SPAN_RECONCILE) as span:
            span.set_attribute(ATTR_WORKLOAD, "team-a/job-1")
        await anyio.to_thread.run_sync(tracing.shutdown)
    finally:
        await runner.cleanup()
    ((path, content_type, body),) = received
    assert path == "/v1/traces"
    assert content_type == "application/x-protobuf"
    assert b"dispatcher.reconcile" in body
    assert b"team-a/job-1" in body
    assert b"multikueue-dispatcher" in body
