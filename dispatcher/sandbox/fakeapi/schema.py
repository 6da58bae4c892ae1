"""Structural schemas of custom resources: pruning, defaulting, validation and CEL rules.

This module implements spec F42–F45 as a pure, synchronous library. :func:`compile_schema` turns one
CRD version's ``openAPIV3Schema`` into a :class:`CompiledSchema` (cached, so clusters that share a
CRD share the compiled schema). :meth:`CompiledSchema.admit` takes the object a write would store
and returns it pruned and defaulted together with the list of validation errors, in the order the
real API server applies these steps:

1. **Pruning** (F43): fields that the schema does not declare are dropped, except below
   ``x-kubernetes-preserve-unknown-fields: true``. ``apiVersion``, ``kind`` and ``metadata`` of the
   root (and of ``x-kubernetes-embedded-resource`` nodes) are always kept; ``metadata`` is kept as
   is (ObjectMeta is the server's business).
2. **Nulls and defaults** (F43): as apiextensions-apiserver does, a ``null`` for a field that is
   not ``nullable`` is dropped when that field has no ``default``, and replaced by the default when
   it has one. Absent fields with a ``default`` get a copy of it; defaults are applied top-down, so
   the inside of a defaulted object is defaulted too. ``null`` items of lists are kept (and then
   fail validation), unless the item schema has a default.
3. **Structural validation** (F42): type, ``required``, ``enum``, lengths, sizes, ``pattern``
   (Python ``re``, searched like Go's ``MatchString``), bounds, ``multipleOf``, ``nullable``,
   ``x-kubernetes-int-or-string``, ``additionalProperties``, ``min/maxProperties``, ``uniqueItems``,
   ``format: date-time``, ``allOf``/``anyOf``/``oneOf``/``not`` and uniqueness of list-map keys and
   set items.
4. **CEL rules** (F44, F45): every ``x-kubernetes-validations`` rule with ``self`` bound to the
   value at its node. Transition rules (those mentioning ``oldSelf``) run only where the old object
   has a value at the same place (object fields by name, map entries by key, items of
   ``x-kubernetes-list-type: map`` lists by key; never items of atomic or set lists), unless they
   say ``optionalOldSelf: true``. Nodes whose value has the wrong type are skipped (the type
   error is already reported).

Error texts follow Kubernetes' ``field.Error`` bodies (``Required value``, ``Unsupported value: "x":
supported values: "a", "b"``, ``Invalid value: "object": <rule message>`` ...). A rule at the
schema root reports the field ``<nil>``, as the real server does.

Approximations: list equality in CEL is order-sensitive for every list type (Kubernetes compares
``set`` and ``map`` lists without regard to order); the ``int32``/``int64`` formats are not range
checked; CEL cost limits are not modelled; ``metadata`` of embedded resources is kept unpruned;
validation ratcheting (Kubernetes 1.30+ ignores errors in unchanged parts on UPDATE) is not
modelled; a CEL evaluation error reads ``<cel error> evaluating rule: <message or rule>``; map
entries are named ``m.key`` in structural errors and ``m[key]`` in CEL errors, as Kubernetes does.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celpy import celtypes

from dispatcher.sandbox.fakeapi.cel import (
    CELCompileError,
    CELEvalError,
    OptionalValue,
    Program,
    compile_cel,
    compile_expression,
    to_cel,
)
from dispatcher.sandbox.fakeapi.structure import StructureInfo

__all__ = [
    "CELCompileError",
    "CELEvalError",
    "CompiledSchema",
    "FieldError",
    "SchemaNode",
    "compile_expression",
    "compile_schema",
    "invalid_message",
]

_MISSING: Any = object()
_ROOT_FIELD = "<nil>"
_ROOT_KEEP = ("apiVersion", "kind", "metadata")

# Reasons, as Kubernetes names them in status causes.
REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
INVALID = "FieldValueInvalid"
DUPLICATE = "FieldValueDuplicate"
TYPE_INVALID = "FieldValueTypeInvalid"
FORBIDDEN = "FieldValueForbidden"

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


@dataclass(frozen=True)
class FieldError:
    """One validation error, shaped like an entry of ``Status.details.causes``."""

    reason: str
    field: str
    message: str


def invalid_message(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> str:
    """The message of a 422 Invalid status for ``errors`` (as ``errors.NewInvalid`` builds it).

    ``Workload.kueue.x-k8s.io "w1" is invalid: status: Invalid value: "object": ...``; several
    distinct errors are joined as ``[a, b]``.
    """
    qualified = f"{kind}.{group}" if group else kind
    texts: list[str] = []
    for err in errors:
        text = f"{err.field}: {err.message}" if err.field else err.message
        if text not in texts:
            texts.append(text)
    body = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return f'{qualified} "{name}" is invalid: {body}'


# --- value formatting, after k8s.io/apimachinery field.Error ------------------------------------


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _go_number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _go_repr(value: Any) -> str:
    """Go's ``%#v`` of an unstructured value (approximately)."""
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _go_number(value)
    if isinstance(value, str):
        return _go_quote(value)
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_go_quote(str(k))}:{_go_repr(v)}" for k, v in sorted(value.items()))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_repr(v) for v in value) + "}"
    return repr(value)


def _fmt_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _go_number(value)
    if isinstance(value, str):
        return _go_quote(value)
    return _go_repr(value)


def _invalid(path: str, value: Any, detail: str, reason: str = INVALID) -> FieldError:
    return FieldError(reason, path or _ROOT_FIELD, f"Invalid value: {_fmt_value(value)}: {detail}")


def _child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) for v in value]
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


_PATTERNS: dict[str, re.Pattern[str]] = {}


_INLINE_FLAGS = re.compile(r"\(\?([imsU]+)\)")


def _re2_to_python(text: str) -> str:
    """Rewrite RE2 inline flags that are not at the start (``^(?i)x``) as scoped groups.

    RE2 applies ``(?i)`` from where it stands to the end of the enclosing group; Python only
    accepts global flags at the very start, but has the scoped form ``(?i:...)``.
    """
    out: list[str] = []
    closers: list[int] = [0]  # per open group: how many scoped groups to close at its end
    i = 0
    in_class = False
    while i < len(text):
        char = text[i]
        if char == "\\":
            out.append(text[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            out.append(char)
            i += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            # A ']' right after '[' or '[^' is literal.
            if text[i + 1 : i + 2] == "^":
                out.append("^")
                i += 1
            if text[i + 1 : i + 2] == "]":
                out.append("]")
                i += 1
            i += 1
            continue
        match = _INLINE_FLAGS.match(text, i)
        if match is not None:
            if i == 0:
                out.append(match.group(0))
            else:
                out.append(f"(?{match.group(1).replace('U', '')}:")
                closers[-1] += 1
            i = match.end()
            continue
        if char == "(":
            closers.append(0)
        elif char == ")" and len(closers) > 1:
            out.append(")" * closers.pop())
        out.append(char)
        i += 1
    out.append(")" * closers[0])
    return "".join(out)


def _pattern(text: str) -> re.Pattern[str]:
    compiled = _PATTERNS.get(text)
    if compiled is None:
        compiled = re.compile(_re2_to_python(text))
        _PATTERNS[text] = compiled
    return compiled


# --- compiled schema nodes -----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Rule:
    rule: str
    program: Program
    message: str | None
    message_program: Program | None
    reason: str
    field_path: str | None
    optional_old_self: bool

    @property
    def transition(self) -> bool:
        return self.program.references_old_self


class SchemaNode:
    """One compiled node of a structural schema; satisfies :class:`StructureInfo`."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.type: str | None = raw.get("type")
        self.int_or_string = bool(raw.get("x-kubernetes-int-or-string", False))
        self.preserve_unknown = bool(raw.get("x-kubernetes-preserve-unknown-fields", False))
        self.embedded = bool(raw.get("x-kubernetes-embedded-resource", False))
        self.nullable = bool(raw.get("nullable", False))
        self.properties: dict[str, SchemaNode] = {
            name: SchemaNode(sub) for name, sub in (raw.get("properties") or {}).items()
        }
        additional = raw.get("additionalProperties")
        self.additional: SchemaNode | None = None
        self.additional_forbidden = additional is False
        if isinstance(additional, Mapping):
            self.additional = SchemaNode(additional)
        items = raw.get("items")
        self.items_node: SchemaNode | None = (
            SchemaNode(items) if isinstance(items, Mapping) else None
        )
        self.required: tuple[str, ...] = tuple(raw.get("required") or ())
        enum = raw.get("enum")
        self.enum: tuple[Any, ...] | None = tuple(enum) if enum is not None else None
        self.min_items: int | None = raw.get("minItems")
        self.max_items: int | None = raw.get("maxItems")
        self.min_length: int | None = raw.get("minLength")
        self.max_length: int | None = raw.get("maxLength")
        self.min_properties: int | None = raw.get("minProperties")
        self.max_properties: int | None = raw.get("maxProperties")
        self.unique_items = bool(raw.get("uniqueItems", False))
        self.pattern: str | None = raw.get("pattern")
        if self.pattern is not None:
            _pattern(self.pattern)
        self.minimum: float | None = raw.get("minimum")
        self.maximum: float | None = raw.get("maximum")
        self.exclusive_minimum = bool(raw.get("exclusiveMinimum", False))
        self.exclusive_maximum = bool(raw.get("exclusiveMaximum", False))
        self.multiple_of: float | None = raw.get("multipleOf")
        self.format: str | None = raw.get("format")
        self.default: Any = _json_copy(raw["default"]) if "default" in raw else _MISSING
        self._list_type: str | None = raw.get("x-kubernetes-list-type")
        self._list_map_keys: tuple[str, ...] = tuple(raw.get("x-kubernetes-list-map-keys") or ())
        self._map_type: str | None = raw.get("x-kubernetes-map-type")
        # Value validations only (structural schemas may not declare types in these).
        self.all_of = tuple(SchemaNode(s) for s in raw.get("allOf") or ())
        self.any_of = (
            () if self.int_or_string else tuple(SchemaNode(s) for s in raw.get("anyOf") or ())
        )
        self.one_of = tuple(SchemaNode(s) for s in raw.get("oneOf") or ())
        not_ = raw.get("not")
        self.not_: SchemaNode | None = SchemaNode(not_) if isinstance(not_, Mapping) else None
        self.rules: tuple[_Rule, ...] = tuple(
            _compile_rule(r) for r in raw.get("x-kubernetes-validations") or ()
        )
        self.has_rules_below: bool = bool(self.rules) or any(
            n.has_rules_below for n in self._children()
        )

    def _children(self) -> list[SchemaNode]:
        out = list(self.properties.values())
        if self.additional is not None:
            out.append(self.additional)
        if self.items_node is not None:
            out.append(self.items_node)
        return out

    # StructureInfo -------------------------------------------------------------------------------

    @property
    def list_type(self) -> str | None:
        """``x-kubernetes-list-type`` of an array node (``atomic``, ``set``, ``map``) or None."""
        return self._list_type

    @property
    def list_map_keys(self) -> tuple[str, ...]:
        """``x-kubernetes-list-map-keys`` of a map list, in schema order."""
        return self._list_map_keys

    @property
    def map_type(self) -> str | None:
        """``x-kubernetes-map-type`` (``atomic`` or ``granular``) or None."""
        return self._map_type

    def child(self, name: str) -> StructureInfo | None:
        """The node of property ``name``, else of ``additionalProperties``, else None."""
        return self._child(name)

    def items(self) -> StructureInfo | None:
        """The node of a list's items, if any."""
        return self.items_node

    def _child(self, name: str) -> SchemaNode | None:
        node = self.properties.get(name)
        if node is not None:
            return node
        return self.additional

    # Helpers ------------------------------------------------------------------------------------

    @property
    def cel_type_name(self) -> str:
        """The type name Kubernetes puts in CEL errors (``"object"``, ``"string"`` ...)."""
        return self.type or ""

    def type_matches(self, value: Any) -> bool:
        """True if ``value`` (not None) has the type the node declares."""
        if self.int_or_string:
            return isinstance(value, (int, str)) and not isinstance(value, bool)
        kind = _json_type(value)
        wanted = self.type
        if wanted is None:
            return True
        if wanted == "number":
            return kind in ("integer", "number")
        return kind == wanted


def _compile_rule(raw: Mapping[str, Any]) -> _Rule:
    rule = raw["rule"]
    message_expression = raw.get("messageExpression")
    return _Rule(
        rule=rule,
        program=compile_cel(rule),
        message=raw.get("message") or None,
        message_program=compile_cel(message_expression) if message_expression else None,
        reason=raw.get("reason") or INVALID,
        field_path=raw.get("fieldPath") or None,
        optional_old_self=bool(raw.get("optionalOldSelf", False)),
    )


# --- pruning and defaulting ----------------------------------------------------------------------


def _prune(node: SchemaNode | None, value: Any, root: bool = False) -> None:
    if node is None:
        return
    if isinstance(value, dict):
        keep: tuple[str, ...] = _ROOT_KEEP if (root or node.embedded) else ()
        for key in list(value):
            if key in keep:
                if key != "metadata":
                    _prune(node.properties.get(key), value[key])
                continue
            sub = node.properties.get(key)
            if sub is None:
                sub = node.additional
            if sub is None:
                if not (node.preserve_unknown or node.additional_forbidden):
                    del value[key]
                continue
            _prune(sub, value[key])
    elif isinstance(value, list):
        for item in value:
            _prune(node.items_node, item)


def _prune_nulls(node: SchemaNode | None, value: Any, root: bool = False) -> None:
    if node is None:
        return
    if isinstance(value, dict):
        for key in list(value):
            if root and key == "metadata":
                continue
            sub = node._child(key)
            if value[key] is None:
                if sub is not None and not sub.nullable and sub.default is _MISSING:
                    del value[key]
            else:
                _prune_nulls(sub, value[key])
    elif isinstance(value, list):
        for item in value:
            _prune_nulls(node.items_node, item)


def _apply_defaults(node: SchemaNode | None, value: Any, root: bool = False) -> None:
    if node is None:
        return
    if isinstance(value, dict):
        for key, sub in node.properties.items():
            if root and key == "metadata":
                continue
            if sub.default is not _MISSING and (
                key not in value or (value[key] is None and not sub.nullable)
            ):
                value[key] = _json_copy(sub.default)
        for key, item in value.items():
            if root and key == "metadata":
                continue
            _apply_defaults(node._child(key), item)
    elif isinstance(value, list):
        items = node.items_node
        if items is None:
            return
        for index, item in enumerate(value):
            if item is None and items.default is not _MISSING and not items.nullable:
                value[index] = _json_copy(items.default)
            _apply_defaults(items, value[index])


# --- structural validation -----------------------------------------------------------------------


def _validate(node: SchemaNode, value: Any, path: str, errors: list[FieldError]) -> None:
    label = path or "."
    if value is None:
        if not node.nullable:
            wanted = "integer,string" if node.int_or_string else (node.type or "")
            if wanted or node.int_or_string:
                errors.append(
                    _invalid(
                        path,
                        "null",
                        f'{label} in body must be of type {wanted}: "null"',
                        TYPE_INVALID,
                    )
                )
        return
    if not node.type_matches(value):
        wanted = "integer,string" if node.int_or_string else (node.type or "")
        kind = _json_type(value)
        errors.append(
            _invalid(
                path, kind, f'{label} in body must be of type {wanted}: "{kind}"', TYPE_INVALID
            )
        )
        return
    _validate_value(node, value, path, errors)
    for branch in node.all_of:
        _validate(branch, value, path, errors)
    if node.any_of and not any(_passes(branch, value, path) for branch in node.any_of):
        errors.append(
            _invalid(path, value, f"{label} in body must validate at least one schema (anyOf)")
        )
    if node.one_of:
        passing = sum(1 for branch in node.one_of if _passes(branch, value, path))
        if passing != 1:
            errors.append(
                _invalid(
                    path, value, f"{label} in body must validate one and only one schema (oneOf)"
                )
            )
    if node.not_ is not None and _passes(node.not_, value, path):
        errors.append(_invalid(path, value, f"{label} in body must not validate the schema (not)"))


def _passes(node: SchemaNode, value: Any, path: str) -> bool:
    found: list[FieldError] = []
    _validate(node, value, path, found)
    return not found


def _validate_value(node: SchemaNode, value: Any, path: str, errors: list[FieldError]) -> None:
    label = path or "."
    if node.enum is not None and value not in node.enum:
        allowed = ", ".join(
            _go_quote(v) if isinstance(v, str) else _go_quote(json.dumps(v)) for v in node.enum
        )
        errors.append(
            FieldError(
                NOT_SUPPORTED,
                path or _ROOT_FIELD,
                f"Unsupported value: {_fmt_value(value)}: supported values: {allowed}",
            )
        )
    if isinstance(value, dict):
        _validate_object(node, value, path, errors)
    elif isinstance(value, list):
        _validate_array(node, value, path, errors)
    elif isinstance(value, str):
        if node.max_length is not None and len(value) > node.max_length:
            errors.append(
                FieldError(
                    TOO_LONG,
                    path or _ROOT_FIELD,
                    f"Too long: may not be more than {node.max_length} bytes",
                )
            )
        if node.min_length is not None and len(value) < node.min_length:
            errors.append(
                _invalid(
                    path, value, f"{label} in body should be at least {node.min_length} chars long"
                )
            )
        if node.pattern is not None and not _pattern(node.pattern).search(value):
            errors.append(_invalid(path, value, f"{label} in body should match '{node.pattern}'"))
        if node.format == "date-time" and not _DATE_TIME.match(value):
            errors.append(
                _invalid(path, value, f'{label} in body must be of type date-time: "{value}"')
            )
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(node, value, path, errors)


def _validate_number(node: SchemaNode, value: float, path: str, errors: list[FieldError]) -> None:
    label = path or "."
    if node.minimum is not None:
        if node.exclusive_minimum and value <= node.minimum:
            errors.append(
                _invalid(
                    path,
                    value,
                    f"{label} in body should be greater than {_go_number(node.minimum)}",
                )
            )
        elif not node.exclusive_minimum and value < node.minimum:
            errors.append(
                _invalid(
                    path,
                    value,
                    f"{label} in body should be greater than or "
                    f"equal to {_go_number(node.minimum)}",
                )
            )
    if node.maximum is not None:
        if node.exclusive_maximum and value >= node.maximum:
            errors.append(
                _invalid(
                    path, value, f"{label} in body should be less than {_go_number(node.maximum)}"
                )
            )
        elif not node.exclusive_maximum and value > node.maximum:
            errors.append(
                _invalid(
                    path,
                    value,
                    f"{label} in body should be less than or equal to {_go_number(node.maximum)}",
                )
            )
    if node.multiple_of:
        quotient = value / node.multiple_of
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            errors.append(
                _invalid(
                    path,
                    value,
                    f"{label} in body should be a multiple of {_go_number(node.multiple_of)}",
                )
            )


def _validate_object(
    node: SchemaNode, value: dict[str, Any], path: str, errors: list[FieldError]
) -> None:
    label = path or "."
    if node.max_properties is not None and len(value) > node.max_properties:
        errors.append(
            FieldError(
                TOO_MANY,
                path or _ROOT_FIELD,
                f"Too many: {len(value)}: must have at most {node.max_properties} items",
            )
        )
    if node.min_properties is not None and len(value) < node.min_properties:
        errors.append(
            _invalid(
                path,
                len(value),
                f"{label} in body should have at least {node.min_properties} properties",
            )
        )
    for name in node.required:
        if name not in value:
            errors.append(FieldError(REQUIRED, _child_path(path, name), "Required value"))
    root = path == ""
    for key, item in value.items():
        if root and key == "metadata":
            continue
        sub = node._child(key)
        child_path = _child_path(path, key)
        if sub is None:
            if node.additional_forbidden and not node.preserve_unknown:
                errors.append(
                    _invalid(child_path, item, f"{child_path} in body is a forbidden property")
                )
            continue
        _validate(sub, item, child_path, errors)


def _validate_array(
    node: SchemaNode, value: list[Any], path: str, errors: list[FieldError]
) -> None:
    label = path or "."
    if node.max_items is not None and len(value) > node.max_items:
        errors.append(
            FieldError(
                TOO_MANY,
                path or _ROOT_FIELD,
                f"Too many: {len(value)}: must have at most {node.max_items} items",
            )
        )
    if node.min_items is not None and len(value) < node.min_items:
        errors.append(
            _invalid(
                path, len(value), f"{label} in body should have at least {node.min_items} items"
            )
        )
    if node.unique_items:
        seen_json: set[str] = set()
        for item in value:
            text = json.dumps(item, sort_keys=True)
            if text in seen_json:
                errors.append(
                    _invalid(path, value, f"{label} in body shouldn't contain duplicates")
                )
                break
            seen_json.add(text)
    items = node.items_node
    if items is not None:
        for index, item in enumerate(value):
            _validate(items, item, f"{path}[{index}]", errors)
    if node.list_type == "set":
        counts: dict[str, int] = {}
        for index, item in enumerate(value):
            text = json.dumps(item, sort_keys=True)
            counts[text] = counts.get(text, 0) + 1
            if counts[text] == 2:  # like Kubernetes: the second occurrence of each value only
                errors.append(
                    FieldError(
                        DUPLICATE, f"{path}[{index}]", f"Duplicate value: {_fmt_value(item)}"
                    )
                )
    elif node.list_type == "map" and node.list_map_keys:
        key_counts: dict[str, int] = {}
        for index, item in enumerate(value):
            key = (
                {k: item[k] for k in node.list_map_keys if k in item}
                if isinstance(item, dict)
                else {}
            )
            text = json.dumps(key, sort_keys=True)
            key_counts[text] = key_counts.get(text, 0) + 1
            if key_counts[text] == 2:
                errors.append(
                    FieldError(DUPLICATE, f"{path}[{index}]", f"Duplicate value: {_go_repr(key)}")
                )


# --- CEL -----------------------------------------------------------------------------------------


def _map_list_key(node: SchemaNode, item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    return json.dumps([item.get(k) for k in node.list_map_keys])


class _CelRun:
    """State of one CEL pass over an object: conversions are memoised per JSON container."""

    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}
        self.errors: list[FieldError] = []

    def convert(self, node: SchemaNode | None, value: Any, root: bool = False) -> Any:
        if isinstance(value, (dict, list)):
            cached = self.memo.get(id(value))
            if cached is not None:
                return cached
        result = self._convert(node, value, root)
        if isinstance(value, (dict, list)):
            self.memo[id(value)] = result
        return result

    def _convert(self, node: SchemaNode | None, value: Any, root: bool) -> Any:
        if node is None:
            return to_cel(value)
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                if root and key == "metadata":
                    if isinstance(item, dict):
                        out[celtypes.StringType(key)] = to_cel(
                            {k: item[k] for k in ("name", "generateName") if k in item}
                        )
                    continue
                out[celtypes.StringType(key)] = self.convert(node._child(key), item)
            return celtypes.MapType(out)
        if isinstance(value, list):
            return celtypes.ListType([self.convert(node.items_node, v) for v in value])
        if node.type == "number" and isinstance(value, int) and not isinstance(value, bool):
            return celtypes.DoubleType(float(value))
        return to_cel(value)

    def walk(
        self,
        node: SchemaNode,
        value: Any,
        old: Any,
        path: str,
        root: bool = False,
    ) -> None:
        if value is None or not node.has_rules_below or not node.type_matches(value):
            return
        if node.rules:
            self._run_rules(node, value, old, path, root)
        if isinstance(value, dict):
            for key, item in value.items():
                if root and key == "metadata":
                    continue
                sub = node.properties.get(key)
                in_map = False
                if sub is None:
                    sub = node.additional
                    in_map = True
                if sub is None or not sub.has_rules_below:
                    continue
                old_item = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                child_path = f"{path}[{key}]" if in_map else _child_path(path, key)
                self.walk(sub, item, old_item, child_path)
        elif isinstance(value, list):
            items = node.items_node
            if items is None or not items.has_rules_below:
                return
            old_by_key: dict[str, Any] = {}
            if node.list_type == "map" and node.list_map_keys and isinstance(old, list):
                for old_item in old:
                    old_key = _map_list_key(node, old_item)
                    if old_key is not None:
                        old_by_key.setdefault(old_key, old_item)
            for index, item in enumerate(value):
                old_item = _MISSING
                if old_by_key:
                    item_key = _map_list_key(node, item)
                    if item_key is not None:
                        old_item = old_by_key.get(item_key, _MISSING)
                self.walk(items, item, old_item, f"{path}[{index}]")

    def _run_rules(self, node: SchemaNode, value: Any, old: Any, path: str, root: bool) -> None:
        has_old = old is not _MISSING and old is not None
        self_value: Any = None
        old_value: Any = None
        for rule in node.rules:
            if rule.transition and not has_old and not rule.optional_old_self:
                continue
            if self_value is None:
                self_value = self.convert(node, value, root)
            activation: dict[str, Any] = {"self": self_value}
            if rule.transition:
                if has_old and old_value is None:
                    old_value = self.convert(node, old, root)
                if rule.optional_old_self:
                    activation["oldSelf"] = OptionalValue(old_value, has_old)
                else:
                    activation["oldSelf"] = old_value
            field = path
            if rule.field_path:
                suffix = rule.field_path
                field = (
                    path + suffix
                    if suffix.startswith("[")
                    else _child_path(path, suffix.lstrip("."))
                )
            try:
                result = rule.program.evaluate_cel(activation)
            except CELEvalError as exc:
                detail = f"{exc} evaluating rule: {rule.message or _compact(rule.rule)}"
                self.errors.append(_invalid(field, node.cel_type_name, detail, INVALID))
                continue
            is_bool = isinstance(result, (celtypes.BoolType, bool))
            if is_bool and bool(result):
                continue
            if not is_bool:
                self.errors.append(
                    _invalid(
                        field,
                        node.cel_type_name,
                        f"rule did not evaluate to a bool: {_compact(rule.rule)}",
                        INVALID,
                    )
                )
                continue
            self.errors.append(
                _rule_error(rule, field, node.cel_type_name, self._message(rule, activation))
            )

    @staticmethod
    def _message(rule: _Rule, activation: Mapping[str, Any]) -> str:
        if rule.message_program is not None:
            try:
                result = rule.message_program.evaluate_cel(activation)
            except CELEvalError:
                result = None
            if isinstance(result, str) and result.strip():
                return str(result)
        if rule.message:
            return rule.message
        return "failed rule: " + _compact(rule.rule)


def _compact(rule: str) -> str:
    return " ".join(rule.split())


def _rule_error(rule: _Rule, field: str, type_name: str, message: str) -> FieldError:
    where = field or _ROOT_FIELD
    if rule.reason == FORBIDDEN:
        return FieldError(FORBIDDEN, where, f"Forbidden: {message}")
    if rule.reason == REQUIRED:
        return FieldError(REQUIRED, where, f"Required value: {message}")
    if rule.reason == DUPLICATE:
        return FieldError(DUPLICATE, where, f"Duplicate value: {_fmt_value(type_name)}")
    return FieldError(rule.reason, where, f"Invalid value: {_fmt_value(type_name)}: {message}")


# --- public entry points -------------------------------------------------------------------------


class CompiledSchema:
    """One CRD version's ``openAPIV3Schema``, compiled for pruning, defaulting and validation."""

    def __init__(self, openapi_v3: Mapping[str, Any]) -> None:
        self._root = SchemaNode(openapi_v3)

    @property
    def root(self) -> StructureInfo:
        """The root node, for server-side apply (list types, list-map keys, map types)."""
        return self._root

    @property
    def rule_count(self) -> int:
        """How many ``x-kubernetes-validations`` rules the schema has."""
        count = 0
        stack = [self._root]
        while stack:
            node = stack.pop()
            count += len(node.rules)
            stack.extend(node._children())
        return count

    def prune_and_default(self, new: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``new`` with unknown fields dropped and defaults filled in (F43)."""
        obj = _json_copy(dict(new))
        _prune(self._root, obj, root=True)
        _prune_nulls(self._root, obj, root=True)
        _apply_defaults(self._root, obj, root=True)
        return obj  # type: ignore[no-any-return]

    def validate(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
        """Structural (F42) and CEL (F44, F45) errors of ``obj``; ``old`` None means CREATE."""
        errors: list[FieldError] = []
        _validate(self._root, obj, "", errors)
        run = _CelRun()
        run.walk(self._root, obj, old if old is not None else _MISSING, "", root=True)
        errors.extend(run.errors)
        return errors

    def admit(
        self, new: dict[str, Any], old: dict[str, Any] | None
    ) -> tuple[dict[str, Any], list[FieldError]]:
        """Prune, default, then validate ``new`` (against ``old`` on UPDATE).

        Returns the pruned and defaulted deep copy and the list of errors (empty if the write
        is valid). ``old`` is the stored object (already admitted) or None for CREATE. Neither
        argument is mutated.
        """
        obj = self.prune_and_default(new)
        return obj, self.validate(obj, old)


_SCHEMA_LOCK = threading.Lock()
_BY_ID: dict[int, tuple[Mapping[str, Any], CompiledSchema]] = {}
_BY_TEXT: dict[str, CompiledSchema] = {}


def compile_schema(openapi_v3: Mapping[str, Any]) -> CompiledSchema:
    """Compile one version's ``openAPIV3Schema``.

    Cached: the same schema object, or an equal schema (same JSON text), compiles once per
    process. Raises :class:`~dispatcher.sandbox.fakeapi.cel.CELCompileError` if a rule does not
    compile or uses a function outside standard CEL (F47), and ``re.error`` for a bad pattern.
    """
    with _SCHEMA_LOCK:
        hit = _BY_ID.get(id(openapi_v3))
        if hit is not None and hit[0] is openapi_v3:
            return hit[1]
        text = json.dumps(openapi_v3, sort_keys=True, separators=(",", ":"))
        compiled = _BY_TEXT.get(text)
        if compiled is None:
            compiled = CompiledSchema(openapi_v3)
            _BY_TEXT[text] = compiled
        _BY_ID[id(openapi_v3)] = (openapi_v3, compiled)
        return compiled
