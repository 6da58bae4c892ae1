"""docs/metrics.md is generated from the facade's series and lists exactly what a scrape shows."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from prometheus_client import generate_latest

from dispatcher.algorithms.model import RejectionReason
from dispatcher.telemetry import SERIES, ConnectionState, Metrics

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_metrics_docs", ROOT / "scripts" / "gen_metrics_docs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented() -> dict[str, str]:
    """Table rows of docs/metrics.md: series name → type."""
    return dict(re.findall(r"^\| `(multikueue_dispatcher_\w+)` \| (\w+) \|", DOC.read_text(), re.M))


def test_committed_file_is_current() -> None:
    assert DOC.read_text() == generator().render(), (
        "docs/metrics.md is stale: run python scripts/gen_metrics_docs.py"
    )


def test_every_registered_series_is_documented_and_vice_versa() -> None:
    metrics = Metrics()
    try:
        metrics.nominated(["c"], cluster_queue="q", algorithm="a")
        metrics.observe_decision_latency(0.1, cluster_queue="q", algorithm="a")
        metrics.observe_time_to_admission(1.0, cluster_queue="q", cluster="c")
        metrics.predicted_wait("c", 60.0)
        metrics.observe_predicted_start_error(5.0, cluster="c")
        metrics.set_in_flight("c", 1)
        metrics.set_connection_state("c", ConnectionState.DISCONNECTED)
        metrics.error("api")
        metrics.set_queue_depth(1)
        metrics.add_plugin_info("p", distribution="d", version="1")
        metrics.stuck_workload(cluster_queue="q")
        metrics.stuck_eviction(cluster_queue="q")
        metrics.stuck_eviction_release(cluster_queue="q")
        metrics.leftover_job(cluster_queue="q", cluster="c")
        metrics.gpu_type_mismatch(cluster="c", kind="required")
        metrics.filtered_cluster(plugin="p", reason=RejectionReason.OTHER)
        metrics.no_feasible_cluster(cluster_queue="q", algorithm="a")
        metrics.set_unplaceable({("q", "f", "cpu"): 1000}, {"q": 1})
        metrics.unplaceable_action("restore", cluster_queue="q")
        text = generate_latest(metrics.registry).decode()
    finally:
        metrics.shutdown()
    scraped = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert scraped == documented()
    assert {s.name: s.kind for s in SERIES} == documented()
