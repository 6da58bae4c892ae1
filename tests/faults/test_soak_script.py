"""The soak script (issue 8, scope 4: "30 minutes of steady arrivals with random faults on the
sandbox; report memory growth, open connections/tasks over time, decision latency drift").

The 30-minute run is not part of CI (docs/soak.md has its figures); this runs the script for a
few seconds, end to end, so that it keeps working, and checks its arithmetic.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "soak.py"


@functools.cache
def soak() -> ModuleType:
    """benchmarks/soak.py as a module (registered, as its dataclasses need)."""
    spec = importlib.util.spec_from_file_location("soak_script", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        pytest.param(0.5, {0.01: 0.0, 0.02: 10.0, float("inf"): 10.0}, 0.015, id="mid-bucket"),
        pytest.param(0.95, {0.01: 10.0, 0.02: 10.0, float("inf"): 10.0}, 0.0095, id="first"),
        pytest.param(0.5, {0.01: 0.0, float("inf"): 4.0}, 0.01, id="beyond-last-bound"),
        pytest.param(0.5, {0.01: 0.0, float("inf"): 0.0}, None, id="no-observations"),
    ],
)
def test_quantile_interpolates_as_histogram_quantile(
    q: float, buckets: dict[float, float], expected: float | None
) -> None:
    """Decision latency p50/p95 per interval come from bucket deltas, as Prometheus computes
    them (linear inside the bucket, the last finite bound beyond it)."""
    result = soak().quantile(q, buckets)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


def test_slope_is_least_squares_per_hour() -> None:
    """The leak check's slope: 3 MiB over 30 minutes is 6 MiB/h; noise-free data has no error."""
    fit = soak().slope_per_hour([(t * 60.0, 100.0 + 0.1 * t) for t in range(31)])
    assert fit["slope"] == pytest.approx(6.0)
    assert fit["stderr"] == pytest.approx(0.0, abs=1e-9)
    assert fit["mean"] == pytest.approx(101.5)


def test_verdict_discards_warm_up_and_compares_with_the_thresholds() -> None:
    """Growth confined to the first 20% (warm-up) is discarded; steady growth afterwards fails."""
    module = soak()

    def sample(t: float, rss: float) -> object:
        return module.Sample(
            t=t, rss_mib=rss, fds=30, connections=20, threads=8, tasks=58, cpu_percent=1.0,
            sandbox_cpu_percent=10.0, decisions=10, latency_mean_ms=1.0, latency_p50_ms=1.0,
            latency_p95_ms=2.0, submitted=0, admitted=0, pending=0, reserved=0, finished=0,
            reaped=0, faults_fired=0, episodes=0, dispatcher_errors=0, queue_depth=0,
            connected_workers=3,
        )  # fmt: skip

    warm_then_flat = [sample(t * 60, 80 + 5 * t if t < 6 else 110) for t in range(30)]
    assert module.analyse(warm_then_flat)["verdict"] == "flat"
    leaking = [sample(t * 60, 100 + 0.5 * t) for t in range(30)]  # 30 MiB/h
    analysis = module.analyse(leaking)
    assert analysis["verdict"] == "not flat"
    assert analysis["checks"]["rss_mib_per_h"]["ok"] is False


def test_a_short_run_end_to_end(tmp_path: Path) -> None:
    """A 12-second soak: dispatcher as its own process, faults firing, every Job admitted and
    finished, samples with the process's memory, descriptors, connections and asyncio tasks
    (the event_loop_tasks gauge read from the real /metrics), slopes and a verdict written."""
    report = tmp_path / "soak.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--minutes",
            "0.2",
            "--interval",
            "3",
            "--rate",
            "1",
            "--episode-seconds",
            "3",
            "--max-run-seconds",
            "3",
            "--drain-seconds",
            "60",
            "--json",
            str(report),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "verdict:" in done.stdout
    result = json.loads(report.read_text())
    samples = result["samples"]
    assert len(samples) >= 3
    for sample in samples:
        assert sample["rss_mib"] > 0
        assert sample["fds"] > 0
        assert sample["connections"] > 0  # the manager and three workers at least
        assert sample["tasks"] > 0
    work = result["workloads"]
    assert work["submitted"] > 0
    assert work["admitted"] == work["finished"] == work["submitted"]
    assert work["stuck_after_drain"] == 0
    assert result["faults"]["fired"] > 0
    assert result["dispatcher"]["exit_code"] == 0
    assert result["analysis"]["verdict"] in ("flat", "not flat")
    assert set(result["analysis"]["checks"]) == set(soak().THRESHOLDS)
