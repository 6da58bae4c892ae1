"""Redaction of credentials in log messages and structured fields.

Logs must never carry Secret contents or kubeconfigs (README, *Operations*). :func:`redact` removes,
from any text:

- bearer and basic ``Authorization`` credentials (``Bearer eyJ…`` → ``Bearer [REDACTED]``);
- the values of credential keys in YAML, JSON, Python-repr or ``key=value`` form:
  ``certificate-authority-data``, ``client-certificate-data``, ``client-key-data``, ``token``,
  ``id-token``, ``refresh-token``, ``access-token``, ``password``, ``client-secret``;
- JSON Web Tokens (service-account tokens) wherever they appear;
- PEM blocks (certificates and private keys);
- long base64 runs (64 characters or more, not plain hexadecimal), such as a base64-encoded
  kubeconfig taken from a Secret's ``data``.

:class:`RedactionFilter` applies it to every record a handler emits: the formatted message, the
exception text, the stack and every ``extra=`` field (a field whose *name* is a credential key
loses its value whatever it is).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "REDACTED",
    "SECRET_KEYS",
    "RedactionFilter",
    "extra_fields",
    "redact",
    "redact_value",
]

REDACTED = "[REDACTED]"
"""What replaces a secret."""

SECRET_KEYS = frozenset(
    {
        "certificate-authority-data",
        "client-certificate-data",
        "client-key-data",
        "token",
        "id-token",
        "refresh-token",
        "access-token",
        "password",
        "client-secret",
        "authorization",
    }
)
"""Key names whose values are always secret (compared lower-case, ``_`` read as ``-``)."""

_KEY_ALTERNATIVES = "|".join(
    re.escape(key).replace("\\-", "[-_]") for key in sorted(SECRET_KEYS, key=len, reverse=True)
)
# key, optional closing quote, separator, optional opening quote, value up to a delimiter.
_KEY_VALUE = re.compile(
    rf"""(?P<key>(?<![\w-])(?:{_KEY_ALTERNATIVES})(?![\w-])["']?\s*[:=]\s*)"""
    r"""(?P<quote>["']?)(?P<value>(?:bearer\s+|basic\s+)?[^\s"',;&}\]\)]+)""",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>bearer|basic)\s+[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|$)", re.DOTALL | re.IGNORECASE
)
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{64,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX = re.compile(r"[0-9a-fA-F]+")


def _base64_run(match: re.Match[str]) -> str:
    text = match.group(0)
    return text if _HEX.fullmatch(text) else REDACTED


def redact(text: str) -> str:
    """``text`` with every credential it contains replaced by ``[REDACTED]``."""
    if not text:
        return text
    text = _PEM.sub(REDACTED, text)
    text = _KEY_VALUE.sub(lambda m: f"{m.group('key')}{m.group('quote')}{REDACTED}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group('scheme')} {REDACTED}", text)
    text = _JWT.sub(REDACTED, text)
    return _BASE64.sub(_base64_run, text)


def _is_secret_key(key: object) -> bool:
    return isinstance(key, str) and key.lower().replace("_", "-") in SECRET_KEYS


def redact_value(value: Any) -> Any:
    """A copy of a structured value with secrets removed.

    Strings are redacted, mappings lose the values of credential keys, sequences are redacted
    item by item, bytes are never shown, and other objects become their redacted ``str()``
    (so a JSON formatter never renders an unredacted ``repr``).
    """
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return {
            str(k): REDACTED if _is_secret_key(k) else redact_value(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [redact_value(item) for item in value]
    return redact(str(value))


_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` fields of ``record`` (attributes a plain record does not have)."""
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
    }


class RedactionFilter(logging.Filter):
    """A handler filter that removes credentials from a record before it is formatted.

    The message is rendered (``msg % args``) and redacted, the exception and stack texts are
    rendered and redacted, and every ``extra=`` field is replaced by :func:`redact_value` of it.
    The record is changed in place and always passes.
    """

    _exception_formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; never drops it."""
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: show it unformatted rather than lose it
            message = f"{record.msg} {record.args!r}"
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._exception_formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in extra_fields(record).items():
            setattr(record, key, REDACTED if _is_secret_key(key) else redact_value(value))
        return True
