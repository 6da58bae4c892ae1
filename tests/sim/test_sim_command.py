"""``multikueue-dispatcher simulate``: traces and topologies from files, table, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dispatcher.cli import main
from dispatcher.sim.world import default_topology, load_topology, topology_yaml

TRACE = "\n".join(
    [
        "# two jobs and a fault",
        '{"fault": "worker-down", "cluster": "worker-h100", "start": 0, "end": 100}',
        '{"arrival": 0, "name": "h", "requests": {"cpu": "8", "memory": "64Gi", '
        '"nvidia.com/gpu": 1}, "gpuType": "NVIDIA-H100-80GB-HBM3", "runSeconds": 60}',
        '{"arrival": 5, "name": "c", "namespace": "team-a", "requests": {"cpu": "4"}, '
        '"priorityClass": "high", "runSeconds": 30}',
    ]
)


def test_a_trace_file_is_replayed_and_summarised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE + "\n")
    out = tmp_path / "r.json"
    assert main(["simulate", "--trace", str(trace), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    for name in ("gpu-type-affinity+capacity-first", "all-at-once", "incremental"):
        assert name in table
    document = json.loads(out.read_text())
    assert document["trace"]["source"] == str(trace)
    assert document["trace"]["faults"] == [
        {"cluster": "worker-h100", "start_s": 0.0, "end_s": 100.0}
    ]
    ours = document["algorithms"]["gpu-type-affinity+capacity-first"]
    assert ours["admitted"] == 2
    # The H100 job waits for its only worker to come back (~100 s), then is admitted there.
    assert 100.0 <= ours["tta_max_s"] < 105.0
    assert ours["admitted_by_cluster"]["worker-h100"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--trace", "BAD"], "BAD:2: arrival: required", id="bad-trace-line"),
        pytest.param(["--trace", "BAD", "--seed", "1"], "--seed applies", id="seed-with-trace"),
        pytest.param(["--algorithms", "no-such-algo"], "unknown algorithm", id="unknown-algo"),
        pytest.param(["--fault", "worker-x:1:2"], "unknown worker", id="fault-unknown-worker"),
        pytest.param(["--fault", "worker-h100:1"], "CLUSTER:START:END", id="fault-syntax"),
        pytest.param(["--topology", "TOPO"], "clusterLabels: no worker", id="bad-labels"),
    ],
)
def test_errors_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival": 1, "name": "ok", "runSeconds": 5}\n{"name": "x"}\n')
    topo = tmp_path / "topo.yaml"
    topo.write_text(topology_yaml(default_topology()).replace("worker-l4:\n", "worker-nope:\n", 1))
    args = [str(bad) if a == "BAD" else str(topo) if a == "TOPO" else a for a in args]
    assert (
        main(
            ["simulate", "--generate", "20", *args]
            if "--trace" not in args
            else ["simulate", *args]
        )
        == 2
    )
    assert message.replace("BAD", str(bad)) in capsys.readouterr().err


def test_a_topology_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(topology_yaml(default_topology()))
    loaded = load_topology(path)
    assert [w.name for w in loaded.workers] == [w.name for w in default_topology().workers]
    assert dict(loaded.worker("worker-l4").labels) == {
        "multikueue-dispatcher.io/gpu-type": "NVIDIA-L4"
    }
    assert main(["simulate", "--generate", "50", "--topology", str(path), "--no-faults"]) == 0
