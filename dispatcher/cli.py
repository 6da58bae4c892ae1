"""The ``multikueue-dispatcher`` command line (README, *The manager process*).

:func:`main` is the one error boundary: an expected failure of any command (bad settings from a
flag, a ``DISPATCHER_*`` variable or the YAML file; no usable kubeconfig; a file that cannot be
read or parsed; an unreachable manager) is one line on stderr naming what is wrong and where, and
exit 2 (usage, configuration) or 1 (at run time). ``--debug`` prints the traceback before it.
Usage errors of the parser are one line too.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

PROG = "multikueue-dispatcher"


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (exit 2); subcommand parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _debug_flag(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Accepted before and after the command; the subcommand's default must not override the
    # top-level value, hence SUPPRESS there.
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="on an error, print its traceback before the one-line message",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command; tests and the README use these names."""
    parser = _Parser(
        prog=PROG,
        description="External dispatcher for Kueue MultiKueue.",
    )
    _debug_flag(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    parser.set_defaults(unavailable_commands=_add_extension_commands(sub))
    run = sub.add_parser(
        "run",
        help="the manager process: mirror workers and nominate clusters",
        description="Run the dispatcher against the manager cluster, found as kubectl finds it: "
        "--kubeconfig, else $KUBECONFIG, else in-cluster, else ~/.kube/config. Settings: flags "
        "> DISPATCHER_* environment > YAML file > defaults.",
    )
    _settings_flags(run)
    run.add_argument("--identity", help="leader-election identity (default: host name + uuid)")

    check = sub.add_parser(
        "check-config",
        help="validate settings and the worker kubeconfig Secrets without dispatching",
    )
    _settings_flags(check)
    check.add_argument(
        "--offline", action="store_true", help="validate the settings only; do not connect"
    )

    explain = sub.add_parser(
        "explain",
        help="the last decision and a fresh evaluation for one workload",
    )
    explain.add_argument("workload", metavar="NAMESPACE/NAME")
    _settings_flags(explain)
    explain.add_argument(
        "--sync-timeout",
        type=float,
        default=1.0,
        help="seconds to wait for one connection attempt per worker before evaluating (a "
        "worker that has not answered by then is reported unreachable, never retried)",
    )

    plugins = sub.add_parser(
        "plugins",
        help="list dispatch algorithms and the plugins they come from",
        description="List registered plugins and algorithms (entry-point group "
        "multikueue_dispatcher); the DISPATCHER_DISABLED_PLUGINS and "
        "DISPATCHER_DISABLE_PLUGIN_AUTOLOAD switches apply.",
    )
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")

    from dispatcher.sim.command import add_arguments as add_simulate_arguments

    add_simulate_arguments(
        sub.add_parser(
            "simulate",
            help="compare dispatch algorithms on a workload trace in virtual time",
            description="Replay (--trace) or generate (--generate, --seed) a workload trace and "
            "simulate Kueue MultiKueue with each algorithm; prints a table, --json and --plot "
            "write the results (docs/simulator.md).",
        )
    )
    for command in sub.choices.values():
        _debug_flag(command, top=False)
    return parser


COMMANDS_GROUP = "multikueue_dispatcher.commands"
SANDBOX_HINT = (
    "the sandbox command comes with the test world's distribution, multikueue-dispatcher-sandbox "
    "(from a checkout of the repository: pip install -e ./sandbox, or make venv)"
)


def _add_extension_commands(sub: Any) -> dict[str, str]:
    """Commands other distributions add through the entry-point group :data:`COMMANDS_GROUP`.

    Each entry point names a callable taking the subparsers object; it adds its parser and sets
    ``handler`` (a callable taking the parsed arguments and returning the exit code) as the
    parser's default. The test world's distribution adds ``sandbox`` this way; the product has
    none. One that fails to load leaves the other commands working. Returns the commands that
    are unavailable, each with a one-line reason reported when it is asked for: those that
    failed to load, and ``sandbox`` when nothing provides it.
    """
    from importlib.metadata import entry_points

    failed: dict[str, str] = {}
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            entry.load()(sub)
        except Exception as error:
            failed[entry.name] = (
                f"the {entry.name} command of {entry.value} could not be loaded: "
                f"{type(error).__name__}: {error}"
                + (f" ({SANDBOX_HINT})" if entry.name == "sandbox" else "")
            )
    if "sandbox" not in sub.choices:
        failed.setdefault("sandbox", SANDBOX_HINT)
    return failed


def _settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the manager cluster (default: $KUBECONFIG, a colon-separated list "
        "merged as kubectl merges it; else in-cluster; else ~/.kube/config)",
    )
    parser.add_argument(
        "--context",
        metavar="NAME",
        help="context of the kubeconfig to use (default: its current-context)",
    )
    parser.add_argument(
        "--config", help="YAML settings file (default: $DISPATCHER_CONFIG_FILE if set)"
    )
    parser.add_argument("--dispatcher-name", help="the dispatcherName configured in Kueue")
    parser.add_argument("--kueue-namespace", help="Kueue's namespace (worker kubeconfig Secrets)")
    parser.add_argument("--write-mode", choices=["apply", "merge-patch"])
    parser.add_argument("--field-manager")
    parser.add_argument(
        "--algorithms",
        help="the pipeline, comma-separated (spaces around names ignored) or a JSON list, e.g. "
        "gpu-type-affinity,capacity-first",
    )
    parser.add_argument("--workers", type=int, help="concurrent reconciles")
    parser.add_argument("--health-address", help="host:port of /healthz and /readyz")
    parser.add_argument("--metrics-address", help="host:port of /metrics")
    parser.add_argument("--log-format", choices=["json", "text"])
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="elect a leader through a Lease (default on)",
    )


def _load_settings(args: argparse.Namespace) -> Any:
    import os
    from pathlib import Path

    from dispatcher.app.settings import CONFIG_FILE_ENV, load_settings

    flags: dict[str, Any] = {
        "dispatcher_name": args.dispatcher_name,
        "kueue_namespace": args.kueue_namespace,
        "write_mode": args.write_mode,
        "field_manager": args.field_manager,
        "algorithms": args.algorithms,  # text: the settings read the comma form and JSON
        "workers": args.workers,
        "health_address": args.health_address,
        "metrics_address": args.metrics_address,
        "log_format": args.log_format,
        "log_level": args.log_level,
        "leader_election.enabled": args.leader_election,
    }
    config = args.config or os.environ.get(CONFIG_FILE_ENV)
    return load_settings(flags, Path(config) if config else None)


def run_command(args: argparse.Namespace) -> int:
    """The ``run`` command."""
    import anyio

    from dispatcher.app.manager import check_pipeline, run_manager

    settings = _load_settings(args)
    check_pipeline(settings)  # as check-config: one line on stderr, before logging
    code: int = anyio.run(
        lambda: run_manager(
            settings, kubeconfig=args.kubeconfig, context=args.context, identity=args.identity
        )
    )
    return code


def list_plugins(as_json: bool) -> int:
    """The ``plugins`` command: algorithms, their sources, and plugins that failed to load."""
    import json

    from dispatcher.app.errors import CommandError
    from dispatcher.plugins import PluginError, PluginHost

    try:
        host = PluginHost.load()
        algorithms = host.algorithms()
    except PluginError as error:
        raise CommandError(f"plugins: {error}", exit_code=1) from error
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
    """Run one command and return its exit code; the one error boundary (module docstring)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    problem = _unavailable_command(parser, arguments)
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    args = parser.parse_args(arguments)
    try:
        return _command(args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        code, line = failure(error)
        if args.debug:
            traceback.print_exception(error, file=sys.stderr)
        print(line, file=sys.stderr)
        return code


def _unavailable_command(parser: argparse.ArgumentParser, arguments: list[str]) -> str | None:
    """Why the command asked for cannot run although a distribution may provide it (None: it
    can, or it is no such command and argparse says so)."""
    commands = [a for a in arguments if not a.startswith("-")]
    if not commands:
        return None
    unavailable: dict[str, str] = parser.get_default("unavailable_commands") or {}
    return unavailable.get(commands[0])


def failure(error: BaseException) -> tuple[int, str]:
    """The exit code and the one line for an exception that ended a command."""
    from dispatcher.app.errors import CommandError, describe_api_error
    from dispatcher.app.settings import ConfigError
    from dispatcher.k8s.errors import ApiError, ManagerConfigError

    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]  # from a task group: the one failure inside it
    if isinstance(error, CommandError):
        return error.exit_code, str(error)
    if isinstance(error, ConfigError | ManagerConfigError):
        return 2, str(error)
    if isinstance(error, ApiError):
        return 1, f"manager cluster: {describe_api_error(error)}"
    text = " ".join(str(error).split())
    return 1, (
        f"unexpected error: {type(error).__name__}{': ' + text if text else ''} "
        "(a bug: --debug prints the traceback)"
    )


def _command(args: argparse.Namespace) -> int:
    extension = getattr(args, "handler", None)
    if callable(extension):
        code: int = extension(args)
        return code
    if args.command == "plugins":
        return list_plugins(args.json)
    if args.command == "run":
        return run_command(args)
    if args.command == "check-config":
        from dispatcher.app.checks import check_config_command

        return check_config_command(args, _load_settings)
    if args.command == "explain":
        from dispatcher.app.checks import explain_command

        return explain_command(args, _load_settings)
    if args.command == "simulate":
        from dispatcher.sim.command import main as simulate_main

        return simulate_main(args)
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
