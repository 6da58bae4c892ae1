"""Server-side apply and field ownership (docs/fake-apiserver.md F33-F38).

A pure, synchronous model of what kube-apiserver's field manager does with
``metadata.managedFields``. The HTTP layer calls :func:`apply` for
``application/apply-patch+yaml`` requests and :func:`record_update` for every other write
(create, PUT, merge patch, JSON patch) and for changes a mutating admission hook made.

Model
    Field sets are sets of paths. A path is a tuple of path elements spelt the way ``fieldsV1``
    spells them: ``f:<name>`` (object field), ``k:{"type":"Ready"}`` (list-map item, key fields
    sorted by name, compact JSON), ``v:<json>`` (set value) and ``i:<n>`` (never produced here,
    but decoded and kept). ``fieldsV1`` puts ``".": {}`` under a path that is owned itself and
    also has owned children (a list-map item and its fields, or a map added by an update).

Ownership (F33, F34)
    One entry per (manager, operation, subresource). An apply replaces the applier's set with the
    fields of its body: leaves, atomic lists and maps, list-map items (the item and each of its
    fields) and set values. Granular objects are not owned themselves by an apply. A non-apply
    write takes every path it added or changed, including objects and lists it created (``.`` in
    ``fieldsV1``), and those paths leave all other sets; removed paths leave every set. Entries
    with an empty set are dropped. Entries are ordered as Kubernetes orders them: operation,
    time, manager, apiVersion, subresource. The entry's ``time`` changes as kube-apiserver
    changes it: on an apply, only when the apply changed the object (an apply that only changes
    ownership keeps the time, and a new entry made that way has none); on another write, only
    when the write added or changed a value. A write that changes nothing returns an object equal
    to the input, managedFields included (F38, F5).

Merge rules (F36)
    Objects merge field by field unless the schema says ``x-kubernetes-map-type: atomic``. Lists
    are atomic unless ``x-kubernetes-list-type: map`` with keys or ``x-kubernetes-list-type:
    set``. A list-map merges its items by key (live order kept, new items appended in body order);
    each item (``k:{...}`` with ``.``) and each of its fields is owned separately. A set is the
    union of the live and applied values, each value (``v:<json>``) owned separately. A list-map
    whose items are not all objects carrying every key, a set holding objects or lists, and a list
    that repeats a key or value are treated as atomic (the real server rejects duplicates;
    validation is not this module's job). Without a schema every list is atomic and every object
    granular. As in ObjectMeta, ``metadata.ownerReferences`` is a list-map keyed by ``uid`` and
    ``metadata.finalizers`` a set, whatever the kind's schema says. Labels, annotations and
    finalizers are owned like any field; the server-maintained fields (``apiVersion``, ``kind``,
    ``metadata.name`` and friends, see :data:`IGNORED_METADATA`) never are.

Apply (F35, F37, F38)
    The new object is the live object with the body merged in. Fields the applier owned under its
    previous Apply entry (same subresource) and left out of this body are released; a released
    field nobody else owns is removed from the object (a released list-map item: the whole item;
    a released set value: that value), and objects and lists emptied that way are removed too
    unless someone owns them. Key fields of a list-map item that stays are never removed. A field
    whose value the apply adds or changes while another entry owns it is a conflict: without
    force :class:`ApplyConflict` is raised (Kubernetes' wording, see below); with force the
    applier takes it over. Applying the value a field already has is no conflict and the
    ownership is shared.

    An explicit ``null`` in an apply body means "this manager does not set the field": it is
    dropped from the body before anything else (the real server is subtler).

    ``subresource="status"``: only ``.status`` of the body is considered. ``subresource=None`` on
    a kind with a status subresource: ``.status`` of the body is ignored, the live one kept.

Conflict messages follow ``k8s.io/apimachinery/pkg/util/managedfields/internal/conflict.go``:
one conflict reads ``Apply failed with 1 conflict: conflict with "m": .a.b``; several read
``Apply failed with 2 conflicts: conflicts with "m":\\n- .a\\n- .b`` grouped by manager. A manager
is printed as ``"name"``, plus ``with subresource "status"`` for subresource entries, plus
``using <apiVersion>`` for Update entries only (the real server leaves the apiVersion out for
Apply entries).

Not modelled: conversion of field sets between API versions, the limit on the number of Update
entries, resetting managedFields through a body that carries them, item order of merged lists
(the real server has its own rules), validation errors for duplicate keys or missing key fields.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from dispatcher_sandbox.fake_apiserver.structure import StructureInfo

__all__ = [
    "IGNORED_METADATA",
    "ApplyConflict",
    "apply",
    "decode_fields_v1",
    "encode_fields_v1",
    "field_path_string",
    "record_update",
    "strip_ignored",
]

Path = tuple[str, ...]
"""A field path; each element is a ``fieldsV1`` key such as ``f:status``."""

IGNORED_TOP_LEVEL: Final = frozenset({"apiVersion", "kind"})
"""Top-level fields that no manager owns."""

IGNORED_METADATA: Final = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)
"""Fields of ``metadata`` that the server maintains and no manager owns."""

_META: Final = "f:metadata"
_STATUS: Final = "f:status"
_MISSING: Final[Any] = object()


class ApplyConflict(Exception):
    """An apply without force changed fields that other managers own (HTTP 409 Conflict)."""

    def __init__(self, message: str, causes: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.message = message
        self.causes = causes


# --------------------------------------------------------------------------------------------
# Structure helpers


@dataclass(frozen=True)
class _Fixed:
    """A hand-written schema node (used for the parts of ObjectMeta that matter)."""

    list_type: str | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: str | None = None
    children: Mapping[str, StructureInfo] = field(default_factory=dict)
    item: StructureInfo | None = None

    def child(self, name: str) -> StructureInfo | None:
        return self.children.get(name)

    def items(self) -> StructureInfo | None:
        return self.item


_OBJECT_META: Final = _Fixed(
    children={
        "finalizers": _Fixed(list_type="set"),
        "ownerReferences": _Fixed(list_type="map", list_map_keys=("uid",)),
    }
)


@dataclass(frozen=True)
class _Root:
    """The root of an object: the kind's schema, with ObjectMeta's list types for metadata."""

    schema: StructureInfo | None
    list_type: str | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: str | None = None

    def child(self, name: str) -> StructureInfo | None:
        if name == "metadata":
            return _OBJECT_META
        return self.schema.child(name) if self.schema is not None else None

    def items(self) -> StructureInfo | None:
        return None


def _child(schema: StructureInfo | None, name: str) -> StructureInfo | None:
    return schema.child(name) if schema is not None else None


def _items(schema: StructureInfo | None) -> StructureInfo | None:
    return schema.items() if schema is not None else None


def _atomic_map(schema: StructureInfo | None, path: Path) -> bool:
    return bool(path) and schema is not None and schema.map_type == "atomic"


def _item_element(item: Any, keys: tuple[str, ...]) -> str | None:
    if not isinstance(item, dict) or any(k not in item for k in keys):
        return None
    key = {k: item[k] for k in sorted(keys)}
    return "k:" + json.dumps(key, separators=(",", ":"), ensure_ascii=False)


def _value_element(item: Any) -> str | None:
    if isinstance(item, dict | list):
        return None
    return "v:" + json.dumps(item, separators=(",", ":"), ensure_ascii=False)


def _keyed(value: Any, schema: StructureInfo | None) -> list[tuple[str, Any]] | None:
    """The items of a list-map or set with their path elements; None if the list is atomic."""
    if not isinstance(value, list) or schema is None:
        return None
    keys: tuple[str, ...] = ()
    if schema.list_type == "map" and schema.list_map_keys:
        keys = schema.list_map_keys
    elif schema.list_type != "set":
        return None
    out: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for item in value:
        pe = _item_element(item, keys) if schema.list_type == "map" else _value_element(item)
        if pe is None or pe in seen:
            return None
        seen.add(pe)
        out.append((pe, item))
    return out


# --------------------------------------------------------------------------------------------
# Values


def _equal(a: Any, b: Any) -> bool:
    """JSON equality that tells ``true`` from ``1`` but not ``1`` from ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def strip_ignored(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` without the server-maintained fields no manager owns.

    Drops ``apiVersion``, ``kind`` and the :data:`IGNORED_METADATA` fields (managedFields
    included); an emptied ``metadata`` is dropped too.
    """
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k not in IGNORED_TOP_LEVEL}
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for name in IGNORED_METADATA:
            meta.pop(name, None)
        if not meta:
            del out["metadata"]
    return out


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _ignored_path(path: Path) -> bool:
    if not path:
        return True
    if path[0] in ("f:apiVersion", "f:kind"):
        return True
    if path[0] == _META:
        return len(path) == 1 or path[1][2:] in IGNORED_METADATA
    return False


def _owned_only(paths: Iterable[Path]) -> set[Path]:
    return {p for p in paths if not _ignored_path(p)}


# --------------------------------------------------------------------------------------------
# Field sets


def _applied_set(value: Any, schema: StructureInfo | None, path: Path, out: set[Path]) -> None:
    """The fields an apply body sets: leaves, atomic values and list-map items."""
    if isinstance(value, dict) and not _atomic_map(schema, path):
        for k, v in value.items():
            _applied_set(v, _child(schema, k), (*path, "f:" + k), out)
        return
    keyed = _keyed(value, schema)
    if keyed is None:
        if path:
            out.add(path)
        return
    for pe, item in keyed:
        sub = (*path, pe)
        out.add(sub)
        _applied_set(item, _items(schema), sub, out)


def _all_paths(value: Any, schema: StructureInfo | None, path: Path, out: set[Path]) -> None:
    """Every path of a value, objects and list-map items included (what an update creates)."""
    if path:
        out.add(path)
    if isinstance(value, dict) and not _atomic_map(schema, path):
        for k, v in value.items():
            _all_paths(v, _child(schema, k), (*path, "f:" + k), out)
        return
    for pe, item in _keyed(value, schema) or ():
        _all_paths(item, _items(schema), (*path, pe), out)


@dataclass
class _Diff:
    added: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)


def _compare(old: Any, new: Any, schema: StructureInfo | None, path: Path, diff: _Diff) -> None:
    if old is _MISSING:
        _all_paths(new, schema, path, diff.added)
        return
    if new is _MISSING:
        _all_paths(old, schema, path, diff.removed)
        return
    if isinstance(old, dict) and isinstance(new, dict) and not _atomic_map(schema, path):
        for k in [*old, *(k for k in new if k not in old)]:
            _compare(
                old.get(k, _MISSING),
                new.get(k, _MISSING),
                _child(schema, k),
                (*path, "f:" + k),
                diff,
            )
        return
    old_items, new_items = _keyed(old, schema), _keyed(new, schema)
    if old_items is not None and new_items is not None:
        old_by, new_by = dict(old_items), dict(new_items)
        for pe in [*old_by, *(pe for pe in new_by if pe not in old_by)]:
            _compare(
                old_by.get(pe, _MISSING),
                new_by.get(pe, _MISSING),
                _items(schema),
                (*path, pe),
                diff,
            )
        return
    if not _equal(old, new) and path:
        diff.modified.add(path)
        # A value that changed kind (say, object to string) loses or gains its sub-paths.
        old_paths: set[Path] = set()
        new_paths: set[Path] = set()
        _all_paths(old, schema, path, old_paths)
        _all_paths(new, schema, path, new_paths)
        diff.removed |= old_paths - new_paths - {path}
        diff.added |= new_paths - old_paths - {path}


def _diff(old: Any, new: Any, schema: StructureInfo | None) -> _Diff:
    diff = _Diff()
    _compare(old, new, schema, (), diff)
    diff.added = _owned_only(diff.added)
    diff.modified = _owned_only(diff.modified)
    diff.removed = _owned_only(diff.removed)
    return diff


# --------------------------------------------------------------------------------------------
# fieldsV1 encoding


def _element_sort_key(pe: str) -> tuple[int, int, str]:
    kind, body = pe[:1], pe[2:]
    if kind == "i":
        try:
            return (3, int(body), "")
        except ValueError:
            return (3, 0, body)
    return ({"f": 0, "k": 1, "v": 2}.get(kind, 4), 0, body)


@dataclass
class _Trie:
    member: bool = False
    children: dict[str, _Trie] = field(default_factory=dict)


def _trie(paths: Iterable[Path]) -> _Trie:
    root = _Trie()
    for path in paths:
        node = root
        for pe in path:
            node = node.children.setdefault(pe, _Trie())
        node.member = True
    return root


def encode_fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    """Encode a field set as ``fieldsV1`` (``f:``/``k:`` keys, ``.`` for owned parents)."""

    def encode(node: _Trie) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if node.member and node.children:
            out["."] = {}
        for pe in sorted(node.children, key=_element_sort_key):
            out[pe] = encode(node.children[pe])
        return out

    return encode(_trie(paths))


def decode_fields_v1(fields: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """Decode ``fieldsV1`` into a set of paths (the inverse of :func:`encode_fields_v1`)."""
    out: set[Path] = set()
    for key, sub in fields.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        path = (*prefix, key)
        if isinstance(sub, Mapping) and sub:
            out |= decode_fields_v1(sub, path)
        else:
            out.add(path)
    return out


def _ordered(paths: Iterable[Path]) -> list[Path]:
    """Paths in the order structured-merge-diff iterates a set: members first, then children."""
    out: list[Path] = []

    def walk(node: _Trie, prefix: Path) -> None:
        names = sorted(node.children, key=_element_sort_key)
        out.extend((*prefix, pe) for pe in names if node.children[pe].member)
        for pe in names:
            walk(node.children[pe], (*prefix, pe))

    walk(_trie(paths), ())
    return out


def field_path_string(path: Path) -> str:
    """A path as Kubernetes prints it, e.g. ``.status.conditions[type="Ready"].status``."""
    parts: list[str] = []
    for pe in path:
        kind, body = pe[:1], pe[2:]
        if kind == "f":
            parts.append("." + body)
        elif kind == "k":
            try:
                key = json.loads(body)
            except ValueError:
                key = None
            if isinstance(key, dict):
                inner = ",".join(
                    f"{k}={json.dumps(v, separators=(',', ':'), ensure_ascii=False)}"
                    for k, v in key.items()
                )
                parts.append(f"[{inner}]")
            else:
                parts.append(f"[{body}]")
        elif kind == "v":
            parts.append(f"[={body}]")
        else:
            parts.append(f"[{body}]")
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# managedFields entries

_Key = tuple[str, str, str | None]
"""(manager, operation, subresource)."""


@dataclass
class _Entry:
    manager: str
    operation: str
    api_version: str
    time: str | None
    subresource: str | None
    fields: set[Path]

    @property
    def key(self) -> _Key:
        return (self.manager, self.operation, self.subresource)

    def encode(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = encode_fields_v1(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def label(self) -> str:
        """The manager as conflict messages print it."""
        text = json.dumps(self.manager, ensure_ascii=False)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource, ensure_ascii=False)}"
        if self.operation != "Apply":
            text += f" using {self.api_version}"
        return text


def _decode_entries(obj: Mapping[str, Any]) -> dict[_Key, _Entry]:
    meta = obj.get("metadata")
    raw = meta.get("managedFields") if isinstance(meta, Mapping) else None
    entries: dict[_Key, _Entry] = {}
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, Mapping):
            continue
        fields_v1 = item.get("fieldsV1")
        time = item.get("time")
        entry = _Entry(
            manager=str(item.get("manager", "")),
            operation=str(item.get("operation", "Update")),
            api_version=str(item.get("apiVersion", "")),
            time=str(time) if time is not None else None,
            subresource=str(item["subresource"]) if item.get("subresource") else None,
            fields=decode_fields_v1(fields_v1) if isinstance(fields_v1, Mapping) else set(),
        )
        if entry.key in entries:
            entries[entry.key].fields |= entry.fields
        else:
            entries[entry.key] = entry
    return entries


def _encode_entries(entries: Iterable[_Entry]) -> list[dict[str, Any]]:
    kept = [e for e in entries if e.fields]
    kept.sort(
        key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource or "")
    )
    return [e.encode() for e in kept]


def _with_managed_fields(obj: dict[str, Any], entries: Iterable[_Entry]) -> dict[str, Any]:
    encoded = _encode_entries(entries)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        if not encoded:
            return obj
        meta = obj["metadata"] = {}
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)
    return obj


# --------------------------------------------------------------------------------------------
# Merge and prune


def _merge(live: Any, config: Any, schema: StructureInfo | None, path: Path) -> Any:
    if isinstance(live, dict) and isinstance(config, dict) and not _atomic_map(schema, path):
        out = dict(live)
        for k, v in config.items():
            out[k] = _merge(live.get(k, _MISSING), v, _child(schema, k), (*path, "f:" + k))
        return out
    live_items, config_items = _keyed(live, schema), _keyed(config, schema)
    if live_items is not None and config_items is not None:
        by_key = dict(config_items)
        merged: list[Any] = []
        for pe, item in live_items:
            if pe in by_key:
                item = _merge(item, by_key.pop(pe), _items(schema), (*path, pe))
            merged.append(item)
        merged.extend(copy.deepcopy(item) for item in by_key.values())
        return merged
    return copy.deepcopy(config)


def _locate(obj: Any, path: Path) -> Any:
    node = obj
    for pe in path:
        node = _step(node, pe)
        if node is _MISSING:
            break
    return node


def _step(node: Any, pe: str) -> Any:
    kind, body = pe[:1], pe[2:]
    if kind == "f":
        return node.get(body, _MISSING) if isinstance(node, dict) else _MISSING
    if kind in ("k", "v") and isinstance(node, list):
        index = _find_item(node, pe)
        return node[index] if index is not None else _MISSING
    return _MISSING


def _find_item(items: list[Any], pe: str) -> int | None:
    """The index of the list-map item (``k:``) or set value (``v:``) that ``pe`` names."""
    try:
        wanted = json.loads(pe[2:])
    except ValueError:
        return None
    for index, item in enumerate(items):
        if pe.startswith("v:"):
            if _equal(item, wanted):
                return index
        elif (
            isinstance(wanted, dict)
            and isinstance(item, dict)
            and all(k in item and _equal(item[k], v) for k, v in wanted.items())
        ):
            return index
    return None


def _delete(obj: Any, path: Path) -> None:
    parent = _locate(obj, path[:-1])
    kind, body = path[-1][:1], path[-1][2:]
    if kind == "f" and isinstance(parent, dict):
        parent.pop(body, None)
    elif kind in ("k", "v") and isinstance(parent, list):
        index = _find_item(parent, path[-1])
        if index is not None:
            del parent[index]


def _is_key_field(path: Path) -> bool:
    if len(path) < 2 or not path[-2].startswith("k:") or not path[-1].startswith("f:"):
        return False
    try:
        key = json.loads(path[-2][2:])
    except ValueError:
        return False
    return isinstance(key, dict) and path[-1][2:] in key


def _prune(obj: dict[str, Any], released: set[Path], owned: set[Path]) -> None:
    """Remove released fields nobody owns, and the objects and lists this empties (F37)."""
    kept = set(owned)
    for path in owned:
        kept.update(path[:i] for i in range(1, len(path)))
    for path in sorted(released, key=len, reverse=True):
        if path in kept or _is_key_field(path) or _ignored_path(path):
            continue
        _delete(obj, path)
        for i in range(len(path) - 1, 0, -1):
            parent = path[:i]
            if not parent[-1].startswith("f:") or parent in kept or _ignored_path(parent):
                break
            if _locate(obj, parent) not in ({}, []):
                break
            _delete(obj, parent)


def _scope(subresource: str | None, status_subresource: bool) -> Callable[[Path], bool]:
    if subresource == "status":
        return lambda p: p[:1] == (_STATUS,)
    if status_subresource:
        return lambda p: p[:1] != (_STATUS,)
    return lambda p: True


def _conflict(conflicts: list[tuple[_Entry, list[Path]]]) -> ApplyConflict:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {entry.label()}",
            "field": field_path_string(path),
        }
        for entry, paths in conflicts
        for path in paths
    ]
    if len(causes) == 1:
        entry, paths = conflicts[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {entry.label()}: "
            f"{field_path_string(paths[0])}"
        )
    else:
        lines: list[str] = []
        for entry, paths in conflicts:
            lines.append(f"conflicts with {entry.label()}:")
            lines.extend(f"- {field_path_string(p)}" for p in paths)
        message = f"Apply failed with {len(causes)} conflicts: " + "\n".join(lines)
    return ApplyConflict(message, causes)


# --------------------------------------------------------------------------------------------
# Public entry points


def apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    subresource: str | None,
    status_subresource: bool,
    force: bool,
    schema: StructureInfo | None,
    now: str,
) -> dict[str, Any]:
    """Server-side apply of ``applied`` onto ``live`` (None: create); returns the new object.

    The result is a deep copy with ``metadata.managedFields`` updated; the inputs are not
    mutated. ``subresource="status"`` considers only ``.status`` of the body and records the
    entry with ``subresource: status``; ``subresource=None`` with ``status_subresource=True``
    ignores ``.status`` of the body and keeps the live one. Raises :class:`ApplyConflict` when
    ``force`` is false and the apply would change fields other managers own. An apply that
    changes nothing returns an object equal to ``live`` (managedFields and times included).
    """
    root = _Root(schema)
    base: dict[str, Any] = copy.deepcopy(live) if live is not None else {}
    config: dict[str, Any] = _drop_nulls(strip_ignored(applied))
    if subresource == "status":
        config = {"status": config["status"]} if "status" in config else {}
    elif status_subresource:
        config.pop("status", None)
    in_scope = _scope(subresource, status_subresource)

    entries = _decode_entries(base)
    before = {key: set(entry.fields) for key, entry in entries.items()}
    key: _Key = (manager, "Apply", subresource)
    previous = entries.get(key)
    last_set = previous.fields if previous is not None else set()

    new_set: set[Path] = set()
    _applied_set(config, root, (), new_set)
    new_set = _owned_only(new_set)

    # _merge shares untouched sub-trees with its input and _prune edits in place: merge a copy.
    merged: dict[str, Any] = _merge(copy.deepcopy(base), config, root, ())
    if live is None:
        for name in ("apiVersion", "kind"):
            if name in applied:
                merged[name] = applied[name]
        meta = applied.get("metadata")
        if isinstance(meta, dict):
            target = merged.setdefault("metadata", {})
            for name in ("name", "namespace"):
                if name in meta:
                    target[name] = meta[name]

    others = [entry for k, entry in entries.items() if k != key]
    owned = set(new_set).union(*(entry.fields for entry in others))
    _prune(merged, {p for p in last_set - new_set if in_scope(p)}, owned)

    diff = _diff(strip_ignored(base), strip_ignored(merged), root)
    changed = diff.added | diff.modified
    conflicts = [
        (entry, _ordered(entry.fields & changed))
        for entry in sorted(others, key=lambda e: (e.manager, e.operation, e.subresource or ""))
        if entry.fields & changed
    ]
    if conflicts and not force:
        raise _conflict(conflicts)

    for entry in others:
        entry.fields -= changed | diff.removed
    object_changed = live is None or bool(changed or diff.removed)
    sets_changed = (
        new_set != last_set
        or any(entry.fields != before[entry.key] for entry in others)
        or (previous is not None and previous.api_version != api_version)
    )
    if not object_changed and not sets_changed:
        return base

    # kube-apiserver stamps the applier's time only when the apply changed the object
    # (managedFieldsUpdater.Apply: the merged object differs from the live one); an apply that
    # only changes ownership keeps the entry's time, and a new entry gets none.
    stamp = now if object_changed else (previous.time if previous is not None else None)
    entries[key] = _Entry(manager, "Apply", api_version, stamp, subresource, new_set)
    return _with_managed_fields(merged, entries.values())


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    operation: str,
    api_version: str,
    subresource: str | None,
    schema: StructureInfo | None,
    now: str,
) -> dict[str, Any]:
    """Record ownership for a write that is not an apply; returns ``new`` with managedFields.

    Used for create, PUT, merge and JSON patches (``operation="Update"``) and for changes that
    a mutating admission hook made after an apply (``operation="Apply"``: the changed fields join
    that manager's Apply entry). The manager takes every field whose value was added or changed;
    those fields leave the other managers' sets; removed fields leave every set. Never
    conflicts. The ownership basis is ``old``'s managedFields (managedFields in ``new`` are
    ignored). The result is a deep copy; when nothing changed its managedFields equal ``old``'s.
    """
    root = _Root(schema)
    base: Mapping[str, Any] = old if old is not None else {}
    entries = _decode_entries(base)
    before = {key: set(entry.fields) for key, entry in entries.items()}
    diff = _diff(strip_ignored(base), strip_ignored(new), root)
    taken = diff.added | diff.modified

    key: _Key = (manager, operation, subresource)
    for k, other in entries.items():
        if k != key:
            other.fields -= taken | diff.removed
    own = entries.get(key)
    if own is None:
        own = entries[key] = _Entry(manager, operation, api_version, now, subresource, set())
    own.fields = (own.fields | taken) - diff.removed
    touched = bool(taken) or own.fields != before.get(key, set())
    if taken:
        # As kube-apiserver (managedFieldsUpdater.Update): the time and version change only
        # when this write took fields (added or changed a value), not when it only removed some.
        own.time = now
        own.api_version = api_version

    result = copy.deepcopy(new)
    if not touched and all(e.fields == before.get(k, set()) for k, e in entries.items()):
        meta = result.get("metadata")
        old_meta = base.get("metadata")
        old_fields = old_meta.get("managedFields") if isinstance(old_meta, Mapping) else None
        if old_fields is not None:
            result.setdefault("metadata", {})["managedFields"] = copy.deepcopy(old_fields)
        elif isinstance(meta, dict):
            meta.pop("managedFields", None)
        return result
    return _with_managed_fields(result, entries.values())
