"""``multikueue-dispatcher simulate``: arguments and the command.

Importing this module is cheap (argparse only), so the command line can build its parser without
loading the simulator.
"""

from __future__ import annotations

import argparse
import json
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
        "--no-faults", action="store_true", help="drop every fault event of the trace"
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


def _faults(specs: list[str]) -> list[tuple[str, float, float]]:
    out = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) != 3:
            raise ValueError(f"--fault {spec!r}: expected CLUSTER:START:END")
        out.append((parts[0], float(parts[1]), float(parts[2])))
    return out


def main(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the ``simulate`` command; returns the exit code."""
    import dataclasses

    from dispatcher.plugins import PluginError, PluginHost
    from dispatcher.sandbox.topology import TopologyError
    from dispatcher.sim.engine import Latencies, parse_algorithms, simulate
    from dispatcher.sim.report import report_document, write_json, write_plot
    from dispatcher.sim.trace import (
        FaultEvent,
        TraceError,
        TraceParams,
        dump_trace,
        generate_trace,
        load_trace,
    )
    from dispatcher.sim.world import default_topology, load_topology

    stream = out or sys.stdout
    try:
        options = _algorithm_options(args.algorithm_options)
        algorithms = parse_algorithms(args.algorithms, options)
        topology = load_topology(args.topology) if args.topology else default_topology()
        extra_faults = _faults(args.fault or [])
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
            if args.fault:
                params = dataclasses.replace(params, faults=tuple(extra_faults))
            else:
                names = {w.name for w in topology.workers}
                params = dataclasses.replace(
                    params, faults=tuple(f for f in params.faults if f[0] in names)
                )
            trace = generate_trace(params)
        if args.trace and args.fault:
            trace = dataclasses.replace(
                trace, faults=tuple(FaultEvent(c, s, e) for c, s, e in extra_faults)
            )
        if args.no_faults:
            trace = dataclasses.replace(trace, faults=())
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
        results = simulate(topology, trace, algorithms, latencies=latencies, host=host)
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
    _print_table(document, stream)
    for result in results:
        for message in result.decision_errors[:3]:
            print(f"{result.algorithm}: stage error: {message}", file=sys.stderr)
    return 0


def _print_table(document: dict[str, Any], stream: TextIO) -> None:
    from dispatcher.sim.report import render_table, rich_table

    try:
        from rich.console import Console
    except ImportError:
        print(render_table(document), file=stream)
        return
    Console(file=stream, width=160).print(rich_table(document))
