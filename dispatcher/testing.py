"""A test kit for plugin authors (and for the dispatcher's own tests).

Builders make requests and snapshots from a few numbers instead of Kubernetes objects::

    from dispatcher.testing import make_request, make_cluster, decide, assert_decision

    big = make_cluster("big", cpu=64)
    small = make_cluster("small", cpu=8, used_cpu=6)
    decision = decide(make_request(cpu=4), [big, small], names=["capacity-first"])
    assert_decision(decision, nominate=["big"], dropped={})

Quantities are given in whole units (``cpu=7`` is 7 CPUs, ``memory="4Gi"``); GPUs are
``nvidia.com/gpu`` unless a per-type resource is named. :func:`decide` uses a plugin host with
entry-point autoload **disabled**, so installed plugins do not change your test's outcome; pass
``plugins=[("name", obj)]`` to add the plugin under test.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from dispatcher.algorithms import (
    DEFAULT_PIPELINE,
    ClusterSnapshot,
    Decision,
    DispatchRequest,
    QueuedWorkload,
    describe_decision,
    queued_workload,
)
from dispatcher.kueue.admission import ReservingWorkload
from dispatcher.kueue.gputypes import DEFAULT_GPU_LABEL, cluster_gpu_types, required_gpu_types
from dispatcher.kueue.hints import Taint, parse_placement_hints
from dispatcher.kueue.objects import (
    ClusterQueueView,
    FlavorQuotas,
    NodeSelectorRequirement,
    PodSetView,
    QueuePolicy,
    ResourceFlavorView,
    ResourceGroup,
    ResourceQuota,
    frozen_map,
)
from dispatcher.kueue.quantities import parse_quantity
from dispatcher.plugins import PluginHost
from dispatcher.plugins.host import pipeline_for

__all__ = [
    "GPU",
    "FlavorSpec",
    "assert_decision",
    "decide",
    "dispatch_burst",
    "make_cluster",
    "make_holder",
    "make_host",
    "make_pod_set",
    "make_request",
    "with_in_flight",
]

GPU = "nvidia.com/gpu"
"""The generic NVIDIA GPU resource name."""

Amount = int | float | str


def _q(value: Amount | None) -> int:
    return 0 if value is None else parse_quantity(value)


def make_pod_set(
    name: str = "main",
    *,
    count: int = 1,
    cpu: Amount = 0,
    memory: Amount | None = None,
    gpus: int = 0,
    gpu_resource: str = GPU,
    gpu_type: str | None = None,
    affinity_gpu_types: Sequence[str] | None = None,
    label_key: str = DEFAULT_GPU_LABEL,
    resources: Mapping[str, Amount] | None = None,
) -> PodSetView:
    """A pod set of ``count`` pods, each requesting the given resources.

    ``gpu_type`` requires a type through ``nodeSelector[label_key]``; ``affinity_gpu_types``
    through required node affinity (``In``).
    """
    requests: dict[str, int] = {}
    if cpu:
        requests["cpu"] = _q(cpu)
    if memory is not None:
        requests["memory"] = _q(memory)
    if gpus:
        requests[gpu_resource] = _q(gpus)
    for resource, amount in (resources or {}).items():
        requests[resource] = _q(amount)
    affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    if affinity_gpu_types is not None:
        affinity = ((NodeSelectorRequirement(label_key, "In", tuple(affinity_gpu_types)),),)
    return PodSetView(
        name=name,
        count=count,
        requests=frozen_map(requests),
        node_selector=frozen_map({label_key: gpu_type} if gpu_type else {}),
        required_affinity=affinity,
        resource_names=tuple(requests),
    )


def make_request(
    name: str = "wl",
    *,
    namespace: str = "default",
    queue: str = "queue",
    now: float = 1_000_000.0,
    cpu: Amount = 0,
    memory: Amount | None = None,
    gpus: int = 0,
    count: int = 1,
    gpu_resource: str = GPU,
    gpu_type: str | None = None,
    preferred: Sequence[str] = (),
    priority: int = 0,
    nominated: Sequence[str] = (),
    nominated_at: float | None = None,
    queued_at: float | None = None,
    pod_sets: Sequence[PodSetView] | None = None,
    label_key: str = DEFAULT_GPU_LABEL,
    annotations: Mapping[str, str] | None = None,
) -> DispatchRequest:
    """A request with one pod set (or the given ``pod_sets``).

    ``nominated_at`` defaults to ``now`` when ``nominated`` is given (a fresh nomination).
    ``annotations`` are the Workload's; placement hints among them are parsed as the
    controller parses them (a bad one raises :class:`~dispatcher.kueue.objects.InvalidField`).
    """
    sets = (
        tuple(pod_sets)
        if pod_sets is not None
        else (
            make_pod_set(
                count=count,
                cpu=cpu,
                memory=memory,
                gpus=gpus,
                gpu_resource=gpu_resource,
                gpu_type=gpu_type,
                label_key=label_key,
            ),
        )
    )
    return DispatchRequest(
        namespace=namespace,
        name=name,
        now=now,
        pod_sets=sets,
        queue_name=queue,
        priority=priority,
        required_gpu_types=required_gpu_types(sets, label_key=label_key),
        preferred_gpu_types=tuple(preferred),
        queued_at=queued_at,
        nominated=tuple(nominated),
        nominated_at=(now if nominated and nominated_at is None else nominated_at),
        annotations=frozen_map(annotations),
        hints=parse_placement_hints([("metadata.annotations", annotations or {})]),
    )


@dataclass(frozen=True, slots=True)
class FlavorSpec:
    """One flavor of a test ClusterQueue: quota and current reservation per resource."""

    name: str
    quota: Mapping[str, Amount]
    used: Mapping[str, Amount] | None = None
    node_labels: Mapping[str, str] | None = None
    borrowing_limit: Mapping[str, Amount] | None = None


def make_holder(
    key: str,
    *,
    flavor: str = "default",
    cpu: Amount | None = None,
    gpus: int = 0,
    gpu_resource: str = GPU,
    priority: int = 0,
    reserved_at: float = 0.0,
    admitted: bool = True,
    evicting: bool = False,
) -> ReservingWorkload:
    """A workload holding quota in a test ClusterQueue (a possible preemption victim): its
    usage on ``flavor`` (name it as :func:`make_cluster` names its flavor: the GPU type, or
    ``default``), ``priority``, and since when it holds the quota (epoch seconds; the
    request's ``now`` minus it is the running time a preemption loses). Pass it to
    :func:`make_cluster`'s ``holders``, which adds its usage to the queue's."""
    usage: dict[tuple[str, str], int] = {}
    if cpu is not None:
        usage[(flavor, "cpu")] = _q(cpu)
    if gpus:
        usage[(flavor, gpu_resource)] = _q(gpus)
    moment = datetime.datetime.fromtimestamp(reserved_at, datetime.UTC)
    return ReservingWorkload(
        key=key,
        cluster_queue="",
        usage=frozen_map(usage),
        priority=priority,
        reserved_at=moment,
        queued_at=moment,
        admitted=admitted,
        evicting=evicting,
    )


def make_cluster(
    name: str,
    *,
    cpu: Amount | None = None,
    memory: Amount | None = None,
    gpus: int = 0,
    gpu_resource: str = GPU,
    gpu_type: str | None = None,
    used_cpu: Amount = 0,
    used_gpus: int = 0,
    flavors: Sequence[FlavorSpec] | None = None,
    active: bool = True,
    order: int = 0,
    labels: Mapping[str, str] | None = None,
    in_flight: Iterable[QueuedWorkload] = (),
    pending: Iterable[QueuedWorkload] = (),
    cohort: str | None = None,
    cohort_room: Mapping[tuple[str, str], Amount] | None = None,
    cohort_limit: Mapping[tuple[str, str], Amount] | None = None,
    has_queue: bool = True,
    label_key: str = DEFAULT_GPU_LABEL,
    taints: Sequence[Taint] = (),
    holders: Sequence[ReservingWorkload] = (),
    preemption: str = "Never",
    run_seconds: Sequence[float] = (),
) -> ClusterSnapshot:
    """A worker snapshot with one ClusterQueue of one resource group.

    Either give ``flavors`` explicitly or use the shorthand (``cpu``, ``gpus``, ``gpu_type``,
    ``used_*``), which makes one flavor named after the GPU type (or ``default``) whose node
    labels carry ``label_key: gpu_type``. ``has_queue=False`` models a worker without the
    workload's LocalQueue. ``holders`` (of :func:`make_holder`) are workloads holding quota in
    the ClusterQueue, their usage added to ``used_*``; ``preemption`` is its
    ``preemption.withinClusterQueue`` (``Never``, ``LowerPriority``,
    ``LowerOrNewerEqualPriority``); ``run_seconds`` how long the queue's finished workloads ran
    (what a predicted start is made of).
    """
    if flavors is None:
        quota: dict[str, Amount] = {}
        used: dict[str, Amount] = {}
        if cpu is not None:
            quota["cpu"], used["cpu"] = cpu, used_cpu
        if memory is not None:
            quota["memory"] = memory
        if gpus or used_gpus:
            quota[gpu_resource], used[gpu_resource] = gpus, used_gpus
        flavors = [
            FlavorSpec(
                name=gpu_type or "default",
                quota=quota,
                used=used,
                node_labels={label_key: gpu_type} if gpu_type else None,
            )
        ]
    covered: list[str] = []
    for spec in flavors:
        covered.extend(r for r in spec.quota if r not in covered)
    reserved: dict[tuple[str, str], int] = {}
    flavor_quotas = []
    views = {}
    for spec in flavors:
        limits = spec.borrowing_limit or {}
        flavor_quotas.append(
            FlavorQuotas(
                name=spec.name,
                resources=frozen_map(
                    {
                        r: ResourceQuota(
                            nominal=_q(spec.quota.get(r, 0)),
                            borrowing_limit=_q(limits[r]) if r in limits else None,
                        )
                        for r in covered
                    }
                ),
            )
        )
        for r, amount in (spec.used or {}).items():
            if _q(amount):
                reserved[(spec.name, r)] = _q(amount)
        for holder in holders:
            for (flavor, r), held in holder.usage.items():
                if flavor == spec.name:
                    reserved[(flavor, r)] = reserved.get((flavor, r), 0) + held
        views[spec.name] = ResourceFlavorView(spec.name, frozen_map(spec.node_labels or {}))
    cq = ClusterQueueView(
        name=f"{name}-cq",
        resource_groups=(ResourceGroup(tuple(covered), tuple(flavor_quotas)),),
        cohort=cohort,
        reserved=frozen_map(reserved),
        policy=QueuePolicy(within_cluster_queue=preemption),
    )
    return ClusterSnapshot(
        name=name,
        active=active,
        inactive_reason="" if active else "MultiKueueCluster is not Active",
        order=order,
        labels=frozen_map(labels or {}),
        cluster_queue=cq if has_queue else None,
        flavors=frozen_map(views),
        cohort_room=frozen_map({k: _q(v) for k, v in (cohort_room or {}).items()}),
        cohort_limit=frozen_map({k: _q(v) for k, v in (cohort_limit or {}).items()}),
        in_flight=tuple(in_flight),
        pending=tuple(pending),
        holders=tuple(replace(h, cluster_queue=cq.name) for h in holders),
        run_seconds=tuple(sorted(run_seconds)),
        gpu_types=cluster_gpu_types(
            views.values(), cluster_queue=cq, cluster_labels=labels, label_key=label_key
        ),
        taints=tuple(taints),
    )


def with_in_flight(
    snapshots: Sequence[ClusterSnapshot], request: DispatchRequest, clusters: Iterable[str]
) -> tuple[ClusterSnapshot, ...]:
    """Snapshots after nominating ``request`` to ``clusters`` (recorded as in-flight there)."""
    targets = set(clusters)
    record = queued_workload(request)
    return tuple(
        replace(s, in_flight=(*s.in_flight, record)) if s.name in targets else s for s in snapshots
    )


def make_host(plugins: Iterable[tuple[str, object]] = (), *, autoload: bool = False) -> PluginHost:
    """A plugin host for tests: built-ins plus ``plugins``; entry points only if ``autoload``."""
    return PluginHost.load(environ={}, autoload=autoload, plugins=plugins)


def decide(
    request: DispatchRequest,
    snapshots: Sequence[ClusterSnapshot],
    *,
    names: Sequence[str] = DEFAULT_PIPELINE,
    options: Mapping[str, Mapping[str, Any] | BaseModel] | None = None,
    host: PluginHost | None = None,
    plugins: Iterable[tuple[str, object]] = (),
) -> Decision:
    """One decision through a pipeline of the named algorithms (or, as in the manager, the
    built-in one a workload's dispatch-mode hint asks for)."""
    host = host or make_host(plugins)
    pipeline = pipeline_for(request, host.pipeline(names, options), host.mode_pipelines(options))
    return host.decide(pipeline, request, snapshots)


def dispatch_burst(
    requests: Sequence[DispatchRequest],
    snapshots: Sequence[ClusterSnapshot],
    *,
    names: Sequence[str] = DEFAULT_PIPELINE,
    options: Mapping[str, Mapping[str, Any] | BaseModel] | None = None,
    host: PluginHost | None = None,
    track_in_flight: bool = True,
) -> list[Decision]:
    """Decide ``requests`` one after another, as the controller does during a burst.

    Each nomination is recorded as in-flight on its clusters before the next decision (unless
    ``track_in_flight`` is false, which shows what happens without in-flight bookkeeping).
    """
    host = host or make_host()
    pipeline = host.pipeline(names, options)
    decisions = []
    current = tuple(snapshots)
    for request in requests:
        decision = host.decide(pipeline, request, current)
        decisions.append(decision)
        if track_in_flight:
            current = with_in_flight(current, request, decision.nominate)
    return decisions


def assert_decision(
    decision: Decision,
    *,
    nominate: Sequence[str] | None = None,
    dropped: Mapping[str, str | None] | None = None,
    reason_contains: str | None = None,
    allow_errors: bool = False,
) -> None:
    """Assert facts about a decision; the message describes the whole decision on failure.

    ``nominate``: the exact nomination, in order. ``dropped``: clusters that must have been
    dropped, each with a substring expected in the reason or the filter name (``None``: any);
    an empty mapping asserts that nothing was dropped. ``reason_contains``: a substring of the
    decision's reason. Stage errors fail the assertion unless ``allow_errors``.
    """
    problems = []
    if nominate is not None and tuple(nominate) != decision.nominate:
        problems.append(f"expected nomination {list(nominate)}, got {list(decision.nominate)}")
    if dropped is not None:
        actual = {v.cluster: v for v in decision.verdicts if not v.kept}
        if not dropped and actual:
            problems.append(f"expected nothing dropped, dropped {sorted(actual)}")
        for cluster, expect in dropped.items():
            verdict = actual.get(cluster)
            if verdict is None:
                problems.append(f"expected {cluster} dropped, it was kept or unknown")
            elif expect is not None and expect not in f"{verdict.dropped_by}: {verdict.reason}":
                problems.append(f"{cluster} dropped for {verdict.reason!r}, expected {expect!r}")
    if reason_contains is not None and reason_contains not in decision.reason:
        problems.append(f"reason {decision.reason!r} lacks {reason_contains!r}")
    if decision.errors and not allow_errors:
        problems.append(f"stage errors: {[e.message for e in decision.errors]}")
    if problems:
        raise AssertionError("; ".join(problems) + "\n" + describe_decision(decision))
