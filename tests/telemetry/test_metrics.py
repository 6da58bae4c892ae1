"""The metrics facade: every series renders with the documented name, type and labels through the
Prometheus exporter into an explicit registry; gauges follow state and forget removed clusters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dispatcher.algorithms.model import REJECTION_REASONS, RejectionReason
from dispatcher.telemetry import ERROR_KINDS, SERIES, ConnectionState, ErrorKind, Metrics, Series


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    facade = Metrics(registry=CollectorRegistry())
    yield facade
    facade.shutdown()


def exercise(metrics: Metrics) -> None:
    """Record something in every series."""
    metrics.nominated(["worker-h100", "worker-a100"], cluster_queue="cq-gpu", algorithm="a+b")
    metrics.observe_decision_latency(0.004, cluster_queue="cq-gpu", algorithm="a+b")
    metrics.observe_time_to_admission(12.0, cluster_queue="cq-gpu", cluster="worker-h100")
    metrics.predicted_wait("worker-h100", 340.0)
    metrics.observe_predicted_start_error(-25.0, cluster="worker-h100")
    metrics.set_in_flight("worker-h100", 3)
    metrics.set_connection_state("worker-h100", ConnectionState.CONNECTED)
    metrics.error("watch")
    metrics.set_queue_depth(7)
    metrics.add_plugin_info("capacity-first", distribution="built-in", version="0.1.0")
    metrics.stuck_workload(cluster_queue="cq-gpu")
    metrics.stuck_eviction(cluster_queue="cq-gpu")
    metrics.stuck_eviction_release(cluster_queue="cq-gpu")
    metrics.leftover_job(cluster_queue="cq-gpu", cluster="c")
    metrics.gpu_type_mismatch(cluster="c", kind="preferred")
    metrics.filtered_cluster(plugin="gpu-type", reason=RejectionReason.GPU_TYPE_MISMATCH)
    metrics.no_feasible_cluster(cluster_queue="cq-gpu", algorithm="a+b")
    metrics.set_unplaceable({("cq-gpu", "default-flavor", "nvidia.com/gpu"): 8000}, {"cq-gpu": 1})
    metrics.unplaceable_action("release", cluster_queue="cq-gpu")


def scrape(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def families(text: str) -> dict[str, str]:
    """``# TYPE`` lines: family name as exported → type."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def samples(text: str, name: str) -> list[tuple[str, dict[str, str], float]]:
    found = []
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match and (match[1] == name or match[1].startswith(name + "_")):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match[2] or ""))
            found.append((match[1], labels, float(match[3])))
    return found


def test_every_series_is_exported_with_its_documented_name_and_type(metrics: Metrics) -> None:
    exercise(metrics)
    exported = families(scrape(metrics))
    assert exported == {s.name: s.kind for s in SERIES}


@pytest.mark.parametrize("series", SERIES, ids=lambda s: s.name)
def test_labels_are_the_documented_ones(metrics: Metrics, series: Series) -> None:
    exercise(metrics)
    text = scrape(metrics)
    found = samples(text, series.name)
    assert found
    for _, labels, _ in found:
        labels.pop("le", None)
        assert set(labels) == set(series.all_labels)
        assert labels["replica_role"] == "standalone"


def test_no_scope_labels_and_no_target_info(metrics: Metrics) -> None:
    exercise(metrics)
    text = scrape(metrics)
    assert "otel_scope" not in text
    assert "target_info" not in text


def test_values(metrics: Metrics) -> None:
    exercise(metrics)
    metrics.nominated(["worker-h100"], cluster_queue="cq-gpu", algorithm="a+b")
    text = scrape(metrics)
    nominations = {
        labels["cluster"]: value
        for name, labels, value in samples(text, "multikueue_dispatcher_nominations_total")
    }
    assert nominations == {"worker-h100": 2.0, "worker-a100": 1.0}
    assert samples(text, "multikueue_dispatcher_queue_depth")[0][2] == 7.0
    (count,) = [
        value
        for name, _, value in samples(text, "multikueue_dispatcher_decision_latency_seconds")
        if name.endswith("_count")
    ]
    assert count == 1.0
    buckets = {
        labels["le"]: value
        for name, labels, value in samples(text, "multikueue_dispatcher_time_to_admission_seconds")
        if name.endswith("_bucket")
    }
    assert buckets["10.0"] == 0.0
    assert buckets["20.0"] == 1.0


def connection_states(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (labels["cluster"], labels["state"]): value
        for _, labels, value in samples(
            scrape(metrics), "multikueue_dispatcher_worker_connection_state"
        )
    }


def test_connection_state_is_one_hot_and_removed_clusters_disappear(metrics: Metrics) -> None:
    metrics.set_connection_state("worker-a100", ConnectionState.CONNECTING)
    metrics.set_connection_state("worker-cpu", ConnectionState.UNUSABLE)
    metrics.set_connection_state("worker-a100", ConnectionState.CONNECTED)
    metrics.set_in_flight("worker-a100", 2)
    states = connection_states(metrics)
    assert len(states) == 2 * len(ConnectionState)
    assert {key for key, value in states.items() if value == 1.0} == {
        ("worker-a100", "connected"),
        ("worker-cpu", "unusable"),
    }
    metrics.forget_cluster("worker-a100")
    assert {cluster for cluster, _ in connection_states(metrics)} == {"worker-cpu"}
    assert samples(scrape(metrics), "multikueue_dispatcher_in_flight_nominations") == []


def test_replica_role_label_follows_the_role(metrics: Metrics) -> None:
    metrics.set_replica_role("follower")
    metrics.set_queue_depth(0)
    assert samples(scrape(metrics), "multikueue_dispatcher_queue_depth")[0][1] == {
        "replica_role": "follower"
    }
    metrics.set_replica_role("leader")
    metrics.error("api")
    text = scrape(metrics)
    assert metrics.replica_role == "leader"
    assert samples(text, "multikueue_dispatcher_queue_depth")[0][1] == {"replica_role": "leader"}
    assert samples(text, "multikueue_dispatcher_errors_total")[0][1] == {
        "kind": "api",
        "replica_role": "leader",
    }


def test_decision_timer_records_even_when_the_block_raises(metrics: Metrics) -> None:
    with (
        pytest.raises(RuntimeError),
        metrics.decision_timer(cluster_queue="cq", algorithm="capacity-first"),
    ):
        raise RuntimeError("plugin crashed")
    counts = [
        value
        for name, _, value in samples(
            scrape(metrics), "multikueue_dispatcher_decision_latency_seconds"
        )
        if name.endswith("_count")
    ]
    assert counts == [1.0]


def test_facades_are_independent() -> None:
    first, second = Metrics(), Metrics()
    try:
        first.error("api")
        assert "errors_total" in scrape(first)
        assert "errors_total" not in scrape(second)
    finally:
        first.shutdown()
        second.shutdown()


def test_rejections_are_counted_by_plugin_and_reason_code(metrics: Metrics) -> None:
    metrics.filtered_cluster(plugin="active", reason=RejectionReason.INACTIVE)
    metrics.filtered_cluster(plugin="active", reason=RejectionReason.INACTIVE)
    metrics.filtered_cluster(plugin="gpu-type", reason=RejectionReason.NO_GPU_TYPES)
    metrics.no_feasible_cluster(cluster_queue="cq-gpu", algorithm="capacity-first")
    text = scrape(metrics)
    filtered = {
        (labels["plugin"], labels["reason"]): value
        for _, labels, value in samples(text, "multikueue_dispatcher_filtered_clusters_total")
    }
    assert filtered == {("active", "inactive"): 2.0, ("gpu-type", "no_gpu_types"): 1.0}
    assert samples(text, "multikueue_dispatcher_no_feasible_cluster_total") == [
        (
            "multikueue_dispatcher_no_feasible_cluster_total",
            {
                "cluster_queue": "cq-gpu",
                "algorithm": "capacity-first",
                "replica_role": "standalone",
            },
            1.0,
        )
    ]


def test_every_error_kind_and_rejection_reason_is_documented() -> None:
    assert tuple(ERROR_KINDS) == get_args(ErrorKind)
    assert tuple(REJECTION_REASONS) == tuple(RejectionReason)
    assert all(ERROR_KINDS.values())
    assert all(REJECTION_REASONS.values())
    # The README's Metrics section names every reason code (docs/metrics.md is generated).
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### Metrics") : readme.index("### RBAC")]
    assert [code.value for code in RejectionReason if f"`{code.value}`" not in section] == []


def test_unplaceable_gauges_are_in_the_resources_unit_and_replaced_as_a_whole(
    metrics: Metrics,
) -> None:
    """The held quota is exported in the resource's unit (8 GPUs, not 8000 milli-units), and a
    new set of values replaces the old one: a ClusterQueue without unplaceable workloads
    exports no series."""
    metrics.set_unplaceable(
        {
            ("cq-gpu", "default-flavor", "nvidia.com/gpu"): 8000,
            ("cq-gpu", "default-flavor", "cpu"): 500,
        },
        {"cq-gpu": 1},
    )
    found = {
        (labels["flavor"], labels["resource"]): value
        for _, labels, value in samples(scrape(metrics), "multikueue_dispatcher_unplaceable_quota")
    }
    assert found == {("default-flavor", "nvidia.com/gpu"): 8.0, ("default-flavor", "cpu"): 0.5}
    metrics.set_unplaceable({}, {})
    text = scrape(metrics)
    assert samples(text, "multikueue_dispatcher_unplaceable_quota") == []
    assert samples(text, "multikueue_dispatcher_unplaceable_workloads") == []
