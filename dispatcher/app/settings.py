"""Settings of the manager process (issue 5, scope 1).

Priority, highest first: command-line flags, environment variables ``DISPATCHER_*`` (nested
fields with ``__``: ``DISPATCHER_LEADER_ELECTION__LEASE_NAME``), the YAML file, defaults
(docs/configuration.md). Unknown keys are errors; every field has a description, from which
``docs/configuration.md`` is generated (``scripts/gen_config_docs.py``).

A list setting given as text (an environment variable, a flag, a YAML string) is a JSON list or
comma-separated items, each stripped (``" gpu-type-affinity , capacity-first"``): one validator
does it for every list field (:func:`decode_text`). A mapping or a section in an environment
variable is JSON; JSON that does not parse is a :class:`ConfigError` naming the setting and the
variable (:class:`EnvironmentValueError`), like any other bad value.

Use :func:`load_settings` (flags as a dict, YAML path) and print ``str(error)`` of the
:class:`ConfigError` it raises; :func:`render_validation_error` renders a pydantic
``ValidationError`` for humans, naming each field and where its value came from.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    YamlConfigSettingsSource,
)

from dispatcher.algorithms import DEFAULT_PIPELINE
from dispatcher.clusters.activeness import DEFAULT_STALE_GRACE_SECONDS
from dispatcher.controller.config import DEFAULTS as CONTROLLER_DEFAULTS
from dispatcher.http import parse_address
from dispatcher.leader.settings import LeaderElectionSettings
from dispatcher.logs import redact
from dispatcher.telemetry import TelemetryError, traces_url

__all__ = [
    "CONFIG_FILE_ENV",
    "DEFAULT_CONFIG_FILE",
    "ENV_PREFIX",
    "FALLBACK_DESCRIPTIONS",
    "ClientSettings",
    "ConfigError",
    "EnvironmentValueError",
    "LeaderElectionSettings",
    "Settings",
    "decode_text",
    "load_settings",
    "render_validation_error",
    "split_list",
]

ENV_PREFIX = "DISPATCHER_"
"""Prefix of the environment variables that set fields."""
CONFIG_FILE_ENV = "DISPATCHER_CONFIG_FILE"
"""Environment variable the command line reads the YAML file's path from (not a field)."""
DEFAULT_CONFIG_FILE = Path("/etc/multikueue-dispatcher/config.yaml")
"""Where the Deployment mounts the configuration ConfigMap."""

KUEUE_BUILTIN_DISPATCHERS = frozenset(
    {
        "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
        "kueue.x-k8s.io/multikueue-dispatcher-incremental",
    }
)

_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

_YAML_FILE: ContextVar[Path | None] = ContextVar("dispatcher_settings_yaml_file", default=None)


def _is_list(annotation: Any) -> bool:
    """Whether a field of this type is a list setting (``list[...]``, or one made optional)."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(members) == 1 and _is_list(members[0])
    return origin in (list, tuple, set, frozenset)


def split_list(text: str) -> list[str]:
    """Comma-separated items, each stripped; empty items are dropped (``""`` is ``[]``)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"not valid JSON ({error.msg}, line {error.lineno} column {error.colno})"
        ) from None


def decode_text(value: object, annotation: Any) -> object:
    """A list setting given as text (a flag, a YAML string, an environment variable): a JSON
    list when it starts with ``[``, else comma-separated items, stripped. Other values are
    returned unchanged. Raises ``ValueError`` (a validation error of the field, reported with
    where the value came from) for a JSON list that does not parse."""
    if isinstance(value, str) and _is_list(annotation):
        return _json(value) if value.lstrip().startswith("[") else split_list(value)
    return value


class EnvironmentValueError(ValueError):
    """An environment variable whose JSON does not parse (for a list, a mapping or a section).

    Raised by the environment source, so the variable is reported even when a higher source
    (a flag) sets the same setting; :func:`load_settings` turns it into a :class:`ConfigError`.
    """

    def __init__(self, field: str, variable: str, value: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.field = field
        self.variable = variable
        self.value = value
        self.problem = problem

    def line(self) -> str:
        """The problem as :class:`ConfigError` lists it."""
        return (
            f"{self.field}: {self.problem} (got {redact(repr(self.value))}) "
            f"[from environment variable {self.variable}]"
        )


class _EnvironmentSource(EnvSettingsSource):
    """``DISPATCHER_*`` variables: a list in the comma form stays text (:func:`decode_text`
    splits it); JSON that does not parse raises :class:`EnvironmentValueError` naming the
    variable (pydantic-settings raises a bare ``SettingsError``)."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        text = str(value)
        if field is not None and _is_list(field.annotation) and not text.lstrip().startswith("["):
            return value
        try:
            return _json(text)
        except ValueError as error:
            raise EnvironmentValueError(
                field_name, _variable(field_name, text), text, str(error)
            ) from None


def _variable(field_name: str, value: str) -> str:
    """The ``DISPATCHER_*`` variable holding ``value`` for ``field_name`` (its last part)."""
    suffix = field_name.upper()
    for name, text in os.environ.items():
        upper = name.upper()
        if upper.startswith(ENV_PREFIX) and upper.endswith(suffix) and text == value:
            return name
    return ENV_PREFIX + suffix


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _text_forms(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name is None:
            return value
        return decode_text(value, cls.model_fields[info.field_name].annotation)


class ClientSettings(_Section):
    """Client settings for one kind of cluster connection."""

    qps: float = Field(
        default=20.0,
        gt=0,
        description="Sustained requests per second to one cluster (client-side limit).",
    )
    burst: int = Field(
        default=40,
        ge=1,
        description="Requests allowed at once above `qps` before the limit applies.",
    )
    request_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Client-side timeout of one API request (without it a request can hang "
        "forever).",
    )
    watch_timeout_seconds: int = Field(
        default=300,
        ge=1,
        description="Server-side timeout of one watch request (`timeoutSeconds`); the watch is "
        "then resumed from the last resourceVersion.",
    )


# Descriptions for the documentation of fields whose model (owned elsewhere) has none.
FALLBACK_DESCRIPTIONS: dict[str, str] = {
    "leader_election.enabled": "Elect a leader among replicas with a Lease; only the leader "
    "writes. Off: this replica works alone (`replica_role` standalone).",
    "leader_election.lease_name": "Name of the Lease object.",
    "leader_election.namespace": "Namespace of the Lease; empty: the pod's namespace "
    "(`POD_NAMESPACE`, else the service account's namespace file, else `default`).",
    "leader_election.lease_duration_seconds": "How long followers wait after the last renewal "
    "before taking over.",
    "leader_election.renew_deadline_seconds": "How long the leader keeps trying to renew before "
    "it steps down (and the process exits); shorter than the lease duration.",
    "leader_election.retry_period_seconds": "Interval between attempts to acquire or renew the "
    "Lease; shorter than the renew deadline.",
}


class Settings(BaseSettings):
    """Every setting of ``multikueue-dispatcher run``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
        validate_assignment=True,
    )

    dispatcher_name: str = Field(
        default="multikueue-dispatcher.io/dispatcher",
        description="Kueue's `multiKueue.dispatcherName` this dispatcher serves; must equal the "
        "value in Kueue's configuration (contract C1-C3).",
    )
    kueue_namespace: str = Field(
        default="kueue-system",
        min_length=1,
        description="Namespace of Kueue on the manager cluster; the kubeconfig Secrets named by "
        "MultiKueueClusters live there.",
    )
    multikueue_origin: str = Field(
        default=CONTROLLER_DEFAULTS.origin,
        min_length=1,
        max_length=63,
        description="Kueue's `multiKueue.origin`: the value of the "
        "`kueue.x-k8s.io/multikueue-origin` label Kueue puts on the Workload copies and Jobs it "
        "creates on workers. A worker Workload counts as a copy of a manager Workload only with "
        "this label (Kueue keys its copies the same way; a same-named Workload or Job without "
        "it is someone else's); must equal the value in Kueue's configuration.",
    )
    write_mode: Literal["apply"] = Field(
        default="apply",
        description="How `status.nominatedClusterNames` is written: `apply` (server-side apply "
        "with `field_manager`). Kueue's own admission write must then be able to clear the "
        "field: install Kueue's clear-nominated-cluster-names admission policy or enable its "
        "WorkloadRequestUseMergePatch gate (README, 'Kueue configuration'). `merge-patch` was "
        "removed: on real Kueue it admits nothing.",
    )
    field_manager: str = Field(
        default=CONTROLLER_DEFAULTS.field_manager,
        min_length=1,
        max_length=128,
        description="Field manager of the dispatcher's writes.",
    )
    algorithms: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PIPELINE),
        min_length=1,
        description="The algorithm pipeline, in order (`multikueue-dispatcher plugins` lists "
        "them).",
    )
    algorithm_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Options per algorithm name, e.g. `{capacity-first: {policy: best-fit}}`; "
        "each algorithm validates its own.",
    )
    plugin_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Weight of each plugin's cluster scores by plugin name (default 1).",
    )
    fail_closed_plugins: list[str] = Field(
        default_factory=list,
        description="Plugins whose filters enforce hard rules: when one of their filters "
        "raises, returns garbage or hangs, the decision is withheld (nothing written, a "
        "`DecisionWithheld` Event, decided again with backoff) instead of skipping the filter. "
        "Names must be loaded plugins (`multikueue-dispatcher plugins`).",
    )
    manager_client: ClientSettings = Field(
        default_factory=lambda: ClientSettings(qps=300.0, burst=500),
        description="Client settings for the manager cluster. The defaults are those of "
        "Kueue's own manager client (`clientConnection` 300 QPS, burst 500): one nomination "
        "costs one request (the status apply), so `qps` bounds the nominations per second. "
        "Events are recorded in the background, aggregated, through a token bucket of their "
        "own with these `qps` and `burst` (as controller-runtime's recorder).",
    )
    worker_client: ClientSettings = Field(
        default_factory=ClientSettings, description="Client settings for each worker cluster."
    )
    resync_seconds: float = Field(
        default=CONTROLLER_DEFAULTS.resync_seconds,
        gt=0,
        description="Every eligible Workload is reconciled again at this interval even without "
        "a change.",
    )
    patience_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long a nomination may stay unadmitted before capacity-first moves or "
        "widens it; capacity-first's own `patience_seconds` option, when given, wins.",
    )
    stuck_after_seconds: float = Field(
        default=CONTROLLER_DEFAULTS.stuck_after_seconds,
        gt=0,
        description="How long a copy may stay Admitted on a nominated worker while Kueue has not "
        "set `status.clusterName` on the manager before the workload is reported stuck (the "
        "field-manager pitfall, contract C43: log, `AdmissionStuck` Event, "
        "`multikueue_dispatcher_stuck_workloads_total`), unless Kueue recorded another "
        "admission on that worker within as long, or still has copies of ours to make there "
        "(for up to ten times as long): then it is behind its worker client's backlog, not "
        "refusing the write, and the workload is looked at again later. Also how long a "
        "manager Workload may stay evicted while holding its quota, with no copy left on any "
        "worker, before it is reported as a stuck eviction (contract C93: log, "
        "`EvictionStuck` Event, `multikueue_dispatcher_stuck_evictions_total`), and how long "
        "a workload may stay admitted on a worker where a leftover Job of ours holds its Job's "
        "name before that is reported (contract C68: log, `LeftoverJob` Event, "
        "`multikueue_dispatcher_leftover_jobs_total`).",
    )
    lost_copy_cooldown_seconds: float = Field(
        default=CONTROLLER_DEFAULTS.lost_copy_cooldown_seconds,
        ge=0,
        description="How long a worker where a workload's admitted copy vanished (Kueue's "
        '`Retry` "Admitting remote no longer exists") is left out of that workload\'s '
        "decisions (stage `copy-lost`, rejection code `copy_lost`): a worker back from an "
        "outage can delete every new copy until its Kueue has seen the old Job deleted "
        "(contract C91). 0 turns the guard off.",
    )
    decision_timeout_seconds: float = Field(
        default=CONTROLLER_DEFAULTS.decision_timeout_seconds,
        gt=0,
        description="Longest time one decision may take; a slower one is abandoned, counted as "
        "an error and retried with the work queue's exponential backoff (50 ms doubling, at "
        "most 30 s and never later than `resync_seconds`; reset by the next decision). Applies "
        "to a pipeline with a third-party algorithm or decision hook, run in a thread; one of "
        "built-in stages only runs on the event loop without it (docs/plugins.md).",
    )
    worker_stale_grace_seconds: float = Field(
        default=DEFAULT_STALE_GRACE_SECONDS,
        ge=0,
        description="How long the dispatcher's own mirror of a worker may be disconnected "
        "before the worker is lost for dispatch and its nominations move; a shorter blip moves "
        "nothing. Kueue reporting the MultiKueueCluster not `Active` counts at once. Default 5: "
        "a stream retried after 1 s and 2 s (two failed re-watches) stays within it, and "
        "Kueue's own reconnect backoff starts at 5 s. 0: lost at the first failed re-watch.",
    )
    unplaceable_release: bool = Field(
        default=CONTROLLER_DEFAULTS.unplaceable_release,
        description="Opt-in policy for a worker outage: release the manager quota of an "
        "unplaceable workload (quota reserved on the manager, no reachable worker its filters "
        "keep, and an unreachable one they would keep) by deactivating it (`spec.active: false`, "
        "annotated `multikueue-dispatcher.io/released-at`) after `unplaceable_patience_seconds`, "
        "and reactivate it, oldest first, when an eligible worker is reachable again. Needs "
        "`patch` on `workloads`. Off: such workloads are only reported (Events, "
        "`multikueue_dispatcher_unplaceable_quota`). docs/outage.md.",
    )
    stuck_eviction_release: bool = Field(
        default=CONTROLLER_DEFAULTS.stuck_eviction_release,
        description="Opt-in release of a stuck eviction (contract C93: a manager Workload "
        "evicted while its Job's pods were counted, with no copy left on any worker, keeps its "
        "quota for good on Kueue v0.19): once reported, the dispatcher sets the manager Job's "
        "`status.active` and `status.ready` to 0, as MultiKueue would copy them from a worker "
        "whose Job has no pods, provided no Job of the workload on a worker of its "
        "MultiKueueConfig still has active pods; Kueue then finishes the eviction and queues "
        "the workload again (`EvictionReleased` Event, "
        "`multikueue_dispatcher_stuck_eviction_releases_total`). Needs `patch` on "
        "`jobs/status` (`batch`). Off: stuck evictions are only reported.",
    )
    unplaceable_patience_seconds: float = Field(
        default=CONTROLLER_DEFAULTS.unplaceable_patience_seconds,
        gt=0,
        description="How long a workload must stay unplaceable before `unplaceable_release` "
        "releases it; a workload restored and unplaceable again waits twice as long for each "
        "earlier release (at most 32 times this).",
    )
    workers: int = Field(
        default=CONTROLLER_DEFAULTS.workers,
        ge=1,
        le=256,
        description="Workloads reconciled concurrently (work-queue consumers).",
    )
    leader_election: LeaderElectionSettings = Field(
        default_factory=lambda: LeaderElectionSettings.model_validate({}),
        description="Leader election among replicas (coordination.k8s.io Lease).",
    )
    health_address: str = Field(
        default=":8081",
        description="`host:port` of `/healthz` and `/readyz` (`:port` listens on every interface).",
    )
    metrics_address: str = Field(
        default=":8080",
        description="`host:port` of `/metrics`; may equal `health_address` to share one port.",
    )
    log_format: Literal["json", "text"] = Field(
        default="json", description="`json` (one object per line) or `text` (for terminals)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Lowest level logged."
    )
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP endpoint for traces, e.g. `http://otel-collector:4318`; unset: "
        "no traces. Needs the `otlp` extra.",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _text_forms(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name is None:
            return value
        return decode_text(value, cls.model_fields[info.field_name].annotation)

    @field_validator("dispatcher_name")
    @classmethod
    def _dispatcher_name(cls, value: str) -> str:
        if not value or any(c.isspace() for c in value):
            raise ValueError("must be a non-empty name without spaces, e.g. example.com/dispatcher")
        if value in KUEUE_BUILTIN_DISPATCHERS:
            raise ValueError(
                f"{value!r} is one of Kueue's built-in dispatchers; an external dispatcher needs "
                "its own name (and the same name in Kueue's configuration)"
            )
        return value

    @field_validator("multikueue_origin")
    @classmethod
    def _origin_label_value(cls, value: str) -> str:
        if not _LABEL_VALUE.fullmatch(value):
            raise ValueError(
                "must be a label value (up to 63 letters, digits, '-', '_' or '.', starting and "
                f"ending with a letter or digit), like Kueue's multiKueue.origin, not {value!r}"
            )
        return value

    @field_validator("algorithms")
    @classmethod
    def _no_duplicate_algorithms(cls, value: list[str]) -> list[str]:
        duplicates = sorted({name for name in value if value.count(name) > 1})
        if duplicates:
            raise ValueError(f"algorithms listed twice: {duplicates}")
        return value

    @field_validator("algorithm_options")
    @classmethod
    def _options_for_listed_algorithms(
        cls, value: dict[str, dict[str, Any]], info: ValidationInfo
    ) -> dict[str, dict[str, Any]]:
        listed = info.data.get("algorithms")
        if listed is not None:
            unused = sorted(set(value) - set(listed))
            if unused:
                raise ValueError(f"options for algorithms not in `algorithms` {listed}: {unused}")
        return value

    @field_validator("health_address", "metrics_address")
    @classmethod
    def _address(cls, value: str) -> str:
        parse_address(value)
        return value

    @field_validator("write_mode", mode="before")
    @classmethod
    def _merge_patch_removed(cls, value: object) -> object:
        if value == "merge-patch":
            raise ValueError(
                "'merge-patch' was removed: on real Kueue v0.19.2 it does not avoid the "
                "field-manager pitfall (0 of 10 demo workloads admitted, README 'The "
                "field-manager pitfall'); use 'apply' with Kueue's "
                "clear-nominated-cluster-names admission policy or its "
                "WorkloadRequestUseMergePatch feature gate"
            )
        return value

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("otlp_endpoint", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_url(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                traces_url(value)
            except TelemetryError as error:
                raise ValueError(str(error)) from None
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init arguments) > environment > YAML file (set by :func:`load_settings`)."""
        sources: list[PydanticBaseSettingsSource] = [
            init_settings,
            _EnvironmentSource(settings_cls),
        ]
        yaml_file = _YAML_FILE.get()
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)


class ConfigError(ValueError):
    """The settings cannot be loaded; ``str()`` is the explanation for humans, one line."""

    def __init__(self, problems: Sequence[str], *, header: str = "invalid settings") -> None:
        """``problems`` are one line each; the message is ``header: problem; problem...``."""
        self.problems = tuple(problems)
        super().__init__(f"{header}: {'; '.join(self.problems)}")


def _nest(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags as nested dicts: dotted keys split, ``None`` (a flag not given) dropped."""
    nested: dict[str, Any] = {}
    for key, value in flags.items():
        if value is None:
            continue
        *parents, leaf = key.split(".")
        target = nested
        for part in parents:
            target = target.setdefault(part, {})
        if isinstance(value, Mapping) and isinstance(target.get(leaf), dict):
            target[leaf].update(value)
        else:
            target[leaf] = dict(value) if isinstance(value, Mapping) else value
    return nested


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"], header="cannot read settings") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([f"{path}: {error}"], header="cannot read settings") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(
            [f"{path}: not valid YAML{where}: {problem}"], header="cannot read settings"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"{path}: the top level must be a mapping of setting names to values, "
                f"not a {type(data).__name__}"
            ],
            header="cannot read settings",
        )
    return data


def load_settings(argv_overrides: Mapping[str, Any], yaml_path: Path | None) -> Settings:
    """Build the settings from flags, the environment and the YAML file at ``yaml_path``.

    ``argv_overrides`` maps field names to values given on the command line; nested fields as
    dicts or dotted keys (``{"leader_election.enabled": False}``); ``None`` values (flags not
    given) are ignored. ``yaml_path`` ``None`` reads no file; a given path must exist. Raises
    :class:`ConfigError` naming each bad field and where its value came from.
    """
    flags = _nest(argv_overrides)
    yaml_data = _read_yaml(yaml_path) if yaml_path is not None else None
    token = _YAML_FILE.set(yaml_path if yaml_data else None)
    try:
        return Settings(**flags)
    except ValidationError as error:
        problems = _problems(error, flags=flags, yaml_data=yaml_data, yaml_path=yaml_path)
        raise ConfigError(problems) from error
    except SettingsError as error:
        cause = error.__cause__
        if isinstance(cause, EnvironmentValueError):
            raise ConfigError([cause.line()]) from error
        raise ConfigError([f"{error}: {cause}" if cause else str(error)]) from error
    finally:
        _YAML_FILE.reset(token)


def render_validation_error(
    error: ValidationError,
    *,
    flags: Mapping[str, Any] | None = None,
    yaml_data: Mapping[str, Any] | None = None,
    yaml_path: Path | None = None,
) -> str:
    """A settings ``ValidationError`` for humans: one line per problem, naming the field
    (dotted), the problem, and (when ``flags``/``yaml_data`` are given or the environment
    holds it) where the value came from; unknown keys get a "did you mean" hint."""
    problems = _problems(error, flags=_nest(flags or {}), yaml_data=yaml_data, yaml_path=yaml_path)
    return str(ConfigError(problems))


def _problems(
    error: ValidationError,
    *,
    flags: Mapping[str, Any],
    yaml_data: Mapping[str, Any] | None,
    yaml_path: Path | None,
) -> list[str]:
    problems = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        field = ".".join(str(part) for part in loc) or "settings"
        if item["type"] == "extra_forbidden":
            text = f"{field}: unknown setting"
            known = _field_names(loc[:-1])
            if known is not None:
                close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
                if close:
                    suggestion = ".".join([*map(str, loc[:-1]), close[0]])
                    text += f" (did you mean {suggestion!r}?)"
        else:
            message = str(item["msg"]).removeprefix("Value error, ")
            text = f"{field}: {message}"
            value = item.get("input")
            if isinstance(value, str | int | float):
                text += f" (got {redact(repr(value))})"
        origin = _origin(loc, flags, yaml_data, yaml_path)
        if origin:
            text += f" [from {origin}]"
        problems.append(text)
    return problems


def _field_names(path: tuple[Any, ...]) -> list[str] | None:
    model: type[BaseModel] = Settings
    for part in path:
        info = model.model_fields.get(str(part))
        annotation = info.annotation if info is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return list(model.model_fields)


def _has_path(data: Mapping[str, Any] | None, loc: tuple[Any, ...]) -> bool:
    current: Any = data
    for part in loc:
        if not isinstance(current, Mapping) or str(part) not in current:
            return False
        current = current[str(part)]
    return data is not None


def _origin(
    loc: tuple[Any, ...],
    flags: Mapping[str, Any],
    yaml_data: Mapping[str, Any] | None,
    yaml_path: Path | None,
) -> str | None:
    if not loc:
        return None
    if _has_path(flags, loc):
        return "the command line"
    environ = {name.upper() for name in os.environ}
    for end in range(len(loc), 0, -1):
        name = ENV_PREFIX + "__".join(str(part).upper() for part in loc[:end])
        if name in environ:
            return f"environment variable {name}"
    if _has_path(yaml_data, loc):
        return str(yaml_path)
    return None
