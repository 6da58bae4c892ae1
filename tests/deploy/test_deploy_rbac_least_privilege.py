"""Issue 8, security: "the manifests' RBAC is least-privilege (no wildcard verbs or resources;
Secrets only in Kueue's namespace)", checked statically on every kustomization we ship.

tests/deploy/test_deploy_rbac.py compares the rules with the requests of a recorded run (every
grant used, nothing missing); this module states the fixed rules, fast and without a run, and
shows with broken rules that each check can fail:

- no ``*`` in apiGroups, resources, verbs or resourceNames, no nonResourceURLs;
- no ``escalate``, ``bind`` or ``impersonate``, no ``create`` of ``serviceaccounts/token``, no
  ``pods/exec``, and no binding to the built-in ``cluster-admin``, ``admin`` or ``edit`` roles;
- Secrets: read-only (``get``, ``list``, ``watch``), in a Role of Kueue's namespace bound there,
  never through a ClusterRole (so never cluster-wide);
- the worker ClusterRole of the dispatcher is read-only.

Kueue's own objects on a worker (``multikueue-sa`` with Kueue's documented rules, contract C63)
are not the dispatcher's grants and are not held to these rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher_sandbox.harness.deploy import MANIFESTS, build

KUEUE_NAMESPACE = "kueue-system"
DISPATCHER_NAMESPACE = "multikueue-dispatcher-system"
READ = {"get", "list", "watch"}
FORBIDDEN_VERBS = {"escalate", "bind", "impersonate", "*"}
FORBIDDEN_RESOURCES = {"serviceaccounts/token", "pods/exec", "pods/attach", "*"}
BUILTIN_POWERFUL = {"cluster-admin", "admin", "edit"}
# Kueue's objects on a worker (contract C63), not grants of the dispatcher.
KUEUE_OWN = {"multikueue-sa-role", "multikueue-sa-crb"}
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")

Obj = dict[str, Any]


def _name(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def _ours(objects: list[Obj]) -> Iterator[Obj]:
    for obj in objects:
        if obj.get("kind") in RBAC_KINDS and obj["metadata"].get("name") not in KUEUE_OWN:
            yield obj


def problems(objects: list[Obj]) -> list[str]:
    """Every breach of the rules above in ``objects`` (the dispatcher's RBAC objects)."""
    found: list[str] = []
    rbac = list(_ours(objects))
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in rbac}
    for role in (o for o in rbac if o["kind"] in ("Role", "ClusterRole")):
        for rule in role.get("rules") or []:
            where = f"{_name(role)}: rule {rule}"
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                if "*" in (rule.get(key) or []):
                    found.append(f"{where}: wildcard in {key}")
            if rule.get("nonResourceURLs"):
                found.append(f"{where}: nonResourceURLs")
            verbs = set(rule.get("verbs") or [])
            resources = set(rule.get("resources") or [])
            if verbs & (FORBIDDEN_VERBS - {"*"}):
                found.append(f"{where}: verbs {sorted(verbs & FORBIDDEN_VERBS)}")
            if resources & (FORBIDDEN_RESOURCES - {"*"}):
                found.append(f"{where}: resources {sorted(resources & FORBIDDEN_RESOURCES)}")
            if "" in (rule.get("apiGroups") or []) and "secrets" in resources:
                if role["kind"] == "ClusterRole":
                    found.append(f"{where}: Secrets through a ClusterRole")
                elif role["metadata"].get("namespace") != KUEUE_NAMESPACE:
                    found.append(f"{where}: Secrets outside {KUEUE_NAMESPACE}")
                if verbs - READ:
                    found.append(f"{where}: Secrets not read-only ({sorted(verbs - READ)})")
    for binding in (o for o in rbac if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        if ref["name"] in BUILTIN_POWERFUL and ref["kind"] == "ClusterRole":
            found.append(f"{_name(binding)}: binds the built-in {ref['name']}")
            continue
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        if (ref["kind"], namespace, ref["name"]) not in roles:
            found.append(f"{_name(binding)}: refers to a missing {ref['kind']} {ref['name']}")
    return found


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return build(MANIFESTS / "base")


@pytest.fixture(scope="module")
def worker() -> list[Obj]:
    return build(MANIFESTS / "worker")


def _kustomizations() -> list[Path]:
    return sorted(
        p.parent
        for p in MANIFESTS.rglob("kustomization.yaml")
        if "samples" not in p.parent.relative_to(MANIFESTS).parts
    )


@pytest.mark.parametrize(
    "directory", _kustomizations(), ids=lambda p: str(p.relative_to(MANIFESTS))
)
def test_every_kustomization_is_least_privilege(directory: Path) -> None:
    """Issue 8, security: RBAC least privilege (no wildcard verbs or resources; Secrets only in
    Kueue's namespace), for every kustomization of manifests/ except the samples."""
    objects = build(directory)
    assert not problems(objects)


def test_secrets_are_read_only_and_only_in_kueues_namespace(base: list[Obj]) -> None:
    """Issue 8, security: "Secrets only in Kueue's namespace": the only Secret grant is a
    read-only Role in kueue-system, bound there to the dispatcher's ServiceAccount."""
    secret_roles = [
        o
        for o in _ours(base)
        if o["kind"] in ("Role", "ClusterRole")
        and any("secrets" in (r.get("resources") or []) for r in o.get("rules") or [])
    ]
    assert [(o["kind"], o["metadata"].get("namespace")) for o in secret_roles] == [
        ("Role", KUEUE_NAMESPACE)
    ]
    [role] = secret_roles
    assert {v for r in role["rules"] for v in r["verbs"]} == READ
    [binding] = [
        o
        for o in base
        if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert binding["metadata"]["namespace"] == KUEUE_NAMESPACE
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "multikueue-dispatcher",
            "namespace": DISPATCHER_NAMESPACE,
        }
    ]


def test_the_worker_cluster_role_is_read_only(worker: list[Obj]) -> None:
    """Issue 8, security: the dispatcher never writes on a worker: its worker ClusterRole only
    gets, lists and watches."""
    [role] = [
        o
        for o in worker
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "multikueue-dispatcher-reader"
    ]
    assert {v for rule in role["rules"] for v in rule["verbs"]} == READ


def _role(kind: str, rules: list[Obj], namespace: str | None = None) -> Obj:
    meta: Obj = {"name": "broken"}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "rules": rules}


def _rule(resources: list[str], verbs: list[str], groups: tuple[str, ...] = ("",)) -> Obj:
    return {"apiGroups": list(groups), "resources": resources, "verbs": verbs}


BROKEN = [
    pytest.param(_role("ClusterRole", [_rule(["*"], ["get"])]), "wildcard in resources", id="*res"),
    pytest.param(_role("ClusterRole", [_rule(["pods"], ["*"])]), "wildcard in verbs", id="*verb"),
    pytest.param(
        _role("ClusterRole", [_rule(["pods"], ["get"], ("*",))]),
        "wildcard in apiGroups",
        id="*group",
    ),
    pytest.param(
        _role("ClusterRole", [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        "nonResourceURLs",
        id="non-resource",
    ),
    pytest.param(
        _role("ClusterRole", [_rule(["clusterroles"], ["escalate", "bind"], ("rbac",))]),
        "verbs ['bind', 'escalate']",
        id="escalate-bind",
    ),
    pytest.param(
        _role("ClusterRole", [_rule(["serviceaccounts"], ["impersonate"])]),
        "verbs ['impersonate']",
        id="impersonate",
    ),
    pytest.param(
        _role("ClusterRole", [_rule(["pods/exec"], ["create"])]),
        "resources ['pods/exec']",
        id="pods-exec",
    ),
    pytest.param(
        _role("ClusterRole", [_rule(["secrets"], ["get"])]),
        "Secrets through a ClusterRole",
        id="secrets-cluster-wide",
    ),
    pytest.param(
        _role("Role", [_rule(["secrets"], ["get"])], "default"),
        "Secrets outside kueue-system",
        id="secrets-other-namespace",
    ),
    pytest.param(
        _role("Role", [_rule(["secrets"], ["get", "update"])], KUEUE_NAMESPACE),
        "Secrets not read-only (['update'])",
        id="secrets-write",
    ),
    pytest.param(
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "broken"},
            "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [],
        },
        "binds the built-in cluster-admin",
        id="cluster-admin",
    ),
]


@pytest.mark.parametrize(("obj", "message"), BROKEN)
def test_each_rule_breach_is_caught(base: list[Obj], obj: Obj, message: str) -> None:
    """Issue 8, security: the checks above fail on the breach they name (shipped objects plus
    one broken object)."""
    found = problems([*base, obj])
    assert any(message in p for p in found), found
