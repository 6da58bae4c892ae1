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

from dispatcher.sim.engine import KUEUE_ALL_AT_ONCE, Latencies, Outcome, SimResult
from dispatcher.sim.trace import FaultEvent, Trace
from dispatcher.sim.world import GPU_RESOURCE, SimTopology

__all__ = [
    "OUTAGE_COLUMNS",
    "SCHEMA_VERSION",
    "STARVED_AFTER_S",
    "algorithm_metrics",
    "outage_comparison",
    "outage_metrics",
    "percentile",
    "plot_figure",
    "render_table",
    "report_document",
    "rich_outage_table",
    "rich_table",
    "utilization_series",
    "write_json",
    "write_plot",
]

SCHEMA_VERSION = 1
STARVED_AFTER_S = 30.0
"""A workload is *starved* once its ``starved_s`` reaches this many seconds."""


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
                used = busy.get((worker.name, resource), 0.0)
                row[resource] = _r(used / (cap * span), 4) if span > 0 else 0.0
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
        "preemptions_per_1000": _r(1000 * result.preemptions / len(outcomes)) if outcomes else 0.0,
        "gpu_hours_lost": _r(
            sum(
                i.usage.get(GPU_RESOURCE, 0) / 1000 * (i.end - i.start) / 3600
                for i in result.intervals
                if i.preempted
            )
        ),
        "preemptions_on_workers": result.preemptions_workers,
        "predicted_starts": len(result.prediction_errors),
        "predicted_start_error_p50_s": _r(
            percentile([abs(e) for e in result.prediction_errors], 50)
        ),
        "predicted_start_error_p90_s": _r(
            percentile([abs(e) for e in result.prediction_errors], 90)
        ),
        "predicted_start_bias_s": _r(percentile(result.prediction_errors, 50)),
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


def _overlap(start: float, end: float, windows: Sequence[tuple[float, float]]) -> float:
    """Length of ``[start, end)`` inside the union of ``windows`` (sorted, merged)."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


def _merged(faults: Sequence[FaultEvent], end: float) -> list[tuple[float, float]]:
    """The times at least one worker is down, as sorted disjoint windows (cut at ``end``)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted((f.start, min(f.end, end)) for f in faults):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _still_waiting(outcome: Outcome, windows: Sequence[tuple[float, float]]) -> bool:
    """Not admitted by the end of the outage window of its last starving sample."""
    last = outcome.starved_last
    if last is None:
        return False
    if outcome.first_admitted is None:
        return True
    ends = [b for a, b in windows if a <= last <= b]
    return outcome.first_admitted >= (ends[0] if ends else last)


def outage_metrics(result: SimResult, trace: Trace) -> dict[str, Any]:
    """The outage block of one run (``docs/simulator.md``, "Outages"): who the outage held,
    who starved, what was admitted elsewhere while a worker was down, the policy's releases."""
    faults = trace.faults
    outcomes = result.outcomes
    end = result.end_time
    start = min((o.arrival for o in outcomes), default=0.0)
    windows = _merged(faults, end)
    held_ones = [o for o in outcomes if o.held]
    placeable = [o for o in outcomes if o.eligible and not o.held]
    held_waits = [w for w in map(_wait, held_ones) if w is not None]
    firsts = [o.first_admitted for o in outcomes if o.first_admitted is not None]
    placeable_firsts = [o.first_admitted for o in placeable if o.first_admitted is not None]
    during = [t for t in firsts if any(a <= t < b for a, b in windows)]
    gpu_seconds = 0.0
    for interval in result.intervals:
        gpus = interval.usage.get(GPU_RESOURCE, 0) / 1000
        if gpus:
            gpu_seconds += gpus * _overlap(interval.start, interval.end, windows)
    restored = [r for r in result.releases if r.restored_at is not None]
    starving = [o for o in outcomes if o.starved_s >= STARVED_AFTER_S]
    starved = [o for o in starving if _still_waiting(o, windows)]
    return {
        "held": len(held_ones),
        "held_admitted": len(held_waits),
        "held_wait_mean_s": _r(sum(held_waits) / len(held_waits)) if held_waits else 0.0,
        "placeable": len(placeable),
        "placeable_never_admitted": sum(1 for o in placeable if o.first_admitted is None),
        "starved": len(starved),
        "starved_never_admitted": sum(1 for o in starved if o.first_admitted is None),
        "starving": len(starving),
        "starved_s": _r(sum(o.starved_s for o in outcomes), 1),
        "admitted_during_outage": len(during),
        "gpu_hours_during_outage": _r(gpu_seconds / 3600.0, 3),
        "last_admission_s": _r(max(firsts) - start) if firsts else None,
        "last_placeable_admission_s": (
            _r(max(placeable_firsts) - start) if placeable_firsts else None
        ),
        "released": len(result.releases),
        "restored": len(restored),
        "released_workloads": len({r.key for r in result.releases}),
        "max_releases_per_workload": max((o.releases for o in outcomes), default=0),
        "released_while_reachable": sum(1 for r in result.releases if r.reachable),
    }


def _wait(outcome: Outcome) -> float | None:
    """Arrival → the admission it ran under (its last one); ``None`` if it was never admitted
    or, for a held workload, not admitted again after the outage held it."""
    last = outcome.last_admitted
    if last is None or (outcome.held_at is not None and last < outcome.held_at):
        return None
    return last - outcome.arrival


def _times(result: SimResult) -> dict[str, float]:
    return {o.key: w for o in result.outcomes if (w := _wait(o)) is not None}


def outage_comparison(
    results: Sequence[SimResult], metrics: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each run against AllAtOnce's in the same document (empty without an ``all-at-once``
    run): the held workloads' extra delay (cost) and the work admitted elsewhere (benefit)."""
    base = next((r for r in results if r.algorithm == KUEUE_ALL_AT_ONCE), None)
    if base is None:
        return {}
    base_times = _times(base)
    ref = metrics[base.algorithm]["outage"]
    out = {}
    for result in results:
        mine = metrics[result.algorithm]["outage"]
        times = _times(result)
        deltas = [
            times[o.key] - base_times[o.key]
            for o in result.outcomes
            if o.held and o.key in times and o.key in base_times
        ]
        out[result.algorithm] = {
            "held_extra_delay_mean_s": _r(sum(deltas) / len(deltas)) if deltas else 0.0,
            "held_compared": len(deltas),
            "starved_minus": mine["starved"] - ref["starved"],
            "admitted_during_outage_ratio": _fraction(
                mine["admitted_during_outage"], ref["admitted_during_outage"]
            ),
            "gpu_hours_during_outage_ratio": _fraction(
                mine["gpu_hours_during_outage"], ref["gpu_hours_during_outage"]
            ),
            "last_admission_ratio": _fraction(mine["last_admission_s"], ref["last_admission_s"]),
            "last_placeable_admission_ratio": _fraction(
                mine["last_placeable_admission_s"], ref["last_placeable_admission_s"]
            ),
        }
    return out


def _fraction(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return _r(numerator / denominator, 3)


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
        if trace.faults:
            metrics["outage"] = outage_metrics(result, trace)
        algorithms[result.algorithm] = metrics
    if trace.faults:
        for name, versus in outage_comparison(results, algorithms).items():
            algorithms[name]["outage"]["vs_all_at_once"] = versus
    return {
        "schema_version": SCHEMA_VERSION,
        "trace": {
            "source": trace.source,
            "workloads": len(trace.workloads),
            "first_arrival_s": _r(min(arrivals, default=0.0)),
            "last_arrival_s": _r(max(arrivals, default=0.0)),
            "faults": [
                {"cluster": f.cluster, "start_s": f.start, "end_s": None if f.permanent else f.end}
                for f in trace.faults
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
    ("gpu_hours_lost", "GPU-h LOST"),
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
                "gpu_hours_lost": f"{m['gpu_hours_lost']:.1f}",
                "gpu_type_mismatches": str(m["gpu_type_mismatches"]),
                "gpu_util": f"{m['utilization']['gpu']:.0%}",
                "makespan_h": f"{m['makespan_s'] / 3600:.1f}",
                "wall_s": f"{m['wall_s']:.1f}" if "wall_s" in m else "-",
            }
        )
    return rows


OUTAGE_COLUMNS = (
    ("algorithm", "ALGORITHM"),
    ("admitted", "ADMITTED"),
    ("starved", "STARVED"),
    ("last_admission", "LAST ADM s"),
    ("last_ratio", "×AAO"),
    ("held", "HELD"),
    ("held_wait", "HELD WAIT s"),
    ("held_cost", "HELD +s"),
    ("during", "ADM DURING"),
    ("gpu_hours", "GPU·h DURING"),
    ("gpu_ratio", "×AAO"),
    ("released", "REL/REST"),
)
"""The outage table: one row per algorithm, AllAtOnce's run as the baseline (×AAO)."""


def _ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _outage_rows(document: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = []
    for name, m in document["algorithms"].items():
        o = m.get("outage")
        if o is None:
            continue
        versus = o.get("vs_all_at_once", {})
        rows.append(
            {
                "algorithm": name,
                "admitted": f"{m['admitted']}/{m['workloads']}",
                "starved": str(o["starved"]),
                "last_admission": (
                    "-" if o["last_admission_s"] is None else f"{o['last_admission_s']:.1f}"
                ),
                "last_ratio": _ratio_text(versus.get("last_admission_ratio")),
                "held": f"{o['held_admitted']}/{o['held']}",
                "held_wait": f"{o['held_wait_mean_s']:.1f}" if o["held_admitted"] else "-",
                "held_cost": (
                    f"{versus['held_extra_delay_mean_s']:+.1f}"
                    if versus and versus["held_compared"]
                    else "-"
                ),
                "during": str(o["admitted_during_outage"]),
                "gpu_hours": f"{o['gpu_hours_during_outage']:.2f}",
                "gpu_ratio": _ratio_text(versus.get("gpu_hours_during_outage_ratio")),
                "released": f"{o['released']}/{o['restored']}",
            }
        )
    return rows


def _plain(columns: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, str]]) -> str:
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) for k, h in columns}
    lines = ["  ".join(h.ljust(widths[k]) for k, h in columns)]
    for row in rows:
        lines.append("  ".join(row[k].ljust(widths[k]) for k, _ in columns))
    return "\n".join(lines)


def render_table(document: Mapping[str, Any], *, outage: bool = False) -> str:
    """The terminal table as plain text (the command uses ``rich`` when it is installed); with
    ``outage``, the outage table under it (when the trace has faults)."""
    text = _plain(COLUMNS, _rows(document))
    rows = _outage_rows(document) if outage else []
    if rows:
        text += "\n\n" + _outage_title(document) + "\n" + _plain(OUTAGE_COLUMNS, rows)
    return text


def _end_text(end: float | None) -> str:
    return "end" if end is None else f"{end:g}"


def _outage_title(document: Mapping[str, Any]) -> str:
    faults = ", ".join(
        f"{f['cluster']} {f['start_s']:g}–{_end_text(f['end_s'])} s"
        for f in document["trace"]["faults"]
    )
    return (
        f"outages: {faults}; HELD: admitted/held by the outage, HELD +s: their mean extra "
        "delay against all-at-once; DURING: while a worker was down; ×AAO: against all-at-once"
    )


def rich_outage_table(document: Mapping[str, Any]) -> Any:
    """The outage table as a ``rich.table.Table`` (``None`` without faults)."""
    from rich.table import Table

    rows = _outage_rows(document)
    if not rows:
        return None
    table = Table(title=_outage_title(document))
    for key, header in OUTAGE_COLUMNS:
        left = key == "algorithm"
        table.add_column(header, justify="left" if left else "right", no_wrap=left)
    for row in rows:
        table.add_row(*(row[k] for k, _ in OUTAGE_COLUMNS))
    return table


def rich_table(document: Mapping[str, Any]) -> Any:
    """The terminal table as a ``rich.table.Table`` (needs the ``sandbox`` extra)."""
    from rich.table import Table

    trace = document["trace"]
    table = Table(
        title=f"simulate: {trace['workloads']} workloads ({trace['source']}), "
        f"{len(document['topology']['workers'])} workers"
    )
    for key, header in COLUMNS:
        name = key == "algorithm"  # never folded: a pipeline's name is what a reader looks for
        table.add_column(header, justify="left" if name else "right", no_wrap=name)
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
