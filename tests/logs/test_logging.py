"""Structured logs: JSON lines carry time, level, logger, message and the ``extra=`` fields;
text format for terminals; configure_logging replaces only its own handler."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime

import pytest

from dispatcher.logs import JsonFormatter, TextFormatter, configure_logging


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.usefixtures("restore_root")
def test_json_lines_carry_the_standard_and_structured_fields() -> None:
    stream = io.StringIO()
    configure_logging("json", "debug", stream=stream)
    log = logging.getLogger("dispatcher.controller")
    log.info(
        "nominated %d cluster(s)",
        1,
        extra={"workload": "team-a/job-1", "cluster": "worker-h100", "algorithm": "capacity-first"},
    )
    log.debug("quiet", extra={"attempt": 2, "clusters": ["a", "b"], "ready": True})

    first, second = lines(stream)
    assert list(first)[:4] == ["time", "level", "logger", "message"]
    assert first["level"] == "info"
    assert first["logger"] == "dispatcher.controller"
    assert first["message"] == "nominated 1 cluster(s)"
    assert first["workload"] == "team-a/job-1"
    assert first["cluster"] == "worker-h100"
    assert first["algorithm"] == "capacity-first"
    assert str(first["time"]).endswith("Z")
    datetime.fromisoformat(str(first["time"]))
    assert second == second | {
        "level": "debug",
        "attempt": 2,
        "clusters": ["a", "b"],
        "ready": True,
    }


@pytest.mark.usefixtures("restore_root")
def test_one_line_per_record_even_with_newlines_and_exceptions() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    log = logging.getLogger("dispatcher.test")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed\nacross lines", extra={"cluster": "worker-a100"})
    (entry,) = lines(stream)
    assert entry["level"] == "error"
    assert entry["message"] == "failed\nacross lines"
    assert "RuntimeError: boom" in str(entry["exception"])
    assert entry["cluster"] == "worker-a100"


@pytest.mark.usefixtures("restore_root")
def test_level_filters_and_unserialisable_fields_become_strings() -> None:
    stream = io.StringIO()
    configure_logging("json", "WARNING", stream=stream)
    log = logging.getLogger("dispatcher.test")
    log.info("dropped")
    log.warning(
        "kept", extra={"obj": object.__new__(type("Thing", (), {"__str__": lambda s: "T"}))}
    )
    (entry,) = lines(stream)
    assert entry["message"] == "kept"
    assert entry["obj"] == "T"


@pytest.mark.usefixtures("restore_root")
def test_text_format_for_terminals() -> None:
    stream = io.StringIO()
    configure_logging("text", "info", stream=stream)
    logging.getLogger("dispatcher.app").info(
        "started", extra={"cluster": "worker-cpu", "reason": "two words"}
    )
    line = stream.getvalue().rstrip("\n")
    assert " INFO    dispatcher.app: started " in line
    assert line.endswith('cluster=worker-cpu reason="two words"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


@pytest.mark.usefixtures("restore_root")
def test_configure_again_replaces_only_our_handler() -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    try:
        first, second = io.StringIO(), io.StringIO()
        configure_logging("json", "info", stream=first)
        configure_logging("text", "info", stream=second)
        logging.getLogger("x").warning("once")
        assert first.getvalue() == ""
        assert "once" in second.getvalue()
        assert foreign in root.handlers
    finally:
        root.removeHandler(foreign)


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        configure_logging("json", "loud", stream=io.StringIO())


def test_formatters_render_a_bare_record() -> None:
    record = logging.LogRecord("n", logging.ERROR, __file__, 1, "m %s", ("x",), None)
    assert json.loads(JsonFormatter().format(record))["message"] == "m x"
    assert TextFormatter().format(record).endswith("ERROR   n: m x")
