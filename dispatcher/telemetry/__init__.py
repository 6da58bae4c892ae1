"""OpenTelemetry metrics (served by the Prometheus exporter) and optional OTLP traces.

Build one :class:`Metrics` per process and serve ``metrics.registry`` at ``/metrics``; build
tracing with :func:`setup_tracing` from the ``otlp_endpoint`` setting. The series are listed in
``docs/metrics.md``, generated from :data:`SERIES`.
"""

from dispatcher.telemetry.metrics import (
    DECISION_LATENCY_BUCKETS,
    ERROR_KINDS,
    PREFIX,
    SERIES,
    TIME_TO_ADMISSION_BUCKETS,
    ConnectionState,
    ErrorKind,
    Metrics,
    ReplicaRole,
    Series,
)
from dispatcher.telemetry.tracing import (
    ATTR_CLUSTER_QUEUE,
    ATTR_NAMESPACE,
    ATTR_WORKLOAD,
    SPAN_NOMINATE,
    SPAN_RECONCILE,
    TelemetryError,
    Tracing,
    setup_tracing,
    traces_url,
)

__all__ = [
    "ATTR_CLUSTER_QUEUE",
    "ATTR_NAMESPACE",
    "ATTR_WORKLOAD",
    "DECISION_LATENCY_BUCKETS",
    "ERROR_KINDS",
    "PREFIX",
    "SERIES",
    "SPAN_NOMINATE",
    "SPAN_RECONCILE",
    "TIME_TO_ADMISSION_BUCKETS",
    "ConnectionState",
    "ErrorKind",
    "Metrics",
    "ReplicaRole",
    "Series",
    "TelemetryError",
    "Tracing",
    "setup_tracing",
    "traces_url",
]
