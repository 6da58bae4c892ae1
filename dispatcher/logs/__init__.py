"""Structured logging: JSON lines by default, text for local runs, credentials redacted.

Pass structured fields with ``extra=``; use the names ``workload`` (``namespace/name``),
``cluster``, ``cluster_queue``, ``algorithm`` and ``replica_role`` where relevant, spelt as the
metric labels are (docs/metrics.md)::

    log.info("nominated", extra={"workload": "team-a/job-1", "cluster": "worker-h100"})
"""

from dispatcher.logs.formatting import JsonFormatter, LogFormat, TextFormatter, configure_logging
from dispatcher.logs.redaction import (
    REDACTED,
    SECRET_KEYS,
    RedactionFilter,
    extra_fields,
    redact,
    redact_value,
)

__all__ = [
    "REDACTED",
    "SECRET_KEYS",
    "JsonFormatter",
    "LogFormat",
    "RedactionFilter",
    "TextFormatter",
    "configure_logging",
    "extra_fields",
    "redact",
    "redact_value",
]
