"""Traces: the seeded generator and JSONL files (errors name the line and the field)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dispatcher.sim.trace import (
    TraceError,
    TraceParams,
    dump_trace,
    generate_trace,
    load_trace,
    parse_trace_lines,
)

GOOD = '{"arrival": 0, "name": "a", "requests": {"cpu": "1"}, "runSeconds": 60}'


def test_generator_is_deterministic_and_draws_the_documented_mix() -> None:
    params = TraceParams(workloads=2000, seed=7)
    first, second = generate_trace(params), generate_trace(params)
    assert first == second
    assert len(first.workloads) == 2000
    arrivals = [w.arrival for w in first.workloads]
    assert arrivals == sorted(arrivals)
    gpus = {int(w.line.requests.get("nvidia.com/gpu", 0)) for w in first.workloads}  # type: ignore[union-attr]
    assert gpus == {0, 1, 2, 4, 8}
    assert any(w.line.gpu_type for w in first.workloads)
    assert any(w.line.preferred_gpu_types for w in first.workloads)
    assert {w.line.priority_class for w in first.workloads} == {None, "high", "low"}
    runs = [w.run_seconds for w in first.workloads]
    assert min(runs) >= params.min_run_s
    assert max(runs) <= params.max_run_s
    other = generate_trace(dataclasses.replace(params, seed=8))
    assert other.workloads != first.workloads


def test_a_dumped_trace_loads_back_equal(tmp_path: Path) -> None:
    original = generate_trace(TraceParams(workloads=300, seed=3))
    path = tmp_path / "trace.jsonl"
    path.write_text(dump_trace(original), encoding="utf-8")
    loaded = load_trace(path)
    assert loaded.workloads == original.workloads
    assert loaded.faults == original.faults
    assert loaded.source == str(path)


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        pytest.param("{not json", ":2: not valid JSON", id="invalid-json"),
        pytest.param('{"name": "b", "runSeconds": 5}', ":2: arrival: required", id="no-arrival"),
        pytest.param(
            '{"arrival": 1, "name": "b"}', ":2: runSeconds: required", id="no-run-seconds"
        ),
        pytest.param(
            '{"arrival": -1, "name": "b", "runSeconds": 5}', ":2: arrival: required", id="negative"
        ),
        pytest.param(
            '{"arrival": 1, "name": "b", "runSeconds": 5, "colour": "red"}',
            ":2: colour: unknown field",
            id="unknown-field",
        ),
        pytest.param(
            '{"arrival": 1, "name": "a", "runSeconds": 5}',
            ":2: name: default/a already defined on line 1",
            id="duplicate-name",
        ),
        pytest.param(
            '{"arrival": 1, "name": "b", "runSeconds": 5, "count": 0}',
            ":2: count:",
            id="zero-count",
        ),
        pytest.param(
            '{"fault": "worker-down", "cluster": "w", "start": 10, "end": 5}',
            ":2: end: must be after start",
            id="fault-ends-before-it-starts",
        ),
        pytest.param(
            '{"fault": "reboot", "cluster": "w", "start": 1, "end": 5}',
            ":2: fault: must be 'worker-down'",
            id="fault-kind",
        ),
    ],
)
def test_errors_name_the_file_line_and_field(bad_line: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        parse_trace_lines([GOOD, bad_line, GOOD.replace('"a"', '"c"')], source="t.jsonl")
    assert f"t.jsonl{message}" in str(caught.value)
    assert ":1:" not in str(caught.value) or "already defined" in str(caught.value)


def test_every_bad_line_is_reported_in_line_order() -> None:
    lines = ["# a comment", "", '{"name": "x", "runSeconds": 1}', GOOD, "[1]"]
    with pytest.raises(TraceError) as caught:
        parse_trace_lines(lines, source="t.jsonl")
    found = str(caught.value).splitlines()
    assert found[0].startswith("t.jsonl:3: arrival")
    assert found[-1].startswith("t.jsonl:5:")


def test_faults_and_comments_load() -> None:
    lines = [
        "# workloads and a fault",
        '{"fault": "worker-down", "cluster": "worker-h100", "start": 5, "end": 50}',
        GOOD,
    ]
    loaded = parse_trace_lines(lines, source="t.jsonl")
    assert [(f.cluster, f.start, f.end) for f in loaded.faults] == [("worker-h100", 5.0, 50.0)]
    assert [w.line.name for w in loaded.workloads] == ["a"]
