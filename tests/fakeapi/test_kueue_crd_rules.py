"""The schema module against the real Kueue v0.19.2 CRDs (docs/fake-apiserver.md F42–F47).

The CRD files are not copied into the repository: they are found through ``KUEUE_CRDS_DIR``, or
``<repo>/../shared/kueue-v0.19.2/crds``. Without them these tests skip, unless
``REQUIRE_KUEUE_CRDS=1``, in which case they fail.

Every one of the 79 ``x-kubernetes-validations`` rules (ten CRDs, both served versions) has a row
in ``RULE_CASES``: a minimal valid object that passes, and a crafted bad one that fails with exactly
that rule's message at the expected field. ``test_f44_every_rule_has_a_case`` checks that the
table covers every rule of the CRD files.

Crafted old objects: the ``priorityClassRef.group``/``.kind`` immutability rules cannot fail alone
with a *valid* old object, because the ``priorityClassRef`` rules tie the kind to the group (a
group change is always a kind change too). Their rows use an old object whose ``priorityClassRef``
pairs a group with the other group's kind; transition rules do not validate the old object, so
this isolates each rule. ``test_f45_priority_class_ref_group_change_reports_group_and_kind`` shows
the realistic change, which fails with both messages.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher_sandbox.fake_apiserver.schema import (
    CompiledSchema,
    FieldError,
    compile_schema,
    invalid_message,
)

_REPO = Path(__file__).resolve().parents[2]
_MISSING_REASON = "Kueue CRDs not found: set KUEUE_CRDS_DIR"


def kueue_crds_dir() -> Path:
    """The directory of the Kueue CRD files; skip (or fail if REQUIRE_KUEUE_CRDS=1) if absent."""
    configured = os.environ.get("KUEUE_CRDS_DIR")
    candidate = (
        Path(configured) if configured else _REPO.parent / "shared" / "kueue-v0.19.2" / "crds"
    )
    if candidate.is_dir() and any(candidate.glob("*.yaml")):
        return candidate
    if os.environ.get("REQUIRE_KUEUE_CRDS") == "1":
        pytest.fail(f"{_MISSING_REASON} (looked in {candidate})")
    pytest.skip(_MISSING_REASON)


GROUP = "kueue.x-k8s.io"
Key = tuple[str, str]  # (kind, version)


@dataclass(frozen=True)
class RuleRef:
    kind: str
    version: str
    path: str  # schema path, "spec.resourceGroups[]"; "" for the root
    message: str


def _walk_rules(schema: dict[str, Any], path: str, out: list[tuple[str, dict[str, Any]]]) -> None:
    for rule in schema.get("x-kubernetes-validations") or ():
        out.append((path, rule))
    for name, sub in (schema.get("properties") or {}).items():
        _walk_rules(sub, f"{path}.{name}" if path else name, out)
    if isinstance(schema.get("items"), dict):
        _walk_rules(schema["items"], path + "[]", out)
    if isinstance(schema.get("additionalProperties"), dict):
        _walk_rules(schema["additionalProperties"], path + "{}", out)


@dataclass
class Kueue:
    schemas: dict[Key, CompiledSchema]
    raw: dict[Key, dict[str, Any]]
    rules: list[RuleRef]

    def admit(
        self, kind: str, version: str, new: dict[str, Any], old: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[FieldError]]:
        return self.schemas[(kind, version)].admit(new, old)


@pytest.fixture(scope="module")
def kueue() -> Kueue:
    directory = kueue_crds_dir()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    schemas: dict[Key, CompiledSchema] = {}
    raw: dict[Key, dict[str, Any]] = {}
    rules: list[RuleRef] = []
    for path in sorted(directory.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=loader)
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served", False):
                continue
            schema = version["schema"]["openAPIV3Schema"]
            key = (kind, version["name"])
            raw[key] = schema
            schemas[key] = compile_schema(schema)
            found: list[tuple[str, dict[str, Any]]] = []
            _walk_rules(schema, "", found)
            rules.extend(RuleRef(kind, version["name"], p, r["message"]) for p, r in found)
    return Kueue(schemas, raw, rules)


# --- builders of valid objects -------------------------------------------------------------------


def obj(
    kind: str, version: str, spec: dict[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "x"}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    }


def workload(version: str, **spec: Any) -> dict[str, Any]:
    """A valid Workload with one pod set ``main`` of two pods."""
    body: dict[str, Any] = {
        "queueName": "lq",
        "podSets": [
            {
                "name": "main",
                "count": 2,
                "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            }
        ],
    }
    body.update(spec)
    return obj("Workload", version, body, namespace="ns")


def condition(type_: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": "Test",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def quota_reserved(wl: dict[str, Any], *extra: str) -> dict[str, Any]:
    """``wl`` with QuotaReserved=True (and the ``extra`` conditions) and a matching admission."""
    wl = copy.deepcopy(wl)
    status = wl.setdefault("status", {})
    status["conditions"] = [condition("QuotaReserved")] + [condition(t) for t in extra]
    status["admission"] = {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": ps["name"], "count": ps["count"]} for ps in wl["spec"]["podSets"]
        ],
    }
    return wl


def with_status(o: dict[str, Any], **status: Any) -> dict[str, Any]:
    o = copy.deepcopy(o)
    o.setdefault("status", {}).update(status)
    return o


def admission_check_entry(**extra: Any) -> dict[str, Any]:
    entry = {
        "name": "ac",
        "state": "Ready",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    entry.update(extra)
    return entry


def with_podset_tolerations(version: str, tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    return with_status(
        workload(version),
        admissionChecks=[
            admission_check_entry(podSetUpdates=[{"name": "main", "tolerations": tolerations}])
        ],
    )


def topology_assignment(version: str, assignment: dict[str, Any]) -> dict[str, Any]:
    return with_status(
        workload(version),
        admission={
            "clusterQueue": "cq",
            "podSetAssignments": [{"name": "main", "count": 2, "topologyAssignment": assignment}],
        },
    )


def cluster_queue(version: str, **spec: Any) -> dict[str, Any]:
    return obj("ClusterQueue", version, dict(spec))


def resource_groups(covered: list[str], resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"coveredResources": covered, "flavors": [{"name": "default", "resources": resources}]}]


CPU = {"name": "cpu", "nominalQuota": "10"}
MEMORY = {"name": "memory", "nominalQuota": "10Gi"}
CPU_BORROWING = {"name": "cpu", "nominalQuota": "10", "borrowingLimit": "2"}

TOLERATION_OK = {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}
BAD_TOLERATIONS: dict[str, dict[str, Any]] = {
    "operator must be Exists when 'key' is empty, which means 'match all values and all keys'": {
        "operator": "Equal"
    },
    "effect must be 'NoExecute' when 'tolerationSeconds' is set": {
        "key": "k",
        "operator": "Exists",
        "effect": "NoSchedule",
        "tolerationSeconds": 5,
    },
    "supported toleration values: 'Equal'(default), 'Exists'": {"key": "k", "operator": "In"},
    "a value must be empty when 'operator' is 'Exists'": {
        "key": "k",
        "operator": "Exists",
        "value": "v",
    },
    "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'": {
        "key": "k",
        "operator": "Exists",
        "effect": "Bogus",
    },
}


# --- the table of rules --------------------------------------------------------------------------

Pair = tuple[dict[str, Any], dict[str, Any] | None]


@dataclass(frozen=True)
class RuleCase:
    kind: str
    version: str
    path: str  # the rule's schema path
    message: str  # the rule's message
    field: str  # where the error is reported
    type_name: str  # the node's type, as in 'Invalid value: "object"'
    valid: Callable[[], Pair]
    bad: Callable[[], Pair]

    @property
    def id(self) -> str:
        short = self.message if len(self.message) <= 48 else self.message[:45] + "..."
        return f"{self.kind}/{self.version}/{self.path or '<root>'}/{short}"


def _cases() -> Iterator[RuleCase]:
    both = ("v1beta1", "v1beta2")

    # AdmissionCheck, LocalQueue: immutable fields.
    for v in both:
        ac = obj("AdmissionCheck", v, {"controllerName": "kueue.x-k8s.io/multikueue"})
        ac2 = obj("AdmissionCheck", v, {"controllerName": "other"})
        yield RuleCase(
            "AdmissionCheck",
            v,
            "spec.controllerName",
            "field is immutable",
            "spec.controllerName",
            "string",
            lambda ac=ac: (ac, ac),
            lambda ac=ac, ac2=ac2: (ac2, ac),
        )
        lq = obj("LocalQueue", v, {"clusterQueue": "cq"}, namespace="ns")
        lq2 = obj("LocalQueue", v, {"clusterQueue": "cq2"}, namespace="ns")
        yield RuleCase(
            "LocalQueue",
            v,
            "spec.clusterQueue",
            "field is immutable",
            "spec.clusterQueue",
            "string",
            lambda lq=lq: (lq, lq),
            lambda lq=lq, lq2=lq2: (lq2, lq),
        )

    # ClusterQueue and Cohort.
    for v in both:
        cohort_field = "cohort" if v == "v1beta1" else "cohortName"
        good = cluster_queue(
            v, resourceGroups=resource_groups(["cpu"], [CPU_BORROWING]), **{cohort_field: "co"}
        )
        bad = cluster_queue(v, resourceGroups=resource_groups(["cpu"], [CPU_BORROWING]))
        yield RuleCase(
            "ClusterQueue",
            v,
            "spec",
            "borrowingLimit must be nil when cohort is empty",
            "spec",
            "object",
            lambda g=good: (g, None),
            lambda b=bad: (b, None),
        )
        good = cluster_queue(
            v,
            flavorFungibility={
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
                "preference": "BorrowingOverPreemption",
            },
        )
        bad = cluster_queue(v, flavorFungibility={"preference": "BorrowingOverPreemption"})
        yield RuleCase(
            "ClusterQueue",
            v,
            "spec.flavorFungibility",
            "preference can only be set when both whenCanBorrow and whenCanPreempt are"
            " TryNextFlavor",
            "spec.flavorFungibility",
            "object",
            lambda g=good: (g, None),
            lambda b=bad: (b, None),
        )
        good = cluster_queue(
            v,
            preemption={
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            },
        )
        bad = cluster_queue(
            v,
            preemption={
                "reclaimWithinCohort": "Never",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            },
        )
        yield RuleCase(
            "ClusterQueue",
            v,
            "spec.preemption",
            "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
            "spec.preemption",
            "object",
            lambda g=good: (g, None),
            lambda b=bad: (b, None),
        )
        for kind in ("ClusterQueue", "Cohort"):
            good = obj(
                kind, v, {"resourceGroups": resource_groups(["cpu", "memory"], [CPU, MEMORY])}
            )
            bad = obj(kind, v, {"resourceGroups": resource_groups(["cpu", "memory"], [CPU])})
            yield RuleCase(
                kind,
                v,
                "spec.resourceGroups[]",
                "flavors must have the same number of resources as the coveredResources",
                "spec.resourceGroups[0]",
                "object",
                lambda g=good: (g, None),
                lambda b=bad: (b, None),
            )

    # MultiKueueCluster, MultiKueueConfig (v1beta2 only).
    good = obj("MultiKueueCluster", "v1beta2", {"clusterSource": {"kubeConfig": {"location": "s"}}})
    bad = obj("MultiKueueCluster", "v1beta2", {"clusterSource": {}})
    yield RuleCase(
        "MultiKueueCluster",
        "v1beta2",
        "spec.clusterSource",
        "exactly one of the fields in [kubeConfig clusterProfileRef] must be set",
        "spec.clusterSource",
        "object",
        lambda g=good: (g, None),
        lambda b=bad: (b, None),
    )
    good = obj("MultiKueueConfig", "v1beta2", {"clusters": ["a", "b"]})
    bad = obj("MultiKueueConfig", "v1beta2", {"clusters": ["a", "b", "a"]})
    yield RuleCase(
        "MultiKueueConfig",
        "v1beta2",
        "spec.clusters",
        "must be unique",
        "spec.clusters",
        "array",
        lambda g=good: (g, None),
        lambda b=bad: (b, None),
    )

    # ResourceFlavor.
    for v in both:

        def rf(v: str = v, **spec: Any) -> dict[str, Any]:
            return obj("ResourceFlavor", v, dict(spec))

        topo = {"topologyName": "t", "nodeLabels": {"pool": "a"}}
        yield RuleCase(
            "ResourceFlavor",
            v,
            "spec",
            "at least one nodeLabel is required when topology is set",
            "spec",
            "object",
            lambda rf=rf, topo=topo: (rf(**topo), None),
            lambda rf=rf: (rf(topologyName="t", nodeLabels={}), None),
        )
        yield RuleCase(
            "ResourceFlavor",
            v,
            "spec",
            "nodeLabels are immutable when topologyName is set",
            "spec",
            "object",
            lambda rf=rf, topo=topo: (rf(**topo), rf(**topo)),
            lambda rf=rf, topo=topo: (rf(topologyName="t", nodeLabels={"pool": "b"}), rf(**topo)),
        )
        yield RuleCase(
            "ResourceFlavor",
            v,
            "spec",
            "tolerations are immutable when topologyName is set",
            "spec",
            "object",
            lambda rf=rf, topo=topo: (
                rf(**topo, tolerations=[TOLERATION_OK]),
                rf(**topo, tolerations=[TOLERATION_OK]),
            ),
            lambda rf=rf, topo=topo: (rf(**topo), rf(**topo, tolerations=[TOLERATION_OK])),
        )
        yield RuleCase(
            "ResourceFlavor",
            v,
            "spec",
            "topologyName is immutable when topologyName is set",
            "spec",
            "object",
            lambda rf=rf, topo=topo: (rf(**topo), rf(**topo)),
            lambda rf=rf, topo=topo: (rf(topologyName="t2", nodeLabels={"pool": "a"}), rf(**topo)),
        )
        yield RuleCase(
            "ResourceFlavor",
            v,
            "spec.nodeTaints",
            "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
            "spec.nodeTaints",
            "array",
            lambda rf=rf: (rf(nodeTaints=[{"key": "k", "effect": "NoExecute"}]), None),
            lambda rf=rf: (rf(nodeTaints=[{"key": "k", "effect": "Bogus"}]), None),
        )
        for message, toleration in BAD_TOLERATIONS.items():
            yield RuleCase(
                "ResourceFlavor",
                v,
                "spec.tolerations",
                message,
                "spec.tolerations",
                "array",
                lambda rf=rf: (rf(tolerations=[TOLERATION_OK]), None),
                lambda rf=rf, t=toleration: (rf(tolerations=[TOLERATION_OK, t]), None),
            )

    # Topology.
    for v in both:

        def topology(labels: list[str], v: str = v) -> dict[str, Any]:
            return obj("Topology", v, {"levels": [{"nodeLabel": label} for label in labels]})

        ok = ["cloud.com/block", "kubernetes.io/hostname"]
        yield RuleCase(
            "Topology",
            v,
            "spec.levels",
            "field is immutable",
            "spec.levels",
            "array",
            lambda t=topology, ok=ok: (t(ok), t(ok)),
            lambda t=topology, ok=ok: (t(["cloud.com/rack", "kubernetes.io/hostname"]), t(ok)),
        )
        yield RuleCase(
            "Topology",
            v,
            "spec.levels",
            "must be unique",
            "spec.levels",
            "array",
            lambda t=topology, ok=ok: (t(ok), None),
            lambda t=topology: (t(["a", "a"]), None),
        )
        yield RuleCase(
            "Topology",
            v,
            "spec.levels",
            "the kubernetes.io/hostname label can only be used at the lowest level of topology",
            "spec.levels",
            "array",
            lambda t=topology, ok=ok: (t(ok), None),
            lambda t=topology: (t(["kubernetes.io/hostname", "cloud.com/block"]), None),
        )

    # Workload: rules shared by both versions.
    for v in both:

        def wl(v: str = v, **spec: Any) -> dict[str, Any]:
            return workload(v, **spec)

        def qr(o: dict[str, Any], *extra: str) -> dict[str, Any]:
            return quota_reserved(o, *extra)

        yield RuleCase(
            "Workload",
            v,
            "",
            "podSetAssignments must have the same number of podSets as the spec",
            "<nil>",
            "object",
            lambda wl=wl, qr=qr: (qr(wl()), None),
            lambda wl=wl, qr=qr: (_extra_assignment(qr(wl())), None),
        )
        yield RuleCase(
            "Workload",
            v,
            "",
            "queueName is immutable while workload quota reserved",
            "<nil>",
            "object",
            lambda wl=wl, qr=qr: (qr(wl()), qr(wl())),
            lambda wl=wl, qr=qr: (qr(wl(queueName="lq2")), qr(wl())),
        )
        yield RuleCase(
            "Workload",
            v,
            "",
            "maximumExecutionTimeSeconds is immutable while workload quota reserved",
            "<nil>",
            "object",
            lambda wl=wl, qr=qr: (
                qr(wl(maximumExecutionTimeSeconds=20), "Admitted"),
                qr(wl(maximumExecutionTimeSeconds=10)),  # not admitted before: may change
            ),
            lambda wl=wl, qr=qr: (
                qr(wl(maximumExecutionTimeSeconds=20), "Admitted"),
                qr(wl(maximumExecutionTimeSeconds=10), "Admitted"),
            ),
        )
        yield RuleCase(
            "Workload",
            v,
            "spec.podSets[]",
            "minCount should be positive and less or equal to count",
            "spec.podSets[0]",
            "object",
            lambda wl=wl: (_pod_set(wl(), minCount=2), None),
            lambda wl=wl: (_pod_set(wl(), minCount=3), None),
        )
        yield RuleCase(
            "Workload",
            v,
            "status",
            "clusterName is immutable once set",
            "status",
            "object",
            lambda wl=wl: (with_status(wl(), clusterName="a"), with_status(wl(), clusterName="a")),
            lambda wl=wl: (with_status(wl(), clusterName="b"), with_status(wl(), clusterName="a")),
        )
        yield RuleCase(
            "Workload",
            v,
            "status",
            "clusterName and nominatedClusterNames are mutually exclusive",
            "status",
            "object",
            lambda wl=wl: (with_status(wl(), clusterName="a", nominatedClusterNames=[]), None),
            lambda wl=wl: (with_status(wl(), clusterName="a", nominatedClusterNames=["a"]), None),
        )
        field = "status.admissionChecks[0].podSetUpdates[0].tolerations"
        path = "status.admissionChecks[].podSetUpdates[].tolerations"
        for message, toleration in BAD_TOLERATIONS.items():
            yield RuleCase(
                "Workload",
                v,
                path,
                message,
                field,
                "array",
                lambda v=v: (with_podset_tolerations(v, [TOLERATION_OK]), None),
                lambda v=v, t=toleration: (with_podset_tolerations(v, [t]), None),
            )

    # Workload v1beta1 only.
    v = "v1beta1"

    def wl1(**spec: Any) -> dict[str, Any]:
        return workload("v1beta1", **spec)

    wpc = "kueue.x-k8s.io/workloadpriorityclass"
    spc = "scheduling.k8s.io/priorityclass"
    yield RuleCase(
        "Workload",
        v,
        "spec",
        "priority should not be nil when priorityClassName is set",
        "spec",
        "object",
        lambda: (wl1(priorityClassName="p", priority=1), None),
        lambda: (wl1(priorityClassName="p"), None),
    )
    yield RuleCase(
        "Workload",
        v,
        "",
        "priorityClassSource is immutable while workload quota reserved",
        "<nil>",
        "object",
        lambda: (
            quota_reserved(wl1(priorityClassName="p", priority=1, priorityClassSource=wpc)),
            quota_reserved(wl1(priorityClassName="p", priority=1, priorityClassSource=wpc)),
        ),
        lambda: (
            quota_reserved(wl1(priorityClassName="p", priority=1, priorityClassSource=spc)),
            quota_reserved(wl1(priorityClassName="p", priority=1, priorityClassSource=wpc)),
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        "",
        "priorityClassName is immutable while workload quota reserved and priorityClassSource is"
        " not equal to kueue.x-k8s.io/workloadpriorityclass",
        "<nil>",
        "object",
        lambda: (
            quota_reserved(wl1(priorityClassName="p2", priority=1, priorityClassSource=wpc)),
            quota_reserved(wl1(priorityClassName="p", priority=1, priorityClassSource=wpc)),
        ),
        lambda: (
            quota_reserved(wl1(priorityClassName="p2", priority=1, priorityClassSource=spc)),
            quota_reserved(wl1(priorityClassName="p", priority=1, priorityClassSource=spc)),
        ),
    )

    # Workload v1beta2 only.
    v = "v1beta2"

    def wl2(**spec: Any) -> dict[str, Any]:
        return workload("v1beta2", **spec)

    def ref(group: str, kind: str, name: str = "p") -> dict[str, Any]:
        return {"group": group, "kind": kind, "name": name}

    wpc_ref = ref("kueue.x-k8s.io", "WorkloadPriorityClass")
    pc_ref = ref("scheduling.k8s.io", "PriorityClass")
    yield RuleCase(
        "Workload",
        v,
        "spec",
        "priority should not be nil when priorityClassRef is set",
        "spec",
        "object",
        lambda: (wl2(priorityClassRef=wpc_ref, priority=1), None),
        lambda: (wl2(priorityClassRef=wpc_ref), None),
    )
    yield RuleCase(
        "Workload",
        v,
        "spec.priorityClassRef",
        "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
        "spec.priorityClassRef",
        "object",
        lambda: (wl2(priorityClassRef=pc_ref, priority=1), None),
        lambda: (
            wl2(priorityClassRef=ref("scheduling.k8s.io", "WorkloadPriorityClass"), priority=1),
            None,
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        "spec.priorityClassRef",
        "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
        "spec.priorityClassRef",
        "object",
        lambda: (wl2(priorityClassRef=wpc_ref, priority=1), None),
        lambda: (wl2(priorityClassRef=ref("kueue.x-k8s.io", "PriorityClass"), priority=1), None),
    )
    yield RuleCase(
        "Workload",
        v,
        "",
        "priorityClassRef is immutable while workload quota reserved",
        "<nil>",
        "object",
        lambda: (quota_reserved(wl2(priority=1)), quota_reserved(wl2(priority=1))),
        lambda: (
            quota_reserved(wl2(priority=1)),
            quota_reserved(wl2(priorityClassRef=wpc_ref, priority=1)),
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        "",
        "priorityClassRef.group is immutable while workload quota reserved",
        "<nil>",
        "object",
        lambda: (
            quota_reserved(
                wl2(
                    priorityClassRef=ref("kueue.x-k8s.io", "WorkloadPriorityClass", "q"), priority=1
                )
            ),
            quota_reserved(wl2(priorityClassRef=wpc_ref, priority=1)),
        ),
        lambda: (  # crafted old: scheduling.k8s.io with the kueue kind (see module docstring)
            quota_reserved(wl2(priorityClassRef=wpc_ref, priority=1)),
            quota_reserved(
                wl2(priorityClassRef=ref("scheduling.k8s.io", "WorkloadPriorityClass"), priority=1)
            ),
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        "",
        "priorityClassRef.kind is immutable while workload quota reserved",
        "<nil>",
        "object",
        lambda: (
            quota_reserved(wl2(priorityClassRef=wpc_ref, priority=2)),
            quota_reserved(wl2(priorityClassRef=wpc_ref, priority=1)),
        ),
        lambda: (  # crafted old: the kueue group with the scheduling kind
            quota_reserved(wl2(priorityClassRef=wpc_ref, priority=1)),
            quota_reserved(
                wl2(priorityClassRef=ref("kueue.x-k8s.io", "PriorityClass"), priority=1)
            ),
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        "",
        "priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass while workload"
        " quota reserved",
        "<nil>",
        "object",
        lambda: (  # the name of a WorkloadPriorityClass may change
            quota_reserved(
                wl2(
                    priorityClassRef=ref("kueue.x-k8s.io", "WorkloadPriorityClass", "q"), priority=1
                )
            ),
            quota_reserved(wl2(priorityClassRef=wpc_ref, priority=1)),
        ),
        lambda: (
            quota_reserved(
                wl2(priorityClassRef=ref("scheduling.k8s.io", "PriorityClass", "q"), priority=1)
            ),
            quota_reserved(wl2(priorityClassRef=pc_ref, priority=1)),
        ),
    )
    ta = "status.admission.podSetAssignments[].topologyAssignment"
    ta_field = "status.admission.podSetAssignments[0].topologyAssignment"

    def slice_(
        domain_count: int, pod_counts: dict[str, Any], values: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {"domainCount": domain_count, "podCounts": pod_counts, "valuesPerLevel": values}

    good_ta = {
        "levels": ["block", "host"],
        "slices": [
            slice_(
                2, {"universal": 1}, [{"universal": "b1"}, {"individual": {"roots": ["h1", "h2"]}}]
            )
        ],
    }
    yield RuleCase(
        "Workload",
        v,
        ta,
        "valuesPerLevel must have the same length as the number of levels in this"
        " TopologyAssignment",
        ta_field,
        "object",
        lambda: (topology_assignment(v, good_ta), None),
        lambda: (
            topology_assignment(
                v,
                {
                    "levels": ["block", "host"],
                    "slices": [slice_(1, {"universal": 1}, [{"universal": "b"}])],
                },
            ),
            None,
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        ta + ".slices[]",
        "podCounts.individual must have length equal to domainCount",
        ta_field + ".slices[0]",
        "object",
        lambda: (
            topology_assignment(
                v,
                {
                    "levels": ["h"],
                    "slices": [slice_(2, {"individual": [1, 1]}, [{"universal": "h"}])],
                },
            ),
            None,
        ),
        lambda: (
            topology_assignment(
                v,
                {"levels": ["h"], "slices": [slice_(2, {"individual": [1]}, [{"universal": "h"}])]},
            ),
            None,
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        ta + ".slices[]",
        "valuesPerLevel.individual, if set, must have roots of length equal to domainCount of this"
        " TopologyAssignmentSlice",
        ta_field + ".slices[0]",
        "object",
        lambda: (
            topology_assignment(
                v,
                {
                    "levels": ["h"],
                    "slices": [
                        slice_(2, {"universal": 1}, [{"individual": {"roots": ["a", "b"]}}])
                    ],
                },
            ),
            None,
        ),
        lambda: (
            topology_assignment(
                v,
                {
                    "levels": ["h"],
                    "slices": [slice_(2, {"universal": 1}, [{"individual": {"roots": ["a"]}}])],
                },
            ),
            None,
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        ta + ".slices[].podCounts",
        "exactly one of the fields in [universal individual] must be set",
        ta_field + ".slices[0].podCounts",
        "object",
        lambda: (
            topology_assignment(
                v, {"levels": ["h"], "slices": [slice_(1, {"universal": 3}, [{"universal": "h"}])]}
            ),
            None,
        ),
        lambda: (
            topology_assignment(
                v,
                {
                    "levels": ["h"],
                    "slices": [
                        slice_(1, {"universal": 3, "individual": [3]}, [{"universal": "h"}])
                    ],
                },
            ),
            None,
        ),
    )
    yield RuleCase(
        "Workload",
        v,
        ta + ".slices[].valuesPerLevel[]",
        "exactly one of the fields in [universal individual] must be set",
        ta_field + ".slices[0].valuesPerLevel[0]",
        "object",
        lambda: (
            topology_assignment(
                v, {"levels": ["h"], "slices": [slice_(1, {"universal": 3}, [{"universal": "h"}])]}
            ),
            None,
        ),
        lambda: (
            topology_assignment(
                v,
                {
                    "levels": ["h"],
                    "slices": [
                        slice_(
                            1,
                            {"universal": 3},
                            [{"universal": "h", "individual": {"roots": ["h"]}}],
                        )
                    ],
                },
            ),
            None,
        ),
    )


def _extra_assignment(wl: dict[str, Any]) -> dict[str, Any]:
    wl["status"]["admission"]["podSetAssignments"].append({"name": "extra", "count": 1})
    return wl


def _pod_set(wl: dict[str, Any], **fields: Any) -> dict[str, Any]:
    wl["spec"]["podSets"][0].update(fields)
    return wl


RULE_CASES = list(_cases())


def test_f47_all_79_rules_compile(kueue: Kueue) -> None:
    assert len(kueue.schemas) == 20  # ten CRDs, two served versions each
    assert len(kueue.rules) == 79
    assert sum(s.rule_count for s in kueue.schemas.values()) == 79


def test_f44_every_rule_has_a_case(kueue: Kueue) -> None:
    covered = {RuleRef(c.kind, c.version, c.path, c.message) for c in RULE_CASES}
    assert set(kueue.rules) - covered == set()
    assert covered - set(kueue.rules) == set()
    assert len(RULE_CASES) == 79


@pytest.mark.parametrize("case", RULE_CASES, ids=[c.id for c in RULE_CASES])
def test_f44_f45_rule_passes_on_valid_object(kueue: Kueue, case: RuleCase) -> None:
    new, old = case.valid()
    _, errors = kueue.admit(case.kind, case.version, new, old)
    assert errors == []


@pytest.mark.parametrize("case", RULE_CASES, ids=[c.id for c in RULE_CASES])
def test_f44_f45_rule_fires_on_crafted_bad_object(kueue: Kueue, case: RuleCase) -> None:
    new, old = case.bad()
    _, errors = kueue.admit(case.kind, case.version, new, old)
    expected = FieldError(
        "FieldValueInvalid", case.field, f'Invalid value: "{case.type_name}": {case.message}'
    )
    assert errors == [expected]


# --- C17: the dispatcher's two Workload status fields --------------------------------------------

V2 = "v1beta2"


def test_c17_f44_cluster_name_and_nominations_are_mutually_exclusive(kueue: Kueue) -> None:
    new = with_status(workload(V2), clusterName="w1", nominatedClusterNames=["w1", "w2"])
    _, errors = kueue.admit(
        "Workload", V2, new, with_status(workload(V2), nominatedClusterNames=["w1"])
    )
    assert errors == [
        FieldError(
            "FieldValueInvalid",
            "status",
            'Invalid value: "object": clusterName and nominatedClusterNames are mutually exclusive',
        )
    ]
    assert invalid_message("Workload", GROUP, "x", errors) == (
        'Workload.kueue.x-k8s.io "x" is invalid: status: Invalid value: "object": clusterName and'
        " nominatedClusterNames are mutually exclusive"
    )


@pytest.mark.parametrize(
    ("old_name", "new_name", "error"),
    [
        pytest.param(None, "w1", False, id="unset-to-set-allowed"),
        pytest.param("w1", "w1", False, id="unchanged-allowed"),
        pytest.param("w1", None, False, id="set-to-unset-allowed"),
        pytest.param("w1", "w2", True, id="changed-rejected"),
    ],
)
def test_c17_f45_cluster_name_is_immutable_once_set(
    kueue: Kueue, old_name: str | None, new_name: str | None, error: bool
) -> None:
    def wl(name: str | None) -> dict[str, Any]:
        return with_status(workload(V2), **({"clusterName": name} if name else {}))

    _, errors = kueue.admit("Workload", V2, wl(new_name), wl(old_name))
    expected = [
        FieldError(
            "FieldValueInvalid",
            "status",
            'Invalid value: "object": clusterName is immutable once set',
        )
    ]
    assert errors == (expected if error else [])


# --- Validation ratcheting on UPDATE (KEP-4008) ---------------------------------------------------

MIN_COUNT = 'Invalid value: "object": minCount should be positive and less or equal to count'
IMMUTABLE_CLUSTER = 'Invalid value: "object": clusterName is immutable once set'


def _stored_invalid(**status: Any) -> dict[str, Any]:
    """A Workload stored before a tighter CRD: ``minCount`` 3 of a pod set of 2 pods."""
    return with_status(_pod_set(workload(V2), minCount=3), **status)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            _stored_invalid(),
            _stored_invalid(nominatedClusterNames=["w1"]),
            [],
            id="status-write-leaves-invalid-spec-unchanged-accepted",
        ),
        pytest.param(
            _stored_invalid(),
            _pod_set(_stored_invalid(), minCount=4),
            [("spec.podSets[0]", MIN_COUNT)],
            id="invalid-value-changed-to-other-invalid-value-rejected",
        ),
        pytest.param(
            _stored_invalid(),
            _pod_set(_stored_invalid(), minCount=1),
            [],
            id="invalid-value-fixed-accepted",
        ),
        pytest.param(
            None,
            _stored_invalid(),
            [("spec.podSets[0]", MIN_COUNT)],
            id="create-is-never-ratcheted",
        ),
        pytest.param(
            _stored_invalid(clusterName="w1"),
            _stored_invalid(clusterName="w2"),
            [("status", IMMUTABLE_CLUSTER)],
            id="c17-transition-rule-fires-while-spec-is-ratcheted",
        ),
        pytest.param(
            _stored_invalid(clusterName="w1"),
            _stored_invalid(clusterName="w1", nominatedClusterNames=["w1"]),
            [
                (
                    "status",
                    'Invalid value: "object": clusterName and nominatedClusterNames are mutually'
                    " exclusive",
                )
            ],
            id="c17-changed-status-is-not-ratcheted",
        ),
    ],
)
def test_ratcheting_of_workload_updates(
    kueue: Kueue,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    expected: list[tuple[str, str]],
) -> None:
    _, errors = kueue.admit("Workload", V2, new, old)
    assert [(e.field, e.message) for e in errors] == expected


def test_ratcheting_repeated_status_writes_stay_consistent(kueue: Kueue) -> None:
    """A run of status writes like the dispatcher's, each admitted against the stored object."""
    stored, errors = kueue.admit("Workload", V2, workload(V2), None)
    assert errors == []
    for step in range(5):
        new = with_status(stored, nominatedClusterNames=[f"w{step}"])
        stored, errors = kueue.admit("Workload", V2, new, stored)
        assert errors == []
    new = with_status(stored, clusterName="w4", nominatedClusterNames=[])
    stored, errors = kueue.admit("Workload", V2, new, stored)
    assert errors == []
    _, errors = kueue.admit("Workload", V2, with_status(stored, clusterName="w3"), stored)
    assert [(e.field, e.message) for e in errors] == [("status", IMMUTABLE_CLUSTER)]


def test_f45_transition_rule_not_evaluated_on_create(kueue: Kueue) -> None:
    lq = obj("LocalQueue", V2, {"clusterQueue": "cq"}, namespace="ns")
    assert kueue.admit("LocalQueue", V2, lq, None)[1] == []


def test_f45_transition_rule_not_evaluated_where_old_has_no_value(kueue: Kueue) -> None:
    new = obj("LocalQueue", V2, {"clusterQueue": "cq"}, namespace="ns")
    old = obj("LocalQueue", V2, {}, namespace="ns")
    assert kueue.admit("LocalQueue", V2, new, old)[1] == []


def test_f45_priority_class_ref_group_change_reports_group_and_kind(kueue: Kueue) -> None:
    old = quota_reserved(
        workload(
            V2,
            priority=1,
            priorityClassRef={"group": GROUP, "kind": "WorkloadPriorityClass", "name": "p"},
        )
    )
    new = quota_reserved(
        workload(
            V2,
            priority=1,
            priorityClassRef={"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "p"},
        )
    )
    messages = [e.message for e in kueue.admit("Workload", V2, new, old)[1]]
    assert messages == [
        f'Invalid value: "object": priorityClassRef.{part} is immutable while workload quota'
        " reserved"
        for part in ("group", "kind")
    ]


# --- F42: structural validation against the real schemas -----------------------------------------


def _podset(wl: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return _pod_set(wl, **fields)


@pytest.mark.parametrize(
    ("kind", "new", "expected"),
    [
        pytest.param(
            "Workload",
            _podset(workload(V2), count="two"),
            FieldError(
                "FieldValueTypeInvalid",
                "spec.podSets[0].count",
                'Invalid value: "string": spec.podSets[0].count in body must be of type integer:'
                ' "string"',
            ),
            id="type-podset-count-string",
        ),
        pytest.param(
            "Workload",
            _podset(workload(V2), count=-1),
            FieldError(
                "FieldValueInvalid",
                "spec.podSets[0].count",
                "Invalid value: -1: spec.podSets[0].count in body should be greater than or equal"
                " to 0",
            ),
            id="minimum-podset-count",
        ),
        pytest.param(
            "Workload",
            with_status(workload(V2), nominatedClusterNames=[f"w{i}" for i in range(21)]),
            FieldError(
                "FieldValueTooMany",
                "status.nominatedClusterNames",
                "Too many: 21: must have at most 20 items",
            ),
            id="maxItems-nominatedClusterNames-21",
        ),
        pytest.param(
            "Workload",
            with_status(workload(V2), clusterName="c" * 257),
            FieldError(
                "FieldValueTooLong",
                "status.clusterName",
                "Too long: may not be more than 256 bytes",
            ),
            id="maxLength-clusterName-257",
        ),
        pytest.param(
            "Workload",
            workload(V2, queueName="Not_A_Name"),
            FieldError(
                "FieldValueInvalid",
                "spec.queueName",
                'Invalid value: "Not_A_Name": spec.queueName in body should match'
                " '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
            ),
            id="pattern-queueName",
        ),
        pytest.param(
            "Workload",
            workload(
                V2,
                priority=1,
                priorityClassRef={"group": "example.com", "kind": "PriorityClass", "name": "p"},
            ),
            FieldError(
                "FieldValueNotSupported",
                "spec.priorityClassRef.group",
                'Unsupported value: "example.com": supported values: "kueue.x-k8s.io",'
                ' "scheduling.k8s.io"',
            ),
            id="enum-priorityClassRef-group",
        ),
        pytest.param(
            "Workload",
            with_status(workload(V2), conditions=[condition("Admitted"), condition("Admitted")]),
            FieldError(
                "FieldValueDuplicate",
                "status.conditions[1]",
                'Duplicate value: map[string]interface {}{"type":"Admitted"}',
            ),
            id="duplicate-condition-type",
        ),
        pytest.param(
            "Workload",
            with_status(
                workload(V2),
                conditions=[{"type": "Admitted", "status": "True", "reason": "R", "message": ""}],
            ),
            FieldError(
                "FieldValueRequired", "status.conditions[0].lastTransitionTime", "Required value"
            ),
            id="required-condition-lastTransitionTime",
        ),
        pytest.param(
            "Workload",
            with_status(
                workload(V2),
                conditions=[condition("Admitted") | {"lastTransitionTime": "yesterday"}],
            ),
            FieldError(
                "FieldValueInvalid",
                "status.conditions[0].lastTransitionTime",
                'Invalid value: "yesterday": status.conditions[0].lastTransitionTime in body'
                ' must be of type date-time: "yesterday"',
            ),
            id="format-date-time",
        ),
        pytest.param(
            "AdmissionCheck",
            obj("AdmissionCheck", V2, {}),
            FieldError("FieldValueRequired", "spec.controllerName", "Required value"),
            id="required-controllerName",
        ),
        pytest.param(
            "AdmissionCheck",
            obj(
                "AdmissionCheck",
                V2,
                {
                    "controllerName": "c",
                    "parameters": {"apiGroup": "g", "kind": "9Kind", "name": "n"},
                },
            ),
            FieldError(
                "FieldValueInvalid",
                "spec.parameters.kind",
                'Invalid value: "9Kind": spec.parameters.kind in body should match'
                " '^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$'",
            ),
            id="pattern-with-inline-case-flag",
        ),
    ],
)
def test_f42_structural_errors(
    kueue: Kueue, kind: str, new: dict[str, Any], expected: FieldError
) -> None:
    assert kueue.admit(kind, V2, new)[1] == [expected]


def test_f42_pattern_with_inline_case_flag_accepts_upper_case(kueue: Kueue) -> None:
    ac = obj(
        "AdmissionCheck",
        V2,
        {"controllerName": "c", "parameters": {"apiGroup": "g", "kind": "MyConfig", "name": "n"}},
    )
    assert kueue.admit("AdmissionCheck", V2, ac)[1] == []


def test_f42_int_or_string_quantities(kueue: Kueue) -> None:
    for quota in ("10", 10, "500m", "1Gi"):
        cq = cluster_queue(
            V2, resourceGroups=resource_groups(["cpu"], [{"name": "cpu", "nominalQuota": quota}])
        )
        assert kueue.admit("ClusterQueue", V2, cq)[1] == [], quota
    cq = cluster_queue(
        V2, resourceGroups=resource_groups(["cpu"], [{"name": "cpu", "nominalQuota": True}])
    )
    [error] = kueue.admit("ClusterQueue", V2, cq)[1]
    assert error.reason == "FieldValueTypeInvalid"
    assert error.field == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"


# --- F43: pruning and defaults -------------------------------------------------------------------


def test_f43_unknown_fields_are_pruned_metadata_kept(kueue: Kueue) -> None:
    new = workload(V2)
    new["metadata"]["labels"] = {"a": "b"}
    new["metadata"]["somethingNew"] = {"kept": True}
    new["spec"]["bogus"] = 1
    new["spec"]["podSets"][0]["bogus"] = {"x": 1}
    new["status"] = {"clusterName": "w1", "bogus": []}
    new["topLevelBogus"] = "x"
    before = copy.deepcopy(new)
    stored, errors = kueue.admit("Workload", V2, new)
    assert errors == []
    assert new == before  # inputs are not mutated
    assert stored["metadata"] == new["metadata"]
    assert stored["apiVersion"] == new["apiVersion"]
    assert stored["kind"] == "Workload"
    assert "bogus" not in stored["spec"]
    assert "bogus" not in stored["spec"]["podSets"][0]
    assert stored["status"] == {"clusterName": "w1"}
    assert "topLevelBogus" not in stored


def test_f43_workload_defaults(kueue: Kueue) -> None:
    new = workload(V2)
    del new["spec"]["podSets"][0]["name"]
    del new["spec"]["podSets"][0]["count"]
    stored, errors = kueue.admit("Workload", V2, new)
    assert errors == []
    assert stored["spec"]["podSets"][0]["name"] == "main"
    assert stored["spec"]["podSets"][0]["count"] == 1
    assert stored["spec"]["active"] is True


def test_f43_cluster_queue_defaults(kueue: Kueue) -> None:
    stored, errors = kueue.admit("ClusterQueue", V2, cluster_queue(V2, fairSharing={}))
    assert errors == []
    assert stored["spec"] == {
        "queueingStrategy": "BestEffortFIFO",
        "stopPolicy": "None",
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        "preemption": {
            "reclaimWithinCohort": "Never",
            "withinClusterQueue": "Never",
            "borrowWithinCohort": {"policy": "Never"},
        },
        "fairSharing": {"weight": 1},
    }


def test_f43_non_nullable_nulls_dropped_or_defaulted(kueue: Kueue) -> None:
    cq = cluster_queue(V2, queueingStrategy=None, cohortName=None)
    stored, errors = kueue.admit("ClusterQueue", V2, cq)
    assert errors == []
    assert stored["spec"]["queueingStrategy"] == "BestEffortFIFO"  # null with a default: defaulted
    assert "cohortName" not in stored["spec"]  # null without a default: dropped


def test_f43_defaults_not_applied_over_values(kueue: Kueue) -> None:
    cq = cluster_queue(V2, queueingStrategy="StrictFIFO")
    stored, _ = kueue.admit("ClusterQueue", V2, cq)
    assert stored["spec"]["queueingStrategy"] == "StrictFIFO"


# --- C19 and caching -----------------------------------------------------------------------------


def test_c19_structure_info_of_workload_status(kueue: Kueue) -> None:
    root = kueue.schemas[("Workload", V2)].root
    status = root.child("status")
    assert status is not None
    expected = {
        "conditions": ("map", ("type",)),
        "admissionChecks": ("map", ("name",)),
        "nominatedClusterNames": ("atomic", ()),
        "reclaimablePods": ("map", ("name",)),
        "resourceRequests": ("map", ("name",)),
        "unhealthyNodes": ("map", ("name",)),
    }
    for name, (list_type, keys) in expected.items():
        node = status.child(name)
        assert node is not None, name
        assert (node.list_type, node.list_map_keys) == (list_type, keys), name
    pod_sets = root.child("spec")
    assert pod_sets is not None
    node = pod_sets.child("podSets")
    assert node is not None
    assert node.items() is not None
    assert node.list_map_keys == ("name",)


def test_f40_compiled_schemas_are_shared(kueue: Kueue) -> None:
    schema = kueue.raw[("Workload", V2)]
    assert compile_schema(schema) is kueue.schemas[("Workload", V2)]
    assert compile_schema(copy.deepcopy(schema)) is kueue.schemas[("Workload", V2)]
