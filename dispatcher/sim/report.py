"""Metrics of simulation runs, the ``simulate --json`` document, the terminal table and the plot.

The JSON document (``docs/simulator.md`` has the schema)::

    {"trace": {...}, "topology": {...}, "latencies": {...},
     "algorithms": {NAME: {"workloads", "admitted", "tta_mean_s", "tta_p50_s", "tta_p95_s",
                           "tta_p99_s", "copies_per_admitted", "preemptions",
                           "gpu_type_mismatches", "utilization", "makespan_s", "wall_s", ...}}}

Everything but ``wall_s`` is a function of the trace, the topology, the latencies and the
algorithms, so the same inputs give byte-identical JSON once ``wall_s`` is left out
(``deterministic=True``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dispatcher.sim.engine import Latencies, SimResult
from dispatcher.sim.trace import Trace
from dispatcher.sim.world import GPU_RESOURCE, SimTopology

__all__ = [
    "SCHEMA_VERSION",
    "algorithm_metrics",
    "percentile",
    "plot_figure",
    "render_table",
    "report_document",
    "rich_table",
    "utilization_series",
    "write_json",
    "write_plot",
]

SCHEMA_VERSION = 1


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation (NumPy's default); 0 if empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _r(value: float, digits: int = 3) -> float:
    return round(float(value), digits)


def _window(result: SimResult) -> tuple[float, float]:
    start = min((o.arrival for o in result.outcomes), default=0.0)
    ends = [o.finished for o in result.outcomes if o.finished is not None]
    ends += [i.end for i in result.intervals]
    end = max(ends, default=start)
    return start, max(end, start)


def algorithm_metrics(result: SimResult, topology: SimTopology) -> dict[str, Any]:
    """The metrics of one run (one entry of ``algorithms`` in the JSON document)."""
    outcomes = result.outcomes
    ttas = [o.tta for o in outcomes if o.tta is not None]
    admitted = len(ttas)
    start, end = _window(result)
    span = end - start
    per_cluster: dict[str, dict[str, float]] = {}
    busy: dict[tuple[str, str], float] = {}
    by_type: dict[str, float] = {}
    for interval in result.intervals:
        length = max(0.0, interval.end - interval.start)
        for resource, amount in interval.usage.items():
            key = (interval.cluster, resource)
            busy[key] = busy.get(key, 0.0) + amount * length
        gpus = interval.usage.get(GPU_RESOURCE, 0)
        if gpus and interval.gpu_type is not None:
            by_type[interval.gpu_type] = by_type.get(interval.gpu_type, 0.0) + gpus * length
    capacity_by_type: dict[str, int] = {}
    for worker in topology.workers:
        row = {}
        for resource in ("cpu", GPU_RESOURCE):
            cap = worker.capacity(resource)
            if cap > 0:
                row[resource] = _r(busy.get((worker.name, resource), 0.0) / (cap * span), 4)
        per_cluster[worker.name] = row if span > 0 else dict.fromkeys(row, 0.0)
        for gpu_type, cap in worker.gpu_capacity_by_type().items():
            capacity_by_type[gpu_type] = capacity_by_type.get(gpu_type, 0) + cap
    gpu_types = {
        t: _r(by_type.get(t, 0.0) / (cap * span), 4) if span > 0 else 0.0
        for t, cap in sorted(capacity_by_type.items())
    }
    total_gpu = sum(capacity_by_type.values())
    gpu_busy = sum(by_type.values())
    finished = [o for o in outcomes if o.finished is not None]
    makespan = max((o.finished for o in finished if o.finished is not None), default=start)
    return {
        "workloads": len(outcomes),
        "admitted": admitted,
        "finished": len(finished),
        "never_admitted": len(outcomes) - admitted,
        "tta_mean_s": _r(sum(ttas) / admitted) if admitted else 0.0,
        "tta_p50_s": _r(percentile(ttas, 50)),
        "tta_p95_s": _r(percentile(ttas, 95)),
        "tta_p99_s": _r(percentile(ttas, 99)),
        "tta_max_s": _r(max(ttas, default=0.0)),
        "copies_created": result.copies_created,
        "admissions": result.admissions,
        "dispatches": result.dispatches,
        "copies_per_admitted": _ratio(result.copies_created, result.admissions),
        "copies_per_dispatch": _ratio(result.copies_created, result.dispatches),
        "wasted_reservations": result.wasted_reservations,
        "preemptions": result.preemptions,
        "preemptions_on_workers": result.preemptions_workers,
        "preemptions_by_losing_copies": result.preemptions_by_losers,
        "requeues": sum(o.requeues for o in outcomes),
        "gpu_type_mismatches": sum(1 for o in outcomes if o.mismatch),
        "gpu_preference_misses": sum(1 for o in outcomes if o.preference_miss),
        "decisions": result.decisions,
        "events": result.events,
        "utilization": {
            "gpu": _r(gpu_busy / (total_gpu * span), 4) if total_gpu and span > 0 else 0.0,
            "clusters": per_cluster,
            "gpu_types": gpu_types,
        },
        "admitted_by_cluster": _count_by_cluster(result),
        "makespan_s": _r(makespan - start),
        "wall_s": _r(result.wall_s, 3),
    }


def _ratio(numerator: int, denominator: int) -> float:
    return _r(numerator / denominator, 4) if denominator else 0.0


def _count_by_cluster(result: SimResult) -> dict[str, int]:
    out: dict[str, int] = {}
    for outcome in result.outcomes:
        if outcome.cluster is not None:
            out[outcome.cluster] = out.get(outcome.cluster, 0) + 1
    return dict(sorted(out.items()))


def report_document(
    trace: Trace,
    topology: SimTopology,
    results: Sequence[SimResult],
    latencies: Latencies,
    *,
    deterministic: bool = False,
) -> dict[str, Any]:
    """The ``simulate --json`` document; ``deterministic`` leaves out ``wall_s``."""
    arrivals = [w.arrival for w in trace.workloads]
    algorithms = {}
    for result in results:
        metrics = algorithm_metrics(result, topology)
        if deterministic:
            metrics.pop("wall_s")
        algorithms[result.algorithm] = metrics
    return {
        "schema_version": SCHEMA_VERSION,
        "trace": {
            "source": trace.source,
            "workloads": len(trace.workloads),
            "first_arrival_s": _r(min(arrivals, default=0.0)),
            "last_arrival_s": _r(max(arrivals, default=0.0)),
            "faults": [
                {"cluster": f.cluster, "start_s": f.start, "end_s": f.end} for f in trace.faults
            ],
            "params": dict(trace.params),
        },
        "topology": {
            "source": topology.source,
            "workers": [
                {
                    "name": w.name,
                    "gpus": w.capacity(GPU_RESOURCE) // 1000,
                    "gpu_types": sorted(w.gpu_capacity_by_type()),
                    "cpus": w.capacity("cpu") // 1000,
                }
                for w in topology.workers
            ],
        },
        "latencies": dataclasses.asdict(latencies),
        "algorithms": algorithms,
    }


def write_json(document: Mapping[str, Any], path: str | Path) -> None:
    """Write the document with sorted keys and a final newline (stable bytes)."""
    Path(path).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")


COLUMNS = (
    ("algorithm", "ALGORITHM"),
    ("admitted", "ADMITTED"),
    ("tta_mean_s", "TTA MEAN s"),
    ("tta_p50_s", "P50 s"),
    ("tta_p95_s", "P95 s"),
    ("tta_p99_s", "P99 s"),
    ("copies_per_admitted", "COPIES/ADM"),
    ("preemptions", "PREEMPT"),
    ("gpu_type_mismatches", "MISMATCH"),
    ("gpu_util", "GPU UTIL"),
    ("makespan_h", "MAKESPAN h"),
    ("wall_s", "WALL s"),
)


def _rows(document: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = []
    for name, m in document["algorithms"].items():
        rows.append(
            {
                "algorithm": name,
                "admitted": f"{m['admitted']}/{m['workloads']}",
                "tta_mean_s": f"{m['tta_mean_s']:.1f}",
                "tta_p50_s": f"{m['tta_p50_s']:.1f}",
                "tta_p95_s": f"{m['tta_p95_s']:.1f}",
                "tta_p99_s": f"{m['tta_p99_s']:.1f}",
                "copies_per_admitted": f"{m['copies_per_admitted']:.2f}",
                "preemptions": str(m["preemptions"]),
                "gpu_type_mismatches": str(m["gpu_type_mismatches"]),
                "gpu_util": f"{m['utilization']['gpu']:.0%}",
                "makespan_h": f"{m['makespan_s'] / 3600:.1f}",
                "wall_s": f"{m['wall_s']:.1f}" if "wall_s" in m else "-",
            }
        )
    return rows


def render_table(document: Mapping[str, Any]) -> str:
    """The terminal table as plain text (the command uses ``rich`` when it is installed)."""
    rows = _rows(document)
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) for k, h in COLUMNS}
    lines = ["  ".join(h.ljust(widths[k]) for k, h in COLUMNS)]
    for row in rows:
        lines.append("  ".join(row[k].ljust(widths[k]) for k, _ in COLUMNS))
    return "\n".join(lines)


def rich_table(document: Mapping[str, Any]) -> Any:
    """The terminal table as a ``rich.table.Table`` (needs the ``sandbox`` extra)."""
    from rich.table import Table

    trace = document["trace"]
    table = Table(
        title=f"simulate: {trace['workloads']} workloads ({trace['source']}), "
        f"{len(document['topology']['workers'])} workers"
    )
    for key, header in COLUMNS:
        table.add_column(header, justify="left" if key == "algorithm" else "right")
    for row in _rows(document):
        table.add_row(*(row[k] for k, _ in COLUMNS))
    return table


def utilization_series(
    result: SimResult, topology: SimTopology, bins: int = 200
) -> tuple[list[float], list[float]]:
    """GPU utilization over time: bin centres (hours since the first arrival) and fractions."""
    start, end = _window(result)
    total = sum(w.capacity(GPU_RESOURCE) for w in topology.workers)
    if end <= start or total == 0:
        return [0.0], [0.0]
    width = (end - start) / bins
    busy = [0.0] * bins
    for interval in result.intervals:
        gpus = interval.usage.get(GPU_RESOURCE, 0)
        if not gpus:
            continue
        a = interval.start - start
        b = interval.end - start
        first = max(0, int(a // width))
        last = min(bins - 1, int(b // width))
        for index in range(first, last + 1):
            lo = max(a, index * width)
            hi = min(b, (index + 1) * width)
            if hi > lo:
                busy[index] += gpus * (hi - lo)
    centres = [(i + 0.5) * width / 3600.0 for i in range(bins)]
    return centres, [b / (total * width) for b in busy]


def plot_figure(results: Sequence[SimResult], topology: SimTopology) -> Any:
    """A matplotlib ``Figure``: TTA CDF per algorithm, and GPU utilization over time.

    Built without pyplot on the Agg backend (no display needed, no global state).
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 5), dpi=100)
    cdf, util = figure.subplots(1, 2)
    for result in results:
        ttas = sorted(max(o.tta, 0.01) for o in result.outcomes if o.tta is not None)
        total = len(result.outcomes)
        if ttas:
            ys = [(i + 1) / total for i in range(len(ttas))]
            cdf.step(ttas, ys, where="post", label=result.algorithm)
        hours, fraction = utilization_series(result, topology)
        util.plot(hours, [100 * f for f in fraction], label=result.algorithm, linewidth=1)
    cdf.set_xscale("log")
    cdf.set_xlabel("time to admission (s, log scale)")
    cdf.set_ylabel("fraction of workloads admitted")
    cdf.set_title("Time to admission (CDF)")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(loc="lower right")
    util.set_xlabel("virtual time (hours since the first arrival)")
    util.set_ylabel("GPU utilization (% of GPU quota running jobs)")
    util.set_title("GPU utilization over time")
    util.set_ylim(0, 125)
    util.grid(True, alpha=0.3)
    util.legend(loc="upper center", ncols=2, fontsize="small")
    figure.tight_layout()
    return figure


def write_plot(results: Sequence[SimResult], topology: SimTopology, path: str | Path) -> None:
    """Write :func:`plot_figure` as a PNG file (1200 × 500 pixels)."""
    plot_figure(results, topology).savefig(str(path), format="png")
