"""Unit tests of the server-side apply engine (docs/fake-apiserver.md F33-F38, contract C43)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from dispatcher_sandbox.fake_apiserver.managed import (
    ApplyConflict,
    apply,
    decode_fields_v1,
    encode_fields_v1,
    field_path_string,
    record_update,
    strip_ignored,
)
from dispatcher_sandbox.fake_apiserver.structure import StructureInfo

API = "kueue.x-k8s.io/v1beta2"
T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:00:01Z"
T2 = "2026-01-01T00:00:02Z"
T3 = "2026-01-01T00:00:03Z"
READY = 'k:{"type":"Ready"}'
ADMITTED = 'k:{"type":"Admitted"}'


# ---------------------------------------------------------------------------------------------
# Builders


@dataclass
class Node:
    """A tiny StructureInfo for tests."""

    list_type: str | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: str | None = None
    props: dict[str, Node] = field(default_factory=dict)
    item: Node | None = None

    def child(self, name: str) -> StructureInfo | None:
        return self.props.get(name)

    def items(self) -> StructureInfo | None:
        return self.item


def map_list(*keys: str) -> Node:
    return Node(list_type="map", list_map_keys=keys, item=Node())


# A Workload-like schema: conditions keyed by type, nominatedClusterNames atomic (contract C19).
WORKLOAD = Node(
    props={
        "spec": Node(
            props={
                "selector": Node(map_type="atomic"),
                "tags": Node(list_type="set"),
                "podSets": map_list("name"),
            }
        ),
        "status": Node(
            props={
                "conditions": map_list("type"),
                "admissionChecks": map_list("name"),
                "nominatedClusterNames": Node(list_type="atomic"),
            }
        ),
    }
)


def wl(**top: Any) -> dict[str, Any]:
    """An apply body (or object) for Workload ``ns/wl`` with the given top-level fields."""
    meta = top.pop("metadata", {})
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ns", **meta},
        **top,
    }


def cond(type_: str, status: str = "True", reason: str = "R") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason}


def do_apply(
    live: dict[str, Any] | None,
    body: dict[str, Any],
    manager: str,
    *,
    sub: str | None = None,
    force: bool = False,
    now: str = T1,
    schema: StructureInfo | None = WORKLOAD,
    status_sub: bool = True,
) -> dict[str, Any]:
    return apply(
        live,
        body,
        manager=manager,
        api_version=API,
        subresource=sub,
        status_subresource=status_sub,
        force=force,
        schema=schema,
        now=now,
    )


def do_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    *,
    operation: str = "Update",
    sub: str | None = None,
    now: str = T1,
) -> dict[str, Any]:
    return record_update(
        old,
        new,
        manager=manager,
        operation=operation,
        api_version=API,
        subresource=sub,
        schema=WORKLOAD,
        now=now,
    )


def entry(
    obj: dict[str, Any], manager: str, operation: str = "Apply", *, sub: Any = ...
) -> dict[str, Any]:
    """The one entry of ``manager``/``operation`` (and subresource ``sub`` unless omitted)."""
    every: list[dict[str, Any]] = obj["metadata"].get("managedFields", [])
    found = [e for e in every if e["manager"] == manager and e["operation"] == operation]
    if sub is not ...:
        found = [e for e in found if e.get("subresource") == sub]
    assert len(found) == 1, obj["metadata"].get("managedFields")
    return found[0]


def fields(obj: dict[str, Any], manager: str, operation: str = "Apply") -> dict[str, Any]:
    fields_v1: dict[str, Any] = entry(obj, manager, operation)["fieldsV1"]
    return fields_v1


def managers(obj: dict[str, Any]) -> set[tuple[str, str, str | None]]:
    return {
        (e["manager"], e["operation"], e.get("subresource"))
        for e in obj["metadata"].get("managedFields", [])
    }


# ---------------------------------------------------------------------------------------------
# F33: entries and the fieldsV1 encoding


def test_f33_apply_creates_entry_with_real_encoding() -> None:
    """F33: a create by apply records one Apply entry with f:/k:/. keys."""
    body = wl(
        metadata={"labels": {"app": "x"}, "uid": "u", "resourceVersion": "7"},
        spec={"queueName": "q"},
        status={"conditions": [cond("Ready")]},
    )
    obj = do_apply(None, body, "me", status_sub=False)
    assert obj["metadata"]["managedFields"] == [
        {
            "manager": "me",
            "operation": "Apply",
            "apiVersion": API,
            "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:queueName": {}},
                "f:status": {
                    "f:conditions": {READY: {".": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}
                },
            },
        }
    ]
    assert obj["apiVersion"] == API
    assert obj["kind"] == "Workload"
    assert obj["metadata"]["name"] == "wl"
    assert obj["metadata"]["namespace"] == "ns"
    assert obj["status"] == {"conditions": [cond("Ready")]}
    assert next(iter(fields(obj, "me")["f:status"]["f:conditions"][READY])) == "."


def test_f33_same_manager_per_subresource_gets_separate_entries() -> None:
    """F33: one entry per (manager, operation, subresource)."""
    obj = do_apply(None, wl(spec={"a": 1}), "me")
    obj = do_apply(obj, wl(status={"clusterName": "w1"}), "me", sub="status", now=T2)
    assert managers(obj) == {("me", "Apply", None), ("me", "Apply", "status")}
    status_entry = next(e for e in obj["metadata"]["managedFields"] if e.get("subresource"))
    assert status_entry["fieldsV1"] == {"f:status": {"f:clusterName": {}}}
    assert status_entry["time"] == T2


@pytest.mark.parametrize(
    ("paths", "encoded"),
    [
        pytest.param(
            {("f:spec", "f:a")},
            {"f:spec": {"f:a": {}}},
            id="leaf",
        ),
        pytest.param(
            {("f:spec",), ("f:spec", "f:a")},
            {"f:spec": {".": {}, "f:a": {}}},
            id="owned-parent-with-children",
        ),
        pytest.param(
            {("f:s", "f:c", READY), ("f:s", "f:c", READY, "f:type")},
            {"f:s": {"f:c": {READY: {".": {}, "f:type": {}}}}},
            id="list-map-item",
        ),
        pytest.param(set(), {}, id="empty"),
    ],
)
def test_f33_fields_v1_round_trip(paths: set[tuple[str, ...]], encoded: dict[str, Any]) -> None:
    """F33: fieldsV1 encoding and decoding are inverse."""
    assert encode_fields_v1(paths) == encoded
    assert decode_fields_v1(encoded) == paths


@pytest.mark.parametrize(
    ("path", "text"),
    [
        pytest.param(("f:status", "f:clusterName"), ".status.clusterName", id="fields"),
        pytest.param(
            ("f:status", "f:conditions", READY, "f:status"),
            '.status.conditions[type="Ready"].status',
            id="list-map-key",
        ),
        pytest.param(("f:x", 'k:{"name":"a","port":80}'), '.x[name="a",port=80]', id="two-keys"),
        pytest.param(("f:x", 'v:"a"'), '.x[="a"]', id="set-value"),
    ],
)
def test_f35_field_path_string(path: tuple[str, ...], text: str) -> None:
    """F35: conflict fields are printed the way Kubernetes prints paths."""
    assert field_path_string(path) == text


def test_f33_server_fields_not_owned_but_labels_annotations_finalizers_are() -> None:
    """F33: metadata.name etc. are never owned; labels, annotations, finalizers are."""
    body = wl(
        metadata={
            "labels": {"a": "1"},
            "annotations": {"b": "2"},
            "finalizers": ["f"],
            "generation": 3,
            "creationTimestamp": T0,
        }
    )
    obj = do_apply(None, body, "me")
    assert fields(obj, "me") == {
        "f:metadata": {
            "f:annotations": {"f:b": {}},
            "f:finalizers": {'v:"f"': {}},
            "f:labels": {"f:a": {}},
        }
    }
    assert strip_ignored(obj) == {
        "metadata": {"labels": {"a": "1"}, "annotations": {"b": "2"}, "finalizers": ["f"]}
    }


def test_f33_owner_references_merge_by_uid() -> None:
    """F36: metadata.ownerReferences is a list-map keyed by uid, as in ObjectMeta."""
    ref_a = {"uid": "a", "name": "x", "kind": "Job", "apiVersion": "batch/v1"}
    ref_b = {"uid": "b", "name": "y", "kind": "Job", "apiVersion": "batch/v1"}
    obj = do_apply(None, wl(metadata={"ownerReferences": [ref_a]}), "one")
    obj = do_apply(obj, wl(metadata={"ownerReferences": [ref_b]}), "two")
    assert obj["metadata"]["ownerReferences"] == [ref_a, ref_b]
    assert 'k:{"uid":"b"}' in fields(obj, "two")["f:metadata"]["f:ownerReferences"]


# ---------------------------------------------------------------------------------------------
# Two managers, release and removal (F33, F37)


def test_f33_two_field_managers_on_one_object() -> None:
    """F33/F36: two appliers of different fields each own their own fields."""
    obj = do_apply(None, wl(spec={"a": 1}), "one")
    obj = do_apply(obj, wl(spec={"b": 2}), "two", now=T2)
    assert obj["spec"] == {"a": 1, "b": 2}
    assert fields(obj, "one") == {"f:spec": {"f:a": {}}}
    assert fields(obj, "two") == {"f:spec": {"f:b": {}}}
    assert entry(obj, "one")["time"] == T1
    assert entry(obj, "two")["time"] == T2


def _shared_by_apply(obj: dict[str, Any]) -> dict[str, Any]:
    return do_apply(obj, wl(spec={"a": 1}), "other", now=T2)


def _taken_by_update(obj: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["spec"]["a"] = 5
    return do_update(obj, new, "editor", now=T2)


def _nobody(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


@pytest.mark.parametrize(
    ("setup", "expected_spec"),
    [
        pytest.param(_nobody, {"b": 2}, id="sole-owner-field-removed"),
        pytest.param(_shared_by_apply, {"a": 1, "b": 2}, id="co-owned-by-applier-stays"),
        pytest.param(_taken_by_update, {"a": 5, "b": 2}, id="owned-by-updater-stays"),
    ],
)
def test_f37_dropped_field_removed_only_if_no_one_else_owns_it(
    setup: Any, expected_spec: dict[str, Any]
) -> None:
    """F37: a field left out of a new apply is removed only if nobody else owns it."""
    obj = do_apply(None, wl(spec={"a": 1, "b": 2}), "me")
    obj = setup(obj)
    obj = do_apply(obj, wl(spec={"b": 2}), "me", now=T3)
    assert obj["spec"] == expected_spec
    assert fields(obj, "me") == {"f:spec": {"f:b": {}}}


def test_f37_emptied_parent_removed_but_unowned_siblings_kept() -> None:
    """F37: releasing the last owned field removes its emptied parent, not unowned data."""
    obj = do_apply(None, wl(spec={"x": {"a": 1}}), "me")
    obj = do_apply(obj, wl(), "me", now=T2)
    assert "spec" not in obj
    assert "managedFields" not in obj["metadata"]

    obj = do_apply(None, wl(spec={"x": {"a": 1}}), "me")
    obj["spec"]["x"]["unowned"] = True  # e.g. written before managedFields existed
    obj = do_apply(obj, wl(), "me", now=T2)
    assert obj["spec"] == {"x": {"unowned": True}}


def test_f37_explicit_null_means_not_set() -> None:
    """Module rule: an explicit null in an apply body is dropped (the manager does not set it)."""
    obj = do_apply(None, wl(spec={"a": 1}), "other")
    obj = do_apply(obj, wl(spec={"a": None, "b": 2}), "me", now=T2)
    assert obj["spec"] == {"a": 1, "b": 2}
    assert fields(obj, "me") == {"f:spec": {"f:b": {}}}


# ---------------------------------------------------------------------------------------------
# Conflicts and force (F35)


def _conflicts_case(
    setup: list[tuple[str, str | None, dict[str, Any]]],
) -> dict[str, Any]:
    obj: dict[str, Any] | None = None
    for manager, sub, body in setup:
        obj = do_apply(obj, body, manager, sub=sub, force=True)
    assert obj is not None
    return obj


CONFLICT_CASES = [
    pytest.param(
        [("kueue-admission", "status", wl(status={"clusterName": "w1"}))],
        ("status", wl(status={"clusterName": "w2"})),
        'Apply failed with 1 conflict: conflict with "kueue-admission" with subresource "status": '
        ".status.clusterName",
        [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kueue-admission" with subresource "status"',
                "field": ".status.clusterName",
            }
        ],
        id="one-apply-manager-on-status",
    ),
    pytest.param(
        [("one", None, wl(spec={"x": 1, "y": 2, "z": 3}))],
        (None, wl(spec={"x": 9, "y": 9, "z": 3})),
        'Apply failed with 2 conflicts: conflicts with "one":\n- .spec.x\n- .spec.y',
        [
            {"reason": "FieldManagerConflict", "message": 'conflict with "one"', "field": f}
            for f in (".spec.x", ".spec.y")
        ],
        id="two-fields-one-manager",
    ),
    pytest.param(
        [("b", None, wl(spec={"y": 2})), ("a", None, wl(spec={"x": 1}))],
        (None, wl(spec={"x": 9, "y": 9})),
        'Apply failed with 2 conflicts: conflicts with "a":\n- .spec.x\nconflicts with "b":\n'
        "- .spec.y",
        [
            {"reason": "FieldManagerConflict", "message": 'conflict with "a"', "field": ".spec.x"},
            {"reason": "FieldManagerConflict", "message": 'conflict with "b"', "field": ".spec.y"},
        ],
        id="two-managers-sorted",
    ),
    pytest.param(
        [("kueue", "status", wl(status={"conditions": [cond("Ready"), cond("Admitted")]}))],
        ("status", wl(status={"conditions": [cond("Ready", "False")]})),
        'Apply failed with 1 conflict: conflict with "kueue" with subresource "status": '
        '.status.conditions[type="Ready"].status',
        [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kueue" with subresource "status"',
                "field": '.status.conditions[type="Ready"].status',
            }
        ],
        id="list-map-item-field",
    ),
]


@pytest.mark.parametrize(("setup", "request_", "message", "causes"), CONFLICT_CASES)
def test_f35_conflict_without_force_message_and_causes(
    setup: list[tuple[str, str | None, dict[str, Any]]],
    request_: tuple[str | None, dict[str, Any]],
    message: str,
    causes: list[dict[str, str]],
) -> None:
    """F35: an apply without force that changes others' fields fails with exact causes."""
    live = _conflicts_case(setup)
    snapshot = copy.deepcopy(live)
    sub, body = request_
    with pytest.raises(ApplyConflict) as info:
        do_apply(live, body, "me", sub=sub, now=T3)
    assert info.value.message == message
    assert str(info.value) == message
    assert info.value.causes == causes
    assert live == snapshot


def test_f35_conflict_with_update_manager_names_api_version() -> None:
    """F35: Update entries are printed with "using <apiVersion>" (Kubernetes' wording)."""
    created = do_update(None, wl(spec={"a": 1}), "kubectl-create")
    with pytest.raises(ApplyConflict) as info:
        do_apply(created, wl(spec={"a": 2}), "me", now=T2)
    assert info.value.message == (
        f'Apply failed with 1 conflict: conflict with "kubectl-create" using {API}: .spec.a'
    )


def test_f35_conflict_with_status_update_manager() -> None:
    """F35: an Update entry of /status is printed with subresource and apiVersion."""
    obj = do_update(None, wl(spec={"q": 1}), "creator")
    new = copy.deepcopy(obj)
    new["status"] = {"clusterName": "w1"}
    obj = do_update(obj, new, "kueue", sub="status", now=T2)
    with pytest.raises(ApplyConflict) as info:
        do_apply(obj, wl(status={"clusterName": "w2"}), "me", sub="status", now=T3)
    assert info.value.causes == [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "kueue" with subresource "status" using {API}',
            "field": ".status.clusterName",
        }
    ]


@pytest.mark.parametrize(
    "sub", [pytest.param(None, id="main"), pytest.param("status", id="status")]
)
def test_f35_force_takes_ownership(sub: str | None) -> None:
    """F35: with force the applier takes the fields; they leave the other manager's set."""
    other_body = wl(spec={"a": 1, "b": 1}) if sub is None else wl(status={"a": 1, "b": 1})
    my_body = wl(spec={"a": 2}) if sub is None else wl(status={"a": 2})
    top = "spec" if sub is None else "status"
    obj = do_apply(None, other_body, "other", sub=sub)
    obj = do_apply(obj, my_body, "me", sub=sub, force=True, now=T2)
    assert obj[top] == {"a": 2, "b": 1}
    assert fields(obj, "me") == {f"f:{top}": {"f:a": {}}}
    assert fields(obj, "other") == {f"f:{top}": {"f:b": {}}}
    assert entry(obj, "other")["time"] == T1


def test_f35_force_removes_emptied_entry() -> None:
    """F33/F35: an entry whose set becomes empty is removed."""
    obj = do_apply(None, wl(spec={"a": 1}), "other")
    obj = do_apply(obj, wl(spec={"a": 2}), "me", force=True, now=T2)
    assert managers(obj) == {("me", "Apply", None)}


def test_f35_same_value_is_shared_ownership() -> None:
    """F35: applying the value a field already has is no conflict; both managers own it."""
    obj = do_apply(None, wl(spec={"a": 1}), "other")
    obj = do_apply(obj, wl(spec={"a": 1}), "me", now=T2)
    assert fields(obj, "me") == fields(obj, "other") == {"f:spec": {"f:a": {}}}
    with pytest.raises(ApplyConflict):
        do_apply(obj, wl(spec={"a": 3}), "me", now=T3)


# ---------------------------------------------------------------------------------------------
# Merge rules (F36)


def test_f36_conditions_merge_by_key_between_managers() -> None:
    """F36/F37: two managers own different conditions; removing one removes only that one."""
    obj = do_apply(None, wl(status={"conditions": [cond("Ready")]}), "a", sub="status")
    obj = do_apply(obj, wl(status={"conditions": [cond("Admitted")]}), "b", sub="status", now=T2)
    assert obj["status"]["conditions"] == [cond("Ready"), cond("Admitted")]
    assert list(fields(obj, "a")["f:status"]["f:conditions"]) == [READY]
    assert list(fields(obj, "b")["f:status"]["f:conditions"]) == [ADMITTED]

    # "a" updates its condition in place: merged by key, "b"'s untouched.
    obj = do_apply(obj, wl(status={"conditions": [cond("Ready", "False")]}), "a", sub="status")
    assert obj["status"]["conditions"] == [cond("Ready", "False"), cond("Admitted")]

    # "a" leaves its condition out: only that item goes.
    obj = do_apply(obj, wl(status={"conditions": []}), "a", sub="status", now=T3)
    assert obj["status"]["conditions"] == [cond("Admitted")]
    assert ("a", "Apply", "status") not in managers(obj)
    assert list(fields(obj, "b")["f:status"]["f:conditions"]) == [ADMITTED]


def test_f36_item_field_released_but_item_kept_when_co_owned() -> None:
    """F37: a released field of a shared list-map item goes; the item and its key stay."""
    obj = do_apply(None, wl(status={"conditions": [cond("Ready")]}), "a", sub="status")
    obj = do_apply(
        obj, wl(status={"conditions": [{"type": "Ready", "status": "True"}]}), "b", sub="status"
    )
    obj = do_apply(obj, wl(status={}), "a", sub="status", now=T2)
    assert obj["status"]["conditions"] == [{"type": "Ready", "status": "True"}]


@pytest.mark.parametrize(
    ("schema", "path", "before", "applied", "after", "owned"),
    [
        pytest.param(
            WORKLOAD,
            ("status", "nominatedClusterNames"),
            ["w1", "w2"],
            ["w3"],
            ["w3"],
            {"f:status": {"f:nominatedClusterNames": {}}},
            id="atomic-list-replaced",
        ),
        pytest.param(
            None,
            ("status", "conditions"),
            [cond("Ready"), cond("Admitted")],
            [cond("Ready", "False")],
            [cond("Ready", "False")],
            {"f:status": {"f:conditions": {}}},
            id="no-schema-list-atomic",
        ),
        pytest.param(
            WORKLOAD,
            ("spec", "selector"),
            {"a": "1", "b": "2"},
            {"c": "3"},
            {"c": "3"},
            {"f:spec": {"f:selector": {}}},
            id="atomic-map-replaced",
        ),
        pytest.param(
            WORKLOAD,
            ("spec", "podSets"),
            [{"name": "main", "count": 1, "x": 1}],
            [{"name": "main", "count": 2}],
            [{"name": "main", "count": 2}],
            {
                "f:spec": {
                    "f:podSets": {'k:{"name":"main"}': {".": {}, "f:count": {}, "f:name": {}}}
                }
            },
            id="map-list-item-merged-released-field-removed",
        ),
    ],
)
def test_f36_atomic_and_keyed_values(
    schema: StructureInfo | None,
    path: tuple[str, str],
    before: Any,
    applied: Any,
    after: Any,
    owned: dict[str, Any],
) -> None:
    """F36: atomic lists/maps are replaced whole and owned as one field; map-lists by key."""
    top, name = path
    obj = do_apply(None, wl(**{top: {name: before}}), "me", schema=schema, status_sub=False)
    obj = do_apply(obj, wl(**{top: {name: applied}}), "me", schema=schema, status_sub=False, now=T2)
    assert obj[top][name] == after
    assert fields(obj, "me") == owned


def test_f36_multi_key_list_map_encoding() -> None:
    """F33/F36: list-map items with several keys are encoded with the keys sorted by name."""
    ports = Node(props={"spec": Node(props={"ports": map_list("protocol", "port")})})
    body = wl(spec={"ports": [{"protocol": "TCP", "port": 80, "name": "http"}]})
    obj = do_apply(None, body, "me", schema=ports)
    item = 'k:{"port":80,"protocol":"TCP"}'
    assert fields(obj, "me") == {
        "f:spec": {"f:ports": {item: {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}}}}
    }
    other = wl(spec={"ports": [{"protocol": "TCP", "port": 80, "name": "web"}]})
    with pytest.raises(ApplyConflict) as info:
        do_apply(obj, other, "you", schema=ports, now=T2)
    assert info.value.causes[0]["field"] == '.spec.ports[port=80,protocol="TCP"].name'


def test_f36_set_values_owned_separately() -> None:
    """F36/F37: a set is the union of the applied values; each value is owned on its own."""
    obj = do_apply(None, wl(spec={"tags": ["x", "y"]}), "a")
    obj = do_apply(obj, wl(spec={"tags": ["y", "z"]}), "b", now=T2)
    assert obj["spec"]["tags"] == ["x", "y", "z"]
    assert fields(obj, "a") == {"f:spec": {"f:tags": {'v:"x"': {}, 'v:"y"': {}}}}
    assert fields(obj, "b") == {"f:spec": {"f:tags": {'v:"y"': {}, 'v:"z"': {}}}}
    obj = do_apply(obj, wl(spec={"tags": []}), "a", now=T3)
    assert obj["spec"]["tags"] == ["y", "z"]
    assert ("a", "Apply", None) not in managers(obj)


def test_f37_finalizers_are_a_set() -> None:
    """F36/F37: metadata.finalizers is a set: managers add and release their own finalizers."""
    obj = do_apply(None, wl(metadata={"finalizers": ["a.io/f"]}), "a")
    obj = do_apply(obj, wl(metadata={"finalizers": ["b.io/f"]}), "b", now=T2)
    assert obj["metadata"]["finalizers"] == ["a.io/f", "b.io/f"]
    obj = do_apply(obj, wl(), "b", now=T3)
    assert obj["metadata"]["finalizers"] == ["a.io/f"]
    obj = do_apply(obj, wl(), "a", now=T3)
    assert "finalizers" not in obj["metadata"]


def test_f37_list_emptied_by_release_is_removed() -> None:
    """F37: releasing the last item of a list-map removes the list and its emptied parent."""
    obj = do_apply(None, wl(spec={"q": 1}), "creator")
    obj = do_apply(obj, wl(status={"conditions": [cond("Ready")]}), "a", sub="status")
    obj = do_apply(obj, wl(status={}), "a", sub="status", now=T2)
    assert "status" not in obj
    assert managers(obj) == {("creator", "Apply", None)}


# ---------------------------------------------------------------------------------------------
# Status subresource (F38)


def test_f38_main_endpoint_ignores_status_of_body() -> None:
    """F38: an apply to the main endpoint of a kind with /status keeps the live status."""
    obj = do_apply(None, wl(spec={"a": 1}, status={"x": 1}), "me")
    assert "status" not in obj  # dropped on create (F11)
    obj = do_apply(obj, wl(status={"clusterName": "w1"}), "kueue", sub="status")
    obj = do_apply(obj, wl(spec={"a": 1}, status={"clusterName": "w2"}), "me", now=T2)
    assert obj["status"] == {"clusterName": "w1"}
    assert fields(obj, "me") == {"f:spec": {"f:a": {}}}


def test_f38_status_endpoint_considers_only_status() -> None:
    """F38: an apply to /status ignores everything but .status and records subresource."""
    obj = do_apply(None, wl(spec={"a": 1}), "me")
    obj = do_apply(
        obj,
        wl(metadata={"labels": {"x": "y"}}, spec={"a": 2}, status={"clusterName": "w1"}),
        "me",
        sub="status",
    )
    assert obj["spec"] == {"a": 1}
    assert "labels" not in obj["metadata"]
    assert entry(obj, "me", sub=None)["fieldsV1"] == {"f:spec": {"f:a": {}}}
    status_entry = entry(obj, "me", sub="status")
    assert status_entry["subresource"] == "status"
    assert status_entry["fieldsV1"] == {"f:status": {"f:clusterName": {}}}


def test_f38_without_status_subresource_status_is_applied() -> None:
    """F38: a kind without /status treats .status like any other field."""
    obj = do_apply(None, wl(status={"x": 1}), "me", status_sub=False)
    assert obj["status"] == {"x": 1}


@pytest.mark.parametrize(
    "sub", [pytest.param(None, id="main"), pytest.param("status", id="status")]
)
def test_f38_noop_apply_returns_identical_object(sub: str | None) -> None:
    """F38/F5: an apply that changes nothing returns the input, times included."""
    body = wl(status={"conditions": [cond("Ready")]}) if sub else wl(spec={"a": [1, 2]})
    obj = do_apply(None, wl(spec={"a": [1, 2]}), "me")
    obj = do_apply(obj, body, "other", sub=sub, now=T2)
    again = do_apply(obj, body, "other", sub=sub, now=T3)
    assert again == obj
    assert again is not obj


def test_f38_changed_value_refreshes_time() -> None:
    """F33: an apply that changes a value of an owned field refreshes the entry's time."""
    obj = do_apply(None, wl(spec={"a": 1}), "me")
    obj = do_apply(obj, wl(spec={"a": 2}), "me", now=T2)
    assert entry(obj, "me")["time"] == T2
    assert obj["spec"] == {"a": 2}


@pytest.mark.parametrize(
    ("first", "second", "expected_time"),
    [
        pytest.param(
            {"nominatedClusterNames": ["w1"]},
            {"nominatedClusterNames": ["w2"]},
            T2,
            id="value-changed-time-refreshed",
        ),
        pytest.param(
            {"nominatedClusterNames": ["w1"]},
            {"nominatedClusterNames": ["w1"]},
            T1,
            id="same-value-time-kept",
        ),
        pytest.param(
            {"nominatedClusterNames": ["w1"], "clusterName": "w1"},
            {"nominatedClusterNames": ["w1"]},
            T1,
            id="ownership-released-only-time-kept",
        ),
    ],
)
def test_f33_status_apply_time_changes_only_with_the_object(
    first: dict[str, Any], second: dict[str, Any], expected_time: str
) -> None:
    """F33, as kube-apiserver does it (k8s.io/apimachinery managedfields/internal
    managedFieldsUpdater.Apply): the applier's ``time`` is stamped only when the apply changed
    the object. Releasing a field another manager still owns (its value stays) changes only
    ownership and keeps the time. The dispatcher reads this time back as the age of its
    nomination after a restart."""
    obj = do_apply(None, wl(spec={"a": 1}), "creator", now=T0)
    obj = do_apply(obj, wl(status={"clusterName": "w1"}), "kueue", sub="status", now=T0)
    obj = do_apply(obj, wl(status=first), "me", sub="status", force=True, now=T1)
    obj = do_apply(obj, wl(status=second), "me", sub="status", force=True, now=T2)
    assert entry(obj, "me", sub="status")["time"] == expected_time
    assert obj["status"]["nominatedClusterNames"] == second["nominatedClusterNames"]


def test_f33_apply_that_only_shares_ownership_records_no_time() -> None:
    """F33, as kube-apiserver: a first apply of values the object already has changes no value,
    so the new entry owns the fields but carries no ``time`` (the server stamps none), and the
    other owner's time stays."""
    obj = do_apply(None, wl(spec={"a": 1}), "one", now=T1)
    obj = do_apply(obj, wl(spec={"a": 1}), "two", now=T2)
    assert fields(obj, "two") == {"f:spec": {"f:a": {}}}
    assert "time" not in entry(obj, "two")
    assert entry(obj, "one")["time"] == T1


def test_f34_update_that_only_removes_keeps_its_time() -> None:
    """F34, as kube-apiserver (managedFieldsUpdater.Update stamps the time only when the write
    took a field): an update that only removes fields keeps the writer's entry time."""
    obj = do_update(None, wl(spec={"a": 1, "b": 1}), "editor", now=T1)
    new = copy.deepcopy(obj)
    del new["spec"]["b"]
    obj = do_update(obj, new, "editor", now=T2)
    assert fields(obj, "editor", "Update") == {"f:spec": {".": {}, "f:a": {}}}
    assert entry(obj, "editor", "Update")["time"] == T1


# ---------------------------------------------------------------------------------------------
# Non-apply writes (F34)


def test_f34_create_by_update_owns_everything_with_parents() -> None:
    """F34: a create records an Update entry that owns every field, objects marked with '.'."""
    obj = do_update(None, wl(metadata={"labels": {"a": "b"}}, spec={"x": {"y": 1}}), "creator")
    assert entry(obj, "creator", "Update") == {
        "manager": "creator",
        "operation": "Update",
        "apiVersion": API,
        "time": T1,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
            "f:spec": {".": {}, "f:x": {".": {}, "f:y": {}}},
        },
    }


def test_f33_entries_ordered_apply_first_then_by_time() -> None:
    """F33: entries are ordered like Kubernetes orders them (operation, then time)."""
    obj = do_update(None, wl(spec={"a": 1}), "creator", now=T0)
    obj = do_apply(obj, wl(spec={"b": 1}), "late", now=T3)
    obj = do_apply(obj, wl(spec={"c": 1}), "early", now=T2)
    order = [(e["manager"], e["operation"]) for e in obj["metadata"]["managedFields"]]
    assert order == [("early", "Apply"), ("late", "Apply"), ("creator", "Update")]


def test_f34_update_takes_ownership_from_apply_manager() -> None:
    """F34: a merge patch takes the changed field from an applier; the applier then conflicts."""
    obj = do_apply(None, wl(spec={"a": 1, "b": 1}), "me")
    new = copy.deepcopy(obj)
    new["spec"]["a"] = 2
    obj = do_update(obj, new, "kubectl-edit", now=T2)
    assert fields(obj, "me") == {"f:spec": {"f:b": {}}}
    assert fields(obj, "kubectl-edit", "Update") == {"f:spec": {"f:a": {}}}
    with pytest.raises(ApplyConflict) as info:
        do_apply(obj, wl(spec={"a": 3, "b": 1}), "me", now=T3)
    assert info.value.causes == [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "kubectl-edit" using {API}',
            "field": ".spec.a",
        }
    ]


def test_f34_removed_fields_leave_every_set() -> None:
    """F34: a field removed by an update leaves every manager's set."""
    obj = do_apply(None, wl(spec={"a": 1, "b": 1}), "me")
    obj = do_apply(obj, wl(spec={"a": 1}), "other")
    new = copy.deepcopy(obj)
    del new["spec"]["a"]
    obj = do_update(obj, new, "patcher", now=T2)
    assert fields(obj, "me") == {"f:spec": {"f:b": {}}}
    assert ("other", "Apply", None) not in managers(obj)
    assert ("patcher", "Update", None) not in managers(obj)  # changed nothing it could own


def test_f34_value_changing_kind_drops_sub_paths() -> None:
    """F34: when an object becomes a scalar, the owners of its old sub-fields lose them."""
    obj = do_apply(None, wl(spec={"x": {"a": 1}, "b": 1}), "me")
    new = copy.deepcopy(obj)
    new["spec"]["x"] = "flat"
    obj = do_update(obj, new, "patcher", now=T2)
    assert fields(obj, "me") == {"f:spec": {"f:b": {}}}
    assert fields(obj, "patcher", "Update") == {"f:spec": {"f:x": {}}}


def test_f34_noop_update_keeps_managed_fields() -> None:
    """F34/F5: an update that changes nothing keeps managedFields (and times) as they were."""
    obj = do_apply(None, wl(spec={"a": 1}), "me")
    same = copy.deepcopy(obj)
    same["metadata"]["resourceVersion"] = "99"
    out = do_update(obj, same, "patcher", now=T2)
    assert out["metadata"]["managedFields"] == obj["metadata"]["managedFields"]
    assert out["metadata"]["resourceVersion"] == "99"


def test_f34_hook_change_joins_apply_entry() -> None:
    """F49/F34: a mutating hook's change after an apply is added to the applier's Apply entry."""
    obj = do_apply(
        None, wl(status={"nominatedClusterNames": ["w1"]}), "my-dispatcher", sub="status"
    )
    applied = do_apply(obj, wl(status={"clusterName": "w1"}), "kueue-admission", sub="status")
    hooked = copy.deepcopy(applied)
    hooked["status"]["nominatedClusterNames"] = []
    out = do_update(applied, hooked, "kueue-admission", operation="Apply", sub="status", now=T2)
    assert fields(out, "kueue-admission") == {
        "f:status": {"f:clusterName": {}, "f:nominatedClusterNames": {}}
    }
    assert ("my-dispatcher", "Apply", "status") not in managers(out)
    assert ("kueue-admission", "Update", "status") not in managers(out)


# ---------------------------------------------------------------------------------------------
# The Kueue field-manager pitfall (contract C43, F37/F39)


def _nominated(obj: dict[str, Any] | None) -> dict[str, Any]:
    return do_apply(
        obj, wl(status={"nominatedClusterNames": ["w1"]}), "my-dispatcher", sub="status"
    )


KUEUE_ADMISSION = wl(
    status={
        "clusterName": "w1",
        "conditions": [cond("QuotaReserved"), cond("Admitted")],
    }
)


def test_c43_pitfall_nomination_survives_kueue_forced_apply() -> None:
    """C43/F37: Kueue's forced apply leaves nominatedClusterNames out; the dispatcher still owns
    it, so it survives next to the new clusterName (the CEL rule would then reject the write)."""
    obj = do_apply(None, wl(spec={"queueName": "q"}), "creator")
    obj = _nominated(obj)
    obj = do_apply(obj, KUEUE_ADMISSION, "kueue-admission", sub="status", force=True, now=T2)
    assert obj["status"]["clusterName"] == "w1"
    assert obj["status"]["nominatedClusterNames"] == ["w1"]
    assert fields(obj, "my-dispatcher") == {"f:status": {"f:nominatedClusterNames": {}}}
    assert set(fields(obj, "kueue-admission")["f:status"]) == {"f:clusterName", "f:conditions"}


def test_c43_pitfall_shared_nomination_survives_kueue_release() -> None:
    """C43/F37: even if Kueue co-owned the nomination, releasing it does not remove it."""
    obj = do_apply(None, wl(spec={"queueName": "q"}), "creator")
    obj = do_apply(
        obj, wl(status={"nominatedClusterNames": ["w1"]}), "kueue-admission", sub="status"
    )
    obj = _nominated(obj)
    obj = do_apply(obj, KUEUE_ADMISSION, "kueue-admission", sub="status", force=True, now=T2)
    assert obj["status"]["nominatedClusterNames"] == ["w1"]


def test_c44_nomination_owned_by_kueue_alone_is_removed() -> None:
    """C44/F37: when only kueue-admission owned the nomination, leaving it out removes it."""
    obj = do_apply(None, wl(spec={"queueName": "q"}), "creator")
    obj = do_apply(
        obj, wl(status={"nominatedClusterNames": ["w1"]}), "kueue-admission", sub="status"
    )
    obj = do_apply(obj, KUEUE_ADMISSION, "kueue-admission", sub="status", force=True, now=T2)
    assert "nominatedClusterNames" not in obj["status"]
    assert obj["status"]["clusterName"] == "w1"


def test_f33_inputs_never_mutated() -> None:
    """API contract: apply and record_update return deep copies and leave inputs alone."""
    live = _nominated(do_apply(None, wl(spec={"queueName": "q"}), "creator"))
    body = copy.deepcopy(KUEUE_ADMISSION)
    live_copy, body_copy = copy.deepcopy(live), copy.deepcopy(body)
    out = do_apply(live, body, "kueue-admission", sub="status", force=True, now=T2)
    assert live == live_copy
    assert body == body_copy
    out["status"]["conditions"][0]["status"] = "mutated"
    assert body == body_copy
    new = copy.deepcopy(out)
    new_copy = copy.deepcopy(new)
    do_update(out, new, "x")
    assert new == new_copy


def test_f37_release_of_untouched_subtree_is_seen_as_removal() -> None:
    """F37/F34: fields pruned from a sub-tree the body does not mention leave every set."""
    obj = do_apply(None, wl(spec={"x": {"a": 1}}), "me")
    new = copy.deepcopy(obj)
    new["spec"]["x"]["b"] = 2
    obj = do_update(obj, new, "editor", now=T2)
    obj = do_apply(obj, wl(metadata={"labels": {"l": "v"}}), "me", now=T3)
    assert obj["spec"] == {"x": {"b": 2}}
    assert fields(obj, "me") == {"f:metadata": {"f:labels": {"f:l": {}}}}
    assert fields(obj, "editor", "Update") == {"f:spec": {"f:x": {"f:b": {}}}}
