"""Process-wide records a test session checks after the fact.

:data:`REJECTIONS`: every 422 answer of every fake cluster of this process, so that a session can
prove a component (the Kueue emulation) never had a write rejected except where a test expects
it. :data:`ISSUED_CREDENTIALS`: every credential the fake clusters minted, so that a session can
prove none of them ever reached a log line (issue 8, security).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rejection:
    """A write answered with 422 Invalid (schema, CEL, patch options or an admission hook)."""

    cluster: str
    expected: bool
    user_agent: str
    method: str
    path: str
    message: str


# Every 422 of every fake cluster of this process, in order.
REJECTIONS: list[Rejection] = []


@dataclass(frozen=True)
class IssuedCredential:
    """A credential the sandbox minted: a cluster's bearer token (``token``, also the admin
    endpoint's), the shared CA's private key (``ca-key``) or a serving key (``serving-key``)."""

    kind: str
    cluster: str
    value: str


# Every credential the fake clusters of this process issued, in order, each once.
ISSUED_CREDENTIALS: list[IssuedCredential] = []
_ISSUED_VALUES: set[str] = set()


def register_credential(kind: str, cluster: str, value: str) -> None:
    """Add a credential to :data:`ISSUED_CREDENTIALS` unless it is there already."""
    if value not in _ISSUED_VALUES:
        _ISSUED_VALUES.add(value)
        ISSUED_CREDENTIALS.append(IssuedCredential(kind, cluster, value))
