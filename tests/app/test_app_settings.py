"""Settings: flags > environment (DISPATCHER_*, nested with __) > YAML file > defaults; errors
name the field, the problem and where the value came from."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dispatcher.algorithms import DEFAULT_PIPELINE
from dispatcher.app.settings import (
    ConfigError,
    LeaderElectionSettings,
    Settings,
    load_settings,
    render_validation_error,
)
from dispatcher.plugins import PluginHost


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("DISPATCHER_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


# (flag, env, yaml) for each case; None: that source does not set the field.
PRIORITY_CASES = {
    "default": (None, None, None, "default"),
    "yaml": (None, None, "yaml", "yaml"),
    "env beats yaml": (None, "env", "yaml", "env"),
    "env": (None, "env", None, "env"),
    "flag beats env and yaml": ("flag", "env", "yaml", "flag"),
    "flag beats env": ("flag", "env", None, "flag"),
    "flag beats yaml": ("flag", None, "yaml", "flag"),
    "flag": ("flag", None, None, "flag"),
}
# field (dotted), environment variable, value per source.
FIELDS = {
    "workers": ("DISPATCHER_WORKERS", {"default": 4, "yaml": 2, "env": 3, "flag": 5}),
    "kueue_namespace": (
        "DISPATCHER_KUEUE_NAMESPACE",
        {"default": "kueue-system", "yaml": "from-yaml", "env": "from-env", "flag": "from-flag"},
    ),
    "leader_election.lease_name": (
        "DISPATCHER_LEADER_ELECTION__LEASE_NAME",
        {
            "default": LeaderElectionSettings.model_fields["lease_name"].default,
            "yaml": "lease-yaml",
            "env": "lease-env",
            "flag": "lease-flag",
        },
    ),
    "worker_client.qps": (
        "DISPATCHER_WORKER_CLIENT__QPS",
        {"default": 20.0, "yaml": 1.5, "env": 2.5, "flag": 3.5},
    ),
}


def get(settings: Settings, dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("case", PRIORITY_CASES)
def test_priority(case: str, field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag, env, yaml_source, winner = PRIORITY_CASES[case]
    env_name, values = FIELDS[field]
    flags = {field: values["flag"]} if flag else {}
    if env:
        monkeypatch.setenv(env_name, str(values["env"]))
    path = None
    if yaml_source:
        *parents, leaf = field.split(".")
        text = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parents))
        text += f"{'  ' * len(parents)}{leaf}: {values['yaml']}\n"
        path = write(tmp_path, text)
    assert get(load_settings(flags, path), field) == values[winner]


def test_nested_sources_merge_field_by_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        "leader_election:\n  lease_name: from-yaml\n  namespace: ns-yaml\n"
        "worker_client: {qps: 7, burst: 9}\n",
    )
    monkeypatch.setenv("DISPATCHER_LEADER_ELECTION__LEASE_NAME", "from-env")
    monkeypatch.setenv("DISPATCHER_WORKER_CLIENT__BURST", "11")
    settings = load_settings({"leader_election": {"enabled": False}}, path)
    assert settings.leader_election == LeaderElectionSettings(
        enabled=False, lease_name="from-env", namespace="ns-yaml"
    )
    assert (settings.worker_client.qps, settings.worker_client.burst) == (7.0, 11)
    # The manager client keeps its own defaults: Kueue's manager client's (300 QPS, burst 500).
    assert (settings.manager_client.qps, settings.manager_client.burst) == (300.0, 500)


def test_environment_takes_json_for_lists_and_mappings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCHER_ALGORITHMS", '["capacity-first"]')
    monkeypatch.setenv("DISPATCHER_ALGORITHM_OPTIONS", '{"capacity-first": {"policy": "best-fit"}}')
    monkeypatch.setenv("DISPATCHER_PLUGIN_WEIGHTS", '{"my-plugin": 2.5}')
    monkeypatch.setenv("DISPATCHER_LEADER_ELECTION", '{"enabled": false}')
    settings = load_settings({}, None)
    assert settings.algorithms == ["capacity-first"]
    assert settings.algorithm_options == {"capacity-first": {"policy": "best-fit"}}
    assert settings.plugin_weights == {"my-plugin": 2.5}
    assert settings.leader_election.enabled is False


def list_fields() -> list[str]:
    """Every list-valued setting (today algorithms and fail_closed_plugins)."""
    return [
        name
        for name, info in Settings.model_fields.items()
        if getattr(info.annotation, "__origin__", None) is list
    ]


def test_the_list_settings_are_known() -> None:
    assert list_fields() == ["algorithms", "fail_closed_plugins"]


# Text of a list setting → the list it stands for.
LIST_TEXTS = {
    "comma": ("a,b", ["a", "b"]),
    "comma with spaces": (" a , b ", ["a", "b"]),
    "one item": ("a", ["a"]),
    "trailing comma": ("a,b,", ["a", "b"]),
    "JSON list": ('["a", "b"]', ["a", "b"]),
    "JSON list with leading space": (' ["a"]', ["a"]),
}


@pytest.mark.parametrize("case", LIST_TEXTS)
@pytest.mark.parametrize("source", ["environment", "flag", "yaml"])
@pytest.mark.parametrize("field", list_fields())
def test_list_settings_take_the_comma_form_from_every_source(
    field: str, source: str, case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, expected = LIST_TEXTS[case]
    # Names are not checked by the settings (the plugin host checks them), so any will do.
    flags: dict[str, Any] = {}
    path = None
    if source == "environment":
        monkeypatch.setenv(f"DISPATCHER_{field.upper()}", text)
    elif source == "flag":
        flags[field] = text
    else:
        path = write(tmp_path, f"{field}: '{text}'\n")
    assert getattr(load_settings(flags, path), field) == expected


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        pytest.param(
            "DISPATCHER_ALGORITHMS",
            '["capacity-first"',
            "invalid settings: algorithms: not valid JSON (Expecting ',' delimiter, line 1 "
            "column 18) (got '[\"capacity-first\"') [from environment variable "
            "DISPATCHER_ALGORITHMS]",
            id="list-bad-json",
        ),
        pytest.param(
            "DISPATCHER_LEADER_ELECTION",
            "{bad",
            "invalid settings: leader_election: not valid JSON (Expecting property name "
            "enclosed in double quotes, line 1 column 2) (got '{bad') [from environment "
            "variable DISPATCHER_LEADER_ELECTION]",
            id="section-bad-json",
        ),
        pytest.param(
            "DISPATCHER_PLUGIN_WEIGHTS",
            "cost=2",
            "invalid settings: plugin_weights: not valid JSON (Expecting value, line 1 column "
            "1) (got 'cost=2') [from environment variable DISPATCHER_PLUGIN_WEIGHTS]",
            id="mapping-not-json",
        ),
        pytest.param(
            "DISPATCHER_ALGORITHMS",
            " , ",
            "invalid settings: algorithms: List should have at least 1 item after validation, "
            "not 0 [from environment variable DISPATCHER_ALGORITHMS]",
            id="list-empty",
        ),
    ],
)
def test_environment_text_that_does_not_parse_names_the_variable(
    variable: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as excinfo:
        load_settings({}, None)
    assert str(excinfo.value) == expected


def test_a_yaml_string_for_a_section_is_the_wrong_type(tmp_path: Path) -> None:
    """Only environment text is read as JSON for a section: in YAML, a mapping is a mapping."""
    path = write(tmp_path, "leader_election: '{\"enabled\": false}'\n")
    with pytest.raises(ConfigError, match="leader_election: Input should be a valid dictionary"):
        load_settings({}, path)


def test_flags_not_given_are_none_and_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCHER_WORKERS", "3")
    settings = load_settings(
        {"workers": None, "leader_election.renew_deadline_seconds": 8, "log_level": None}, None
    )
    assert settings.workers == 3
    assert settings.leader_election.renew_deadline_seconds == 8.0
    assert settings.log_level == "info"


def test_other_dispatcher_variables_are_not_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin host's switches and the config-file path share the prefix."""
    monkeypatch.setenv("DISPATCHER_DISABLED_PLUGINS", "x,y")
    monkeypatch.setenv("DISPATCHER_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("DISPATCHER_CONFIG_FILE", "/nowhere.yaml")
    assert load_settings({}, None) == Settings()


def test_defaults() -> None:
    settings = load_settings({}, None)
    assert settings.dispatcher_name == "multikueue-dispatcher.io/dispatcher"
    assert settings.kueue_namespace == "kueue-system"
    assert (settings.write_mode, settings.field_manager) == ("apply", "multikueue-dispatcher")
    assert settings.algorithms == list(DEFAULT_PIPELINE) == ["gpu-type-affinity", "capacity-first"]
    assert (settings.health_address, settings.metrics_address) == (":8081", ":8080")
    assert (settings.log_format, settings.log_level, settings.otlp_endpoint) == (
        "json",
        "info",
        None,
    )
    le = settings.leader_election
    assert (le.lease_duration_seconds, le.renew_deadline_seconds, le.retry_period_seconds) == (
        15,
        10.0,
        2.0,
    )


def test_settings_feed_the_plugin_host(tmp_path: Path) -> None:
    """The names docs/plugins.md uses: algorithms, algorithm_options, plugin_weights."""
    path = write(
        tmp_path,
        "algorithms: [gpu-type-affinity, capacity-first]\n"
        "algorithm_options:\n"
        "  capacity-first: {policy: best-fit, patience_seconds: 600}\n"
        "  gpu-type-affinity: {label_key: cloud.google.com/gke-accelerator}\n",
    )
    settings = load_settings({}, path)
    host = PluginHost.load(autoload=False)
    pipeline = host.pipeline(
        settings.algorithms, settings.algorithm_options, plugin_weights=settings.plugin_weights
    )
    assert pipeline is not None


def problems(excinfo: pytest.ExceptionInfo[ConfigError]) -> str:
    return str(excinfo.value)


def test_unknown_yaml_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "workrs: 3\nleader_election:\n  lease_nam: x\n")
    with pytest.raises(ConfigError) as excinfo:
        load_settings({}, path)
    assert excinfo.value.problems == (
        f"leader_election.lease_nam: unknown setting (did you mean "
        f"'leader_election.lease_name'?) [from {path}]",
        f"workrs: unknown setting (did you mean 'workers'?) [from {path}]",
    )


def test_unknown_key_without_a_close_match(tmp_path: Path) -> None:
    path = write(tmp_path, "frobnicate: true\n")
    with pytest.raises(ConfigError, match=r"frobnicate: unknown setting \[from"):
        load_settings({}, path)


def test_unknown_flag() -> None:
    with pytest.raises(
        ConfigError, match=r"no_such_flag: unknown setting \[from the command line\]"
    ):
        load_settings({"no_such_flag": 1}, None)


@pytest.mark.parametrize(
    ("yaml_text", "env", "expected"),
    [
        ("workers: many\n", {}, "workers: Input should be a valid integer"),
        ("workers: 0\n", {}, "workers: Input should be greater than or equal to 1 (got 0)"),
        (
            "",
            {"DISPATCHER_LEADER_ELECTION__LEASE_DURATION_SECONDS": "abc"},
            "leader_election.lease_duration_seconds: Input should be a valid integer, unable to "
            "parse string as an integer (got 'abc') [from environment variable "
            "DISPATCHER_LEADER_ELECTION__LEASE_DURATION_SECONDS]",
        ),
        ("write_mode: patch\n", {}, "write_mode: Input should be 'apply'"),
        ("write_mode: merge-patch\n", {}, "write_mode: 'merge-patch' was removed: on real Kueue"),
        ("algorithms: {capacity-first: 1}\n", {}, "algorithms: Input should be a valid list"),
        ("plugin_weights: {p: heavy}\n", {}, "plugin_weights.p: Input should be a valid number"),
        ("worker_client: {qps: -1}\n", {}, "worker_client.qps: Input should be greater than 0"),
        ("leader_election: fast\n", {}, "leader_election: Input should be a valid dictionary"),
    ],
)
def test_wrong_type_names_the_field(
    yaml_text: str,
    env: dict[str, str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as excinfo:
        load_settings({}, write(tmp_path, yaml_text))
    assert expected in str(excinfo.value)
    assert str(excinfo.value).startswith("invalid settings: ")
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            {"dispatcher_name": "kueue.x-k8s.io/multikueue-dispatcher-incremental"},
            "dispatcher_name: 'kueue.x-k8s.io/multikueue-dispatcher-incremental' is one of "
            "Kueue's built-in dispatchers",
        ),
        ({"dispatcher_name": "a b"}, "dispatcher_name: must be a non-empty name without spaces"),
        (
            {"leader_election.renew_deadline_seconds": 20},
            r"leader_election: renew_deadline_seconds .*lease_duration_seconds",
        ),
        (
            {"leader_election.retry_period_seconds": 10},
            r"leader_election: retry_period_seconds .*renew_deadline_seconds",
        ),
        (
            {"algorithm_options": {"incremental": {}}},
            "algorithm_options: options for algorithms not in `algorithms`",
        ),
        (
            {"algorithms": ["capacity-first", "capacity-first"]},
            "algorithms: algorithms listed twice: ['capacity-first']",
        ),
        ({"algorithms": []}, "algorithms: List should have at least 1 item"),
        ({"health_address": "8081"}, "health_address: address '8081' must be host:port"),
        ({"metrics_address": "[x]:1"}, "metrics_address: address '[x]:1': 'x' is not an IPv6"),
        (
            {"otlp_endpoint": "collector:4318"},
            "otlp_endpoint: OTLP endpoint must be an http(s) URL",
        ),
        ({"log_format": "xml"}, "log_format: Input should be 'json' or 'text'"),
    ],
)
def test_semantic_errors(flags: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_settings(flags, None)
    text = str(excinfo.value)
    assert expected in text or re.search(expected, text), text


def test_lenient_spellings() -> None:
    settings = load_settings(
        {"log_level": "DEBUG", "log_format": "Text", "otlp_endpoint": ""}, None
    )
    assert (settings.log_level, settings.log_format, settings.otlp_endpoint) == (
        "debug",
        "text",
        None,
    )


def test_yaml_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cannot read settings: .*missing.yaml: no such file$"):
        load_settings({}, tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"not valid YAML \(line 2, column 1\)"):
        load_settings({}, write(tmp_path, "workers: [3\n"))
    with pytest.raises(ConfigError, match=r"the top level must be a mapping .*, not a list"):
        load_settings({}, write(tmp_path, "- workers\n- 3\n"))
    assert load_settings({}, write(tmp_path, "# only a comment\n")) == Settings()


def test_render_validation_error_for_a_direct_construction() -> None:
    with pytest.raises(ValidationError) as excinfo:
        Settings(workers="x", colour="blue")  # type: ignore[arg-type, call-arg]
    text = render_validation_error(excinfo.value, flags={"workers": "x", "colour": "blue"})
    assert text == (
        "invalid settings: workers: Input should be a valid integer, unable to parse string as "
        "an integer (got 'x') [from the command line]; colour: unknown setting [from the "
        "command line]"
    )


def test_rendered_inputs_are_redacted() -> None:
    token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    with pytest.raises(ConfigError) as excinfo:
        load_settings({"workers": f"Bearer {token}"}, None)
    assert token not in str(excinfo.value)


def test_load_settings_does_not_leak_the_yaml_file(tmp_path: Path) -> None:
    load_settings({}, write(tmp_path, "workers: 9\n"))
    assert Settings().workers == 4
