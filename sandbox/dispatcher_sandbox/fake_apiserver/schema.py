"""Structural schemas of custom resources: pruning, defaulting, validation and CEL rules.

This module implements F42–F45 of ``docs/fake-apiserver.md`` as a pure, synchronous library.
:func:`compile_schema` turns one CRD version's ``openAPIV3Schema`` into a :class:`CompiledSchema`
(cached, so clusters that share a CRD share the compiled schema). :meth:`CompiledSchema.admit` takes
the object a write would store and returns it pruned and defaulted together with the list of
validation errors, in the order the real API server applies these steps:

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

Validation ratcheting (UPDATE only)
-----------------------------------

Kubernetes' ``CRDValidationRatcheting`` (KEP-4008: alpha in 1.28 and off by default, beta and on
by default in 1.30, GA and locked on in 1.33) lets an UPDATE keep a value that the schema rejects,
as long as that value is unchanged.
:meth:`CompiledSchema.validate` models it as follows.

- **Correlation.** The new object is walked together with the old one: object fields and map
  entries by name, items of ``x-kubernetes-list-type: map`` lists by their key, items of lists
  without a list type by index. Items of ``set`` and ``atomic`` lists are not correlated, and
  neither are ``apiVersion`` and ``kind`` of the root.
- **Equality.** A correlated node is unchanged when it equals its old value the way
  ``CorrelatedObject.CachedDeepEqual`` decides: same keys, each having a schema node, and equal
  values; ``map`` lists item by key (so reordering them is no change); other lists item by item;
  scalars (and uncorrelated lists) with Go's ``reflect.DeepEqual`` (types must match: ``true`` is
  not ``1``, ``1`` is not ``1.0``).
- **Structural errors** of an unchanged node and of everything below it are ratcheted, so such a
  subtree is not validated at all. Errors in uncorrelated items count for the nearest correlated
  ancestor: the items of a changed ``atomic`` list are validated in full.
- **List types.** Duplicate items of ``set`` lists and duplicate keys of ``map`` lists are checked
  on the whole new object and reported only if the old object had no such error.
- **CEL rules.** A rule that evaluates to false at (or below) an unchanged node is ratcheted unless
  it is a transition rule (mentions ``oldSelf``): those are never ratcheted. Evaluation errors
  (``no such key`` ...) are reported even at unchanged nodes, as in Kubernetes, where only a false
  result goes through the ratcheting check. CREATE is never ratcheted.

Ratcheting is what the real server does; it does not by itself avoid CEL work, since unchanged
nodes must still be evaluated for evaluation errors. What avoids it is a cache of rule *outcomes*
(passed, failed with its message, or the error) per compiled schema, keyed by the rule and by the
values it can read: :attr:`~dispatcher_sandbox.fake_apiserver.cel.Program.dependencies` lists the
field
paths each expression reads from ``self`` and ``oldSelf`` (only presence for ``has()``), so a rule
whose inputs are unchanged, like the ``spec`` rules on a ``/status`` write, is not evaluated again.
A rule is a pure function of ``self`` and ``oldSelf``, so this cannot change any result.

Sources checked (kubernetes/kubernetes and kubernetes/enhancements): KEP-4008 "CRD Validation
Ratcheting" (milestones); the ``CRDValidationRatcheting`` entries of the versioned feature gates
(1.28 alpha, 1.30 beta, 1.33 GA); ``apiextensions-apiserver/pkg/apiserver/validation/ratcheting.go``
(structural errors of a node equal to its correlated old value become warnings);
``apiserver/pkg/cel/common/equality.go`` (``CorrelatedObject``: ``Key``, ``Index``,
``CachedDeepEqual``); ``apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go``
(``ratchetingOptions.shouldRatchetError``, the ``!UsesOldSelf`` condition, evaluation errors
appended without the check, ``apiVersion``/``kind`` not correlated, ``MapIsCorrelatable``); the
custom resource strategies' ``ValidateUpdate`` (list-type errors only if the old object had none);
the ``ValidationRule`` API documentation (transition rules, ``optionalOldSelf``).

Approximations: list equality in CEL is order-sensitive for every list type (Kubernetes compares
``set`` and ``map`` lists without regard to order); the ``int32``/``int64`` formats are not range
checked; CEL cost limits are not modelled; ``metadata`` of embedded resources is kept unpruned;
ratcheted errors are dropped (the real server returns them as warnings); the branches of
``allOf``/``anyOf``/``oneOf``/``not`` of a changed node are validated without ratcheting inside
them; items of a ``map`` list with a duplicate key correlate with the first old item of that key;
a CEL evaluation error reads ``<cel error> evaluating rule: <message or rule>``; map entries are
named ``m.key`` in structural errors and ``m[key]`` in CEL errors, as Kubernetes does.
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

from dispatcher_sandbox.fake_apiserver.cel import (
    CELCompileError,
    CELEvalError,
    Dependency,
    OptionalValue,
    Program,
    compile_cel,
    compile_expression,
    to_cel,
)
from dispatcher_sandbox.fake_apiserver.structure import StructureInfo

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
    """A value in an error message: ``null`` for None, else as :func:`_go_repr` prints it."""
    return "null" if value is None else _go_repr(value)


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
    dependencies: tuple[Dependency, ...] = ()

    @property
    def transition(self) -> bool:
        """True for a transition rule (its ``rule`` mentions ``oldSelf``); never ratcheted."""
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
        self.has_list_types_below: bool = self._list_type in ("set", "map") or any(
            n.has_list_types_below for n in self._children()
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
    program = compile_cel(rule)
    message_program = compile_cel(message_expression) if message_expression else None
    dependencies = set(program.dependencies)
    if message_program is not None:
        dependencies.update(message_program.dependencies)
    return _Rule(
        rule=rule,
        program=program,
        message=raw.get("message") or None,
        message_program=message_program,
        reason=raw.get("reason") or INVALID,
        field_path=raw.get("fieldPath") or None,
        optional_old_self=bool(raw.get("optionalOldSelf", False)),
        dependencies=tuple(sorted(dependencies)),
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


def _validate(
    node: SchemaNode,
    value: Any,
    path: str,
    errors: list[FieldError],
    old: Any = _MISSING,
    ratchet: _Ratchet | None = None,
) -> None:
    """Structural errors of ``value`` at ``node``.

    On UPDATE (``ratchet`` set), ``old`` is the correlated old value (``_MISSING`` where there is
    none): a node equal to it is not validated, as all its errors would be ratcheted.
    """
    if ratchet is not None and old is not _MISSING and ratchet.equal(node, value, old):
        return
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
    _validate_value(node, value, path, errors, old, ratchet)
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


def _validate_value(
    node: SchemaNode,
    value: Any,
    path: str,
    errors: list[FieldError],
    old: Any = _MISSING,
    ratchet: _Ratchet | None = None,
) -> None:
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
        _validate_object(node, value, path, errors, old, ratchet)
    elif isinstance(value, list):
        _validate_array(node, value, path, errors, old, ratchet)
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
    node: SchemaNode,
    value: dict[str, Any],
    path: str,
    errors: list[FieldError],
    old: Any = _MISSING,
    ratchet: _Ratchet | None = None,
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
        old_item = _MISSING
        if ratchet is not None and isinstance(old, dict) and not (root and key in _ROOT_KEEP):
            old_item = old.get(key, _MISSING)
        _validate(sub, item, child_path, errors, old_item, ratchet)


def _validate_array(
    node: SchemaNode,
    value: list[Any],
    path: str,
    errors: list[FieldError],
    old: Any = _MISSING,
    ratchet: _Ratchet | None = None,
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
        correlate = (
            _ratchet_correlation(node, old)
            if ratchet is not None and isinstance(old, list)
            else None
        )
        for index, item in enumerate(value):
            old_item = correlate(index, item) if correlate is not None else _MISSING
            _validate(items, item, f"{path}[{index}]", errors, old_item, ratchet)
    if ratchet is None:  # on UPDATE, CompiledSchema.validate checks list types separately
        _check_list_type(node, value, path, errors)


def _check_list_type(
    node: SchemaNode, value: list[Any], path: str, errors: list[FieldError]
) -> None:
    """Duplicate items of a ``set`` list and duplicate keys of a ``map`` list."""
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


def _list_type_errors(node: SchemaNode, value: Any, path: str, errors: list[FieldError]) -> None:
    """The list-type errors of a whole object (``structurallisttype.ValidateListSetsAndMaps``)."""
    if not node.has_list_types_below or not node.type_matches(value):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if path == "" and key == "metadata":
                continue
            sub = node._child(key)
            if sub is not None and item is not None:
                _list_type_errors(sub, item, _child_path(path, key), errors)
    elif isinstance(value, list):
        items = node.items_node
        if items is not None:
            for index, item in enumerate(value):
                if item is not None:
                    _list_type_errors(items, item, f"{path}[{index}]", errors)
        _check_list_type(node, value, path, errors)


# --- ratcheting ----------------------------------------------------------------------------------


def _strict_equal(a: Any, b: Any) -> bool:
    """Go's ``reflect.DeepEqual`` of two unstructured values (types must match: 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(k in b and _strict_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_strict_equal, a, b))
    return bool(a == b)


def _map_list_key(node: SchemaNode, item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    return json.dumps([item.get(k) for k in node.list_map_keys])


def _ratchet_correlation(node: SchemaNode, old: list[Any]) -> Any:
    """A function (index, new item) -> the correlated old item or ``_MISSING``, for ratcheting.

    Items of ``map`` lists correlate by key, items of lists without a list type by index; items
    of ``set`` and ``atomic`` lists do not correlate (``CorrelatedObject.Index`` in Kubernetes).
    """
    if node.list_type == "map" and node.list_map_keys:
        by_key: dict[str, Any] = {}
        for old_item in old:
            old_key = _map_list_key(node, old_item)
            if old_key is not None:
                by_key.setdefault(old_key, old_item)

        def by_map_key(index: int, item: Any) -> Any:
            key = _map_list_key(node, item)
            found = by_key.get(key, _MISSING) if key is not None else _MISSING
            return _MISSING if found is None else found

        return by_map_key
    if node.list_type in ("set", "atomic"):
        return lambda index, item: _MISSING

    def by_index(index: int, item: Any) -> Any:
        found = old[index] if index < len(old) else None
        return _MISSING if found is None else found

    return by_index


class _Ratchet:
    """The equality test of validation ratcheting for one UPDATE, memoised per pair of containers.

    Follows ``CorrelatedObject.CachedDeepEqual``: objects and maps are equal when they have the
    same keys, every key has a schema node and every value is equal; ``map`` lists when they have
    the same length and every new item has an old item with the same key that is equal (so order
    does not matter); other lists with an item schema item by item; scalars (and lists without
    correlation) with ``reflect.DeepEqual``.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[int, int], bool] = {}

    def equal(self, node: SchemaNode | None, new: Any, old: Any) -> bool:
        if not isinstance(new, (dict, list)):
            return type(new) is type(old) and bool(new == old)
        key = (id(new), id(old))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._equal_container(node, new, old)
            self._memo[key] = hit
        return hit

    def _equal_container(self, node: SchemaNode | None, new: Any, old: Any) -> bool:
        if type(new) is not type(old) or len(new) != len(old):
            return False
        if isinstance(new, dict):
            for key, item in new.items():
                if key not in old:
                    return False
                sub = node._child(key) if node is not None else None
                if sub is None or not self.equal(sub, item, old[key]):
                    return False
            return True
        items = node.items_node if node is not None else None
        if items is None or node is None or node.list_type in ("set", "atomic"):
            return _strict_equal(new, old)
        correlate = _ratchet_correlation(node, old)
        for index, item in enumerate(new):
            old_item = correlate(index, item)
            if old_item is _MISSING or not self.equal(items, item, old_item):
                return False
        return True


# --- CEL -----------------------------------------------------------------------------------------

_OUTCOME_CACHE_SIZE = 2048
_ABSENT = "\x00absent"


@dataclass(frozen=True)
class _Outcome:
    """What evaluating one rule gave: passed, failed (with its message), or an error text."""

    passed: bool
    message: str | None = None  # failed: the rule's message (messageExpression evaluated)
    error: str | None = None  # evaluation error, or "rule did not evaluate to a bool" text


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _project(base: Any, presence: bool, path: tuple[str, ...]) -> Any:
    """What a rule can see at ``path`` of ``base`` (a hashable summary, part of a cache key)."""
    if base is _MISSING:
        return _ABSENT
    current = base
    for index, name in enumerate(path):
        if not isinstance(current, dict):
            return ("x", index, _dump(current))
        if name not in current:
            return ("a", index)
        current = current[name]
    if presence:
        return ("p", current is None)
    return ("v", _dump(current))


def _outcome_key(rule: _Rule, value: Any, old: Any) -> tuple[Any, ...]:
    """Key of the outcome cache: the rule and every value it can read (see ``Program``)."""
    parts: list[Any] = [rule]
    for variable, presence, path in rule.dependencies:
        parts.append(_project(value if variable == "self" else old, presence, path))
    return tuple(parts)


class _CelRun:
    """State of one CEL pass over an object: conversions are memoised per JSON container.

    ``ratchet`` is set on UPDATE: a node equal to its correlated old value is *ratcheted*, and
    a non-transition rule there (or below) that evaluates to false reports nothing.
    """

    def __init__(self, cache: dict[tuple[Any, ...], _Outcome], ratchet: _Ratchet | None) -> None:
        self.memo: dict[int, Any] = {}
        self.errors: list[FieldError] = []
        self.cache = cache
        self.ratchet = ratchet

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
        ratchet_old: Any,
        path: str,
        root: bool = False,
        ratcheted: bool = False,
    ) -> None:
        """Run the rules at ``node`` and below.

        ``old`` is the old value as transition rules see it (``_MISSING`` if none); ``ratchet_old``
        the old value as ratcheting correlates it (also by index in lists without a list type);
        ``ratcheted`` is True below a node equal to its old value.
        """
        if value is None or not node.has_rules_below or not node.type_matches(value):
            return
        if (
            not ratcheted
            and self.ratchet is not None
            and ratchet_old is not _MISSING
            and self.ratchet.equal(node, value, ratchet_old)
        ):
            ratcheted = True
        if node.rules:
            self._run_rules(node, value, old, path, root, ratcheted)
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
                ratchet_item = _MISSING
                if isinstance(ratchet_old, dict) and not (root and key in _ROOT_KEEP):
                    ratchet_item = ratchet_old.get(key, _MISSING)
                child_path = f"{path}[{key}]" if in_map else _child_path(path, key)
                self.walk(sub, item, old_item, ratchet_item, child_path, ratcheted=ratcheted)
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
            correlate = (
                _ratchet_correlation(node, ratchet_old)
                if self.ratchet is not None and not ratcheted and isinstance(ratchet_old, list)
                else None
            )
            for index, item in enumerate(value):
                old_item = _MISSING
                if old_by_key:
                    item_key = _map_list_key(node, item)
                    if item_key is not None:
                        old_item = old_by_key.get(item_key, _MISSING)
                ratchet_item = correlate(index, item) if correlate is not None else _MISSING
                self.walk(
                    items, item, old_item, ratchet_item, f"{path}[{index}]", ratcheted=ratcheted
                )

    def _run_rules(
        self, node: SchemaNode, value: Any, old: Any, path: str, root: bool, ratcheted: bool
    ) -> None:
        has_old = old is not _MISSING and old is not None
        for rule in node.rules:
            if rule.transition and not has_old and not rule.optional_old_self:
                continue
            outcome = self._outcome(node, rule, value, old, has_old, root)
            if outcome.passed:
                continue
            field = path
            if rule.field_path:
                suffix = rule.field_path
                field = (
                    path + suffix
                    if suffix.startswith("[")
                    else _child_path(path, suffix.lstrip("."))
                )
            if outcome.error is not None:
                # Evaluation errors are reported even where the node is ratcheted (Kubernetes
                # ratchets only a rule that evaluated to false).
                self.errors.append(_invalid(field, node.cel_type_name, outcome.error, INVALID))
                continue
            if ratcheted and not rule.transition:
                continue  # ratcheted: the value is unchanged since it was stored
            assert outcome.message is not None
            self.errors.append(_rule_error(rule, field, node.cel_type_name, outcome.message))

    def _outcome(
        self, node: SchemaNode, rule: _Rule, value: Any, old: Any, has_old: bool, root: bool
    ) -> _Outcome:
        """Evaluate ``rule`` (or reuse the outcome of an evaluation with the same inputs)."""
        key = _outcome_key(rule, value, old if has_old else _MISSING)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        outcome = self._evaluate(node, rule, value, old, has_old, root)
        if len(self.cache) >= _OUTCOME_CACHE_SIZE:
            self.cache.clear()
        self.cache[key] = outcome
        return outcome

    def _evaluate(
        self, node: SchemaNode, rule: _Rule, value: Any, old: Any, has_old: bool, root: bool
    ) -> _Outcome:
        activation: dict[str, Any] = {"self": self.convert(node, value, root)}
        if rule.transition:
            old_value = self.convert(node, old, root) if has_old else None
            if rule.optional_old_self:
                activation["oldSelf"] = OptionalValue(old_value, has_old)
            else:
                activation["oldSelf"] = old_value
        try:
            result = rule.program.evaluate_cel(activation)
        except CELEvalError as exc:
            return _Outcome(
                False, error=f"{exc} evaluating rule: {rule.message or _compact(rule.rule)}"
            )
        if not isinstance(result, (celtypes.BoolType, bool)):
            return _Outcome(False, error=f"rule did not evaluate to a bool: {_compact(rule.rule)}")
        if bool(result):
            return _Outcome(True)
        return _Outcome(False, message=self._message(rule, activation))

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
        # Outcomes of rule evaluations by rule and inputs (bounded; see _outcome_key).
        self._outcomes: dict[tuple[Any, ...], _Outcome] = {}

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
        if old is None:
            _validate(self._root, obj, "", errors)
            run = _CelRun(self._outcomes, None)
            run.walk(self._root, obj, _MISSING, _MISSING, "", root=True)
            errors.extend(run.errors)
            return errors
        ratchet = _Ratchet()
        _validate(self._root, obj, "", errors, old, ratchet)
        # List-type errors are checked on the whole object, and reported only if the old object
        # had none (the strategies' ValidateUpdate in apiextensions-apiserver).
        list_errors: list[FieldError] = []
        _list_type_errors(self._root, obj, "", list_errors)
        if list_errors:
            old_list_errors: list[FieldError] = []
            _list_type_errors(self._root, old, "", old_list_errors)
            if not old_list_errors:
                errors.extend(list_errors)
        run = _CelRun(self._outcomes, ratchet)
        run.walk(self._root, obj, old, old, "", root=True)
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
    process. Raises :class:`~dispatcher_sandbox.fake_apiserver.cel.CELCompileError` if a rule does
    not
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
