"""The command line's one error boundary (dispatcher/cli.py ``main``): every expected failure of
``run``, ``check-config``, ``explain``, ``plugins`` and ``simulate`` is one line on stderr that
names what is wrong and where, exit 2 for usage and configuration, 1 at run time; a traceback
only with ``--debug``.

Each case runs ``main`` in-process with a clean environment (no ``DISPATCHER_*``, no
``KUBECONFIG``, not in a pod, ``HOME`` in ``tmp_path``) and checks the exit code and the whole
of stderr, which is exactly one line."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import dispatcher.cli
import dispatcher.k8s.loading
from dispatcher.app.settings import ConfigError
from dispatcher.cli import failure, main


@dataclass(frozen=True)
class Where:
    """What a message may mention: the test's folder, its home, a closed loopback port."""

    tmp: Path
    port: int

    @property
    def home(self) -> Path:
        return self.tmp / "home"


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed (the kernel refuses connections
    to it at once, so no timeout is waited for)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def where(tmp_path: Path, closed_port: int, monkeypatch: pytest.MonkeyPatch) -> Where:
    for name in list(os.environ):
        if name.startswith("DISPATCHER_") or name in (
            "KUBECONFIG",
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT",
        ):
            monkeypatch.delenv(name)
    place = Where(tmp_path, closed_port)
    place.home.mkdir()
    monkeypatch.setenv("HOME", str(place.home))
    monkeypatch.setattr(dispatcher.k8s.loading, "SERVICE_ACCOUNT_DIR", tmp_path / "no-account")
    monkeypatch.setenv("DISPATCHER_DISABLE_PLUGIN_AUTOLOAD", "1")  # built-in algorithms only
    monkeypatch.setenv("DISPATCHER_MANAGER_CLIENT__REQUEST_TIMEOUT_SECONDS", "2")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "unreachable.yaml").write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{closed_port}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    (tmp_path / "not-yaml.yaml").write_text("a: [\n")
    return place


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    code: int
    line: str  # formatted with tmp, home and port
    env: dict[str, str] = field(default_factory=dict)


NOTHING_FOUND = (
    "no kubeconfig for the manager cluster (--kubeconfig: not given; $KUBECONFIG: not set; "
    "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT not set (not in a pod); "
    "{home}/.kube/config: no such file)"
)
UNREACHABLE = (
    "manager cluster https://127.0.0.1:{port} (--kubeconfig {tmp}/unreachable.yaml, context "
    "ctx): unreachable: ClientConnectorError: Cannot connect to host 127.0.0.1:{port} "
    "ssl:default [Connect call failed ('127.0.0.1', {port})]"
)
BUILTINS = (
    "available: all-at-once (builtin), capacity-first (builtin), gpu-type-affinity (builtin), "
    "incremental (builtin)"
)
HTTP = ("--health-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0")
MANAGER_COMMANDS = {
    "run": ("run", "--no-leader-election", *HTTP),
    "check-config": ("check-config",),
    "explain": ("explain", "team-a/job-1"),
}


def _each_manager_command(
    case_id: str, args: tuple[str, ...], code: int, line: str, **env: str
) -> list[Any]:
    """The case for run, check-config and explain alike (ids ``COMMAND-CASE``)."""
    return [
        pytest.param(Case((*command, *args), code, line, env), id=f"{name}-{case_id}")
        for name, command in MANAGER_COMMANDS.items()
    ]


CASES = [
    # kubeconfig resolution: exit 2 (configuration)
    *_each_manager_command("no-kubeconfig-anywhere", (), 2, NOTHING_FOUND),
    *_each_manager_command(
        "kubeconfig-missing",
        ("--kubeconfig", "/nonexistent"),
        2,
        "--kubeconfig /nonexistent: no such file",
    ),
    *_each_manager_command(
        "KUBECONFIG-files-missing",
        (),
        2,
        "KUBECONFIG={tmp}/a.yaml:{tmp}/b.yaml: none of its files exists",
        KUBECONFIG="{tmp}/a.yaml:{tmp}/b.yaml",
    ),
    *_each_manager_command(
        "kubeconfig-not-yaml",
        ("--kubeconfig", "not-yaml.yaml"),
        2,
        "--kubeconfig not-yaml.yaml: not valid YAML (line 2, column 1): expected the node "
        "content, but found '<stream end>'",
    ),
    *_each_manager_command(
        "kubeconfig-is-a-directory",
        ("--kubeconfig", "{tmp}"),
        2,
        "--kubeconfig {tmp}: is a directory, not a file",
    ),
    *_each_manager_command(
        "context-unknown",
        ("--kubeconfig", "unreachable.yaml", "--context", "prod"),
        2,
        "--context prod: no such context in --kubeconfig unreachable.yaml (contexts: ctx)",
    ),
    # an unreachable manager: exit 1 (run time)
    *_each_manager_command(
        "manager-unreachable", ("--kubeconfig", "{tmp}/unreachable.yaml"), 1, UNREACHABLE
    ),
    # settings from each source: exit 2, before any connection
    *_each_manager_command(
        "env-section-bad-json",
        (),
        2,
        "invalid settings: leader_election: not valid JSON (Expecting property name enclosed in "
        "double quotes, line 1 column 2) (got '{{bad') [from environment variable "
        "DISPATCHER_LEADER_ELECTION]",
        DISPATCHER_LEADER_ELECTION="{{bad",
    ),
    *_each_manager_command(
        "env-list-unknown-name",
        (),
        2,
        f"algorithms: unknown algorithm 'capcity-first'; {BUILTINS}",
        DISPATCHER_ALGORITHMS=" gpu-type-affinity , capcity-first ",
    ),
    *_each_manager_command(
        "flag-list-with-spaces-unknown-name",
        ("--algorithms", "gpu-type-affinity, capcity-first"),
        2,
        f"algorithms: unknown algorithm 'capcity-first'; {BUILTINS}",
    ),
    *_each_manager_command(
        "flag-config-missing",
        ("--config", "missing.yaml"),
        2,
        "cannot read settings: missing.yaml: no such file",
    ),
    *_each_manager_command(
        "env-config-file-not-yaml",
        (),
        2,
        "cannot read settings: {tmp}/not-yaml.yaml: not valid YAML (line 2, column 1): expected "
        "the node content, but found '<stream end>'",
        DISPATCHER_CONFIG_FILE="{tmp}/not-yaml.yaml",
    ),
    *_each_manager_command(
        "env-wrong-type",
        (),
        2,
        "invalid settings: workers: Input should be a valid integer, unable to parse string as "
        "an integer (got 'many') [from environment variable DISPATCHER_WORKERS]",
        DISPATCHER_WORKERS="many",
    ),
    *_each_manager_command(
        "flag-wrong-type",
        ("--workers", "many"),
        2,
        "multikueue-dispatcher {command}: argument --workers: invalid int value: 'many' (see "
        "multikueue-dispatcher {command} --help)",
    ),
    pytest.param(
        Case(
            ("explain", "job-1", "--kubeconfig", "unreachable.yaml"),
            2,
            "explain: expected NAMESPACE/NAME, not 'job-1'",
        ),
        id="explain-not-namespace-slash-name",
    ),
    # simulate: exit 2, naming the flag
    pytest.param(
        Case(
            ("simulate", "--generate", "5", "--topology", "missing.yaml"),
            2,
            "error: --topology missing.yaml: No such file or directory",
        ),
        id="simulate-topology-missing",
    ),
    pytest.param(
        Case(
            ("simulate", "--generate", "5", "--topology", "not-yaml.yaml"),
            2,
            "error: not-yaml.yaml: not valid YAML (line 2, column 1): expected the node content, "
            "but found '<stream end>'",
        ),
        id="simulate-topology-not-yaml",
    ),
    pytest.param(
        Case(
            ("simulate", "--trace", "missing.jsonl"),
            2,
            "error: --trace missing.jsonl: No such file or directory",
        ),
        id="simulate-trace-missing",
    ),
    pytest.param(
        Case(
            ("simulate", "--generate", "5", "--algorithm-options", "{{bad"),
            2,
            "error: --algorithm-options: not valid JSON (Expecting property name enclosed in "
            "double quotes, line 1 column 2)",
        ),
        id="simulate-options-not-json",
    ),
    pytest.param(
        Case(
            ("simulate", "--generate", "5", "--algorithms", "all-at-once", "--json", "no/x.json"),
            2,
            "error: --json no/x.json: No such file or directory",
        ),
        id="simulate-json-unwritable",
    ),
    pytest.param(
        Case(
            ("simulate", "--generate", "0"),
            2,
            "multikueue-dispatcher simulate: argument --generate: invalid positive integer "
            "value: '0' (see multikueue-dispatcher simulate --help)",
        ),
        id="simulate-generate-zero",
    ),
    pytest.param(
        Case(
            ("frobnicate",),
            2,
            "multikueue-dispatcher: argument COMMAND: invalid choice: 'frobnicate' (choose from "
            "'sandbox', 'run', 'check-config', 'explain', 'plugins', 'simulate') (see "
            "multikueue-dispatcher --help)",
        ),
        id="unknown-command",
    ),
]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", CASES)
def test_one_line_and_the_exit_code(
    case: Case,
    where: Where,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = {"tmp": where.tmp, "home": where.home, "port": where.port, "command": case.argv[0]}
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.format(**values))
    argv = [arg.format(**values) for arg in case.argv]
    code, err = run_cli(argv, capsys)
    assert (code, err) == (case.code, case.line.format(**values) + "\n")


# --- what works --------------------------------------------------------------------------------

GOOD = [
    pytest.param({"DISPATCHER_ALGORITHMS": "gpu-type-affinity,capacity-first"}, (), id="env-comma"),
    pytest.param(
        {"DISPATCHER_ALGORITHMS": " gpu-type-affinity , capacity-first "}, (), id="env-spaces"
    ),
    pytest.param({"DISPATCHER_ALGORITHMS": '["capacity-first"]'}, (), id="env-json-list"),
    pytest.param({}, ("--algorithms", "gpu-type-affinity, capacity-first"), id="flag-spaces"),
    pytest.param({}, ("--algorithms", '["capacity-first"]'), id="flag-json-list"),
    pytest.param({"DISPATCHER_LEADER_ELECTION": '{"enabled": false}'}, (), id="env-section"),
]


@pytest.mark.parametrize(("env", "args"), GOOD)
def test_the_comma_form_and_json_pass_check_config(
    env: dict[str, str],
    args: tuple[str, ...],
    where: Where,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["check-config", "--offline", *args]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith("settings: ok (dispatcher multikueue-dispatcher.io/dispatcher, ")


# --- --debug -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--debug", "check-config", "--kubeconfig", "/nonexistent"], id="before"),
        pytest.param(["check-config", "--kubeconfig", "/nonexistent", "--debug"], id="after"),
    ],
)
def test_debug_prints_the_traceback_then_the_line(
    argv: list[str], where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(argv, capsys)
    lines = err.splitlines()
    assert code == 2
    assert lines[0] == "Traceback (most recent call last):"
    assert (
        lines[-2]
        == "dispatcher.k8s.errors.ManagerConfigError: --kubeconfig /nonexistent: no such file"
    )
    assert lines[-1] == "--kubeconfig /nonexistent: no such file"


def test_without_debug_there_is_no_traceback(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(["check-config", "--kubeconfig", "/nonexistent"], capsys)
    assert (code, err) == (2, "--kubeconfig /nonexistent: no such file\n")


# --- the boundary itself -----------------------------------------------------------------------


def test_an_unexpected_error_is_one_line_that_says_it_is_a_bug(
    where: Where, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(as_json: bool) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(dispatcher.cli, "list_plugins", broken)
    assert run_cli(["plugins"], capsys) == (
        1,
        "unexpected error: RuntimeError: boom second line (a bug: --debug prints the traceback)\n",
    )


def test_a_failure_inside_a_task_group_is_its_own_line() -> None:
    grouped = ExceptionGroup("unhandled errors in a TaskGroup", [ConfigError(["workers: bad"])])
    assert failure(grouped) == (2, "invalid settings: workers: bad")


def test_a_plugin_that_cannot_be_imported_is_named(
    where: Where, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed plugin whose module is missing: ``plugins`` exits 1 and ``check-config``
    2, both naming the plugin and how to skip it."""
    site = where.tmp / "site"
    dist = site / "broken_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[multikueue_dispatcher]\nbroken = no_such_module_for_the_test\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("DISPATCHER_DISABLE_PLUGIN_AUTOLOAD")
    problem = (
        "plugin broken (entry point of multikueue_dispatcher) cannot be loaded: "
        "ModuleNotFoundError: No module named 'no_such_module_for_the_test'; "
        "DISPATCHER_DISABLED_PLUGINS=broken skips it"
    )
    assert run_cli(["plugins"], capsys) == (1, f"plugins: {problem}\n")
    assert run_cli(["check-config", "--offline"], capsys) == (2, f"algorithms: {problem}\n")
    monkeypatch.setenv("DISPATCHER_DISABLED_PLUGINS", "cost, broken")
    assert run_cli(["plugins"], capsys)[0] == 0
