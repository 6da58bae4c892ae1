"""``python -m dispatcher_sandbox.fake_apiserver``: one fake cluster as a separate process (F23).

Prints ``READY <url>`` once serving, writes the kubeconfig if asked, and stops cleanly on SIGINT
or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from dispatcher_sandbox.fake_apiserver.kubeconfig import dump
from dispatcher_sandbox.fake_apiserver.server import FakeCluster


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the process entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m dispatcher_sandbox.fake_apiserver",
        description="Run one fake Kubernetes API server.",
    )
    parser.add_argument("--name", default="fake", help="cluster and context name")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="API port (0: a free one)")
    parser.add_argument("--admin-port", type=int, default=0, help="admin port (0: a free one)")
    parser.add_argument("--kubeconfig", type=Path, help="write the kubeconfig to this file")
    parser.add_argument(
        "--resource",
        action="append",
        default=[],
        metavar="GROUP/VERSION/PLURAL=Kind[:cluster][+status]",
        help="register a custom resource without a schema (repeatable)",
    )
    parser.add_argument(
        "--crd", action="append", default=[], type=Path, help="CRD file or folder (repeatable)"
    )
    parser.add_argument("--history", type=int, default=10_000, help="watch history size")
    parser.add_argument("--bookmark-interval", type=float, default=1.0, help="seconds")
    parser.add_argument("--token", help="bearer token (default: random)")
    parser.add_argument("--http", action="store_true", help="plain HTTP instead of HTTPS (F29)")
    parser.add_argument(
        "--anonymous-health",
        action="store_true",
        help="serve /version and health endpoints without a token",
    )
    return parser


async def serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    cluster = FakeCluster(
        args.name,
        host=args.host,
        port=args.port,
        tls=not args.http,
        token=args.token,
        resources=args.resource,
        crd_paths=args.crd,
        history_size=args.history,
        bookmark_interval=args.bookmark_interval,
        admin_port=args.admin_port,
        anonymous_health=args.anonymous_health,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await cluster.start()
    try:
        if args.kubeconfig:
            args.kubeconfig.write_text(dump(cluster.kubeconfig))
            args.kubeconfig.chmod(0o600)
        print(f"READY {cluster.url} admin={cluster.admin_url}", flush=True)
        await stop.wait()
    finally:
        await cluster.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
