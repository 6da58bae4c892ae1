"""The simulator runs the same plugin algorithms as the manager process, third-party ones too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from dispatcher.algorithms import AlgorithmSpec, NoOptions, Stages, TopN
from dispatcher.plugins import PluginHost, hookimpl
from dispatcher.sim.engine import parse_algorithms
from dispatcher_sandbox.harness.sim import A100, run, trace, workload


def test_cost_aware_from_its_distribution_sends_work_to_the_cheapest_fitting_worker() -> None:
    host = PluginHost.load()
    assert host.algorithm("cost-aware").distribution is not None  # an installed entry point
    items = [workload(f"a-{i}", 5.0 * i, gpus=1, gpu_type=A100) for i in range(6)]
    options = {"cost-aware": {"costs": {"worker-a100-west": 0.5}}}
    name = "gpu-type-affinity+cost-aware"
    result, metrics = run(name, trace(*items), options=options, host=host)[name]
    assert metrics["admitted_by_cluster"] == {"worker-a100-west": 6}
    assert metrics["copies_per_admitted"] == 1.0
    assert result.decisions >= 6
    assert result.decision_errors == []


class _FirstInConfig:
    """A third-party plugin registered in-process: the best-ranked (first) worker, no checks."""

    @hookimpl
    def mkd_register_algorithms(self) -> Sequence[AlgorithmSpec[Any]]:
        def build(options: NoOptions) -> Stages:
            return Stages(selector=TopN(n=1))

        return [AlgorithmSpec("prefer-first", "test", NoOptions, build)]


def test_an_in_process_plugin_runs_in_the_simulator() -> None:
    host = PluginHost.load(plugins=[("test-plugin", _FirstInConfig())])
    name = "gpu-type-affinity+prefer-first"
    items = [workload(f"c-{i}", float(i), gpus=1) for i in range(3)]
    _, metrics = run(name, trace(*items), host=host)[name]
    assert metrics["admitted"] == 3
    # TopN over config order: the first worker, whatever its capacity.
    assert metrics["admitted_by_cluster"] == {"worker-a100-east": 3}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("all-at-once", [("all-at-once", "all-at-once", ())], id="kueue-builtin"),
        pytest.param(
            "gpu-type-affinity+capacity-first",
            [
                (
                    "gpu-type-affinity+capacity-first",
                    "pipeline",
                    ("gpu-type-affinity", "capacity-first"),
                )
            ],
            id="pipeline",
        ),
        pytest.param(
            "capacity-first, incremental",
            [
                ("capacity-first", "pipeline", ("capacity-first",)),
                ("incremental", "incremental", ()),
            ],
            id="list",
        ),
        pytest.param(
            "plugin:all-at-once",
            [("plugin:all-at-once", "pipeline", ("all-at-once",))],
            id="plugin-re-creation",
        ),
    ],
)
def test_algorithm_names(text: str, expected: list[tuple[str, str, tuple[str, ...]]]) -> None:
    assert [(c.name, c.kind, c.pipeline) for c in parse_algorithms(text)] == expected


@pytest.mark.parametrize("text", ["", "a,a"], ids=["empty", "twice"])
def test_bad_algorithm_lists(text: str) -> None:
    with pytest.raises(ValueError, match="algorithm"):
        parse_algorithms(text)


def test_the_plugin_re_creation_of_all_at_once_runs_through_the_dispatcher() -> None:
    items = [workload(f"p-{i}", float(i), gpus=1) for i in range(3)]
    runs = run("plugin:all-at-once,all-at-once", trace(*items))
    plugin, kueue = runs["plugin:all-at-once"], runs["all-at-once"]
    assert plugin[0].decisions >= 3
    assert kueue[0].decisions == 0
    assert plugin[1]["copies_per_dispatch"] == kueue[1]["copies_per_dispatch"] == 5
