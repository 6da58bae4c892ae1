"""Errors of the Kubernetes layer, free of kubernetes_asyncio types.

Code above ``dispatcher.k8s`` never imports kubernetes_asyncio, so it cannot catch
``ApiException``: every call of this package translates it into :class:`ApiError`, and transport
failures (refused connection, TLS, timeouts, cut streams) into :class:`ApiUnreachable`.
"""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """A non-2xx answer of an API server, with the fields of its ``Status`` body.

    ``status`` is the HTTP code (0 for :class:`ApiUnreachable`), ``reason`` the Status reason
    (``NotFound``, ``Conflict``, ``Invalid``, ``Expired``…), ``message`` the Status message.
    """

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        *,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body = body or {}

    @classmethod
    def from_body(
        cls, status: int, raw: bytes | str | None, headers: Any = None, default_reason: str = ""
    ) -> ApiError:
        """An error from an HTTP status and a (possibly non-JSON) Status body."""
        body: dict[str, Any] = {}
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else (raw or "")
        try:
            parsed = json.loads(text) if text else {}
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            body = {}
        message = str(body.get("message") or text[:500])
        reason = str(body.get("reason") or default_reason)
        retry_after: float | None = None
        if headers is not None:
            value = headers.get("Retry-After")
            if value:
                try:
                    retry_after = float(value)
                except ValueError:
                    retry_after = None
        return cls(status, reason, message, retry_after=retry_after, body=body)

    @property
    def not_found(self) -> bool:
        """404."""
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409: stale resourceVersion, an existing name, or an apply conflict."""
        return self.status == 409

    @property
    def gone(self) -> bool:
        """410: the resourceVersion is too old (re-list)."""
        return self.status == 410


class ApiUnreachable(ApiError):
    """The request got no HTTP answer: connection refused or cut, TLS failure, timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "Unreachable", message)


class ManagerConfigError(Exception):
    """The dispatcher's own connection to the manager cluster cannot be configured: no
    kubeconfig found, a file that cannot be read or parsed, a context that does not exist.

    ``str()`` is one line that names the source (``--kubeconfig FILE``, ``$KUBECONFIG``, the
    file, the context) and what is wrong; for "nothing found" it lists what was tried.
    """
