"""HTTP endpoints of the manager process: ``/healthz``, ``/readyz`` and ``/metrics``."""

from dispatcher.http.server import (
    BoundAddresses,
    Check,
    CheckResult,
    format_address,
    parse_address,
    serve_http,
)

__all__ = [
    "BoundAddresses",
    "Check",
    "CheckResult",
    "format_address",
    "parse_address",
    "serve_http",
]
