"""Typed, immutable views of the Kueue (v1beta2) and core objects the dispatcher reads.

Each ``parse_*`` function takes the raw JSON dict of an object as the API server returns it and
keeps only what placement decisions need. Views are frozen dataclasses whose mappings are
read-only, so they can be shared between threads, cached and compared. Field names follow the
v1beta2 CRDs (``spec.podSets[].template``, ``spec.resourceGroups[].flavors[].resources[]``,
``status.flavorsReservation`` …); missing optional fields take Kubernetes' defaults.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from dispatcher.kueue.quantities import (
    QuantityError,
    add_requests,
    parse_quantity,
    scale_requests,
)

__all__ = [
    "ClusterQueueView",
    "Condition",
    "FlavorQuotas",
    "FlavorResource",
    "InvalidField",
    "LocalQueueView",
    "NodeSelectorRequirement",
    "PodSetView",
    "QueuePolicy",
    "ResourceFlavorView",
    "ResourceGroup",
    "ResourceQuota",
    "Taint",
    "Toleration",
    "WorkloadView",
    "frozen_map",
    "parse_cluster_queue",
    "parse_local_queue",
    "parse_pod_set",
    "parse_queue_policy",
    "parse_resource_flavor",
    "parse_workload",
    "pod_requests",
]

FlavorResource = tuple[str, str]
"""A ``(flavor name, resource name)`` pair: the unit in which ClusterQueues account quota."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_K = TypeVar("_K")
_V = TypeVar("_V")


class InvalidField(ValueError):
    """A field of an object that cannot be read (a value Kueue's CRD schema would refuse).

    ``field`` is the path of the field within the object, as the API server names it in a 422
    answer (``spec.podSets[0].template.spec.containers[0].resources.requests.cpu``); ``str()``
    is ``"<field>: <problem>"``.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem

    def under(self, parent: str) -> InvalidField:
        """The same problem, its path prefixed with ``parent``."""
        return InvalidField(f"{parent}.{self.field}", self.problem)


def frozen_map(items: Mapping[_K, _V] | None = None) -> Mapping[_K, _V]:
    """A read-only copy of ``items`` (an empty read-only mapping for ``None``)."""
    return MappingProxyType(dict(items or {}))


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def _str_map(value: object) -> Mapping[str, str]:
    return frozen_map({str(k): str(v) for k, v in _dict(value).items()})


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One ``matchExpressions`` item of a required node-affinity term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Evaluate the requirement against a label map (``In``, ``NotIn``, ``Exists``, …)."""
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt") and present and self.values:
            try:
                number, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return number > bound if self.operator == "Gt" else number < bound
        return False

    def __str__(self) -> str:
        """The requirement in ``kubectl`` label-selector syntax (``Gt``/``Lt`` have none: they
        print as ``key gt (value)``)."""
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        if self.operator in ("In", "NotIn") and len(self.values) == 1:
            return f"{self.key}{'=' if self.operator == 'In' else '!='}{self.values[0]}"
        return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod's, a flavor's or a workload's toleration (of node taints, or of MultiKueueCluster
    taints through its placement hints)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration tolerates ``taint`` (Kubernetes' matching rules)."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Taint:
    """A taint: a ResourceFlavor's node taint, or a MultiKueueCluster's
    (:mod:`dispatcher.kueue.hints`)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        """``key=value:effect``, as ``kubectl taint`` writes it."""
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


def _parse_toleration(raw: Mapping[str, Any]) -> Toleration:
    return Toleration(
        key=str(raw.get("key", "")),
        operator=str(raw.get("operator", "Equal")),
        value=str(raw.get("value", "")),
        effect=str(raw.get("effect", "")),
    )


def _quantity(value: Any, where: str) -> int:
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError, ValueError) as error:
        problem = str(error) if isinstance(error, QuantityError) else f"not a quantity: {value!r}"
        raise InvalidField(where, problem) from None


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective per-pod requests in milli-units, as the scheduler and Kueue count them.

    Sum of the app containers (plus restartable init containers, i.e. sidecars), at least the
    largest regular init container, plus ``overhead``. A container's ``limits`` stand in for
    missing ``requests`` (Kubernetes defaults requests to limits). A value that is not a
    quantity raises :class:`InvalidField` with its path in the pod spec
    (``containers[0].resources.requests.cpu``).
    """

    def container_requests(where: str, container: Mapping[str, Any]) -> dict[str, int]:
        resources = _dict(container.get("resources"))
        found: dict[str, int] = {}
        for part in ("limits", "requests"):  # requests win over limits
            for name, amount in _dict(resources.get(part)).items():
                found[str(name)] = _quantity(amount, f"{where}.resources.{part}.{name}")
        return found

    containers = list(enumerate(_list(pod_spec.get("containers"))))
    init = list(enumerate(_list(pod_spec.get("initContainers"))))
    sidecars = [(i, c) for i, c in init if _dict(c).get("restartPolicy") == "Always"]
    regular_init = [(i, c) for i, c in init if _dict(c).get("restartPolicy") != "Always"]
    total = add_requests(
        *(container_requests(f"containers[{i}]", _dict(c)) for i, c in containers),
        *(container_requests(f"initContainers[{i}]", _dict(c)) for i, c in sidecars),
    )
    for i, c in regular_init:
        for name, amount in container_requests(f"initContainers[{i}]", _dict(c)).items():
            total[name] = max(total.get(name, 0), amount)
    overhead = {
        str(k): _quantity(v, f"overhead.{k}") for k, v in _dict(pod_spec.get("overhead")).items()
    }
    return add_requests(total, overhead)


@dataclass(frozen=True, slots=True)
class PodSetView:
    """One pod set of a Workload: how many pods, what each requests, where they may run."""

    name: str
    count: int
    requests: Mapping[str, int] = field(default_factory=frozen_map)
    """Per-pod requests in milli-units."""
    min_count: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=frozen_map)
    required_affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    """Required node-affinity terms: the terms are ORed, the requirements of a term ANDed."""
    tolerations: tuple[Toleration, ...] = ()
    resource_names: tuple[str, ...] = ()
    """Names of the requested resources in the order first seen (stable for explanations)."""
    _total: Mapping[str, int] = field(init=False, repr=False, compare=False)
    """Set on first use of :attr:`total` (a slot left empty until then: the index holds a
    pod set for every mirrored workload, and only those a decision replays need it)."""

    @property
    def total(self) -> Mapping[str, int]:
        """Requests of the whole pod set (per-pod requests times ``count``), read-only; computed
        once (a decision replays every in-flight workload's pod sets on each cluster)."""
        try:
            return self._total
        except AttributeError:
            total = frozen_map(scale_requests(self.requests, self.count))
            object.__setattr__(self, "_total", total)
            return total


def _integer(value: Any, where: str, *, minimum: int | None = None) -> int:
    """An integer field (JSON number or digit string), else :class:`InvalidField`."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = int(value)
    if number is None:
        raise InvalidField(where, f"not an integer: {value!r}")
    if minimum is not None and number < minimum:
        raise InvalidField(where, f"must be {minimum} or more, not {number}")
    return number


def parse_pod_set(raw: Mapping[str, Any]) -> PodSetView:
    """Build a :class:`PodSetView` from one ``spec.podSets[]`` item of a Workload.

    A field that cannot be read raises :class:`InvalidField` with its path in the pod set
    (``template.spec.containers[0].resources.requests.cpu``, ``count``).
    """
    template = _dict(raw.get("template"))
    spec = _dict(template.get("spec"))
    try:
        requests = pod_requests(spec)
    except InvalidField as error:
        raise error.under("template.spec") from None
    affinity = _dict(_dict(spec.get("affinity")).get("nodeAffinity"))
    required = _dict(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms: list[tuple[NodeSelectorRequirement, ...]] = []
    for term in _list(required.get("nodeSelectorTerms")):
        terms.append(
            tuple(
                NodeSelectorRequirement(
                    key=str(expr.get("key", "")),
                    operator=str(expr.get("operator", "In")),
                    values=tuple(str(v) for v in _list(expr.get("values"))),
                )
                for expr in _list(_dict(term).get("matchExpressions"))
            )
        )
    min_count = raw.get("minCount")
    return PodSetView(
        name=str(raw.get("name", "main")),
        count=_integer(raw.get("count", 1), "count", minimum=0),
        requests=frozen_map(requests),
        min_count=int(min_count) if isinstance(min_count, int) else None,
        node_selector=_str_map(spec.get("nodeSelector")),
        required_affinity=tuple(terms),
        tolerations=tuple(_parse_toleration(t) for t in _list(spec.get("tolerations"))),
        resource_names=tuple(requests),
    )


@dataclass(frozen=True, slots=True)
class Condition:
    """A status condition, reduced to what decisions use."""

    type: str
    status: str
    reason: str = ""
    last_transition_time: str = ""


def _conditions(raw: object) -> Mapping[str, Condition]:
    out = {}
    for item in _list(raw):
        cond = Condition(
            type=str(item.get("type", "")),
            status=str(item.get("status", "Unknown")),
            reason=str(item.get("reason", "")),
            last_transition_time=str(item.get("lastTransitionTime", "")),
        )
        out[cond.type] = cond
    return frozen_map(out)


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """A manager-side Workload (``kueue.x-k8s.io/v1beta2``)."""

    namespace: str
    name: str
    queue_name: str = ""
    priority: int = 0
    pod_sets: tuple[PodSetView, ...] = ()
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    creation_timestamp: str = ""
    nominated_cluster_names: tuple[str, ...] = ()
    cluster_name: str | None = None
    conditions: Mapping[str, Condition] = field(default_factory=frozen_map)
    active: bool = True
    max_execution_seconds: int | None = None
    """``spec.maximumExecutionTimeSeconds``, if set."""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def total_requests(self) -> Mapping[str, int]:
        """Requests of all pod sets together, in milli-units."""
        return add_requests(*(ps.total for ps in self.pod_sets))


def parse_workload(raw: Mapping[str, Any]) -> WorkloadView:
    """Build a :class:`WorkloadView` from a raw Workload dict.

    A field that cannot be read raises :class:`InvalidField` with its path in the Workload
    (``spec.podSets[0].template.spec.containers[0].resources.requests.cpu``).
    """
    meta = _dict(raw.get("metadata"))
    spec = _dict(raw.get("spec"))
    status = _dict(raw.get("status"))
    cluster_name = status.get("clusterName")
    pod_sets = []
    for index, item in enumerate(_list(spec.get("podSets"))):
        try:
            pod_sets.append(parse_pod_set(_dict(item)))
        except InvalidField as error:
            raise error.under(f"spec.podSets[{index}]") from None
    priority = _integer(spec.get("priority") or 0, "spec.priority")
    limit = spec.get("maximumExecutionTimeSeconds")
    max_execution = (
        None if limit is None else _integer(limit, "spec.maximumExecutionTimeSeconds", minimum=1)
    )
    return WorkloadView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        queue_name=str(spec.get("queueName", "")),
        priority=priority,
        pod_sets=tuple(pod_sets),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        creation_timestamp=str(meta.get("creationTimestamp", "")),
        nominated_cluster_names=tuple(str(n) for n in _list(status.get("nominatedClusterNames"))),
        cluster_name=str(cluster_name) if cluster_name else None,
        conditions=_conditions(status.get("conditions")),
        active=bool(spec.get("active", True)),
        max_execution_seconds=max_execution,
    )


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota of one resource in one flavor of a ClusterQueue, in milli-units."""

    nominal: int
    borrowing_limit: int | None = None
    """``None`` means unlimited borrowing from the cohort (Kueue's default)."""
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    """One ``flavors[]`` item of a resource group."""

    name: str
    resources: Mapping[str, ResourceQuota] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """One ``spec.resourceGroups[]`` item: resources covered together by an ordered flavor list."""

    covered: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


BEST_EFFORT_FIFO = "BestEffortFIFO"
STRICT_FIFO = "StrictFIFO"
NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The scheduling knobs of a ClusterQueue spec the admission model honours (CRD defaults)."""

    queueing_strategy: str = BEST_EFFORT_FIFO
    """``spec.queueingStrategy``: ``BestEffortFIFO`` or ``StrictFIFO``."""
    within_cluster_queue: str = NEVER
    """``spec.preemption.withinClusterQueue``: ``Never``, ``LowerPriority`` or
    ``LowerOrNewerEqualPriority``."""
    borrow_within_cohort: str = NEVER
    """``spec.preemption.borrowWithinCohort.policy``: ``Never`` (also when unset) or
    ``LowerPriority``; anything but ``Never`` lets a preemptor that needs to borrow preempt."""

    @property
    def strict(self) -> bool:
        """Whether the first workload not admitted blocks the ones behind it."""
        return self.queueing_strategy == STRICT_FIFO

    @property
    def preempts_while_borrowing(self) -> bool:
        """Kueue's ``canPreemptWhileBorrowing`` (without fair sharing): ``borrowWithinCohort``
        is set to a policy other than ``Never``."""
        return self.borrow_within_cohort != NEVER

    @property
    def preempts(self) -> bool:
        """Whether the queue's own workloads can ever be preempted for another of its own."""
        return self.within_cluster_queue != NEVER


def parse_queue_policy(raw: Mapping[str, Any]) -> QueuePolicy:
    """Read :class:`QueuePolicy` from a raw ClusterQueue dict (v1beta2)."""
    spec = _dict(raw.get("spec"))
    preemption = _dict(spec.get("preemption"))
    borrow = _dict(preemption.get("borrowWithinCohort"))
    return QueuePolicy(
        queueing_strategy=str(spec.get("queueingStrategy") or BEST_EFFORT_FIFO),
        within_cluster_queue=str(preemption.get("withinClusterQueue") or NEVER),
        borrow_within_cohort=str(borrow.get("policy") or NEVER),
    )


@dataclass(frozen=True, slots=True)
class ClusterQueueView:
    """A ClusterQueue's quotas and current accounting."""

    name: str
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: str | None = None
    reserved: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """``status.flavorsReservation`` totals: quota held by reserving *and* admitted workloads."""
    usage: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """``status.flavorsUsage`` totals: quota of admitted workloads."""
    pending_workloads: int = 0
    active: bool = True
    """``Active`` condition true (or absent) and no ``stopPolicy`` set."""
    policy: QueuePolicy = QueuePolicy()
    """Its queueing strategy and preemption policy (``spec.queueingStrategy``,
    ``spec.preemption``)."""

    def quota(self, flavor: str, resource: str) -> ResourceQuota | None:
        """The quota entry for ``(flavor, resource)``, if the queue defines one."""
        for group in self.resource_groups:
            if resource not in group.covered:
                continue
            for fq in group.flavors:
                if fq.name == flavor:
                    return fq.resources.get(resource)
        return None

    def group_of(self, resource: str) -> ResourceGroup | None:
        """The resource group covering ``resource``, if any."""
        for group in self.resource_groups:
            if resource in group.covered:
                return group
        return None


def _flavor_totals(raw: object, key: str) -> Mapping[FlavorResource, int]:
    out: dict[FlavorResource, int] = {}
    for flavor in _list(raw):
        for res in _list(_dict(flavor).get("resources")):
            amount = res.get(key)
            if amount is not None:
                out[(str(flavor.get("name")), str(res.get("name")))] = parse_quantity(amount)
    return frozen_map(out)


def parse_cluster_queue(raw: Mapping[str, Any]) -> ClusterQueueView:
    """Build a :class:`ClusterQueueView` from a raw ClusterQueue dict."""
    meta = _dict(raw.get("metadata"))
    spec = _dict(raw.get("spec"))
    status = _dict(raw.get("status"))
    groups = []
    for group in _list(spec.get("resourceGroups")):
        flavors = []
        for flavor in _list(_dict(group).get("flavors")):
            resources = {}
            for res in _list(_dict(flavor).get("resources")):
                borrowing = res.get("borrowingLimit")
                lending = res.get("lendingLimit")
                resources[str(res.get("name"))] = ResourceQuota(
                    nominal=parse_quantity(res.get("nominalQuota", 0)),
                    borrowing_limit=None if borrowing is None else parse_quantity(borrowing),
                    lending_limit=None if lending is None else parse_quantity(lending),
                )
            flavors.append(
                FlavorQuotas(name=str(flavor.get("name")), resources=frozen_map(resources))
            )
        groups.append(
            ResourceGroup(
                covered=tuple(str(r) for r in _list(group.get("coveredResources"))),
                flavors=tuple(flavors),
            )
        )
    conditions = _conditions(status.get("conditions"))
    active_cond = conditions.get("Active")
    stop = spec.get("stopPolicy")
    return ClusterQueueView(
        name=str(meta.get("name", "")),
        resource_groups=tuple(groups),
        cohort=str(spec["cohortName"]) if spec.get("cohortName") else None,
        reserved=_flavor_totals(status.get("flavorsReservation"), "total"),
        usage=_flavor_totals(status.get("flavorsUsage"), "total"),
        pending_workloads=int(status.get("pendingWorkloads") or 0),
        active=(active_cond is None or active_cond.status == "True") and stop in (None, "None"),
        policy=parse_queue_policy(raw),
    )


@dataclass(frozen=True, slots=True)
class ResourceFlavorView:
    """A ResourceFlavor: the node labels it stands for, its taints and tolerations."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=frozen_map)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


def parse_resource_flavor(raw: Mapping[str, Any]) -> ResourceFlavorView:
    """Build a :class:`ResourceFlavorView` from a raw ResourceFlavor dict."""
    meta = _dict(raw.get("metadata"))
    spec = _dict(raw.get("spec"))
    return ResourceFlavorView(
        name=str(meta.get("name", "")),
        node_labels=_str_map(spec.get("nodeLabels")),
        node_taints=tuple(
            Taint(
                key=str(t.get("key", "")),
                value=str(t.get("value", "")),
                effect=str(t.get("effect", "NoSchedule")),
            )
            for t in _list(spec.get("nodeTaints"))
        ),
        tolerations=tuple(_parse_toleration(t) for t in _list(spec.get("tolerations"))),
    )


@dataclass(frozen=True, slots=True)
class LocalQueueView:
    """A LocalQueue: which ClusterQueue a namespace's queue name points at."""

    namespace: str
    name: str
    cluster_queue: str
    stopped: bool = False


def parse_local_queue(raw: Mapping[str, Any]) -> LocalQueueView:
    """Build a :class:`LocalQueueView` from a raw LocalQueue dict."""
    meta = _dict(raw.get("metadata"))
    spec = _dict(raw.get("spec"))
    return LocalQueueView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        cluster_queue=str(spec.get("clusterQueue", "")),
        stopped=spec.get("stopPolicy") not in (None, "None"),
    )
