"""Placement hints in every pipeline (issue 18 item 3): the pipeline's own ``hints`` stage drops
the clusters a required hint rules out (code ``placement_hint``) or whose NoSchedule/NoExecute
taints the workload does not tolerate (code ``tainted``) before any algorithm's filters, and ranks
the rest by the preferred affinity and soft taints in the preference tier (score ``hints``), so
a hint holds whatever algorithm or plugin decides. Verdicts and ``explain`` name the hint."""

from __future__ import annotations

import json

import pytest

from dispatcher.algorithms import ClusterSnapshot, RejectionReason
from dispatcher.algorithms.explain import describe_decision
from dispatcher.controller.nominator import summarize
from dispatcher.kueue.hints import (
    CLUSTER_AFFINITY,
    CLUSTER_NAMES,
    CLUSTER_SELECTOR,
    CLUSTER_TOLERATIONS,
    DISPATCH_MODE,
    Taint,
)
from dispatcher.plugins import hookimpl
from dispatcher.testing import decide, make_cluster, make_request

REGION = "kueue.x-k8s.io/region"
DEDICATED = Taint("dedicated", "ml", "NoSchedule")
SOFT = Taint("spot", "", "PreferNoSchedule")


class PreferW1:
    """A plugin scorer that wants w1 above everything (tier 0)."""

    @hookimpl
    def mkd_score_cluster(self, cluster: ClusterSnapshot) -> float:
        return 100.0 if cluster.name == "w1" else 0.0


def fleet(
    w2_taints: tuple[Taint, ...] = (), w3_taints: tuple[Taint, ...] = ()
) -> list[ClusterSnapshot]:
    return [
        make_cluster("w1", cpu=4, order=0, labels={REGION: "us"}),
        make_cluster("w2", cpu=16, order=1, labels={REGION: "eu"}, taints=w2_taints),  # most free
        make_cluster("w3", cpu=8, order=2, labels={REGION: "eu"}, taints=w3_taints),
    ]


DEFAULT = ("gpu-type-affinity", "capacity-first")


def prefer(weight: int, selector: str) -> str:
    """A cluster-affinity annotation with one preferred term."""
    return json.dumps({"preferred": [{"weight": weight, "preference": selector}]})


TOLERATE = '[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]'


@pytest.mark.parametrize(
    ("names", "plugins", "annotations", "taints", "nominated", "dropped"),
    [
        pytest.param(DEFAULT, (), {}, (), ("w2",), {}, id="default-no-hints"),
        pytest.param(
            DEFAULT,
            (),
            {CLUSTER_SELECTOR.key: f"{REGION}=us"},
            (),
            ("w1",),
            {"w2": "placement_hint", "w3": "placement_hint"},
            id="default-selector-excludes",
        ),
        pytest.param(
            DEFAULT,
            (),
            {CLUSTER_NAMES.key: "w3,w9"},
            (),
            ("w3",),
            {"w1": "placement_hint", "w2": "placement_hint"},
            id="default-cluster-names",
        ),
        pytest.param(
            DEFAULT,
            (),
            {CLUSTER_AFFINITY.key: f'{{"required": ["{REGION}=eu"]}}'},
            ((DEDICATED,), ()),
            ("w3",),
            {"w1": "placement_hint", "w2": "tainted"},
            id="default-required-affinity-and-taint",
        ),
        pytest.param(
            DEFAULT,
            (),
            {CLUSTER_TOLERATIONS.key: TOLERATE},
            ((DEDICATED,), ()),
            ("w2",),
            {},
            id="default-toleration-admits",
        ),
        pytest.param(
            DEFAULT,
            (),
            {CLUSTER_AFFINITY.key: prefer(10, f"{REGION}=us")},
            (),
            ("w1",),
            {},
            id="default-preferred-ranks",
        ),
        pytest.param(DEFAULT, (), {}, ((SOFT,), ()), ("w3",), {}, id="default-soft-taint-ranks"),
        pytest.param(
            ("all-at-once",),
            (),
            {CLUSTER_SELECTOR.key: f"{REGION}=eu"},
            (),
            ("w2", "w3"),
            {"w1": "placement_hint"},
            id="all-at-once",
        ),
        pytest.param(
            ("incremental",),
            (),
            {CLUSTER_SELECTOR.key: f"{REGION}!=us"},
            ((DEDICATED,), ()),
            ("w3",),
            {"w1": "placement_hint", "w2": "tainted"},
            id="incremental",
        ),
        pytest.param(
            ("capacity-first",),
            (("prefer", PreferW1()),),
            {CLUSTER_SELECTOR.key: f"{REGION}=eu"},
            (),
            ("w2",),
            {"w1": "placement_hint"},
            id="plugin-cannot-override",
        ),
        pytest.param(
            DEFAULT,
            (),
            {CLUSTER_NAMES.key: "w9"},
            (),
            (),
            {"w1": "placement_hint", "w2": "placement_hint", "w3": "placement_hint"},
            id="nowhere",
        ),
    ],
)
def test_hints_hold_in_every_pipeline(
    names: tuple[str, ...],
    plugins: tuple[tuple[str, object], ...],
    annotations: dict[str, str],
    taints: tuple[tuple[Taint, ...], tuple[Taint, ...]],
    nominated: tuple[str, ...],
    dropped: dict[str, str],
) -> None:
    request = make_request(cpu=1, annotations=annotations)
    decision = decide(request, fleet(*taints) if taints else fleet(), names=names, plugins=plugins)
    assert decision.nominate == nominated
    by_hints = {v.cluster: str(v.reason_code) for v in decision.verdicts if v.dropped_by == "hints"}
    assert by_hints == dropped


def test_verdicts_events_and_explain_name_the_hint() -> None:
    request = make_request(
        cpu=1,
        annotations={
            CLUSTER_SELECTOR.key: f"{REGION}=eu",
            CLUSTER_TOLERATIONS.key: TOLERATE,
            CLUSTER_AFFINITY.key: prefer(40, f"{REGION}=eu"),
        },
    )
    decision = decide(request, fleet(w2_taints=(DEDICATED,), w3_taints=(SOFT,)), names=DEFAULT)
    assert decision.nominate == ("w2",)
    w1 = decision.verdict("w1")
    assert w1.reason == f"labels do not match hint cluster-selector ({REGION}=eu)"
    assert w1.reason_code is RejectionReason.PLACEMENT_HINT
    [hint] = [c for c in decision.verdict("w2").scores if c.scorer == "hints"]
    assert hint.detail == f"preferred ({REGION}=eu) +40; tolerates taint dedicated=ml:NoSchedule"
    assert hint.value == 1.0
    [soft] = [c for c in decision.verdict("w3").scores if c.scorer == "hints"]
    assert soft.value == 0.0  # the preference (1) less the soft taint not tolerated (1)
    assert soft.detail == f"preferred ({REGION}=eu) +40; taint spot:PreferNoSchedule not tolerated"
    message = summarize(decision)
    assert f"w2: rank 0 (fits now; {hint.detail})" in message
    assert f"w1: hints: labels do not match hint cluster-selector ({REGION}=eu)" in message
    explained = describe_decision(decision)
    assert f"dropped by hints: labels do not match hint cluster-selector ({REGION}=eu)" in explained
    assert "tolerates taint dedicated=ml:NoSchedule" in explained


def test_unreadable_taints_fence_the_cluster_off() -> None:
    broken = [
        make_cluster("w1", cpu=4),
        ClusterSnapshot(name="w2", taints_error="metadata.annotations[x]: not valid JSON"),
    ]
    decision = decide(make_request(cpu=1), broken, names=DEFAULT)
    assert decision.nominate == ("w1",)
    verdict = decision.verdict("w2")
    assert verdict.reason_code is RejectionReason.TAINTED
    assert verdict.reason.startswith("taints cannot be read (metadata.annotations[x]")


def test_without_hints_or_taints_no_hint_score_is_added() -> None:
    decision = decide(make_request(cpu=1), fleet(), names=DEFAULT)
    assert all(c.scorer != "hints" for v in decision.verdicts for c in v.scores)


def test_an_inactive_cluster_is_reported_inactive_not_excluded_by_a_hint() -> None:
    request = make_request(cpu=1, annotations={CLUSTER_NAMES.key: "w2"})
    decision = decide(request, [make_cluster("w1", cpu=4, active=False), *fleet()[1:]])
    assert decision.verdict("w1").dropped_by == "active"


@pytest.mark.parametrize(
    ("mode", "algorithm", "nominated"),
    [
        pytest.param(None, "gpu-type-affinity+capacity-first", ("w2",), id="configured"),
        pytest.param("all-at-once", "all-at-once", ("w2", "w3"), id="all-at-once"),
        pytest.param(
            "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
            "all-at-once",
            ("w2", "w3"),
            id="kueue-name",
        ),
        pytest.param("incremental", "incremental", ("w2", "w3"), id="incremental"),
    ],
)
def test_the_dispatch_mode_hint_picks_the_built_in_algorithm(
    mode: str | None, algorithm: str, nominated: tuple[str, ...]
) -> None:
    """The workload's dispatch mode replaces the configured pipeline for it alone; its other
    hints still hold (w1 is excluded by the selector, w2's taint tolerated)."""
    annotations = {CLUSTER_SELECTOR.key: f"{REGION}=eu", CLUSTER_TOLERATIONS.key: TOLERATE}
    if mode is not None:
        annotations[DISPATCH_MODE.key] = mode
    request = make_request(cpu=1, annotations=annotations)
    decision = decide(request, fleet(w2_taints=(DEDICATED,)), names=DEFAULT)
    assert decision.algorithm == algorithm
    assert decision.nominate == nominated
    assert decision.verdict("w1").dropped_by == "hints"
