"""Placement hints in the simulator (issue 18 item 3): the simulator decides with the same
pipeline, so a held trace whose Jobs carry hints on their pod templates lands where the hints
say, with MultiKueueCluster labels (``clusterLabels``) and taints (``clusterTaints``) from the
topology file; without hints the same trace spreads as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dispatcher.kueue.hints import (
    CLUSTER_AFFINITY,
    CLUSTER_SELECTOR,
    CLUSTER_TOLERATIONS,
    DISPATCH_MODE,
)
from dispatcher.sim.trace import TraceWorkload
from dispatcher.sim.world import (
    CLUSTER_LABELS_KEY,
    CLUSTER_TAINTS_KEY,
    TopologyError,
    default_topology,
    load_topology,
    topology_yaml,
)
from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.sim import run, trace

REGION = "kueue.x-k8s.io/region"


def topology(tmp_path: Path, taint_east: bool = True) -> Path:
    """The default topology with regions on the A100 workers (east in us, west in eu), and
    worker-a100-east tainted ``reserved=batch:NoSchedule``."""
    data = yaml.safe_load(topology_yaml(default_topology()))
    data[CLUSTER_LABELS_KEY]["worker-a100-east"] = {REGION: "us"}
    data[CLUSTER_LABELS_KEY]["worker-a100-west"] = {REGION: "eu"}
    if taint_east:
        data[CLUSTER_TAINTS_KEY] = {
            "worker-a100-east": [{"key": "reserved", "value": "batch", "effect": "NoSchedule"}]
        }
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def a100_job(name: str, arrival: float, hints: dict[str, str]) -> TraceWorkload:
    line = WorkloadLine.model_validate(
        {
            "name": name,
            "runSeconds": 600,
            "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 1},
            "gpuType": "NVIDIA-A100-SXM4-80GB",
            "podAnnotations": hints,
        }
    )
    return TraceWorkload(arrival, line)


TOLERATE = json.dumps([{"key": "reserved", "operator": "Exists"}])


@pytest.mark.parametrize(
    ("hints", "placed"),
    [
        pytest.param({}, {"worker-a100-west"}, id="taint-keeps-east-out"),
        pytest.param(
            {CLUSTER_TOLERATIONS.key: TOLERATE},
            {"worker-a100-east", "worker-a100-west"},
            id="toleration-admits-east",
        ),
        pytest.param(
            {CLUSTER_TOLERATIONS.key: TOLERATE, CLUSTER_SELECTOR.key: f"{REGION}=us"},
            {"worker-a100-east"},
            id="selector-and-toleration",
        ),
        pytest.param(
            {
                CLUSTER_TOLERATIONS.key: TOLERATE,
                CLUSTER_AFFINITY.key: json.dumps(
                    {"preferred": [{"weight": 1, "preference": f"{REGION}=us"}]}
                ),
            },
            {"worker-a100-east"},
            id="preferred-ranks-east-first",
        ),
    ],
)
def test_the_simulator_places_by_the_hints(
    tmp_path: Path, hints: dict[str, str], placed: set[str]
) -> None:
    # Eight 1-GPU A100 Jobs, one a minute: few enough to fit on either A100 worker alone.
    jobs = [a100_job(f"j{i}", 60.0 * i, hints) for i in range(8)]
    [(result, _)] = run(
        "gpu-type-affinity+capacity-first", trace(*jobs), topology=load_topology(topology(tmp_path))
    ).values()
    clusters = {o.cluster for o in result.outcomes}
    assert None not in clusters
    assert clusters == placed


def test_cluster_taints_round_trip_and_bad_ones_name_the_field(tmp_path: Path) -> None:
    loaded = load_topology(topology(tmp_path))
    again = tmp_path / "again.yaml"
    again.write_text(topology_yaml(loaded))
    assert load_topology(again).worker("worker-a100-east").taints == (
        loaded.worker("worker-a100-east").taints
    )
    bad = topology(tmp_path).read_text().replace("NoSchedule", "Never")
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    with pytest.raises(TopologyError) as caught:
        load_topology(path)
    assert str(caught.value) == (
        f"{path}: {CLUSTER_TAINTS_KEY}.worker-a100-east[0].effect: 'Never': one of NoSchedule, "
        "PreferNoSchedule, NoExecute"
    )


def test_a_dispatch_mode_hint_makes_copies_everywhere_in_the_simulator(tmp_path: Path) -> None:
    """The same eight Jobs asking for ``all-at-once`` get a copy on each worker their other
    hints allow (a region label, the taint tolerated: the two A100 workers; the loser's copy is
    deleted), where the configured pipeline makes one; the hint's pipeline is the manager's
    (``pipeline_for``)."""
    base = {CLUSTER_TOLERATIONS.key: TOLERATE, CLUSTER_SELECTOR.key: REGION}
    runs = {}
    for label, hints in (
        ("configured", base),
        ("mode", {**base, DISPATCH_MODE.key: "all-at-once"}),
    ):
        jobs = [a100_job(f"j{i}", 60.0 * i, hints) for i in range(8)]
        [(result, _)] = run(
            "gpu-type-affinity+capacity-first",
            trace(*jobs),
            topology=load_topology(topology(tmp_path)),
        ).values()
        assert all(o.cluster is not None for o in result.outcomes)
        runs[label] = result.copies_created
    assert runs == {"configured": 8, "mode": 16}
