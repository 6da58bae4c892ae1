"""The ``sandbox`` command, added to ``multikueue-dispatcher`` through the entry-point group
``multikueue_dispatcher.commands`` (the product's command line lists no test-world command).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from dispatcher.topology import Topology, TopologyError, generic_topology, load_topology
from dispatcher_sandbox.serve import BUILTIN_DISPATCHERS, describe, run_topology, wait_for_signal


def register(sub: Any) -> None:
    """Add ``sandbox`` (the demo) and ``sandbox serve`` to the product's subparsers."""
    sandbox = sub.add_parser(
        "sandbox",
        help="the demo: emulated clusters, Kueue and the dispatcher with a workload mix",
        description="Start the emulated manager and workers, the emulated Kueue and the real "
        "dispatcher, submit a workload mix, show the progress live and end with a summary. "
        "Exit status 0 when every workload that fits the topology was admitted on a matching "
        "cluster, 1 when something failed, 2 for bad input files.",
    )
    sandbox.add_argument("--dir", help="folder for <cluster>.kubeconfig files (default: temporary)")
    sandbox.add_argument(
        "--algorithm",
        metavar="NAMES",
        help="comma-separated algorithm pipeline (default: the dispatcher's default, "
        "gpu-type-affinity,capacity-first); see `multikueue-dispatcher plugins`",
    )
    sandbox.add_argument(
        "--topology", metavar="FILE", help="topology YAML file (default: the built-in default)"
    )
    sandbox.add_argument(
        "--workloads", metavar="FILE", help="workload JSONL file (default: the built-in demo mix)"
    )
    sandbox.add_argument(
        "--trace",
        metavar="FILE",
        help="a simulator trace (JSONL): workload lines with `arrival` (seconds after the start) "
        "and `runSeconds`, as `simulate --write-trace` writes",
    )
    sandbox.add_argument("--json", metavar="FILE", help="write the summary as JSON to FILE")
    sandbox.add_argument(
        "--backend",
        choices=["sandbox", "real"],
        default="sandbox",
        help="sandbox: emulated clusters and Kueue (default); real: real kube-apiserver, etcd "
        "and Kueue v0.19.2 processes (built with go: make real-binaries)",
    )
    sandbox.add_argument(
        "--keep",
        action="store_true",
        help="stay up after the summary and print kubectl commands to explore (until Ctrl-C)",
    )
    sandbox.add_argument(
        "--time-scale",
        type=float,
        default=10.0,
        metavar="FACTOR",
        help="divide runSeconds and trace times by FACTOR (default 10; 1: real time)",
    )
    sandbox.add_argument(
        "--timeout",
        type=float,
        default=40.0,
        metavar="SECONDS",
        help="give up waiting for admissions this long after the last submission (default 40)",
    )
    sandbox.add_argument(
        "--duration",
        type=float,
        help="with --keep: stay up this many seconds after the summary instead of until Ctrl-C",
    )
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND")
    serve = sandbox_sub.add_parser(
        "serve",
        help="serve only the emulated clusters and write their kubeconfigs",
    )
    serve.add_argument("--dir", required=True, help="folder for <cluster>.kubeconfig files")
    serve.add_argument(
        "--backend",
        choices=["sandbox", "real"],
        default="sandbox",
        help="sandbox: fake API servers and the Kueue emulation (default); real: real "
        "kube-apiserver, etcd and Kueue v0.19.2 processes (built with go)",
    )
    serve.add_argument(
        "--topology",
        metavar="FILE",
        help='topology YAML file (default: "default", the built-in A100/H100/CPU topology)',
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="instead of a topology: N identical generic workers worker-1 … worker-N",
    )
    serve.add_argument(
        "--kueue",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the Kueue emulation on the clusters (default on)",
    )
    serve.add_argument(
        "--dispatcher-name",
        default="multikueue-dispatcher.io/dispatcher",
        help="the emulated manager Kueue's dispatcherName: an external name (default: ours, "
        "nothing is nominated until a dispatcher runs), or all-at-once / incremental for "
        "Kueue's built-in dispatchers",
    )
    serve.add_argument(
        "--remedy",
        choices=["policy", "gate", "none"],
        default="policy",
        help="the field-manager pitfall remedy on the manager: the clear-nominated-cluster-names "
        "admission policy (default), the WorkloadRequestUseMergePatch gate, or none",
    )
    serve.add_argument("--incremental-step-size", type=int, default=3)
    serve.add_argument(
        "--incremental-round-seconds",
        type=float,
        default=300.0,
        help="round length of the Incremental dispatcher (Kueue: 5 minutes)",
    )
    serve.set_defaults(duration=None)
    sandbox.set_defaults(handler=_main)


def _topology(args: argparse.Namespace) -> Topology:
    """``--workers N`` gives the generic topology; otherwise ``--topology`` (default: default)."""
    if args.workers is not None:
        return generic_topology([f"worker-{i}" for i in range(1, args.workers + 1)])
    return load_topology(args.topology or "default")


async def _serve_real(args: argparse.Namespace) -> int:
    """``sandbox serve --backend real``: the topology on real Kueue processes."""
    from dispatcher_sandbox.real_kueue.plane import KueueOptions, describe
    from dispatcher_sandbox.real_kueue.topology import real_topology

    name = BUILTIN_DISPATCHERS.get(args.dispatcher_name, args.dispatcher_name)
    directory = Path(args.dir)
    kueue = KueueOptions(
        incremental_step_size=args.incremental_step_size
        if name == BUILTIN_DISPATCHERS["incremental"]
        else None
    )
    async with real_topology(
        directory / "clusters",
        _topology(args),
        dispatcher_name=name,
        remedy=args.remedy,
        kueue=kueue,
    ) as running:
        for cluster in running.plane.clusters:
            (directory / f"{cluster.name}.kubeconfig").write_text(
                cluster.kubeconfig_path.read_text()
            )
        print(describe(running.plane), flush=True)
        print(f"Kueue v0.19.2 (real): dispatcherName {name}, pitfall remedy: {args.remedy}")
        print("READY", flush=True)
        await wait_for_signal()
    return 0


async def _serve(args: argparse.Namespace) -> int:
    if getattr(args, "backend", "sandbox") == "real":
        return await _serve_real(args)
    if not args.kueue:
        async with run_topology(Path(args.dir), _topology(args)) as sandbox:
            print(describe(sandbox), flush=True)
            print("READY", flush=True)
            await wait_for_signal()
        return 0
    from dispatcher_sandbox.environment import environment

    name = BUILTIN_DISPATCHERS.get(args.dispatcher_name, args.dispatcher_name)
    async with environment(
        Path(args.dir),
        _topology(args),
        remedy=args.remedy,
        run_dispatcher=False,
        dispatcher_name=name,
        kueue={
            "incremental_step_size": args.incremental_step_size,
            "incremental_round_seconds": args.incremental_round_seconds,
        },
    ) as env:
        print(describe(env.sandbox), flush=True)
        print(f"Kueue emulation: dispatcherName {name}, pitfall remedy: {args.remedy}", flush=True)
        print("READY", flush=True)
        await wait_for_signal()
    return 0


def _real_backend_problem(args: argparse.Namespace) -> str | None:
    """Why ``--backend real`` cannot run with these arguments here (None: it can)."""
    from dispatcher_sandbox.real_kueue.build import missing_reason

    if not args.kueue:
        return "--backend real always runs Kueue: --no-kueue is for the sandbox backend"
    if args.incremental_round_seconds != 300.0:
        return "--incremental-round-seconds is the emulation's: real Kueue's round is 5 minutes"
    reason = missing_reason()
    return f"--backend real: {reason}" if reason else None


def _main(args: argparse.Namespace) -> int:
    """Run ``sandbox serve``, or the ``sandbox`` demo (:mod:`dispatcher_sandbox.demo`), from
    parsed command-line arguments."""
    if args.sandbox_command == "serve":
        if args.workers is not None and args.topology is not None:
            print("error: give --topology or --workers, not both", file=sys.stderr)
            return 2
        if args.workers is not None and not 0 <= args.workers <= 20:
            print("error: --workers must be between 0 and 20", file=sys.stderr)
            return 2
        try:
            _topology(args)  # report a bad topology file before starting anything
        except (TopologyError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        if getattr(args, "backend", "sandbox") == "real":
            problem = _real_backend_problem(args)
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                return 2
        return asyncio.run(_serve(args))
    if getattr(args, "backend", "sandbox") == "real":
        from dispatcher_sandbox.real_kueue.build import missing_reason

        reason = missing_reason()
        if reason:
            print(f"error: --backend real: {reason}", file=sys.stderr)
            return 2
    from dispatcher_sandbox.demo import main as demo_main

    return demo_main(args)
