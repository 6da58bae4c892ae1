"""Unit tests of the schema and CEL modules with small hand-written schemas (docs/fake-apiserver.md
F42–F47)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from dispatcher_sandbox.fake_apiserver.cel import (
    CELCompileError,
    CELEvalError,
    Program,
    compile_cel,
)
from dispatcher_sandbox.fake_apiserver.schema import (
    CompiledSchema,
    FieldError,
    compile_expression,
    compile_schema,
    invalid_message,
)


def root(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A root schema whose ``spec`` is ``spec``."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }
    schema.update(extra)
    return schema


def obj(spec: Any) -> dict[str, Any]:
    return {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": spec}


def errors_of(spec_schema: dict[str, Any], spec: Any, old: Any = None) -> list[FieldError]:
    schema = compile_schema(root(spec_schema))
    return schema.admit(obj(spec), obj(old) if old is not None else None)[1]


S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741


def props(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


# --- F42: one row per keyword --------------------------------------------------------------------

F42_CASES: list[Any] = [
    pytest.param(
        props(a=I),
        {"a": "x"},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a",
                'Invalid value: "string": spec.a in body must be of type integer: "string"',
            )
        ],
        id="type-integer-got-string",
    ),
    pytest.param(
        props(a=I),
        {"a": 1.5},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a",
                'Invalid value: "number": spec.a in body must be of type integer: "number"',
            )
        ],
        id="type-integer-got-float",
    ),
    pytest.param(
        props(a=I),
        {"a": True},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a",
                'Invalid value: "boolean": spec.a in body must be of type integer: "boolean"',
            )
        ],
        id="type-integer-got-bool",
    ),
    pytest.param(props(a={"type": "number"}), {"a": 3}, [], id="type-number-accepts-int"),
    pytest.param(
        props(a={"type": "boolean"}),
        {"a": "true"},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a",
                'Invalid value: "string": spec.a in body must be of type boolean: "string"',
            )
        ],
        id="type-boolean",
    ),
    pytest.param(
        props(a={"type": "array", "items": S}),
        {"a": {}},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a",
                'Invalid value: "object": spec.a in body must be of type array: "object"',
            )
        ],
        id="type-array",
    ),
    pytest.param(
        props(("a", "b"), a=S, b=S),
        {"a": "x"},
        [FieldError("FieldValueRequired", "spec.b", "Required value")],
        id="required",
    ),
    pytest.param(
        props(a={"type": "string", "enum": ["x", "y"]}),
        {"a": "z"},
        [
            FieldError(
                "FieldValueNotSupported",
                "spec.a",
                'Unsupported value: "z": supported values: "x", "y"',
            )
        ],
        id="enum",
    ),
    pytest.param(
        props(a={"type": "array", "items": S, "maxItems": 1}),
        {"a": ["x", "y"]},
        [FieldError("FieldValueTooMany", "spec.a", "Too many: 2: must have at most 1 items")],
        id="maxItems",
    ),
    pytest.param(
        props(a={"type": "array", "items": S, "minItems": 1}),
        {"a": []},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                "Invalid value: 0: spec.a in body should have at least 1 items",
            )
        ],
        id="minItems",
    ),
    pytest.param(
        props(a={"type": "string", "maxLength": 2}),
        {"a": "abc"},
        [FieldError("FieldValueTooLong", "spec.a", "Too long: may not be more than 2 bytes")],
        id="maxLength",
    ),
    pytest.param(
        props(a={"type": "string", "minLength": 2}),
        {"a": "a"},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                'Invalid value: "a": spec.a in body should be at least 2 chars long',
            )
        ],
        id="minLength",
    ),
    pytest.param(
        props(a={"type": "string", "pattern": "^[a-z]+$"}),
        {"a": "A"},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                "Invalid value: \"A\": spec.a in body should match '^[a-z]+$'",
            )
        ],
        id="pattern",
    ),
    pytest.param(
        props(a={"type": "string", "pattern": "b"}),
        {"a": "abc"},
        [],
        id="pattern-unanchored-search",
    ),
    pytest.param(
        props(a={"type": "string", "pattern": "^(?i)[a-z]+$"}),
        {"a": "AbC"},
        [],
        id="pattern-inline-flag-after-anchor",
    ),
    pytest.param(
        props(a={"type": "integer", "minimum": 1}),
        {"a": 0},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                "Invalid value: 0: spec.a in body should be greater than or equal to 1",
            )
        ],
        id="minimum",
    ),
    pytest.param(
        props(a={"type": "integer", "minimum": 1, "exclusiveMinimum": True}),
        {"a": 1},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                "Invalid value: 1: spec.a in body should be greater than 1",
            )
        ],
        id="exclusiveMinimum",
    ),
    pytest.param(
        props(a={"type": "integer", "maximum": 5}),
        {"a": 6},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                "Invalid value: 6: spec.a in body should be less than or equal to 5",
            )
        ],
        id="maximum",
    ),
    pytest.param(
        props(a={"type": "integer", "maximum": 5, "exclusiveMaximum": True}),
        {"a": 5},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                "Invalid value: 5: spec.a in body should be less than 5",
            )
        ],
        id="exclusiveMaximum",
    ),
    pytest.param(
        props(a={"type": "string", "nullable": True}), {"a": None}, [], id="nullable-null-allowed"
    ),
    pytest.param(
        props(a={"type": "array", "items": S}),
        {"a": ["x", None]},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a[1]",
                'Invalid value: "null": spec.a[1] in body must be of type string: "null"',
            )
        ],
        id="null-list-item-rejected",
    ),
    pytest.param(
        props(
            a={
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
            }
        ),
        {"a": 3},
        [],
        id="int-or-string-int",
    ),
    pytest.param(
        props(a={"x-kubernetes-int-or-string": True}), {"a": "3"}, [], id="int-or-string-string"
    ),
    pytest.param(
        props(a={"x-kubernetes-int-or-string": True}),
        {"a": 1.5},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a",
                'Invalid value: "number": spec.a in body must be of type integer,string: "number"',
            )
        ],
        id="int-or-string-float",
    ),
    pytest.param(
        props(a={"type": "object", "additionalProperties": I}),
        {"a": {"k": "v"}},
        [
            FieldError(
                "FieldValueTypeInvalid",
                "spec.a.k",
                'Invalid value: "string": spec.a.k in body must be of type integer: "string"',
            )
        ],
        id="additionalProperties",
    ),
    pytest.param(
        props(a={"type": "object", "additionalProperties": S, "maxProperties": 1}),
        {"a": {"k": "v", "l": "w"}},
        [FieldError("FieldValueTooMany", "spec.a", "Too many: 2: must have at most 1 items")],
        id="maxProperties",
    ),
    pytest.param(
        props(a={"type": "array", "x-kubernetes-list-type": "set", "items": S}),
        {"a": ["x", "y", "x", "x"]},
        [FieldError("FieldValueDuplicate", "spec.a[2]", 'Duplicate value: "x"')],
        id="set-duplicate",
    ),
    pytest.param(
        props(
            a={
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": props(("name",), name=S, v=I),
            }
        ),
        {"a": [{"name": "x", "v": 1}, {"name": "x", "v": 2}]},
        [
            FieldError(
                "FieldValueDuplicate",
                "spec.a[1]",
                'Duplicate value: map[string]interface {}{"name":"x"}',
            )
        ],
        id="map-list-duplicate-key",
    ),
    pytest.param(
        props(a={"type": "string", "format": "date-time"}),
        {"a": "2026-01-01T00:00:00Z"},
        [],
        id="date-time-ok",
    ),
    pytest.param(
        props(a={"type": "string", "format": "date-time"}),
        {"a": "soon"},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                'Invalid value: "soon": spec.a in body must be of type date-time: "soon"',
            )
        ],
        id="date-time-bad",
    ),
    pytest.param(
        props(a={"type": "integer", "multipleOf": 2}),
        {"a": 3},
        [
            FieldError(
                "FieldValueInvalid",
                "spec.a",
                "Invalid value: 3: spec.a in body should be a multiple of 2",
            )
        ],
        id="multipleOf",
    ),
]


@pytest.mark.parametrize(("schema", "spec", "expected"), F42_CASES)
def test_f42_keyword(schema: dict[str, Any], spec: Any, expected: list[FieldError]) -> None:
    assert errors_of(schema, spec) == expected


def test_f42_type_error_stops_descent() -> None:
    schema = props(a=props(("b",), b=S))
    assert [e.field for e in errors_of(schema, {"a": 5})] == ["spec.a"]


# --- F43: pruning, nulls and defaults ------------------------------------------------------------


def test_f43_prune_unknown_fields_and_keep_root_identity() -> None:
    schema = compile_schema(root(props(a=props(b=S))))
    new = {
        "apiVersion": "x/v1",
        "kind": "K",
        "metadata": {"name": "n", "whatever": {"deep": [1]}},
        "spec": {"a": {"b": "x", "c": 1}, "z": 2},
        "extra": True,
    }
    before = copy.deepcopy(new)
    stored, errors = schema.admit(new, None)
    assert errors == []
    assert new == before
    assert stored == {
        "apiVersion": "x/v1",
        "kind": "K",
        "metadata": {"name": "n", "whatever": {"deep": [1]}},
        "spec": {"a": {"b": "x"}},
    }


def test_f43_preserve_unknown_fields_keeps_unknown_but_prunes_known_children() -> None:
    schema = props(a=props(b=S))
    schema["x-kubernetes-preserve-unknown-fields"] = True
    compiled = compile_schema(root(schema))
    stored, _ = compiled.admit(obj({"a": {"b": "x", "c": 1}, "free": {"any": [1]}}), None)
    assert stored["spec"] == {"a": {"b": "x"}, "free": {"any": [1]}}


def test_f43_additional_properties_values_are_pruned() -> None:
    compiled = compile_schema(root(props(m={"type": "object", "additionalProperties": props(x=S)})))
    stored, _ = compiled.admit(obj({"m": {"k": {"x": "1", "y": "2"}}}), None)
    assert stored["spec"] == {"m": {"k": {"x": "1"}}}


def test_f43_defaults_are_applied_top_down() -> None:
    schema = props(
        a={
            "type": "object",
            "default": {},
            "properties": {"b": {"type": "string", "default": "B"}},
        },
        items={
            "type": "array",
            "items": props(n={"type": "integer", "default": 1}, s=S),
        },
        keep={"type": "string", "default": "D"},
    )
    compiled = compile_schema(root(schema))
    stored, errors = compiled.admit(obj({"items": [{"s": "x"}, {"n": 5}], "keep": "mine"}), None)
    assert errors == []
    assert stored["spec"] == {
        "a": {"b": "B"},
        "items": [{"s": "x", "n": 1}, {"n": 5}],
        "keep": "mine",
    }


def test_f43_nulls_for_non_nullable_fields() -> None:
    schema = props(
        dropped=S,
        defaulted={"type": "string", "default": "D"},
        kept={"type": "string", "nullable": True},
    )
    compiled = compile_schema(root(schema))
    stored, errors = compiled.admit(obj({"dropped": None, "defaulted": None, "kept": None}), None)
    assert errors == []
    assert stored["spec"] == {"defaulted": "D", "kept": None}


# --- F44: CEL rules ------------------------------------------------------------------------------


def ruled(rule: dict[str, Any], schema: dict[str, Any] | None = None) -> dict[str, Any]:
    node = copy.deepcopy(schema) if schema is not None else props(a=I, b=I)
    node["x-kubernetes-validations"] = [rule]
    return node


def test_f44_rule_failure_message_and_node_type() -> None:
    schema = ruled({"rule": "self.a < self.b", "message": "a must be below b"})
    assert errors_of(schema, {"a": 1, "b": 2}) == []
    assert errors_of(schema, {"a": 2, "b": 1}) == [
        FieldError("FieldValueInvalid", "spec", 'Invalid value: "object": a must be below b')
    ]


def test_f44_rule_without_message() -> None:
    schema = ruled({"rule": "self.a <  self.b"})
    [error] = errors_of(schema, {"a": 2, "b": 1})
    assert error.message == 'Invalid value: "object": failed rule: self.a < self.b'


def test_f44_message_expression_reason_and_field_path() -> None:
    schema = ruled(
        {
            "rule": "self.a < self.b",
            "messageExpression": "'a is ' + string(self.a)",
            "message": "unused",
            "reason": "FieldValueForbidden",
            "fieldPath": ".a",
        }
    )
    assert errors_of(schema, {"a": 3, "b": 1}) == [
        FieldError("FieldValueForbidden", "spec.a", "Forbidden: a is 3")
    ]


def test_f44_rule_under_absent_node_not_evaluated() -> None:
    schema = props(inner=ruled({"rule": "false", "message": "never"}, props(x=S)))
    assert errors_of(schema, {}) == []
    assert [e.message for e in errors_of(schema, {"inner": {}})] == [
        'Invalid value: "object": never'
    ]


def test_f44_rules_on_list_items_and_scalars() -> None:
    item = ruled({"rule": "self.size() <= 3", "message": "short"}, {"type": "string"})
    schema = props(names={"type": "array", "items": item})
    assert errors_of(schema, {"names": ["abc", "abcd"]}) == [
        FieldError("FieldValueInvalid", "spec.names[1]", 'Invalid value: "string": short')
    ]


def test_f44_root_rule_reports_nil_field() -> None:
    schema = root(props(a=I))
    schema["x-kubernetes-validations"] = [{"rule": "self.spec.a > 0", "message": "positive"}]
    compiled = compile_schema(schema)
    assert compiled.admit(obj({"a": 0}), None)[1] == [
        FieldError("FieldValueInvalid", "<nil>", 'Invalid value: "object": positive')
    ]


def test_f44_evaluation_error_is_reported() -> None:
    schema = ruled({"rule": "self.missing == 1", "message": "m"})
    [error] = errors_of(schema, {"a": 1})
    assert error.message == 'Invalid value: "object": no such key: missing evaluating rule: m'


def test_f44_cel_sees_json_integers_as_int_and_number_fields_as_double() -> None:
    schema = ruled(
        {"rule": "self.i == 2 && self.d == 2.0", "message": "m"}, props(i=I, d={"type": "number"})
    )
    assert errors_of(schema, {"i": 2, "d": 2}) == []


def test_f44_cel_macros_and_ternary() -> None:
    rule = (
        "self.l.all(x, x > 0) && self.l.exists(x, x == 2) && size(self.l.filter(x, x > 1)) == 2"
        " && self.l.size() == 3 && (has(self.m.k) ? self.m.k == 'v' : false) && !has(self.m.z)"
    )
    schema = ruled(
        {"rule": rule, "message": "m"},
        props(l={"type": "array", "items": I}, m={"type": "object", "additionalProperties": S}),
    )
    assert errors_of(schema, {"l": [1, 2, 3], "m": {"k": "v"}}) == []
    assert len(errors_of(schema, {"l": [1, 2, 3], "m": {"k": "w"}})) == 1


# --- F45: transition rules -----------------------------------------------------------------------

IMMUTABLE = {"rule": "self == oldSelf", "message": "immutable"}


def test_f45_transition_rule_needs_old_value() -> None:
    schema = props(a=ruled(IMMUTABLE, S))
    assert errors_of(schema, {"a": "x"}) == []  # create
    assert errors_of(schema, {"a": "x"}, old={}) == []  # old has no value
    assert errors_of(schema, {"a": "y"}, old={"a": "x"}) == [
        FieldError("FieldValueInvalid", "spec.a", 'Invalid value: "string": immutable')
    ]


def test_f45_map_list_items_are_correlated_by_key() -> None:
    item = props(("name",), name=S, v=ruled(IMMUTABLE, I))
    schema = props(
        l={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": item,
        }
    )
    old = {"l": [{"name": "a", "v": 1}, {"name": "b", "v": 2}]}
    assert errors_of(schema, {"l": [{"name": "b", "v": 2}, {"name": "a", "v": 1}]}, old) == []
    assert errors_of(schema, {"l": [{"name": "c", "v": 9}]}, old) == []  # new key: no old value
    assert [e.field for e in errors_of(schema, {"l": [{"name": "b", "v": 3}]}, old)] == [
        "spec.l[0].v"
    ]


@pytest.mark.parametrize("list_type", ["atomic", "set"])
def test_f45_items_of_atomic_and_set_lists_have_no_old_value(list_type: str) -> None:
    schema = props(
        l={"type": "array", "x-kubernetes-list-type": list_type, "items": ruled(IMMUTABLE, S)}
    )
    assert errors_of(schema, {"l": ["b"]}, old={"l": ["a"]}) == []


def test_f45_map_entries_are_correlated_by_key() -> None:
    schema = props(m={"type": "object", "additionalProperties": ruled(IMMUTABLE, S)})
    assert errors_of(schema, {"m": {"k": "v", "n": "w"}}, old={"m": {"k": "v"}}) == []
    assert errors_of(schema, {"m": {"k": "x"}}, old={"m": {"k": "v"}}) == [
        FieldError("FieldValueInvalid", "spec.m[k]", 'Invalid value: "string": immutable')
    ]


def test_f45_optional_old_self() -> None:
    rule = {
        "rule": "!oldSelf.hasValue() ? self == 'first' : self == oldSelf.value()",
        "message": "m",
        "optionalOldSelf": True,
    }
    schema = props(a=ruled(rule, S))
    assert errors_of(schema, {"a": "first"}) == []
    assert len(errors_of(schema, {"a": "other"})) == 1  # evaluated on create too
    assert errors_of(schema, {"a": "x"}, old={"a": "x"}) == []
    assert len(errors_of(schema, {"a": "y"}, old={"a": "x"})) == 1


# --- F47: CEL library ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "quantity(self.q).isLessThan(quantity('1'))",
        "self.s.lowerAscii() == 's'",
        "url(self.u).getHost() == 'x'",
        "self.l.sum() > 0",
    ],
)
def test_f47_kubernetes_extension_functions_fail_at_compile_time(expr: str) -> None:
    with pytest.raises(CELCompileError, match="outside standard CEL"):
        compile_cel(expr)
    schema = ruled({"rule": expr}, props(q=S, s=S, u=S, l={"type": "array", "items": I}))
    with pytest.raises(CELCompileError):
        compile_schema(root(schema))


def test_f47_syntax_error_fails_at_compile_time() -> None:
    with pytest.raises(CELCompileError):
        compile_cel("self.a ==")


def test_f47_expressions_compile_once() -> None:
    assert compile_cel("1 + 1 == 2") is compile_cel("1 + 1 == 2")


def test_compile_expression_returns_plain_values() -> None:
    match = compile_expression(
        "has(object.status) && object.status.nominatedClusterNames.size() > 0"
        " && (oldObject == null || !has(oldObject.status.clusterName))"
    )
    new = {"status": {"nominatedClusterNames": ["a"], "clusterName": "a"}}
    assert match({"object": new, "oldObject": None}) is True
    assert match({"object": new, "oldObject": {"status": {"clusterName": "a"}}}) is False
    value = compile_expression("{'a': [1, 'x', true, 1.5]}")({})
    assert value == {"a": [1, "x", True, 1.5]}
    assert type(value["a"][0]) is int
    with pytest.raises(CELEvalError):
        compile_expression("object.nope")({"object": {}})


def test_an_evaluation_logs_nothing_with_the_root_logger_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # celpy traces each step of an evaluation with the whole activation; formatting those
    # records (87,712 in one run of the seeded mix, each the repr of a Workload) cost more CPU
    # than the CRD validation itself and slowed the emulated control plane behind real Kueue's.
    match = compile_expression(
        "has(object.status) && object.status.conditions.exists(c, c.type == 'Admitted')"
    )
    with caplog.at_level(logging.DEBUG):
        assert match({"object": {"status": {"conditions": [{"type": "Admitted"}]}}}) is True
    assert [r.name for r in caplog.records if r.name.startswith("celpy")] == []


# --- API odds and ends ---------------------------------------------------------------------------


def test_invalid_message_joins_several_errors() -> None:
    errors = [
        FieldError("FieldValueRequired", "spec.a", "Required value"),
        FieldError("FieldValueInvalid", "spec", 'Invalid value: "object": m'),
        FieldError("FieldValueRequired", "spec.a", "Required value"),
    ]
    assert invalid_message("K", "x.io", "n", errors) == (
        'K.x.io "n" is invalid: [spec.a: Required value, spec: Invalid value: "object": m]'
    )
    assert (
        invalid_message("Pod", "", "p", errors[:1]) == 'Pod "p" is invalid: spec.a: Required value'
    )


def test_structure_info_nodes() -> None:
    schema = props(
        l={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["a", "b"],
            "items": props(a=S, b=S),
        },
        m={"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": S},
    )
    compiled = compile_schema(root(schema))
    spec = compiled.root.child("spec")
    assert spec is not None
    assert spec.list_type is None
    assert spec.map_type is None
    lst = spec.child("l")
    assert lst is not None
    assert (lst.list_type, lst.list_map_keys) == ("map", ("a", "b"))
    assert lst.items() is not None
    m = spec.child("m")
    assert m is not None
    assert m.map_type == "atomic"
    assert m.child("anything") is not None  # additionalProperties
    assert spec.child("nope") is None


def test_compile_schema_is_cached() -> None:
    schema = root(props(a=S))
    assert compile_schema(schema) is compile_schema(schema)
    assert compile_schema(copy.deepcopy(schema)) is compile_schema(schema)


# --- Validation ratcheting (KEP-4008; CRDValidationRatcheting, GA in Kubernetes 1.33) -------------

SHORT = {"type": "string", "maxLength": 2}
TOO_LONG = "Too long: may not be more than 2 bytes"
SHORT_RULE = {"rule": "self.size() <= 2", "message": "short"}
SHORT_RULE_ERROR = 'Invalid value: "string": short'


def _list(list_type: str | None, items: dict[str, Any], *keys: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": items}
    if list_type is not None:
        schema["x-kubernetes-list-type"] = list_type
    if keys:
        schema["x-kubernetes-list-map-keys"] = list(keys)
    return schema


NAMED = props(("name",), name=S, v=SHORT)

# (schema of spec, old spec, new spec, expected (field, message) pairs). Every old spec is invalid:
# it stands for an object stored before its CRD was tightened.
RATCHET_CASES: list[Any] = [
    pytest.param(
        props(a=SHORT, b=S),
        {"a": "xxx", "b": "1"},
        {"a": "xxx", "b": "2"},
        [],
        id="structural-unchanged-invalid-field-accepted",
    ),
    pytest.param(
        props(a=SHORT, b=S),
        {"a": "xxx", "b": "1"},
        {"a": "yyy", "b": "1"},
        [("spec.a", TOO_LONG)],
        id="structural-changed-to-other-invalid-value-rejected",
    ),
    pytest.param(
        props(a=ruled(SHORT_RULE, S), b=S),
        {"a": "xxx", "b": "1"},
        {"a": "xxx", "b": "2"},
        [],
        id="cel-unchanged-invalid-field-accepted",
    ),
    pytest.param(
        props(a=ruled(SHORT_RULE, S), b=S),
        {"a": "xxx", "b": "1"},
        {"a": "yyy", "b": "1"},
        [("spec.a", SHORT_RULE_ERROR)],
        id="cel-changed-to-other-invalid-value-rejected",
    ),
    pytest.param(
        ruled({"rule": "self.a < self.b", "message": "a<b"}, props(a=I, b=I, c=S)),
        {"a": 2, "b": 1, "c": "x"},
        {"a": 2, "b": 1, "c": "y"},
        [("spec", 'Invalid value: "object": a<b')],
        id="cel-rule-on-changed-node-rejected-though-its-inputs-are-unchanged",
    ),
    pytest.param(
        props(a=SHORT, b=S),
        {"a": 12},
        {"a": 12, "b": "1"},
        [],
        id="structural-unchanged-wrong-type-accepted",
    ),
    pytest.param(
        props(n=I, b=S),
        {"n": 1},
        {"n": True, "b": "1"},
        [("spec.n", 'Invalid value: "boolean": spec.n in body must be of type integer: "boolean"')],
        id="true-is-not-equal-to-1",
    ),
    pytest.param(
        props(l=_list("map", NAMED, "name"), b=S),
        {"l": [{"name": "p", "v": "xxx"}, {"name": "q", "v": "ok"}]},
        {"l": [{"name": "q", "v": "ok"}, {"name": "p", "v": "xxx"}], "b": "1"},
        [],
        id="map-list-items-correlate-by-key-reordered-accepted",
    ),
    pytest.param(
        props(l=_list("map", NAMED, "name")),
        {"l": [{"name": "p", "v": "xxx"}]},
        {"l": [{"name": "p", "v": "xxx"}, {"name": "q", "v": "yyy"}]},
        [("spec.l[1].v", TOO_LONG)],
        id="map-list-new-item-validated-old-item-ratcheted",
    ),
    pytest.param(
        props(l=_list(None, SHORT)),
        {"l": ["xxx"]},
        {"l": ["xxx", "ok"]},
        [],
        id="plain-list-items-correlate-by-index-accepted",
    ),
    pytest.param(
        props(l=_list(None, SHORT)),
        {"l": ["xxx"]},
        {"l": ["ok", "xxx"]},
        [("spec.l[1]", TOO_LONG)],
        id="plain-list-item-moved-to-another-index-rejected",
    ),
    pytest.param(
        props(l=_list("atomic", SHORT), b=S),
        {"l": ["xxx"]},
        {"l": ["xxx"], "b": "1"},
        [],
        id="atomic-list-unchanged-accepted",
    ),
    pytest.param(
        props(l=_list("atomic", SHORT)),
        {"l": ["xxx"]},
        {"l": ["xxx", "ok"]},
        [("spec.l[0]", TOO_LONG)],
        id="atomic-list-items-do-not-correlate-changed-list-rejected",
    ),
    pytest.param(
        props(l=_list("set", ruled(SHORT_RULE, S))),
        {"l": ["xxx"]},
        {"l": ["xxx", "ok"]},
        [("spec.l[0]", SHORT_RULE_ERROR)],
        id="set-list-items-do-not-correlate-changed-list-rejected",
    ),
    pytest.param(
        props(m={"type": "object", "additionalProperties": SHORT}),
        {"m": {"k": "xxx"}},
        {"m": {"k": "xxx", "n": "ok"}},
        [],
        id="map-entries-correlate-by-key-accepted",
    ),
    pytest.param(
        props(l=_list("set", S)),
        {"l": ["a"]},
        {"l": ["a", "a"]},
        [("spec.l[1]", 'Duplicate value: "a"')],
        id="set-duplicate-new-rejected",
    ),
    pytest.param(
        props(l=_list("set", S)),
        {"l": ["a", "a"]},
        {"l": ["a", "a", "b"]},
        [],
        id="set-duplicate-accepted-when-old-object-had-list-type-errors",
    ),
    pytest.param(
        props(a=ruled({"rule": "!(self == 'x' && oldSelf == 'x')", "message": "stuck"}, S), b=S),
        {"a": "x", "b": "1"},
        {"a": "x", "b": "2"},
        [("spec.a", 'Invalid value: "string": stuck')],
        id="transition-rule-on-unchanged-value-still-fires",
    ),
    pytest.param(
        props(i=ruled({"rule": "self.missing == 1", "message": "m"}, props(x=S)), b=S),
        {"i": {"x": "1"}, "b": "1"},
        {"i": {"x": "1"}, "b": "2"},
        [("spec.i", 'Invalid value: "object": no such key: missing evaluating rule: m')],
        id="evaluation-error-on-unchanged-value-still-reported",
    ),
]


@pytest.mark.parametrize(("schema", "old", "new", "expected"), RATCHET_CASES)
def test_ratcheting_on_update(
    schema: dict[str, Any], old: Any, new: Any, expected: list[tuple[str, str]]
) -> None:
    assert [(e.field, e.message) for e in errors_of(schema, new, old=old)] == expected


@pytest.mark.parametrize(
    ("schema", "spec", "expected"),
    [
        pytest.param(props(a=SHORT), {"a": "xxx"}, ("spec.a", TOO_LONG), id="structural"),
        pytest.param(
            props(a=ruled(SHORT_RULE, S)), {"a": "xxx"}, ("spec.a", SHORT_RULE_ERROR), id="cel"
        ),
    ],
)
def test_ratcheting_never_on_create(
    schema: dict[str, Any], spec: Any, expected: tuple[str, str]
) -> None:
    assert [(e.field, e.message) for e in errors_of(schema, spec)] == [expected]
    # The same value stored and written again unchanged is ratcheted.
    assert errors_of(schema, spec, old=spec) == []


# --- Rule outcomes are reused when a rule's inputs did not change ---------------------------------


class _Counter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = Program.evaluate_cel

        def counting(program: Program, activation: Any) -> Any:
            self.calls += 1
            return original(program, activation)

        monkeypatch.setattr(Program, "evaluate_cel", counting)

    def take(self) -> int:
        calls, self.calls = self.calls, 0
        return calls


def test_rule_outcomes_are_reused_for_unchanged_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    item = ruled({"rule": "self.size() <= 2", "message": "short"}, S)
    raw = root(props(a=I, b=I, c=S, l=_list(None, item)))
    raw["x-kubernetes-validations"] = [{"rule": "self.spec.a < self.spec.b", "message": "<"}]
    schema = CompiledSchema(raw)  # not compile_schema: a fresh, unshared cache of outcomes
    counter = _Counter(monkeypatch)

    def errors(spec: dict[str, Any]) -> list[tuple[str, str]]:
        return [(e.field, e.message) for e in schema.admit(obj(spec), None)[1]]

    assert errors({"a": 2, "b": 1, "c": "x", "l": ["xxx"]}) == [
        ("<nil>", 'Invalid value: "object": <'),
        ("spec.l[0]", 'Invalid value: "string": short'),
    ]
    assert counter.take() == 2
    # Same inputs: nothing is evaluated again, and the outcomes are reported at their places.
    assert errors({"a": 2, "b": 1, "c": "y", "l": ["ok", "xxx"]}) == [
        ("<nil>", 'Invalid value: "object": <'),
        ("spec.l[1]", 'Invalid value: "string": short'),
    ]
    assert counter.take() == 1  # only "ok" is new
    assert errors({"a": 1, "b": 2, "c": "y", "l": []}) == []
    assert counter.take() == 1  # the root rule reads spec.a and spec.b, which changed


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param("self == oldSelf", [("oldSelf", False, ()), ("self", False, ())], id="bare"),
        pytest.param(
            "has(self.a.b) && self.c.d.exists(x, x > self.e)",
            [("self", False, ("c", "d")), ("self", False, ("e",)), ("self", True, ("a", "b"))],
            id="has-is-presence-only",
        ),
        pytest.param("self.m['k'] == 1", [("self", False, ("m",))], id="index-ends-the-path"),
        pytest.param(
            "oldSelf.value().a == self.a",
            [("oldSelf", False, ()), ("self", False, ("a",))],
            id="method-call-ends-the-path",
        ),
        pytest.param("1 == 1", [], id="none"),
    ],
)
def test_cel_dependencies(expr: str, expected: list[Any]) -> None:
    assert list(compile_cel(expr).dependencies) == expected
