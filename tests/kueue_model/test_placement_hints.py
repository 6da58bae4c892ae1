"""Parsing and matching of placement hints (issue 18 item 3; ``dispatcher.kueue.hints``): what
each annotation accepts, the error naming the annotation and field for what it refuses, and the
label-selector, affinity and toleration semantics (Kubernetes' own, applied to
MultiKueueCluster labels and taints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.kueue.hints import (
    CLUSTER_AFFINITY,
    CLUSTER_NAMES,
    CLUSTER_SELECTOR,
    CLUSTER_TAINTS,
    CLUSTER_TOLERATIONS,
    DISPATCH_MODE,
    HINTS,
    NO_HINTS,
    PlacementHints,
    Taint,
    Toleration,
    parse_placement_hints,
    parse_selector,
    parse_taints,
)
from dispatcher.kueue.objects import InvalidField

EU_H100 = {"kueue.x-k8s.io/region": "eu", "kueue.x-k8s.io/accelerator": "h100"}
US_A100 = {"kueue.x-k8s.io/region": "us", "kueue.x-k8s.io/accelerator": "a100", "spot": "yes"}


def hints(**annotations: str) -> PlacementHints:
    keys = {
        "names": CLUSTER_NAMES.key,
        "selector": CLUSTER_SELECTOR.key,
        "affinity": CLUSTER_AFFINITY.key,
        "tolerations": CLUSTER_TOLERATIONS.key,
        "mode": DISPATCH_MODE.key,
    }
    return parse_placement_hints(
        [("metadata.annotations", {keys[k]: v for k, v in annotations.items()})]
    )


@pytest.mark.parametrize(
    ("selector", "eu_h100", "us_a100"),
    [
        pytest.param("kueue.x-k8s.io/region=eu", True, False, id="equals"),
        pytest.param("kueue.x-k8s.io/region==eu", True, False, id="double-equals"),
        pytest.param("kueue.x-k8s.io/region!=eu", False, True, id="not-equals"),
        pytest.param("kueue.x-k8s.io/accelerator in (h100, a100)", True, True, id="in"),
        pytest.param("kueue.x-k8s.io/accelerator notin (h100)", False, True, id="notin"),
        pytest.param("spot", False, True, id="exists"),
        pytest.param("!spot", True, False, id="does-not-exist"),
        pytest.param("kueue.x-k8s.io/region=eu,!spot", True, False, id="and"),
        pytest.param("kueue.x-k8s.io/region in (eu,us),spot", False, True, id="set-and-exists"),
        pytest.param('{"matchLabels": {"kueue.x-k8s.io/region": "us"}}', False, True, id="json"),
        pytest.param(
            '{"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}',
            True,
            False,
            id="json-expression",
        ),
        pytest.param("{}", True, True, id="json-empty-matches-all"),
    ],
)
def test_selectors_match_as_kubernetes_label_selectors(
    selector: str, eu_h100: bool, us_a100: bool
) -> None:
    parsed = parse_selector(selector, "f")
    assert (parsed.matches(EU_H100), parsed.matches(US_A100)) == (eu_h100, us_a100)


def test_a_selector_prints_in_kubectl_syntax() -> None:
    parsed = parse_selector("a=1,b!=2,c in (x,y),d,!e,f notin (z)", "f")
    assert str(parsed) == "a=1,b!=2,c in (x,y),d,!e,f!=z"


@pytest.mark.parametrize(
    ("annotations", "field", "problem"),
    [
        pytest.param(
            {"selector": "region=eu,,zone=a"},
            f"metadata.annotations[{CLUSTER_SELECTOR.key}]",
            "empty requirement in selector 'region=eu,,zone=a'",
            id="selector-empty-part",
        ),
        pytest.param(
            {"selector": "region=e u"},
            f"metadata.annotations[{CLUSTER_SELECTOR.key}]",
            "'region=e u' is not a valid label key",
            id="selector-space",
        ),
        pytest.param(
            {"selector": '{"matchLabels": '},
            f"metadata.annotations[{CLUSTER_SELECTOR.key}]",
            "not valid JSON",
            id="selector-bad-json",
        ),
        pytest.param(
            {"selector": '{"matchExpressions": [{"key": "a", "operator": "Has"}]}'},
            f"metadata.annotations[{CLUSTER_SELECTOR.key}].matchExpressions[0].operator",
            "'Has': one of In, NotIn, Exists, DoesNotExist",
            id="selector-operator",
        ),
        pytest.param(
            {"selector": '{"matchExpressions": [{"key": "a", "operator": "In"}]}'},
            f"metadata.annotations[{CLUSTER_SELECTOR.key}].matchExpressions[0].values",
            "In needs at least one value",
            id="selector-in-without-values",
        ),
        pytest.param(
            {"names": "a,,b"},
            f"metadata.annotations[{CLUSTER_NAMES.key}]",
            "'a,,b': an empty name in the comma list",
            id="names-empty",
        ),
        pytest.param(
            {"affinity": '{"required": [], "prefered": []}'},
            f"metadata.annotations[{CLUSTER_AFFINITY.key}]",
            "unknown field 'prefered'",
            id="affinity-typo",
        ),
        pytest.param(
            {"affinity": '{"preferred": [{"weight": 0, "preference": "a=b"}]}'},
            f"metadata.annotations[{CLUSTER_AFFINITY.key}].preferred[0].weight",
            "0: an integer from 1 to 100",
            id="affinity-weight",
        ),
        pytest.param(
            {"affinity": '{"required": ["a="]}'},
            None,
            None,
            id="affinity-empty-value-is-valid",
        ),
        pytest.param(
            {"mode": "first-come"},
            f"metadata.annotations[{DISPATCH_MODE.key}]",
            "'first-come': one of all-at-once, incremental, "
            "kueue.x-k8s.io/multikueue-dispatcher-all-at-once, "
            "kueue.x-k8s.io/multikueue-dispatcher-incremental",
            id="dispatch-mode-unknown",
        ),
        pytest.param(
            {"tolerations": '{"key": "a"}'},
            f"metadata.annotations[{CLUSTER_TOLERATIONS.key}]",
            "a JSON list of tolerations",
            id="tolerations-not-a-list",
        ),
        pytest.param(
            {"tolerations": '[{"key": "a", "effect": "NoRun"}]'},
            f"metadata.annotations[{CLUSTER_TOLERATIONS.key}][0].effect",
            "'NoRun': one of NoSchedule, PreferNoSchedule, NoExecute",
            id="tolerations-effect",
        ),
        pytest.param(
            {"tolerations": '[{"operator": "Equal", "value": "x"}]'},
            f"metadata.annotations[{CLUSTER_TOLERATIONS.key}][0].key",
            "an empty key needs operator Exists",
            id="tolerations-empty-key",
        ),
    ],
)
def test_a_bad_hint_names_its_annotation_and_field(
    annotations: dict[str, str], field: str | None, problem: str | None
) -> None:
    if field is None:
        hints(**annotations)
        return
    with pytest.raises(InvalidField) as caught:
        hints(**annotations)
    assert caught.value.field == field
    assert problem is not None
    assert caught.value.problem.startswith(problem)


def test_a_dispatch_mode_is_read_by_either_name() -> None:
    assert hints(mode="all-at-once").dispatch_mode == "all-at-once"
    assert hints(mode="kueue.x-k8s.io/multikueue-dispatcher-incremental").dispatch_mode == (
        "incremental"
    )
    assert hints(mode="incremental")  # a hint on its own


def test_no_hint_annotation_gives_the_shared_empty_hints() -> None:
    assert parse_placement_hints([("metadata.annotations", {"other": "x"})]) is NO_HINTS
    assert not NO_HINTS


def test_a_hint_on_the_workload_and_a_pod_template_must_agree() -> None:
    workload = ("metadata.annotations", {CLUSTER_NAMES.key: "w1"})
    same = ("spec.podSets[0].template.metadata.annotations", {CLUSTER_NAMES.key: "w1"})
    other = ("spec.podSets[1].template.metadata.annotations", {CLUSTER_NAMES.key: "w2"})
    assert parse_placement_hints([workload, same]).cluster_names == frozenset({"w1"})
    with pytest.raises(InvalidField) as caught:
        parse_placement_hints([workload, same, other])
    assert caught.value.field == (
        f"spec.podSets[1].template.metadata.annotations[{CLUSTER_NAMES.key}]"
    )
    assert caught.value.problem == (
        f"differs from metadata.annotations[{CLUSTER_NAMES.key}]: give the hint once"
    )


@pytest.mark.parametrize(
    ("annotations", "cluster", "labels", "excluded"),
    [
        pytest.param({"names": "w1, w3"}, "w1", {}, None, id="names-in"),
        pytest.param(
            {"names": "w1,w3"}, "w2", {}, "not in hint cluster-names (w1,w3)", id="names-out"
        ),
        pytest.param({"selector": "kueue.x-k8s.io/region=eu"}, "w", EU_H100, None, id="sel-in"),
        pytest.param(
            {"selector": "kueue.x-k8s.io/region=eu"},
            "w",
            US_A100,
            "labels do not match hint cluster-selector (kueue.x-k8s.io/region=eu)",
            id="sel-out",
        ),
        pytest.param(
            {"affinity": '{"required": ["spot", "kueue.x-k8s.io/region=eu"]}'},
            "w",
            EU_H100,
            None,
            id="required-terms-ored",
        ),
        pytest.param(
            {"affinity": '{"required": ["spot", "kueue.x-k8s.io/region=us"]}'},
            "w",
            EU_H100,
            "labels match no required term of hint cluster-affinity: (spot) or "
            "(kueue.x-k8s.io/region=us)",
            id="required-out",
        ),
        pytest.param(
            {"affinity": '{"preferred": [{"weight": 5, "preference": "spot"}]}'},
            "w",
            EU_H100,
            None,
            id="preferred-never-excludes",
        ),
    ],
)
def test_required_hints_exclude_and_name_the_hint(
    annotations: dict[str, str], cluster: str, labels: dict[str, str], excluded: str | None
) -> None:
    parsed = hints(**annotations)
    assert parsed.excluded_by(cluster, labels) == excluded


def test_preferred_terms_sum_their_weights() -> None:
    parsed = hints(
        affinity='{"preferred": [{"weight": 30, "preference": "kueue.x-k8s.io/region=eu"},'
        ' {"weight": 70, "preference": {"matchLabels": {"kueue.x-k8s.io/accelerator": "h100"}}}]}'
    )
    weight, matched = parsed.preference(EU_H100)
    assert weight == 100
    assert len(matched) == 2
    weight, matched = parsed.preference(US_A100)
    assert weight == 0
    assert matched == ()


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerates"),
    [
        pytest.param(Toleration("gpu", "Equal", "ml"), Taint("gpu", "ml"), True, id="equal"),
        pytest.param(Toleration("gpu", "Equal", "ml"), Taint("gpu", "db"), False, id="value"),
        pytest.param(Toleration("gpu", "Exists"), Taint("gpu", "db"), True, id="exists"),
        pytest.param(Toleration("", "Exists"), Taint("any", "x"), True, id="exists-all"),
        pytest.param(
            Toleration("gpu", "Exists", effect="NoSchedule"),
            Taint("gpu", "", "NoExecute"),
            False,
            id="effect-differs",
        ),
        pytest.param(
            Toleration("gpu", "Exists"), Taint("gpu", "", "NoExecute"), True, id="any-effect"
        ),
        pytest.param(Toleration("cpu", "Exists"), Taint("gpu"), False, id="other-key"),
    ],
)
def test_tolerations_follow_pod_semantics(
    toleration: Toleration, taint: Taint, tolerates: bool
) -> None:
    assert toleration.tolerates(taint) is tolerates


@pytest.mark.parametrize(
    ("text", "result"),
    [
        pytest.param(
            '[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]',
            (Taint("dedicated", "ml", "NoSchedule"),),
            id="one",
        ),
        pytest.param("[]", (), id="none"),
        pytest.param('[{"key": "a"}]', "[0].effect: None: one of", id="no-effect"),
        pytest.param('[{"key": "a", "effect": "NoSchedule", "x": 1}]', "[0]: unknown", id="field"),
        pytest.param('{"key": "a"}', ": a JSON list of taints", id="not-a-list"),
    ],
)
def test_cluster_taints_parse_or_name_the_field(text: str, result: object) -> None:
    annotations = {CLUSTER_TAINTS.key: text}
    if isinstance(result, tuple):
        assert parse_taints(annotations) == result
        return
    with pytest.raises(InvalidField) as caught:
        parse_taints(annotations)
    assert str(caught.value).startswith(f"metadata.annotations[{CLUSTER_TAINTS.key}]{result}")


def test_the_hint_table_names_each_key_once() -> None:
    keys = [h.key for h in HINTS]
    assert len(keys) == len(set(keys)) == 6
    assert {h.on for h in HINTS} == {"Workload", "MultiKueueCluster"}


def test_the_plugin_guide_lists_every_hint_of_the_table() -> None:
    """docs/plugins.md ("Placement hints") has a row per hint, naming its key and object."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()
    rows = [line for line in guide.splitlines() if line.startswith("| ")]
    for hint in HINTS:
        assert any(f"`{hint.key}` | {hint.on} |" in row for row in rows), hint.key
