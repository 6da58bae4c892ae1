"""``multikueue-dispatcher simulate``: arguments and the command.

Importing this module is cheap (argparse only), so the command line can build its parser without
loading the simulator.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, TextIO

__all__ = ["DEFAULT_ALGORITHMS", "add_arguments", "main"]

DEFAULT_ALGORITHMS = "gpu-type-affinity+capacity-first,all-at-once,incremental"
"""Our default pipeline and Kueue's two built-in dispatchers."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``simulate`` flags to ``parser``."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--trace", metavar="FILE.jsonl", help="replay a JSONL trace")
    source.add_argument(
        "--generate",
        metavar="N",
        type=_positive_int,
        help="generate a trace of N workloads (default: 5000, the documented default trace)",
    )
    parser.add_argument("--seed", type=int, help="seed of the generated trace (default 20261130)")
    parser.add_argument(
        "--topology",
        metavar="FILE",
        help="topology YAML (the sandbox format plus clusterLabels; default: the simulator's "
        "five-worker A100/H100/L4/CPU topology)",
    )
    parser.add_argument(
        "--algorithms",
        default=DEFAULT_ALGORITHMS,
        help="comma-separated; a+b composes plugin algorithms into one pipeline; all-at-once and "
        f"incremental alone are Kueue's built-in dispatchers (default: {DEFAULT_ALGORITHMS})",
    )
    parser.add_argument(
        "--algorithm-options",
        metavar="JSON",
        help="options per algorithm as JSON, e.g. "
        '\'{"cost-aware": {"costs": {"worker-l4": 0.5}}}\'',
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="write the TTA CDF and utilization plot")
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="leave the wall-clock figures (wall_s) out of the JSON, so equal inputs give "
        "byte-identical files",
    )
    parser.add_argument(
        "--write-trace", metavar="FILE.jsonl", help="also write the trace that was simulated"
    )
    parser.add_argument(
        "--fault",
        action="append",
        metavar="CLUSTER:START:END",
        help="a worker down from START to END seconds (repeatable; replaces the generated "
        "trace's default fault)",
    )
    parser.add_argument(
        "--outage",
        action="append",
        metavar="WORKER:AT[:UNTIL]",
        help="a worker unreachable from AT to UNTIL seconds, or to the end without UNTIL "
        "(repeatable; like --fault, replaces the trace's faults)",
    )
    parser.add_argument(
        "--no-faults", action="store_true", help="drop every fault event of the trace"
    )
    parser.add_argument(
        "--unplaceable-release",
        action="store_true",
        help="also run every pipeline with the dispatcher's unplaceable-release policy, as "
        "NAME@release (an algorithm named NAME@release in --algorithms runs it too)",
    )
    parser.add_argument(
        "--unplaceable-patience",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="unplaceable_patience_seconds: how long a workload is unplaceable before its "
        "manager quota is released (default 60)",
    )
    parser.add_argument(
        "--unplaceable-backoff-max",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="unplaceable_backoff_max_seconds: the longest wait before a later release of a "
        "restored workload (the wait doubles from the patience; default 3600)",
    )
    parser.add_argument(
        "--incremental-step-size",
        type=int,
        default=1,
        help="stepSize of Kueue's Incremental dispatcher (default 1 as in scenario S10; "
        "Kueue's own default is 3)",
    )
    parser.add_argument(
        "--event-batch", type=float, default=1.0, help="Kueue's remote event batching, seconds"
    )
    parser.add_argument(
        "--copy-creation", type=float, default=0.2, help="remote copy creation, seconds"
    )
    parser.add_argument(
        "--worker-admission", type=float, default=0.5, help="worker scheduling latency, seconds"
    )
    parser.add_argument(
        "--nomination-write", type=float, default=0.05, help="nomination status write, seconds"
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


_positive_int.__name__ = "positive integer"  # argparse: "invalid positive integer value: '0'"

FILE_FLAGS = ("topology", "trace", "json", "plot", "write_trace")
"""The flags that name files, to say which flag a file error is about."""


def _file_error(args: argparse.Namespace, error: OSError) -> str:
    """``--FLAG PATH: reason`` for an error reading or writing a file a flag names."""
    reason = error.strerror or type(error).__name__
    for name in FILE_FLAGS:
        value = getattr(args, name, None)
        if value is not None and error.filename is not None and str(value) == str(error.filename):
            return f"--{name.replace('_', '-')} {value}: {reason}"
    return f"{error.filename}: {reason}" if error.filename else str(error)


def _algorithm_options(text: str | None) -> dict[str, Any]:
    try:
        options = json.loads(text or "{}")
    except json.JSONDecodeError as error:
        raise ValueError(
            f"--algorithm-options: not valid JSON ({error.msg}, line {error.lineno} column "
            f"{error.colno})"
        ) from None
    if not isinstance(options, dict):
        raise ValueError("--algorithm-options: must be a JSON object of options per algorithm")
    return options


def _faults(specs: list[str], flag: str = "--fault") -> list[tuple[str, float, float]]:
    """``--fault CLUSTER:START:END`` or ``--outage WORKER:AT[:UNTIL]`` values, validated."""
    out = []
    outage = flag == "--outage"
    form = "WORKER:AT[:UNTIL]" if outage else "CLUSTER:START:END"
    labels = ("AT", "UNTIL") if outage else ("START", "END")
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in ((2, 3) if outage else (3,)) or not parts[0]:
            raise ValueError(f"{flag} {spec!r}: expected {form}")
        times = []
        for label, text in zip(labels, parts[1:], strict=False):
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{flag} {spec!r}: {label}: not a number of seconds") from None
            if not 0 <= value < math.inf:
                raise ValueError(f"{flag} {spec!r}: {label}: must be a number of seconds >= 0")
            times.append(value)
        end = times[1] if len(times) > 1 else math.inf
        if end <= times[0]:
            raise ValueError(f"{flag} {spec!r}: the end must be after the start")
        out.append((parts[0], times[0], end))
    return out


def _check_fault_workers(faults: Any, workers: list[str]) -> None:
    for fault in faults:
        if fault.cluster not in workers:
            where = fault.where or "--outage/--fault"
            raise ValueError(
                f"{where}: unknown worker {fault.cluster!r} (workers: {', '.join(workers)})"
            )


def _with_release(text: str) -> str:
    """``--unplaceable-release``: each pipeline of ``--algorithms`` followed by its
    ``@release`` variant (Kueue's built-ins have no such variant)."""
    from dispatcher.sim.engine import KUEUE_ALL_AT_ONCE, KUEUE_INCREMENTAL, RELEASE_SUFFIX

    items = [p.strip() for p in text.split(",") if p.strip()]
    out = []
    for item in items:
        out.append(item)
        variant = item + RELEASE_SUFFIX
        builtin = item in (KUEUE_ALL_AT_ONCE, KUEUE_INCREMENTAL)
        if not builtin and not item.endswith(RELEASE_SUFFIX) and variant not in items:
            out.append(variant)
    return ",".join(out)


def main(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the ``simulate`` command; returns the exit code."""
    import dataclasses

    from dispatcher.plugins import PluginError, PluginHost
    from dispatcher.sim.engine import Latencies, ReleasePolicy, parse_algorithms, simulate
    from dispatcher.sim.report import report_document, write_json, write_plot
    from dispatcher.sim.trace import (
        FaultEvent,
        TraceError,
        TraceParams,
        check_overlaps,
        dump_trace,
        generate_trace,
        load_trace,
    )
    from dispatcher.sim.world import default_topology, load_topology
    from dispatcher.topology import TopologyError

    stream = out or sys.stdout
    try:
        options = _algorithm_options(args.algorithm_options)
        names = _with_release(args.algorithms) if args.unplaceable_release else args.algorithms
        algorithms = parse_algorithms(names, options)
        policy = ReleasePolicy(
            unplaceable_patience_seconds=args.unplaceable_patience,
            unplaceable_backoff_max_seconds=args.unplaceable_backoff_max,
        )
        topology = load_topology(args.topology) if args.topology else default_topology()
        fault_specs = _faults(args.fault or [])
        outage_specs = _faults(args.outage or [], "--outage")
        extra_faults = fault_specs + outage_specs
        wheres = [f"--fault {s}" for s in args.fault or []]
        wheres += [f"--outage {s}" for s in args.outage or []]
        if args.trace:
            if args.seed is not None:
                raise ValueError("--seed applies to generated traces only")
            trace = load_trace(args.trace)
        else:
            params = TraceParams()
            if args.generate is not None:
                params = dataclasses.replace(params, workloads=args.generate)
            if args.seed is not None:
                params = dataclasses.replace(params, seed=args.seed)
            if extra_faults:
                params = dataclasses.replace(params, faults=tuple(extra_faults))
            else:
                names = {w.name for w in topology.workers}
                params = dataclasses.replace(
                    params, faults=tuple(f for f in params.faults if f[0] in names)
                )
            trace = generate_trace(params)
        if extra_faults:
            trace = dataclasses.replace(
                trace,
                faults=tuple(
                    FaultEvent(c, s, e, where=w, outage=w.startswith("--outage"))
                    for (c, s, e), w in zip(extra_faults, wheres, strict=True)
                ),
            )
            overlaps = check_overlaps(trace.faults)
            if overlaps:
                raise ValueError(overlaps[0][1])
        if args.no_faults:
            trace = dataclasses.replace(trace, faults=())
        _check_fault_workers(trace.faults, [w.name for w in topology.workers])
        latencies = Latencies(
            event_batch_s=args.event_batch,
            copy_creation_s=args.copy_creation,
            worker_admission_s=args.worker_admission,
            nomination_write_s=args.nomination_write,
            incremental_step_size=args.incremental_step_size,
        )
        host = PluginHost.load() if any(a.kind == "pipeline" for a in algorithms) else None
        if args.write_trace:
            with open(args.write_trace, "w", encoding="utf-8") as handle:
                handle.write(dump_trace(trace))
        if host is None and trace.faults:
            host = PluginHost.load()
        results = simulate(
            topology, trace, algorithms, latencies=latencies, host=host, policy=policy
        )
        document = report_document(
            trace, topology, results, latencies, deterministic=args.deterministic
        )
        if args.json:
            write_json(document, args.json)
        if args.plot:
            write_plot(results, topology, args.plot)
    except OSError as error:
        print(f"error: {_file_error(args, error)}", file=sys.stderr)
        return 2
    except (TraceError, TopologyError, ValueError, PluginError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    outage_table = any(f.outage for f in trace.faults) or any(a.release for a in algorithms)
    _print_table(document, stream, outage=outage_table)
    for result in results:
        for message in result.decision_errors[:3]:
            print(f"{result.algorithm}: stage error: {message}", file=sys.stderr)
    return 0


def _print_table(document: dict[str, Any], stream: TextIO, *, outage: bool) -> None:
    """The comparison table, and the outage table under it when ``outage`` (the trace has an
    outage, or the unplaceable-release policy runs)."""
    from dispatcher.sim.report import render_table, rich_outage_table, rich_table

    try:
        from rich.console import Console
    except ImportError:
        print(render_table(document, outage=outage), file=stream)
        return
    console = Console(file=stream, width=160)
    console.print(rich_table(document))
    table = rich_outage_table(document) if outage else None
    if table is not None:
        console.print(table)
