"""What every part of a fake cluster shares about objects and the URLs that address them.

:class:`Target` (what a resource URL addresses), the time stamp format, the copy a client is
shown (:func:`render`), the label and field selection of a list or watch, and the defaulting of
built-in kinds. Requirement numbers (F…) are the points of ``docs/fake-apiserver.md``.
"""

from __future__ import annotations

import base64
import copy
import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher_sandbox.fake_apiserver.errors import invalid_field
from dispatcher_sandbox.fake_apiserver.registry import Resource
from dispatcher_sandbox.fake_apiserver.selectors import (
    field_getters,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from dispatcher_sandbox.fake_apiserver.structure import StructureInfo

Obj = dict[str, Any]

# Fields the server owns; a client cannot set or change them.
SERVER_METADATA = ("uid", "creationTimestamp", "generation", "resourceVersion", "managedFields")

NAMESPACE_MISMATCH = (
    "the namespace of the provided object does not match the namespace sent on the request"
)


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses (F3)."""

    resource: Resource
    version: str
    namespace: str | None  # None: cluster-scoped, or a list across all namespaces
    name: str | None
    subresource: str | None

    @property
    def api_version(self) -> str:
        return self.resource.api_version(self.version)


def now() -> str:
    """The current time as the API server stamps it (seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def truthy(value: str | None) -> bool:
    """Kubernetes query booleans, as ``kubernetes_asyncio`` renders them too (``True``) (F14)."""
    return value is not None and value.lower() in ("true", "1")


def render(obj: Obj, target: Target) -> Obj:
    """A copy with ``apiVersion`` and ``kind`` of the requested version (F41)."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = target.api_version
    out["kind"] = target.resource.kind
    return out


def render_view(obj: Obj, target: Target) -> Obj:
    """:func:`render` for an answer that is only serialised (a watch event): a new top level
    sharing the stored object's nested values, which the caller must not change."""
    return {**obj, "apiVersion": target.api_version, "kind": target.resource.kind}


def structure_of(resource: Resource, version: str) -> StructureInfo | None:
    """The schema's structure (list and map types) for server-side apply, if it has a schema."""
    schema = resource.schema(version)
    return schema.root if schema is not None else None


def selection(query: Mapping[str, str], target: Target) -> Callable[[Obj], bool]:
    """Whether an object is in a list's or watch's selection: namespace, ``labelSelector`` and
    ``fieldSelector`` of the query."""
    labels = parse_label_selector(query.get("labelSelector"))
    getters = field_getters(list(target.resource.field_selectors))
    fields = parse_field_selector(query.get("fieldSelector"), getters, target.resource.label)
    namespace = target.namespace

    def matches(obj: Obj) -> bool:
        if namespace is not None and obj["metadata"].get("namespace") != namespace:
            return False
        return labels_match(labels, obj) and fields_match(fields, obj)

    return matches


def prepare_builtin(resource: Resource, obj: Obj) -> None:
    """Built-in kinds' own defaulting (F21 and the namespace phase)."""
    if resource.key == ("", "secrets"):
        string_data = obj.pop("stringData", None) or {}
        data = dict(obj.get("data") or {})
        for key, value in data.items():
            try:
                base64.b64decode(value, validate=True)
            except (ValueError, TypeError) as exc:
                raise invalid_field(
                    "Secret",
                    "",
                    obj["metadata"].get("name", ""),
                    f"data[{key}]",
                    "Invalid value: illegal base64 data",
                    "FieldValueInvalid",
                ) from exc
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode("ascii")
        if data:
            obj["data"] = data
        obj.setdefault("type", "Opaque")
    elif resource.key == ("", "namespaces"):
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
