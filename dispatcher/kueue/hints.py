"""Placement hints: where a workload asks to run, and where an admin fences a cluster off.

A user writes hints on the Job; an admin writes labels and taints on the MultiKueueCluster.
Every name the dispatcher reads lives in one table, :data:`HINTS` (``docs/plugins.md``, section
"Placement hints", renders it): when upstream settles a name, that row changes and nothing else.

**Where the names come from.** Kueue's composable-dispatcher proposal (KEP-8692, kueue PR
#10784, a work-in-progress draft) plans cluster selectors, required and preferred cluster
affinity and tolerations on workloads, and taints and well-known labels on MultiKueueClusters.
The draft publishes no annotation keys yet, so the workload hints use our own prefix
``multikueue-dispatcher.io/``. The one name upstream has proposed,
``kueue.x-k8s.io/multikueue-cluster-names`` (kueue PR #14539, alpha feature gate
``MultiKueueClusterNames``; Kueue v0.19 and v0.20 do not read it), is honoured as proposed: a
comma list that narrows the MultiKueueConfig's clusters and never widens it. The well-known
cluster labels of the proposal (:data:`WELL_KNOWN_CLUSTER_LABELS`) are ordinary labels of the
MultiKueueCluster here: selectors and affinity terms match them like any other label.

**Where a Job's hints reach the Workload** (contract C89). Kueue copies a Job's *pod
template* into the Workload's ``spec.podSets[].template``, annotations included; the Job's own
annotations do not reach the Workload (Kueue v0.19.2's ``NewWorkload`` keeps only
provisioning-request annotations and, with the ``CustomMetricLabels`` gate, the ones configured
for metrics), and its labels only those listed in ``integrations.labelKeysToCopy``. So hints are
read from the Workload's own annotations (a Workload written directly, or a Kueue configured to
copy them) and from each pod template's annotations (``spec.template.metadata.annotations`` of a
Job). Label values cannot hold the lists and selectors hints are made of, so hints are
annotations only.

**Taints.** A MultiKueueCluster has no ``spec.taints`` in Kueue v0.19 or v0.20 (the structural
schema would prune it), so a cluster's taints are a JSON annotation on the MultiKueueCluster.

Everything here is pure: parse functions raise :class:`~dispatcher.kueue.objects.InvalidField`
naming the annotation, and the match functions are total.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dispatcher.kueue.objects import InvalidField, Taint, Toleration
from dispatcher.kueue.objects import NodeSelectorRequirement as Requirement

__all__ = [
    "CLUSTER_AFFINITY",
    "CLUSTER_NAMES",
    "CLUSTER_SELECTOR",
    "CLUSTER_TAINTS",
    "CLUSTER_TOLERATIONS",
    "DISPATCH_MODE",
    "DISPATCH_MODES",
    "HINTS",
    "NO_HINTS",
    "WELL_KNOWN_CLUSTER_LABELS",
    "HintName",
    "PlacementHints",
    "PreferredTerm",
    "Selector",
    "Taint",
    "Toleration",
    "parse_placement_hints",
    "parse_selector",
    "parse_taint_list",
    "parse_taints",
    "tolerated",
]


@dataclass(frozen=True, slots=True)
class HintName:
    """One row of the hint table: a hint, the key it is read from, and where that key is from."""

    hint: str
    """Short name, used in verdicts and Events."""
    key: str
    """The annotation key."""
    on: Literal["Workload", "MultiKueueCluster"]
    """The object that carries it (a Workload's hint may sit on any of its pod templates)."""
    syntax: str
    origin: str
    """Where the name comes from (upstream proposal, or ours until upstream settles one)."""


CLUSTER_NAMES = HintName(
    "cluster-names",
    "kueue.x-k8s.io/multikueue-cluster-names",
    "Workload",
    "comma-separated MultiKueueCluster names",
    "proposed upstream (kueue PR #14539, gate MultiKueueClusterNames); not read by Kueue "
    "v0.19 or v0.20",
)
CLUSTER_SELECTOR = HintName(
    "cluster-selector",
    "multikueue-dispatcher.io/cluster-selector",
    "Workload",
    "a label selector over the MultiKueueCluster's labels: `kubectl` syntax "
    "(`region=eu,tier!=spot,accelerator in (h100,a100),!legacy`) or a JSON LabelSelector "
    '(`{"matchLabels": {...}, "matchExpressions": [...]}`)',
    "KEP-8692 plans a cluster selector; no key published yet, ours until it is",
)
CLUSTER_AFFINITY = HintName(
    "cluster-affinity",
    "multikueue-dispatcher.io/cluster-affinity",
    "Workload",
    'JSON `{"required": [selector, ...], "preferred": [{"weight": 1-100, "preference": '
    "selector}, ...]}`; a selector is either form above; the required terms are ORed, as "
    "a node affinity's nodeSelectorTerms",
    "KEP-8692 plans required and preferred cluster affinity; no key published yet, ours "
    "until it is",
)
CLUSTER_TOLERATIONS = HintName(
    "cluster-tolerations",
    "multikueue-dispatcher.io/cluster-tolerations",
    "Workload",
    'JSON list of tolerations as a Pod\'s: `[{"key": ..., "operator": "Equal" | "Exists", '
    '"value": ..., "effect": "NoSchedule" | "PreferNoSchedule" | "NoExecute"}]`',
    "KEP-8692 plans tolerations of cluster taints; no key published yet, ours until it is",
)
DISPATCH_MODE = HintName(
    "dispatch-mode",
    "multikueue-dispatcher.io/dispatch-mode",
    "Workload",
    "`all-at-once` or `incremental` (Kueue's dispatcher names "
    "`kueue.x-k8s.io/multikueue-dispatcher-all-at-once` and `…-incremental` mean the same): "
    "this workload is dispatched by that built-in algorithm instead of the configured pipeline, "
    "with the same plugins and its other hints",
    "KEP-8692 plans a per-workload dispatch mode; no key published yet, ours until it is",
)
CLUSTER_TAINTS = HintName(
    "cluster-taints",
    "multikueue-dispatcher.io/cluster-taints",
    "MultiKueueCluster",
    'JSON list of taints: `[{"key": ..., "value": ..., "effect": "NoSchedule" | '
    '"PreferNoSchedule" | "NoExecute"}]`',
    "KEP-8692 plans taints on MultiKueueClusters; the CRD has no field for them in Kueue "
    "v0.19 or v0.20, so an annotation of ours",
)

HINTS: tuple[HintName, ...] = (
    CLUSTER_NAMES,
    CLUSTER_SELECTOR,
    CLUSTER_AFFINITY,
    CLUSTER_TOLERATIONS,
    DISPATCH_MODE,
    CLUSTER_TAINTS,
)
"""Every hint the dispatcher reads: the one table to change when upstream names them."""

DISPATCH_MODES: Mapping[str, str] = {
    "all-at-once": "all-at-once",
    "incremental": "incremental",
    "kueue.x-k8s.io/multikueue-dispatcher-all-at-once": "all-at-once",
    "kueue.x-k8s.io/multikueue-dispatcher-incremental": "incremental",
}
"""The values of the dispatch-mode hint, each to the built-in algorithm that dispatches it."""

WELL_KNOWN_CLUSTER_LABELS: tuple[str, ...] = (
    "kueue.x-k8s.io/region",
    "kueue.x-k8s.io/zone",
    "kueue.x-k8s.io/accelerator",
    "kueue.x-k8s.io/instance-family",
)
"""MultiKueueCluster labels KEP-8692 proposes as well known; selectors match them as any label."""

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
"""Taint effects. ``NoSchedule`` and ``NoExecute`` exclude a cluster that is not tolerated (the
dispatcher never evicts, so the two act alike); ``PreferNoSchedule`` ranks it lower."""


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector: every requirement must hold (an empty one matches everything). Its
    requirements are node-selector requirements limited to ``In``, ``NotIn``, ``Exists`` and
    ``DoesNotExist``, which match labels as a label selector's do."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` meet every requirement."""
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements) or "(everything)"


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    """A preferred cluster-affinity term: clusters it matches rank higher by ``weight``."""

    weight: int
    preference: Selector


@dataclass(frozen=True, slots=True)
class PlacementHints:
    """A workload's placement hints, parsed (the empty default means none)."""

    cluster_names: frozenset[str] | None = None
    """Only these clusters (``None``: no such hint)."""
    selector: Selector | None = None
    required: tuple[Selector, ...] = ()
    """Required affinity terms, ORed (empty: no required affinity)."""
    preferred: tuple[PreferredTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    dispatch_mode: str | None = None
    """The built-in algorithm the workload asks to be dispatched by (a value of
    :data:`DISPATCH_MODES`), or ``None`` for the configured pipeline."""

    def __bool__(self) -> bool:
        return bool(
            self.cluster_names is not None
            or self.selector is not None
            or self.required
            or self.preferred
            or self.tolerations
            or self.dispatch_mode is not None
        )

    def excluded_by(self, cluster: str, labels: Mapping[str, str]) -> str | None:
        """Why a required hint rules ``cluster`` (with MultiKueueCluster ``labels``) out, naming
        the hint; ``None`` when every required hint admits it."""
        if self.cluster_names is not None and cluster not in self.cluster_names:
            names = ",".join(sorted(self.cluster_names)) or "(none)"
            return f"not in hint {CLUSTER_NAMES.hint} ({names})"
        if self.selector is not None and not self.selector.matches(labels):
            return f"labels do not match hint {CLUSTER_SELECTOR.hint} ({self.selector})"
        if self.required and not any(term.matches(labels) for term in self.required):
            terms = " or ".join(f"({term})" for term in self.required)
            return f"labels match no required term of hint {CLUSTER_AFFINITY.hint}: {terms}"
        return None

    def preference(self, labels: Mapping[str, str]) -> tuple[int, tuple[PreferredTerm, ...]]:
        """The summed weight of the preferred terms ``labels`` match, and those terms."""
        matched = tuple(term for term in self.preferred if term.preference.matches(labels))
        return sum(term.weight for term in matched), matched


NO_HINTS = PlacementHints()


def tolerated(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint``."""
    return any(t.tolerates(taint) for t in tolerations)


# --- parsing ----------------------------------------------------------------------------------

# A label key: an optional DNS-subdomain prefix and a name of up to 63 characters.
_KEY = r"(?:[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
_KEY_RE = re.compile(rf"^{_KEY}$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")
_SET_RE = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ_RE = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


def _key(key: str, field: str) -> str:
    if not _KEY_RE.match(key):
        raise InvalidField(field, f"{key!r} is not a valid label key")
    return key


def _value(value: str, field: str) -> str:
    if not _VALUE_RE.match(value):
        raise InvalidField(field, f"{value!r} is not a valid label value")
    return value


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    parts: list[str] = []
    depth = start = 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _parse_selector_string(text: str, field: str) -> Selector:
    requirements = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            raise InvalidField(field, f"empty requirement in selector {text!r}")
        if match := _SET_RE.match(part):
            values = tuple(v.strip() for v in match["values"].split(","))
            if not all(values):
                raise InvalidField(field, f"empty value in {part!r}")
            requirements.append(
                Requirement(
                    _key(match["key"], field),
                    "In" if match["op"] == "in" else "NotIn",
                    tuple(_value(v, field) for v in values),
                )
            )
        elif match := _EQ_RE.match(part):
            op: Operator = "NotIn" if match["op"] == "!=" else "In"
            value = _value(match["value"], field)
            requirements.append(Requirement(_key(match["key"], field), op, (value,)))
        elif part.startswith("!"):
            requirements.append(Requirement(_key(part[1:].strip(), field), "DoesNotExist"))
        else:
            requirements.append(Requirement(_key(part, field), "Exists"))
    return Selector(tuple(requirements))


def _parse_label_selector_object(raw: object, field: str) -> Selector:
    if not isinstance(raw, Mapping):
        raise InvalidField(field, "a selector is a string or a JSON object")
    unknown = sorted(set(raw) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise InvalidField(field, f"unknown field {unknown[0]!r} of a LabelSelector")
    requirements = []
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise InvalidField(f"{field}.matchLabels", "not an object")
    for key, value in sorted(labels.items()):
        if not isinstance(value, str):
            raise InvalidField(f"{field}.matchLabels.{key}", "not a string")
        requirements.append(
            Requirement(_key(key, f"{field}.matchLabels"), "In", (_value(value, field),))
        )
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise InvalidField(f"{field}.matchExpressions", "not a list")
    for i, item in enumerate(expressions):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidField(where, "not an object")
        operator = item.get("operator")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise InvalidField(
                f"{where}.operator", f"{operator!r}: one of In, NotIn, Exists, DoesNotExist"
            )
        values = item.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidField(f"{where}.values", "not a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise InvalidField(f"{where}.values", f"{operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise InvalidField(f"{where}.values", f"{operator} takes no values")
        key = _key(str(item.get("key", "")), f"{where}.key")
        requirements.append(
            Requirement(key, operator, tuple(_value(v, f"{where}.values") for v in values))
        )
    return Selector(tuple(requirements))


def parse_selector(raw: object, field: str) -> Selector:
    """A selector from a ``kubectl``-syntax string (a JSON object in a string is read as JSON)
    or a decoded LabelSelector object; ``field`` names it in errors."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("{"):
            return _parse_label_selector_object(_json(text, field), field)
        if not text:
            raise InvalidField(field, "empty selector")
        return _parse_selector_string(text, field)
    return _parse_label_selector_object(raw, field)


def _json(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidField(field, f"not valid JSON: {error}") from None


def _parse_affinity(
    text: str, field: str
) -> tuple[tuple[Selector, ...], tuple[PreferredTerm, ...]]:
    raw = _json(text, field)
    if not isinstance(raw, Mapping):
        raise InvalidField(field, 'a JSON object with "required" and/or "preferred"')
    unknown = sorted(set(raw) - {"required", "preferred"})
    if unknown:
        raise InvalidField(field, f'unknown field {unknown[0]!r} (use "required", "preferred")')
    required_raw = raw.get("required") or []
    if not isinstance(required_raw, list):
        raise InvalidField(f"{field}.required", "not a list")
    required = tuple(
        parse_selector(term, f"{field}.required[{i}]") for i, term in enumerate(required_raw)
    )
    preferred_raw = raw.get("preferred") or []
    if not isinstance(preferred_raw, list):
        raise InvalidField(f"{field}.preferred", "not a list")
    preferred = []
    for i, item in enumerate(preferred_raw):
        where = f"{field}.preferred[{i}]"
        if not isinstance(item, Mapping) or "preference" not in item:
            raise InvalidField(where, 'an object with "weight" and "preference"')
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise InvalidField(f"{where}.weight", f"{weight!r}: an integer from 1 to 100")
        preferred.append(PreferredTerm(weight, parse_selector(item["preference"], where)))
    return required, tuple(preferred)


def _objects(
    raw: object, where: str, kind: str, fields: frozenset[str]
) -> list[tuple[str, Mapping[str, Any]]]:
    """The items of a decoded JSON list of ``kind`` objects with their paths (``where[i]``),
    each checked to be an object with no field outside ``fields``."""
    if not isinstance(raw, list):
        raise InvalidField(where, f"a JSON list of {kind}s")
    out = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidField(at, "not an object")
        unknown = sorted(set(item) - fields)
        if unknown:
            raise InvalidField(at, f"unknown field {unknown[0]!r} of a {kind}")
        out.append((at, item))
    return out


_TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_TAINT_FIELDS = frozenset({"key", "value", "effect"})


def _parse_tolerations(text: str, field: str) -> tuple[Toleration, ...]:
    out = []
    for where, item in _objects(_json(text, field), field, "toleration", _TOLERATION_FIELDS):
        operator = item.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            raise InvalidField(f"{where}.operator", f"{operator!r}: Equal or Exists")
        key, value, effect = (str(item.get(name, "")) for name in ("key", "value", "effect"))
        if key:
            _key(key, f"{where}.key")
        elif operator != "Exists":
            raise InvalidField(f"{where}.key", "an empty key needs operator Exists")
        if operator == "Exists" and value:
            raise InvalidField(f"{where}.value", "operator Exists takes no value")
        if effect and effect not in EFFECTS:
            raise InvalidField(f"{where}.effect", f"{effect!r}: one of {', '.join(EFFECTS)}")
        out.append(Toleration(key, operator, value, effect))
    return tuple(out)


def parse_taints(
    annotations: Mapping[str, str], field: str = "metadata.annotations"
) -> tuple[Taint, ...]:
    """A MultiKueueCluster's taints from its annotations (none when the annotation is absent);
    :class:`InvalidField` names the annotation."""
    text = annotations.get(CLUSTER_TAINTS.key)
    if text is None:
        return ()
    where = f"{field}[{CLUSTER_TAINTS.key}]"
    return parse_taint_list(_json(text, where), where)


def parse_taint_list(raw: object, where: str) -> tuple[Taint, ...]:
    """Taints from a decoded list of ``{key, value, effect}``; ``where`` names it in errors."""
    out = []
    for at, item in _objects(raw, where, "taint", _TAINT_FIELDS):
        key = _key(str(item.get("key", "")), f"{at}.key")
        value = str(item.get("value", ""))
        if value:
            _value(value, f"{at}.value")
        effect = item.get("effect")
        if effect not in EFFECTS:
            raise InvalidField(f"{at}.effect", f"{effect!r}: one of {', '.join(EFFECTS)}")
        out.append(Taint(key, value, str(effect)))
    return tuple(out)


def _cluster_names(text: str, field: str) -> frozenset[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise InvalidField(field, f"{text!r}: an empty name in the comma list")
    return frozenset(names)


def parse_placement_hints(sources: Iterable[tuple[str, Mapping[str, str]]]) -> PlacementHints:
    """A workload's hints from its annotation maps, each given with the path of its field
    (``metadata.annotations``, ``spec.podSets[0].template.metadata.annotations``).

    A hint may sit on several of them (a Job's pod template and a Workload written directly);
    it must then have the same value on each, else :class:`InvalidField` names the two places.
    A hint that cannot be read raises :class:`InvalidField` naming its annotation.
    """
    found: dict[str, tuple[str, str]] = {}
    workload_keys = {h.key for h in HINTS if h.on == "Workload"}
    for field, notes in sources:
        for key in workload_keys & notes.keys():
            value = notes[key]
            where = f"{field}[{key}]"
            first = found.get(key)
            if first is None:
                found[key] = (value, where)
            elif first[0] != value:
                raise InvalidField(where, f"differs from {first[1]}: give the hint once")
    if not found:
        return NO_HINTS

    def get(hint: HintName) -> tuple[str, str] | None:
        return found.get(hint.key)

    names = selector = None
    required: tuple[Selector, ...] = ()
    preferred: tuple[PreferredTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    if item := get(CLUSTER_NAMES):
        names = _cluster_names(*item)
    if item := get(CLUSTER_SELECTOR):
        selector = parse_selector(*item)
    if item := get(CLUSTER_AFFINITY):
        required, preferred = _parse_affinity(*item)
    if item := get(CLUSTER_TOLERATIONS):
        tolerations = _parse_tolerations(*item)
    mode = None
    if item := get(DISPATCH_MODE):
        value, where = item
        mode = DISPATCH_MODES.get(value.strip())
        if mode is None:
            raise InvalidField(where, f"{value!r}: one of {', '.join(DISPATCH_MODES)}")
    return PlacementHints(names, selector, required, preferred, tolerations, mode)
