"""JSON-lines and text formatters, and the process-wide logging setup."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Literal

from dispatcher.logs.redaction import RedactionFilter, extra_fields

__all__ = ["JsonFormatter", "LogFormat", "TextFormatter", "configure_logging"]

LogFormat = Literal["json", "text"]
"""``json``: one JSON object per line (production); ``text``: human-readable (local runs)."""

_MARK = "_multikueue_dispatcher_handler"


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, then the
    ``extra=`` fields (``workload``, ``cluster``, ``algorithm``…), then ``exception`` and
    ``stack`` when present.

    ``time`` is RFC 3339 in UTC with milliseconds; ``level`` is lower case as in
    controller-runtime's zap output. Values that are not JSON types are rendered with ``str``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one line of JSON."""
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL logger: message key=value …`` for reading in a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as text (several lines when there is an exception)."""
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        fields = extra_fields(record)
        if fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _text_value(value: object) -> str:
    if isinstance(value, str) and value and not any(c.isspace() or c in "\"'=" for c in value):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


def configure_logging(
    log_format: LogFormat = "json",
    level: int | str = "info",
    *,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send every log record of the process to ``stream`` (default ``sys.stdout``) in
    ``log_format``, with credentials redacted (:class:`RedactionFilter`).

    Replaces the handler an earlier call installed (so it may be called again, for example after
    loading settings) and leaves other handlers alone. ``level`` is a name (``debug``, ``info``,
    ``warning``, ``error``, any case) or a number; it is set on the root logger. Returns the
    handler.
    """
    if isinstance(level, str):
        numeric = logging.getLevelNamesMapping().get(level.upper())
        if numeric is None:
            raise ValueError(f"unknown log level {level!r}")
        level = numeric
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    handler = logging.StreamHandler(stream if stream is not None else sys.stdout)
    handler.setFormatter(formatter)
    handler.addFilter(RedactionFilter())
    setattr(handler, _MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _MARK, False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(level)
    return handler
