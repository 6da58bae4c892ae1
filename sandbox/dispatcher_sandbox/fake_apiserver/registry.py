"""Which resources a fake cluster serves (docs/fake-apiserver.md F1, F2, F40, F41, F59–F61).

A resource is stored once per ``(group, plural)`` and may be served under several versions. The
fake does not convert between versions: objects are stored as written and only ``apiVersion`` is
rewritten on read (F41).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dispatcher_sandbox.fake_apiserver.errors import ApiError

if TYPE_CHECKING:
    from dispatcher_sandbox.fake_apiserver.schema import CompiledSchema

ALL_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


@dataclass
class Resource:
    """One resource (all its served versions)."""

    group: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    versions: list[str]
    status_subresource: bool = False
    builtin: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    field_selectors: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    schemas: dict[str, CompiledSchema] = field(default_factory=dict)
    list_kind: str = ""

    def __post_init__(self) -> None:
        if not self.list_kind:
            self.list_kind = f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str]:
        """The storage key ``(group, plural)``."""
        return (self.group, self.plural)

    def api_version(self, version: str) -> str:
        """``v1`` or ``group/version``."""
        return f"{self.group}/{version}" if self.group else version

    @property
    def label(self) -> str:
        """``plural.group`` as used in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def schema(self, version: str) -> CompiledSchema | None:
        """The compiled schema of a served version, if the resource came with one."""
        return self.schemas.get(version)


def _core(
    plural: str,
    kind: str,
    namespaced: bool,
    *,
    status: bool = False,
    short: tuple[str, ...] = (),
    fields: tuple[str, ...] = (),
) -> Resource:
    return Resource(
        group="",
        plural=plural,
        kind=kind,
        singular=kind.lower(),
        namespaced=namespaced,
        versions=["v1"],
        status_subresource=status,
        short_names=short,
        field_selectors=("metadata.name", "metadata.namespace", *fields),
    )


def builtin_resources() -> list[Resource]:
    """The kinds every fake cluster serves from the start (F2, F59–F61)."""
    return [
        _core(
            "namespaces", "Namespace", False, status=True, short=("ns",), fields=("status.phase",)
        ),
        _core("nodes", "Node", False, status=True, short=("no",), fields=("spec.unschedulable",)),
        _core("secrets", "Secret", True, fields=("type",)),
        _core("configmaps", "ConfigMap", True, short=("cm",)),
        _core(
            "events",
            "Event",
            True,
            short=("ev",),
            fields=(
                "involvedObject.kind",
                "involvedObject.name",
                "involvedObject.namespace",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        ),
        Resource(
            group="events.k8s.io",
            plural="events",
            kind="Event",
            singular="event",
            namespaced=True,
            versions=["v1"],
            short_names=("ev",),
            field_selectors=(
                "metadata.name",
                "metadata.namespace",
                "regarding.kind",
                "regarding.name",
                "regarding.namespace",
                "regarding.uid",
                "regarding.apiVersion",
                "reason",
                "reportingController",
                "type",
            ),
        ),
        Resource(
            group="coordination.k8s.io",
            plural="leases",
            kind="Lease",
            singular="lease",
            namespaced=True,
            versions=["v1"],
        ),
        # batch/v1 Jobs: the entry point of Kueue's batch/Job integration (issue 3, scope 6).
        # Stored and served as a built-in kind, without a schema and without the Job
        # controller's defaulting (selector, template labels).
        Resource(
            group="batch",
            plural="jobs",
            kind="Job",
            singular="job",
            namespaced=True,
            versions=["v1"],
            status_subresource=True,
            categories=("all",),
        ),
        Resource(
            group="apiextensions.k8s.io",
            plural="customresourcedefinitions",
            kind="CustomResourceDefinition",
            singular="customresourcedefinition",
            namespaced=False,
            versions=["v1"],
            status_subresource=True,
            short_names=("crd", "crds"),
        ),
    ]


_SHORT_FORM = re.compile(
    r"^(?P<group>[a-z0-9.-]+)/(?P<version>v[0-9a-z]+)/(?P<plural>[a-z0-9]+)"
    r"=(?P<kind>[A-Za-z0-9]+)(?::(?P<scope>cluster|namespaced))?(?P<status>\+status)?$"
)


def parse_short_form(text: str) -> Resource:
    """A custom resource from ``group/version/plural=Kind[:cluster][+status]`` (F2).

    Kinds registered this way have no schema and are not validated (F40). ``+status`` gives the
    kind a status subresource.
    """
    m = _SHORT_FORM.match(text.strip())
    if not m:
        raise ValueError(
            f"resource {text!r}: expected group/version/plural=Kind[:cluster][+status], "
            "for example kueue.x-k8s.io/v1beta2/workloads=Workload+status"
        )
    kind = m.group("kind")
    return Resource(
        group=m.group("group"),
        plural=m.group("plural"),
        kind=kind,
        singular=kind.lower(),
        namespaced=m.group("scope") != "cluster",
        versions=[m.group("version")],
        status_subresource=bool(m.group("status")),
        builtin=False,
    )


def resource_from_crd(crd: Mapping[str, Any]) -> Resource:
    """A custom resource from an ``apiextensions.k8s.io/v1`` CRD object (F40).

    Every served version is registered with its schema (compiled once per process and shared by
    all fake clusters), scope, names and subresources.
    """
    from dispatcher_sandbox.fake_apiserver.schema import compile_schema

    name = crd.get("metadata", {}).get("name", "<unnamed>")
    spec = crd.get("spec")
    if crd.get("kind") != "CustomResourceDefinition" or not isinstance(spec, Mapping):
        raise ValueError(f"{name}: not a CustomResourceDefinition with a spec")
    names = spec.get("names") or {}
    group = spec.get("group")
    plural = names.get("plural")
    kind = names.get("kind")
    if not group or not plural or not kind:
        raise ValueError(f"CustomResourceDefinition {name}: spec.group, names.plural, names.kind")
    if name != f"{plural}.{group}":
        raise ValueError(
            f'CustomResourceDefinition {name}: metadata.name must be "{plural}.{group}"'
        )
    versions: list[str] = []
    schemas: dict[str, CompiledSchema] = {}
    status = False
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        versions.append(version["name"])
        openapi = (version.get("schema") or {}).get("openAPIV3Schema")
        if openapi is not None:
            schemas[version["name"]] = compile_schema(openapi)
        if "status" in (version.get("subresources") or {}):
            status = True
    if not versions:
        raise ValueError(f"CustomResourceDefinition {name}: no served version")
    return Resource(
        group=group,
        plural=plural,
        kind=kind,
        singular=names.get("singular") or kind.lower(),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        versions=versions,
        status_subresource=status,
        builtin=False,
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        schemas=schemas,
        list_kind=names.get("listKind") or f"{kind}List",
    )


class Registry:
    """The resources one fake cluster serves, indexed for URL routing and discovery."""

    def __init__(self, resources: Iterable[Resource] = ()) -> None:
        self._by_key: dict[tuple[str, str], Resource] = {}
        for resource in resources:
            self.add(resource)

    def add(self, resource: Resource) -> None:
        """Register (or replace) a resource."""
        self._by_key[resource.key] = resource

    def remove(self, group: str, plural: str) -> Resource | None:
        """Unregister a resource (its CRD was deleted)."""
        return self._by_key.pop((group, plural), None)

    def get(self, group: str, plural: str) -> Resource | None:
        """A resource by storage key."""
        return self._by_key.get((group, plural))

    def lookup(self, group: str, version: str, plural: str) -> Resource:
        """The resource served at ``group/version/plural``; 404 when not served (F40)."""
        resource = self._by_key.get((group, plural))
        if resource is None or version not in resource.versions:
            gv = f"{group}/{version}" if group else version
            raise ApiError(404, f"the server could not find the requested resource ({gv} {plural})")
        return resource

    def by_kind(self, group: str, kind: str) -> Resource | None:
        """A resource by group and kind (used for apply bodies and CRD checks)."""
        for resource in self._by_key.values():
            if resource.group == group and resource.kind == kind:
                return resource
        return None

    def all(self) -> list[Resource]:
        """Every resource, in registration order."""
        return list(self._by_key.values())

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per API group (``""`` is the core group)."""
        groups: dict[str, list[str]] = {}
        for resource in self._by_key.values():
            versions = groups.setdefault(resource.group, [])
            for version in resource.versions:
                if version not in versions:
                    versions.append(version)
        return groups

    def in_group_version(self, group: str, version: str) -> list[Resource]:
        """Resources served under one group version."""
        return [r for r in self._by_key.values() if r.group == group and version in r.versions]
