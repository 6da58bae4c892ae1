"""Traces: exported over OTLP/HTTP only when an endpoint is configured, otherwise no-op.

The OTLP exporter is an optional dependency (``pip install 'multikueue-dispatcher[otlp]'``). It
sends from the batch processor's own thread, so the event loop is never blocked; its standard
``OTEL_EXPORTER_OTLP_*`` environment variables (headers, certificates, timeout) still apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

__all__ = [
    "ATTR_CLUSTER_QUEUE",
    "ATTR_NAMESPACE",
    "ATTR_WORKLOAD",
    "SPAN_NOMINATE",
    "SPAN_RECONCILE",
    "TelemetryError",
    "Tracing",
    "setup_tracing",
    "traces_url",
]

SPAN_RECONCILE = "dispatcher.reconcile"
"""One span per reconcile of a Workload."""
SPAN_NOMINATE = "dispatcher.nominate"
"""One span per nomination write."""
ATTR_NAMESPACE = "k8s.namespace.name"
ATTR_WORKLOAD = "kueue.workload"
ATTR_CLUSTER_QUEUE = "kueue.cluster_queue"

_TRACER_NAME = "multikueue_dispatcher"


class TelemetryError(RuntimeError):
    """Tracing was configured but cannot be set up (for example the ``otlp`` extra is missing)."""


@dataclass
class Tracing:
    """The process's tracer and, when exporting, the provider to shut down."""

    tracer: trace.Tracer
    """Start spans with ``tracing.tracer.start_as_current_span(SPAN_RECONCILE)``."""
    provider: TracerProvider | None
    """``None`` when tracing is a no-op."""

    @property
    def enabled(self) -> bool:
        """Whether spans are exported anywhere."""
        return self.provider is not None

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking: call it through ``anyio.to_thread``)."""
        if self.provider is not None:
            self.provider.shutdown()


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for ``endpoint``: a base URL such as
    ``http://collector:4318`` gets ``/v1/traces`` (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` does);
    a URL with a path is used as it is."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TelemetryError(f"OTLP endpoint must be an http(s) URL, got {endpoint!r}")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


def setup_tracing(
    otlp_endpoint: str | None,
    *,
    service_name: str = "multikueue-dispatcher",
    service_version: str | None = None,
    exporter: SpanExporter | None = None,
) -> Tracing:
    """A tracer exporting over OTLP/HTTP to ``otlp_endpoint``, or a no-op tracer when it is
    ``None`` and no ``exporter`` is given.

    ``exporter`` (tests, debugging) replaces OTLP and is fed synchronously. The provider is not
    installed globally, so tests can build several. Raises :class:`TelemetryError` when an
    endpoint is set but the ``otlp`` extra is not installed.
    """
    if otlp_endpoint is None and exporter is None:
        return Tracing(tracer=trace.NoOpTracer(), provider=None)
    attributes: dict[str, str] = {"service.name": service_name}
    if service_version:
        attributes["service.version"] = service_version
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if otlp_endpoint is not None:
        url = traces_url(otlp_endpoint)
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as error:  # pragma: no cover - depends on the installed extras
            raise TelemetryError(
                "an OTLP endpoint is configured but the OTLP exporter is not installed: "
                "pip install 'multikueue-dispatcher[otlp]'"
            ) from error
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    return Tracing(tracer=provider.get_tracer(_TRACER_NAME), provider=provider)
