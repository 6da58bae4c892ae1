"""Label and field selectors (docs/fake-apiserver.md F13, F19, F59, F60)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher_sandbox.fake_apiserver.errors import ApiError

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_IN_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this term (``!=`` and ``notin`` match absent keys)."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" match objects without the key.
        return not present or value not in self.values


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return terms


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h``; 400 BadRequest on a syntax error."""
    if text is None or not text.strip():
        return []
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        if m := _IN_RE.match(term):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            requirements.append(Requirement(m.group(1), m.group(2), values))
        elif m := _EQ_RE.match(term):
            op = "=" if m.group(2) in ("=", "==") else "!="
            requirements.append(Requirement(m.group(1), op, frozenset({m.group(3)})))
        elif m := _SET_RE.match(term):
            requirements.append(
                Requirement(m.group(2), "!exists" if m.group(1) else "exists", frozenset())
            )
        else:
            raise ApiError(400, f'unable to parse requirement: invalid label selector: "{text}"')
    return requirements


def labels_match(requirements: list[Requirement], obj: Mapping[str, Any]) -> bool:
    """Whether an object's ``metadata.labels`` satisfy every requirement."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


FieldGetter = Callable[[Mapping[str, Any]], str]


def _path_getter(path: str) -> FieldGetter:
    parts = path.split(".")

    def get(obj: Mapping[str, Any]) -> str:
        node: Any = obj
        for part in parts:
            if not isinstance(node, Mapping):
                return ""
            node = node.get(part)
        if node is None:
            return ""
        if isinstance(node, bool):
            return "true" if node else "false"
        return str(node)

    return get


def field_getters(paths: list[str]) -> dict[str, FieldGetter]:
    """Getters for the field-selector paths one resource supports."""
    return {path: _path_getter(path) for path in paths}


@dataclass(frozen=True)
class FieldTerm:
    """One ``path=value`` or ``path!=value`` term of a field selector."""

    path: str
    negate: bool
    value: str
    getter: FieldGetter

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's field equals (or, negated, differs from) the value."""
        return (self.getter(obj) == self.value) != self.negate


def parse_field_selector(
    text: str | None, supported: Mapping[str, FieldGetter], resource: str
) -> list[FieldTerm]:
    """Parse a field selector; 400 for a syntax error or a field this resource cannot select on."""
    if text is None or not text.strip():
        return []
    terms: list[FieldTerm] = []
    for raw in text.split(","):
        term = raw.strip()
        for op in ("!=", "==", "="):
            if op in term:
                path, value = term.split(op, 1)
                negate = op == "!="
                break
        else:
            raise ApiError(400, f'invalid selector: "{text}"; can\'t understand "{term}"')
        path = path.strip()
        if path not in supported:
            raise ApiError(
                400,
                f'field label not supported: {path} (field selector "{text}" on {resource})',
            )
        terms.append(FieldTerm(path, negate, value.strip(), supported[path]))
    return terms


def fields_match(terms: list[FieldTerm], obj: Mapping[str, Any]) -> bool:
    """Whether the object satisfies every field-selector term."""
    return all(t.matches(obj) for t in terms)
