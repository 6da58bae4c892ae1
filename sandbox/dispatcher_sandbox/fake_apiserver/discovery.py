"""Discovery (F1): ``/version``, ``/api``, ``/apis``, and each group's and version's resources.

Free functions of the cluster's :class:`~.registry.Registry`; the bodies are what
``kubectl``, client-go and ``kubernetes_asyncio`` read to find resources and preferred versions.
"""

from __future__ import annotations

import re

from dispatcher_sandbox.fake_apiserver.errors import ApiError
from dispatcher_sandbox.fake_apiserver.objects import Obj
from dispatcher_sandbox.fake_apiserver.registry import ALL_VERBS, Registry

KUBE_VERSION = {"major": "1", "minor": "34"}


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version ordering: GA before beta before alpha, higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


def version_info() -> Obj:
    """The body of ``GET /version``."""
    return {
        **KUBE_VERSION,
        "gitVersion": f"v{KUBE_VERSION['major']}.{KUBE_VERSION['minor']}.0-fakeapi",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(host: str, port: int) -> Obj:
    """The body of ``GET /api``: the core group's versions and the server's address."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{host}:{port}"}
        ],
    }


def _group_entry(group: str, versions: list[str]) -> Obj:
    ordered = sorted(versions, key=version_priority)
    return {
        "name": group,
        "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered],
        "preferredVersion": {"groupVersion": f"{group}/{ordered[0]}", "version": ordered[0]},
    }


def api_group_list(registry: Registry) -> Obj:
    """The body of ``GET /apis``: every named group with its versions, preferred first."""
    groups = [
        _group_entry(group, versions)
        for group, versions in registry.group_versions().items()
        if group
    ]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> Obj:
    """The body of ``GET /apis/{group}``."""
    versions = registry.group_versions().get(group)
    if not group or not versions:
        raise ApiError(404, "the server could not find the requested resource")
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def resource_list(registry: Registry, group: str, version: str) -> Obj:
    """The body of ``GET /api/v1`` or ``GET /apis/{group}/{version}``: an APIResourceList with
    each resource and its status subresource."""
    resources = registry.in_group_version(group, version)
    if not resources:
        raise ApiError(404, "the server could not find the requested resource")
    entries: list[Obj] = []
    for r in resources:
        entry: Obj = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(ALL_VERBS),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entries.append(entry)
        if r.status_subresource:
            entries.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": entries,
    }
