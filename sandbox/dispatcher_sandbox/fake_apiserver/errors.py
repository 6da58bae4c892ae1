"""Kubernetes ``Status`` error bodies (docs/fake-apiserver.md F8)."""

from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

CONFLICT_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def status_body(
    code: int,
    message: str,
    *,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``kind: Status`` failure body as the API server sends it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or _REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """An error answered to the client as a ``Status`` body with an HTTP status code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The ``Status`` body of this error."""
        return status_body(self.code, self.message, reason=self.reason, details=self.details)


def resource_label(group: str, plural: str) -> str:
    """``workloads.kueue.x-k8s.io`` or ``secrets`` (the form the API server uses in messages)."""
    return f"{plural}.{group}" if group else plural


def _details(name: str, group: str, plural: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def not_found(group: str, plural: str, name: str) -> ApiError:
    """404 for a missing object."""
    return ApiError(
        404,
        f'{resource_label(group, plural)} "{name}" not found',
        details=_details(name, group, plural),
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    """409 AlreadyExists for a create of an existing name."""
    return ApiError(
        409,
        f'{resource_label(group, plural)} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str) -> ApiError:
    """409 Conflict for a stale ``resourceVersion`` (F9)."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource_label(group, plural)} "{name}": '
        + CONFLICT_MESSAGE,
        reason="Conflict",
        details=_details(name, group, plural),
    )


def invalid(
    kind: str,
    group: str,
    name: str,
    message: str,
    causes: list[dict[str, str]],
) -> ApiError:
    """422 Invalid with one cause per field error (F42)."""
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, message, details=details)


def invalid_field(
    kind: str, group: str, name: str, field: str, detail: str, reason: str
) -> ApiError:
    """422 Invalid for a single field, with the message in the API server's format."""
    qualified = f"{kind}.{group}" if group else kind
    message = f'{qualified} "{name}" is invalid: {field}: {detail}'
    return invalid(
        kind, group, name, message, [{"reason": reason, "message": detail, "field": field}]
    )
