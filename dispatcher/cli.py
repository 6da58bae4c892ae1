"""The ``multikueue-dispatcher`` command line (design section 4)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command; tests and the README use these names."""
    parser = argparse.ArgumentParser(
        prog="multikueue-dispatcher",
        description="External dispatcher for Kueue MultiKueue.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    sandbox = sub.add_parser(
        "sandbox",
        help="emulated manager and worker clusters on this machine",
        description="Start the emulated clusters of the default topology.",
    )
    sandbox.add_argument("--dir", help="folder for <cluster>.kubeconfig files (default: temporary)")
    sandbox.add_argument(
        "--duration", type=float, help="serve this many seconds, then stop (default: until Ctrl-C)"
    )
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND")
    serve = sandbox_sub.add_parser(
        "serve",
        help="serve only the emulated clusters and write their kubeconfigs",
    )
    serve.add_argument("--dir", required=True, help="folder for <cluster>.kubeconfig files")
    serve.add_argument("--workers", type=int, default=2, help="number of worker clusters")
    serve.set_defaults(duration=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "sandbox":
        from dispatcher.sandbox import serve

        return serve.main(args)
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
