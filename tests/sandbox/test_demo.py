"""The ``sandbox`` demo (issue 6, scope 1): the default mix on the default topology, in process and
as the command a newcomer runs, its ``--json`` contract, its exit status, and its inputs.

Must show: the demo runs to its summary with exit 0; every workload that fits the topology lands
on a cluster of its required GPU type; the one too big for every cluster is reported pending with
the reason Kueue gives.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dispatcher.cli import main as cli_main
from dispatcher.topology import (
    WorkloadFileError,
    WorkloadLine,
    default_topology,
    demo_workloads,
)
from dispatcher_sandbox.demo import (
    DemoOptions,
    TimedLine,
    _short_reason,
    expectations,
    parse_trace_lines,
    run_demo,
)

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
GPU_OF_CLUSTER: dict[str, str | None] = {
    "worker-a100": A100,
    "worker-h100": H100,
    "worker-cpu": None,
}
WORKLOAD_FIELDS = {"namespace", "name", "cluster", "copies", "tta_s", "gpu_type", "outcome"}


def check_demo_json(document: dict[str, Any]) -> None:
    """The ``sandbox --json`` contract on the default mix, and the demo's promises."""
    assert set(document) == {"workloads", "summary"}
    lines = {f"{line.namespace}/{line.name}": line for line in demo_workloads()}
    entries = {f"{w['namespace']}/{w['name']}": w for w in document["workloads"]}
    assert set(entries) == set(lines)
    for key, entry in entries.items():
        assert set(entry) >= WORKLOAD_FIELDS, key
        line = lines[key]
        if key == "team-a/too-big":
            assert entry["outcome"] == "pending"
            assert entry["cluster"] is None
            assert entry["copies"] == 0
            assert entry["expected"] == "pending"
            assert "insufficient quota" in entry["reason"]
            continue
        assert entry["outcome"] in ("admitted", "finished"), entry
        cluster = entry["cluster"]
        assert cluster in GPU_OF_CLUSTER
        if line.gpu_type:
            assert GPU_OF_CLUSTER[cluster] == line.gpu_type == entry["gpu_type"], entry
        if line.preferred_gpu_types:
            assert entry["gpu_type"] in line.preferred_gpu_types, entry
        assert entry["copies"] == 1, entry
        assert isinstance(entry["tta_s"], float)
        assert entry["tta_s"] >= 0
        assert entry["reason"].startswith(f"nominated [{cluster}]"), entry
        assert entry["problem"] is None
    summary = document["summary"]
    assert summary["ok"] is True
    assert summary["problems"] == []
    assert summary["workloads"] == len(lines)
    assert summary["admitted"] == len(lines) - 1
    assert summary["pending"] == summary["expected_pending"] == 1
    assert summary["gpu_type_mismatches"] == 0
    assert summary["dispatcher_errors"] == 0
    assert summary["copies_per_admitted"] == 1.0
    assert summary["algorithm"] == "gpu-type-affinity+capacity-first"


# --- inputs (no clusters) ----------------------------------------------------------------------


def test_expectations_of_the_demo_mix() -> None:
    expected = expectations(demo_workloads(), default_topology())
    never = {key for key, e in expected.items() if not e.admittable}
    assert never == {"team-a/too-big"}
    assert "manager's ClusterQueue" in expected["team-a/too-big"].reason
    assert expected["team-a/llm-pretrain"].clusters == ("worker-h100",)
    assert expected["team-a/vision-finetune"].clusters == ("worker-a100",)
    assert expected["team-b/etl-nightly"].clusters == ("worker-a100", "worker-h100", "worker-cpu")


def test_expectations_a_workload_that_fits_the_manager_but_no_worker() -> None:
    line = WorkloadLine.model_validate(
        {"name": "h100x8", "requests": {"cpu": "1", "nvidia.com/gpu": 8}, "gpuType": H100}
    )
    [expectation] = expectations([line], default_topology()).values()
    assert not expectation.admittable
    assert expectation.reason.startswith("fits no worker: worker-a100: ")
    assert "worker-h100: " in expectation.reason


def test_traces_are_the_simulators_format() -> None:
    """``--trace`` takes what ``simulate --trace`` takes: workload lines with ``arrival``."""
    trace = parse_trace_lines(
        [
            "# a comment",
            json.dumps({"arrival": 5, "name": "late", "runSeconds": 1}),
            json.dumps({"arrival": 0, "name": "first", "runSeconds": 1}),
            json.dumps({"arrival": 1.5, "name": "middle", "runSeconds": 3}),
        ],
        topology=default_topology(),
    )
    assert [(t.at, t.line.name) for t in trace] == [(0.0, "first"), (1.5, "middle"), (5.0, "late")]
    assert trace[1].line.run_seconds == 3


def test_trace_errors_name_the_line_and_field() -> None:
    with pytest.raises(WorkloadFileError) as caught:
        parse_trace_lines(
            [
                json.dumps({"arrival": -1, "name": "a", "runSeconds": 1}),
                json.dumps({"arrival": 0, "name": "b", "runSeconds": 1, "x": 1}),
            ],
            source="t.jsonl",
        )
    message = str(caught.value)
    assert "t.jsonl:1: arrival: required, a number of seconds >= 0" in message
    assert "t.jsonl:2: x:" in message


def test_trace_faults_and_unknown_queues_are_refused() -> None:
    with pytest.raises(WorkloadFileError) as caught:
        parse_trace_lines(
            [
                json.dumps({"arrival": 0, "name": "a", "runSeconds": 1, "queue": "nope"}),
                json.dumps(
                    {"fault": "worker-down", "cluster": "worker-a100", "start": 1, "end": 2}
                ),
            ],
            source="t.jsonl",
            topology=default_topology(),
        )
    message = str(caught.value)
    assert "replayed by `simulate` only" in message
    assert "t.jsonl: default/a: queue: no LocalQueue default/nope" in message


def test_short_reason_is_the_decision_part_of_the_event() -> None:
    message = "nominated [worker-a100] by p: worker-a100: fits now. worker-a100: rank 0 (fits now)"
    assert _short_reason(message) == "worker-a100: fits now"
    assert _short_reason("pending: no room") == "pending: no room"


def test_bad_input_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "w.jsonl"
    bad.write_text(json.dumps({"name": "a", "queue": "nope"}) + "\n")
    assert cli_main(["sandbox", "--workloads", str(bad)]) == 2
    assert f"{bad}:1: queue: no LocalQueue default/nope" in capsys.readouterr().err
    assert cli_main(["sandbox", "--workloads", str(bad), "--trace", str(bad)]) == 2
    assert cli_main(["sandbox", "--topology", str(tmp_path / "missing.yaml")]) == 2


def test_c22_workload_lines_for_the_manager_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14 item 1 (C22): the demo submits to the MultiKueue manager, which rejects a
    Workload no Job owns; a ``kind: Workload`` line is bad input, named by line and field."""
    workloads = tmp_path / "w.jsonl"
    workloads.write_text(json.dumps({"kind": "Workload", "name": "bare"}) + "\n")
    assert cli_main(["sandbox", "--workloads", str(workloads)]) == 2
    assert f'{workloads}:1: kind: "Workload" cannot be submitted to the MultiKueue manager' in (
        capsys.readouterr().err
    )
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        json.dumps({"arrival": 0, "kind": "Workload", "name": "bare", "runSeconds": 1}) + "\n"
    )
    assert cli_main(["sandbox", "--trace", str(trace)]) == 2
    assert f'{trace}: default/bare: kind: "Workload" cannot be submitted' in (
        capsys.readouterr().err
    )


# --- the demo ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_demo_in_process_places_the_mix_and_writes_the_contract(
    tmp_path: Path, crds_dir: Path
) -> None:
    out = io.StringIO()
    options = DemoOptions(
        topology=default_topology(),
        workloads=[TimedLine(0.0, line) for line in demo_workloads()],
        directory=tmp_path / "clusters",
        json_path=tmp_path / "out.json",
        live=False,
        crds=crds_dir,
    )
    report = await run_demo(options, out)
    text = out.getvalue()
    assert report.ok, text
    assert "Summary: 10 workloads, 9 admitted" in text
    assert "per worker nominated/admitted/finished" in text  # the plain progress lines
    assert "team-a/too-big: pending on the manager (QuotaReserved=False)" in text
    check_demo_json(json.loads((tmp_path / "out.json").read_text()))
    assert (tmp_path / "clusters" / "manager.kubeconfig").is_file()


@pytest.mark.slow
async def test_demo_fails_when_an_admittable_workload_is_not_admitted(
    tmp_path: Path, crds_dir: Path
) -> None:
    """Four H100s held forever by a job without runSeconds: the second H100 job fits the
    topology but waits past the timeout, so the demo reports a failure (live view on)."""
    holder = {"name": "holder", "count": 4, "requests": {"cpu": "1", "nvidia.com/gpu": 1}}
    waiter = {"name": "waiter", "count": 4, "requests": {"cpu": "1", "nvidia.com/gpu": 1}}
    lines = [
        TimedLine(0.0, WorkloadLine.model_validate({**holder, "gpuType": H100})),
        TimedLine(0.5, WorkloadLine.model_validate({**waiter, "gpuType": H100})),
    ]
    out = io.StringIO()
    options = DemoOptions(
        topology=default_topology(),
        workloads=lines,
        timeout=2.0,
        time_scale=1.0,
        live=True,
        crds=crds_dir,
    )
    report = await run_demo(options, out)
    assert not report.ok
    document = report.to_json()
    assert document["summary"]["problems"] == ["default/waiter: not admitted within 2s"]
    waiting = document["workloads"][1]
    assert (waiting["name"], waiting["outcome"], waiting["expected"]) == (
        "waiter",
        "pending",
        "admitted",
    )
    text = out.getvalue()
    assert "FAILED:" in text
    assert "submitted" in text
    assert "nominated" in text


@pytest.mark.slow
def test_sandbox_command_runs_the_demo_to_its_summary(tmp_path: Path, crds_dir: Path) -> None:
    """What a newcomer runs first (``make sandbox``), as a process without a terminal (as in
    CI): exit 0, the summary, and the JSON contract."""
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "sandbox", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "KUEUE_CRDS_DIR": str(crds_dir)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Summary: 10 workloads, 9 admitted" in done.stdout
    assert "OK: every workload that fits the topology was admitted" in done.stdout
    check_demo_json(json.loads(out.read_text()))
