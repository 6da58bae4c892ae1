"""The plugin host: registration through hooks, entry points, env switches, isolation.

Aspects: built-ins come through ``mkd_register_algorithms``; the example plugin installed in the
venv is discovered through its entry point and changes a decision; blocking it (or disabling
autoload) by environment variable removes it; a plugin that raises, returns a wrong type or names
an unknown cluster is skipped for that decision with the error reported while other plugins keep
working; misspelt hooks fail at start; duplicate names and unknown algorithms are errors.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pluggy
import pydantic
import pytest

from dispatcher.algorithms import (
    AlgorithmSpec,
    ClusterSnapshot,
    Decision,
    DispatchRequest,
    NoOptions,
    Selection,
    StageContext,
    Stages,
)
from dispatcher.plugins import (
    ENV_DISABLE_AUTOLOAD,
    ENV_DISABLED_PLUGINS,
    PluginError,
    PluginHost,
    UnknownAlgorithmError,
    hookimpl,
)
from dispatcher.testing import assert_decision, decide, make_cluster, make_host, make_request

EXAMPLE_PLUGIN = "cost"
EXAMPLE_DIST = "multikueue-dispatcher-cost"
BUILTINS = {"capacity-first", "gpu-type-affinity", "all-at-once", "incremental"}


def _priced_fleet() -> list[ClusterSnapshot]:
    # Same size, so capacity-first ties and falls back to config order: "pricey" first.
    return [
        make_cluster("pricey", cpu=16, order=0, labels={"multikueue-dispatcher.io/cost": "3.2"}),
        make_cluster("cheap", cpu=16, order=1, labels={"multikueue-dispatcher.io/cost": "1"}),
    ]


def _loaded(environ: dict[str, str]) -> PluginHost:
    return PluginHost.load(environ=environ)


def test_builtins_are_registered_through_the_hook() -> None:
    host = make_host()
    algorithms = host.algorithms()
    assert set(algorithms) == BUILTINS
    assert {a.plugin for a in algorithms.values()} == {"builtin"}
    assert [p.name for p in host.plugins()] == ["builtin"]


def test_example_plugin_is_discovered_through_its_entry_point() -> None:
    host = _loaded({})
    infos = {p.name: p for p in host.plugins()}
    if EXAMPLE_PLUGIN not in infos:
        pytest.fail(
            f"entry point {EXAMPLE_PLUGIN!r} not found: run "
            f"`.venv/bin/pip install -e plugins/{EXAMPLE_DIST}` (make venv does it)"
        )
    assert infos[EXAMPLE_PLUGIN].distribution == EXAMPLE_DIST
    registered = host.algorithms()["cost-aware"]
    assert registered.plugin == EXAMPLE_PLUGIN
    assert registered.distribution == f"{EXAMPLE_DIST}==0.1.0"


def test_example_plugin_changes_the_decision() -> None:
    host = _loaded({})
    request = make_request(cpu=4)
    baseline = host.decide(host.pipeline(["capacity-first"]), request, _priced_fleet())
    with_cost = host.decide(host.pipeline(["cost-aware"]), request, _priced_fleet())
    assert_decision(baseline, nominate=["pricey"])
    assert_decision(with_cost, nominate=["cheap"])
    assert any(s.scorer == "cost" for s in with_cost.verdict("cheap").scores)


def test_example_plugin_spills_over_after_patience() -> None:
    host = _loaded({})
    request = make_request(cpu=4, nominated=["cheap"], nominated_at=1_000_000.0 - 121)
    decision = host.decide(host.pipeline(["cost-aware"]), request, _priced_fleet())
    assert_decision(decision, nominate=["pricey"], reason_contains="moving")


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param({ENV_DISABLED_PLUGINS: EXAMPLE_PLUGIN}, id="blocked-by-name"),
        pytest.param({ENV_DISABLED_PLUGINS: f"other, {EXAMPLE_PLUGIN} "}, id="blocked-in-a-list"),
        pytest.param({ENV_DISABLE_AUTOLOAD: "1"}, id="autoload-disabled"),
    ],
)
def test_env_switches_remove_the_example_plugin(environ: dict[str, str]) -> None:
    host = _loaded(environ)
    assert EXAMPLE_PLUGIN not in {p.name for p in host.plugins()}
    assert set(host.algorithms()) == BUILTINS
    with pytest.raises(
        UnknownAlgorithmError, match=r"unknown algorithm 'cost-aware'.*capacity-first"
    ):
        host.pipeline(["cost-aware"])


def test_blocking_the_builtins_is_possible() -> None:
    host = PluginHost.load(environ={ENV_DISABLED_PLUGINS: "builtin", ENV_DISABLE_AUTOLOAD: "1"})
    assert host.algorithms() == {}


class _DropOdd:
    @hookimpl
    def mkd_filter_cluster(self, cluster: ClusterSnapshot) -> str | None:
        return "odd clusters are off limits" if cluster.name.endswith(("1", "3")) else None


class _Raises:
    @hookimpl
    def mkd_filter_cluster(self, request: DispatchRequest, cluster: ClusterSnapshot) -> str | None:
        raise RuntimeError("plugin bug")

    @hookimpl
    def mkd_score_cluster(self, cluster: ClusterSnapshot) -> float | None:
        raise ZeroDivisionError("also broken")

    @hookimpl
    def mkd_on_decision(self, decision: Decision) -> None:
        raise RuntimeError("observer bug")


class _UnknownCluster:
    @hookimpl
    def mkd_restrict_clusters(self, clusters: Sequence[ClusterSnapshot]) -> Collection[str]:
        return ["w0", "not-a-candidate"]


class _WrongTypes:
    @hookimpl
    def mkd_score_cluster(self, cluster: ClusterSnapshot) -> Any:
        return "high"


class _Prefer2:
    @hookimpl
    def mkd_score_cluster(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> float | None:
        return 1.0 if cluster.name == "w2" else None


def _fleet() -> list[ClusterSnapshot]:
    return [make_cluster(f"w{i}", cpu=8, order=i) for i in range(4)]


@pytest.mark.parametrize(
    ("plugins", "expected", "failed_sources"),
    [
        pytest.param([("drop-odd", _DropOdd())], ["w0"], [], id="working-filter"),
        pytest.param(
            [("broken", _Raises()), ("drop-odd", _DropOdd()), ("prefer-2", _Prefer2())],
            ["w2"],
            ["broken", "broken", "broken"],
            id="raising-plugin-isolated-others-work",
        ),
        pytest.param(
            [("unknown", _UnknownCluster()), ("drop-odd", _DropOdd())],
            ["w0"],
            ["unknown"],
            id="unknown-cluster-restriction-skipped",
        ),
        pytest.param(
            [("wrong", _WrongTypes()), ("prefer-2", _Prefer2())],
            ["w2"],
            ["wrong"],
            id="non-numeric-score-skipped",
        ),
    ],
)
def test_plugin_isolation(
    plugins: list[tuple[str, object]], expected: list[str], failed_sources: list[str]
) -> None:
    decision = decide(make_request(cpu=1), _fleet(), plugins=plugins)
    assert_decision(decision, nominate=expected, allow_errors=True)
    assert sorted(e.source for e in decision.errors) == failed_sources


def test_unknown_restriction_does_not_restrict() -> None:
    decision = decide(make_request(cpu=1), _fleet(), plugins=[("unknown", _UnknownCluster())])
    assert [v.cluster for v in decision.verdicts if v.kept] == ["w0", "w1", "w2", "w3"]
    assert "not-a-candidate" in decision.errors[0].message


class _BadSelector:
    name = "bad-selector"

    def select(
        self, request: DispatchRequest, ranked: Sequence[ClusterSnapshot], ctx: StageContext
    ) -> Selection:
        return Selection(("elsewhere", ranked[0].name), "made up")


class _BadAlgorithmPlugin:
    @hookimpl
    def mkd_register_algorithms(self) -> Sequence[AlgorithmSpec[Any]]:
        return [
            AlgorithmSpec(
                "bad",
                "selects unknown clusters",
                NoOptions,
                lambda _: Stages(selector=_BadSelector()),
            )
        ]


def test_selector_naming_an_unknown_cluster_falls_back() -> None:
    decision = decide(
        make_request(cpu=1), _fleet(), names=["bad"], plugins=[("bad", _BadAlgorithmPlugin())]
    )
    assert decision.nominate == ("w0",)
    assert decision.errors[0].stage == "bad-selector"
    assert "elsewhere" in decision.errors[0].message
    assert "fallback" in decision.reason


class _RaisingRegistration:
    @hookimpl
    def mkd_register_algorithms(self) -> Sequence[AlgorithmSpec[Any]]:
        raise RuntimeError("cannot import numpy")


def test_registration_that_raises_is_skipped_and_reported() -> None:
    host = make_host([("flaky", _RaisingRegistration())])
    assert set(host.algorithms()) == BUILTINS
    assert host.load_errors[0].source == "flaky"


class _Duplicate:
    @hookimpl
    def mkd_register_algorithms(self) -> Sequence[AlgorithmSpec[Any]]:
        return [AlgorithmSpec("incremental", "clash", NoOptions, lambda _: Stages())]


def test_duplicate_algorithm_names_are_an_error() -> None:
    with pytest.raises(PluginError, match="'incremental' is registered by both"):
        make_host([("dup", _Duplicate())]).algorithms()


class _Typo:
    @hookimpl
    def mkd_filter_clusters(self) -> None:  # not a hook: the spec is mkd_filter_cluster
        return None


def test_misspelt_hook_fails_at_start() -> None:
    """As a PluginError (the command line prints it as one line), pluggy's error its cause."""
    with pytest.raises(PluginError, match="unknown hook 'mkd_filter_clusters'") as raised:
        make_host([("typo", _Typo())])
    assert isinstance(raised.value.__cause__, pluggy.PluginValidationError)


def test_options_are_validated_by_the_algorithm_model() -> None:
    host = make_host()
    with pytest.raises(pydantic.ValidationError):
        host.pipeline(["capacity-first"], {"capacity-first": {"policy": "random"}})
    with pytest.raises(pydantic.ValidationError):
        host.pipeline(["capacity-first"], {"capacity-first": {"patience": 3}})
    with pytest.raises(PluginError, match="not in the pipeline"):
        host.pipeline(["capacity-first"], {"incremental": {}})


def test_plugin_score_weight() -> None:
    host = make_host([("prefer-2", _Prefer2())])
    request = make_request(cpu=1)
    favoured = host.decide(host.pipeline(["capacity-first"]), request, _fleet())
    ignored = host.decide(
        host.pipeline(["capacity-first"], plugin_weights={"prefer-2": 0.0}), request, _fleet()
    )
    assert favoured.nominate == ("w2",)
    assert ignored.nominate == ("w0",)


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[str, ...]]] = []

    @hookimpl
    def mkd_on_decision(self, request: DispatchRequest, decision: Decision) -> None:
        self.seen.append((request.key, decision.nominate))


def test_observers_see_every_decision() -> None:
    recorder = _Recorder()
    host = make_host([("recorder", recorder)])
    pipeline = host.pipeline()
    for name in ("a", "b"):
        host.decide(pipeline, make_request(name, cpu=1), _fleet())
    assert recorder.seen == [("default/a", ("w0",)), ("default/b", ("w0",))]


class _AlgorithmsOnly:
    """A third-party plugin that registers an algorithm and implements no decision hook."""

    @hookimpl
    def mkd_register_algorithms(self) -> Sequence[AlgorithmSpec[Any]]:
        return [
            AlgorithmSpec("third-party", "picks the first", NoOptions, lambda _: Stages()),
        ]


@pytest.mark.parametrize(
    ("plugins", "names", "expected"),
    [
        pytest.param([], ("gpu-type-affinity", "capacity-first"), True, id="default-pipeline"),
        pytest.param([], ("all-at-once",), True, id="one-builtin"),
        pytest.param(
            [("other", _AlgorithmsOnly())], ("capacity-first",), True, id="unused-third-party"
        ),
        pytest.param(
            [("other", _AlgorithmsOnly())],
            ("gpu-type-affinity", "third-party"),
            False,
            id="third-party-algorithm",
        ),
        pytest.param([("drop", _DropOdd())], ("capacity-first",), False, id="filter-hook"),
        pytest.param([("prefer", _Prefer2())], ("capacity-first",), False, id="score-hook"),
        pytest.param(
            [("restrict", _UnknownCluster())], ("capacity-first",), False, id="restrict-hook"
        ),
        pytest.param([("seen", _Recorder())], ("capacity-first",), False, id="observer-hook"),
        pytest.param([], ("no-such-algorithm",), False, id="unknown-algorithm"),
    ],
)
def test_builtin_only_tells_which_pipelines_run_only_our_code(
    plugins: list[tuple[str, object]], names: tuple[str, ...], expected: bool
) -> None:
    """Issue 15: a pipeline of built-in stages only may run on the event loop (no thread, no
    deadline); any third-party stage or decision hook keeps it in a thread."""
    assert make_host(plugins).builtin_only(names) is expected
