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
    serve.set_defaults(duration=None)
    plugins = sub.add_parser(
        "plugins",
        help="list dispatch algorithms and the plugins they come from",
        description="List registered plugins and algorithms (entry-point group "
        "multikueue_dispatcher); the DISPATCHER_DISABLED_PLUGINS and "
        "DISPATCHER_DISABLE_PLUGIN_AUTOLOAD switches apply.",
    )
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def list_plugins(as_json: bool) -> int:
    """The ``plugins`` command: algorithms, their sources, and plugins that failed to load."""
    import json

    from dispatcher.plugins import PluginError, PluginHost

    try:
        host = PluginHost.load()
        algorithms = host.algorithms()
    except PluginError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    rows = [
        {
            "algorithm": name,
            "plugin": entry.plugin,
            "source": entry.distribution or "built-in",
            "summary": entry.spec.summary,
        }
        for name, entry in sorted(algorithms.items())
    ]
    errors = [{"hook": e.stage, "plugin": e.source, "error": e.message} for e in host.load_errors]
    if as_json:
        print(json.dumps({"algorithms": rows, "errors": errors}, indent=2))
    else:
        width = max((len(r["algorithm"]) for r in rows), default=9)
        source_width = max((len(r["source"]) for r in rows), default=6)
        print(f"{'ALGORITHM':<{width}}  {'SOURCE':<{source_width}}  SUMMARY")
        for row in rows:
            print(f"{row['algorithm']:<{width}}  {row['source']:<{source_width}}  {row['summary']}")
        for failed in errors:
            print(f"plugin {failed['plugin']} failed in {failed['hook']}: {failed['error']}")
    return 1 if errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "sandbox":
        from dispatcher.sandbox import serve

        return serve.main(args)
    if args.command == "plugins":
        return list_plugins(args.json)
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
