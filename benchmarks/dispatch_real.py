"""Dispatch on real Kueue: a burst of small CPU Jobs, our dispatcher against Kueue's AllAtOnce.

Not a test: it prints figures (and writes them as JSON with ``--json FILE``). Mode (c) of issue
15's dispatch benchmark: the same burst on the same kind of control plane, one run per
dispatcher, in one invocation.

Set-up: for each dispatcher a fresh real control plane of the default topology (a manager and the
workers ``worker-a100``, ``worker-h100``, ``worker-cpu``: etcd, kube-apiserver and Kueue v0.19.2
as processes on loopback, ``make real-binaries``), with Kueue's ``dispatcherName`` set to ours or
to AllAtOnce; ``-N`` suspended ``batch/v1`` Jobs (100m CPU, 64Mi, running for an hour once
admitted) submitted at once to the manager as a user would; followed on every cluster until each
manager Workload has ``status.clusterName``.

The runs: this dispatcher with its default settings, the same without burst-aware spreading
(``spread_backlog: 0``), and Kueue's AllAtOnce. Per run it reports:

- **nominations/s**: Workloads seen nominated on the manager / (last one − submission);
- **admissions/s**: Workloads with ``clusterName`` / (last one − submission);
- **copies per admitted workload**: the worker clusters that held a copy of each admitted one;
- how long it took and whether every Job was admitted;
- **what Kueue's manager did** (``KueueCounts``): its MultiKueue reconciles per admitted
  workload, and the GETs of Workloads and Jobs each worker's API server served it, per admitted
  workload and per second (only the manager's Kueue makes single-object reads there).

Where the time goes: our dispatcher's part is the nominations (it nominates the burst within a
few seconds); the admissions then wait for Kueue: its manager creates each copy on the nominated
worker and reads it back through its worker clients, which Kueue v0.19 limits to client-go's
default 5 QPS per worker per kind (issue 14 item 10, ``docs/kueue-versions.md``). Each of its
reconciles of a Workload reads that Workload on every worker, wherever the copy is: the
Workload GETs per second on each worker, against that 5 QPS, show how close a run is to the
ceiling no placement can lift. AllAtOnce also creates a copy on every worker.

    .venv/bin/python benchmarks/dispatch_real.py [-N 300] [--only external] [--json F]

(``--only`` takes ``external``, ``external-no-spread`` or ``all-at-once``.)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from dispatcher.topology import WorkloadLine, default_topology
from dispatcher_sandbox.real_kueue.mix import MILESTONES, Dispatcher, MixOutcome, run_mix

VARIANTS: dict[str, tuple[Dispatcher, dict[str, Any]]] = {
    "external": ("external", {}),
    "external-no-spread": (
        "external",
        {"algorithm_options": {"capacity-first": {"spread_backlog": 0}}},
    ),
    "all-at-once": ("all-at-once", {}),
}
"""The runs: this dispatcher (default settings), the same without burst-aware spreading
(capacity-first ``spread_backlog: 0``, issue 18 item 6), and Kueue's AllAtOnce."""
STAGES = {
    "created_at": "Job -> Workload (Kueue's Job reconciler, manager)",
    "reserved_at": "-> quota reserved (Kueue's scheduler, manager)",
    "nominated_at": "-> nominated (the dispatcher: decision and write)",
    "copied_at": "-> copy on a worker (MultiKueue, through the worker's client)",
    "copy_admitted_at": "-> copy admitted (the worker's Kueue)",
    "admitted_at": "-> clusterName (MultiKueue reads the admission back)",
}
"""Each milestone of :data:`MILESTONES` and who moves a workload to it from the one before."""


def burst(n: int) -> list[WorkloadLine]:
    """``n`` small CPU Jobs, spread over two namespaces of the default topology."""
    return [
        WorkloadLine.model_validate(
            {
                "name": f"burst-{i:04d}",
                "namespace": ("team-a", "team-b")[i % 2],
                "count": 1,
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "runSeconds": 3600,
            }
        )
        for i in range(n)
    ]


async def measure(variant: str, n: int, deadline: float) -> dict[str, Any]:
    """One burst on a fresh control plane with the dispatcher of ``variant``."""
    dispatcher, settings = VARIANTS[variant]
    lines = burst(n)
    keys = {f"{line.namespace}/{line.name}" for line in lines}
    with tempfile.TemporaryDirectory(prefix="mkd-dispatch-real-") as directory:
        outcome = await run_mix(
            Path(directory),
            default_topology(),
            lines,
            keys,
            dispatcher=dispatcher,
            settings=settings,
            time_scale=1.0,
            deadline=deadline,
            settle=deadline,  # until every manager Workload has clusterName (Kueue reads
            # the admissions back through the worker clients, behind the copies' creation)
            count_kueue=True,
        )
    nominated = sum(1 for f in outcome.followed.values() if f.nominated_at is not None)
    admitted_at = [f.admitted_at for f in outcome.followed.values() if f.admitted_at is not None]
    return {
        "dispatcher": variant,
        "submitted": outcome.submitted,
        "admitted": outcome.admitted,
        "nominated": nominated,
        "nominations_per_s": _round(outcome.rate("nominated_at")),
        "admissions_per_s": _round(outcome.rate("admitted_at")),
        "last_admission_s": _round(max(admitted_at) - outcome.started) if admitted_at else None,
        "copies_per_admitted": round(outcome.copies_per_admitted, 2),
        "stuck_events": outcome.stuck_events,
        "cpu_seconds": round(outcome.cpu_seconds, 2),
        "placed_on": dict(
            sorted(
                collections.Counter(
                    f.cluster or f.admitted_copy_on or "nowhere" for f in outcome.followed.values()
                ).items()
            )
        ),
        "stages": stages(outcome),
        "kueue": kueue_work(outcome),
    }


def kueue_work(outcome: MixOutcome) -> dict[str, Any]:
    """What the manager's Kueue did for the burst (``KueueCounts``): the single-object
    requests each worker served on Workloads and Jobs, per admitted workload and per second of
    the run, and the MultiKueue workload controller's reconciles per admitted workload. Every
    reconcile of a Workload reads it on every worker (Kueue v0.19.2's ``readGroup``),
    whichever worker its copy is on."""
    counts = outcome.kueue_counts
    if counts is None:
        return {}
    admitted = max(outcome.admitted, 1)
    workers = {
        cluster: {
            "by_request": dict(sorted(counted.items())),
            "gets_per_admitted": round(_gets(counted) / admitted, 2),
            "gets_per_s": round(_gets(counted) / outcome.seconds, 2),
        }
        for cluster, counted in sorted(counts.requests.items())
    }
    return {
        "worker_requests": workers,
        "multikueue_reconciles_per_admitted": round(
            counts.reconciles.get("multikueue_workload", 0) / admitted, 2
        ),
    }


def _gets(counted: Mapping[str, int]) -> int:
    """Single-object reads of Workloads and Jobs (made by the manager's Kueue only)."""
    return sum(n for what, n in counted.items() if what.startswith("GET "))


def stages(outcome: MixOutcome) -> list[dict[str, Any]]:
    """Where the time goes: per milestone, when the burst passed it (the last workload, and the
    median one, in seconds from the submission) and how long a workload spent reaching it from
    the milestone before (median and p90 over the workloads seen at both)."""
    out: list[dict[str, Any]] = []
    previous: str | None = None
    for milestone in MILESTONES:
        passed = outcome.passed(milestone)
        spent = sorted(
            getattr(f, milestone) - (getattr(f, previous) if previous else outcome.started)
            for f in outcome.followed.values()
            if getattr(f, milestone) is not None
            and (previous is None or getattr(f, previous) is not None)
        )
        out.append(
            {
                "milestone": milestone,
                "stage": STAGES[milestone],
                "seen": len(passed),
                "median_at_s": _round(_quantile(passed, 0.5)),
                "last_at_s": _round(passed[-1]) if passed else None,
                "spent_p50_s": _round(_quantile(spent, 0.5)),
                "spent_p90_s": _round(_quantile(spent, 0.9)),
            }
        )
        previous = milestone
    return out


def _quantile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank quantile of sorted ``values`` (None when empty)."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, round(fraction * len(values)) - 1))]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def report(runs: list[dict[str, Any]]) -> str:
    """The runs as text, side by side."""
    lines = [f"dispatch on real Kueue v0.19.2: a burst of {runs[0]['submitted']} small CPU Jobs"]
    for run in runs:
        lines.append(
            f"  {run['dispatcher']:<18} admitted {run['admitted']}/{run['submitted']}  "
            f"nominations/s {run['nominations_per_s']}  admissions/s {run['admissions_per_s']}  "
            f"copies/admitted {run['copies_per_admitted']}  last admission "
            f"{run['last_admission_s']} s  stuck events {run['stuck_events']}  "
            f"CPU of this process {run['cpu_seconds']} s  placed on {run['placed_on']}"
        )
    for run in runs:
        lines.append(
            f"  where the time goes, {run['dispatcher']} (s from submission; spent: since "
            "the milestone before, p50/p90):"
        )
        for stage in run["stages"]:
            lines.append(
                f"    {stage['stage']:<62} seen {stage['seen']:>4}  median at "
                f"{stage['median_at_s']}  last at {stage['last_at_s']}  spent "
                f"{stage['spent_p50_s']}/{stage['spent_p90_s']}"
            )
    for run in runs:
        work = run.get("kueue") or {}
        if not work:
            continue
        lines.append(
            f"  Kueue's manager, {run['dispatcher']}: "
            f"{work['multikueue_reconciles_per_admitted']} MultiKueue reconciles per admitted "
            "workload; GETs each worker served it (per admitted workload, per second of the run), "
            "and all single-object requests there:"
        )
        for cluster, counted in work["worker_requests"].items():
            lines.append(
                f"    {cluster:<12} {counted['gets_per_admitted']:>6} per workload  "
                f"{counted['gets_per_s']:>6}/s  {counted['by_request']}"
            )
    first = runs[0]
    for other in runs[1:]:
        if first["admissions_per_s"] and other["admissions_per_s"]:
            ratio = first["admissions_per_s"] / other["admissions_per_s"]
            lines.append(
                f"  admissions/s, {first['dispatcher']} / {other['dispatcher']}: {ratio:.2f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line (``argv``: the arguments, default ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-N", type=int, default=300, help="Jobs in the burst")
    parser.add_argument("--only", choices=list(VARIANTS), help="run one of the runs only")
    parser.add_argument("--deadline", type=float, default=900.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    chosen = [args.only] if args.only else list(VARIANTS)
    runs = [anyio.run(measure, d, args.N, args.deadline) for d in chosen]
    figures = {
        "runs": runs,
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version()},
    }
    print(report(runs))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if all(r["admitted"] == r["submitted"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
