"""Flavor fit: can a workload's pod sets be given flavors in a ClusterQueue, and at what cost.

This is a pure model of Kueue's flavor assignment, good enough to predict placement from the
manager side and shared with the Kueue emulator: for every pod set and every resource group it
needs, the flavors of the group are tried **in order**; a flavor qualifies when its node labels
do not contradict the pod set's ``nodeSelector`` and required node affinity, the pod set tolerates
its taints, it defines quota for every requested resource of the group, and the remaining quota
covers the request. Quota is accounted per ``(flavor, resource)`` and consumed as pod sets are
placed, so several pod sets compete for it.

A ClusterQueue that covers the resource ``pods`` in one of its resource groups counts every pod
of a pod set as one unit of ``pods`` (Kueue's flavor assigner sets the ``pods`` request of each pod
set to its pod count, whatever the template says): :func:`quota_requests`. Elsewhere ``pods`` is not
a quota resource.

Not modelled: partial admission (``minCount``), preemption, topology-aware scheduling, and
flavor fungibility policies other than the default "first flavor that fits".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dispatcher.kueue.objects import (
    ClusterQueueView,
    FlavorResource,
    PodSetView,
    ResourceFlavorView,
    frozen_map,
)
from dispatcher.kueue.quantities import MILLI, format_quantity

__all__ = [
    "PODS",
    "FitResult",
    "assign_flavors",
    "available_now",
    "capacity_ceiling",
    "cohort_lending",
    "covers_pods",
    "flavor_mismatch",
    "quota_requests",
]

PODS = "pods"
"""The resource name under which a ClusterQueue can limit the number of pods it admits."""

_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def flavor_mismatch(pod_set: PodSetView, flavor: ResourceFlavorView) -> str | None:
    """Why ``pod_set`` cannot use ``flavor`` (labels, affinity, taints), or ``None`` if it can.

    Only label keys the flavor defines are compared, as Kueue does: a ``nodeSelector`` on a key the
    flavor does not mention is left to the node scheduler.
    """
    labels = flavor.node_labels
    for key, value in pod_set.node_selector.items():
        if key in labels and labels[key] != value:
            return f"nodeSelector {key}={value} does not match flavor {flavor.name} ({labels[key]})"
    if pod_set.required_affinity:
        ok = any(
            all(req.matches(labels) for req in term if req.key in labels)
            for term in pod_set.required_affinity
        )
        if not ok:
            return f"required node affinity does not match flavor {flavor.name}"
    for taint in flavor.node_taints:
        if taint.effect not in _TAINT_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in pod_set.tolerations):
            return f"untolerated taint {taint.key}={taint.value}:{taint.effect} on {flavor.name}"
    return None


def covers_pods(cluster_queue: ClusterQueueView) -> bool:
    """Whether one of the queue's resource groups covers ``pods`` (Kueue's ``RGByResource``)."""
    return cluster_queue.group_of(PODS) is not None


def quota_requests(pod_set: PodSetView, cluster_queue: ClusterQueueView) -> dict[str, int]:
    """What one pod set asks of a ClusterQueue's quota, in milli-units, zero amounts left out.

    The pod set's total requests (per-pod requests times ``count``), plus ``pods = count`` when the
    queue covers ``pods`` (C69; ``pkg/scheduler/flavorassigner`` ``assignFlavors`` overrides any
    ``pods`` in the template, which Kueue's webhook refuses anyway).
    """
    total = {name: amount for name, amount in pod_set.total.items() if amount > 0}
    if covers_pods(cluster_queue):
        total.pop(PODS, None)
        if pod_set.count > 0:
            total[PODS] = pod_set.count * MILLI
    return total


def available_now(
    cluster_queue: ClusterQueueView, cohort_room: Mapping[FlavorResource, int] | None = None
) -> dict[FlavorResource, int]:
    """Quota that can be reserved now per ``(flavor, resource)``.

    Unreserved nominal quota, plus what may still be borrowed: the cohort's current unused room
    (``cohort_room``), capped by ``borrowingLimit`` minus what the queue already borrows.
    """
    room = cohort_room or {}
    out: dict[FlavorResource, int] = {}
    for group in cluster_queue.resource_groups:
        for fq in group.flavors:
            for resource, quota in fq.resources.items():
                key = (fq.name, resource)
                reserved = cluster_queue.reserved.get(key, 0)
                free = max(0, quota.nominal - reserved)
                if cluster_queue.cohort is not None:
                    borrowed = max(0, reserved - quota.nominal)
                    borrowable = room.get(key, 0)
                    if quota.borrowing_limit is not None:
                        borrowable = min(borrowable, max(0, quota.borrowing_limit - borrowed))
                    free += borrowable
                out[key] = free
    return out


def capacity_ceiling(
    cluster_queue: ClusterQueueView, cohort_limit: Mapping[FlavorResource, int] | None = None
) -> dict[FlavorResource, int]:
    """The most quota a single workload could ever get per ``(flavor, resource)``.

    Nominal quota plus the most the queue may borrow: ``borrowingLimit`` when set, otherwise
    (and at most) what the rest of the cohort could lend (``cohort_limit``).
    """
    limit = cohort_limit or {}
    out: dict[FlavorResource, int] = {}
    for group in cluster_queue.resource_groups:
        for fq in group.flavors:
            for resource, quota in fq.resources.items():
                key = (fq.name, resource)
                extra = 0
                if cluster_queue.cohort is not None:
                    extra = limit.get(key, 0)
                    if quota.borrowing_limit is not None:
                        extra = min(extra, quota.borrowing_limit)
                out[key] = quota.nominal + extra
    return out


@dataclass(frozen=True, slots=True)
class FitResult:
    """Outcome of :func:`assign_flavors`."""

    fits: bool
    reason: str = ""
    """Why it does not fit (empty when it fits)."""
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=frozen_map)
    """Pod set name → resource → flavor chosen."""
    usage: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """Quota the placement consumes per ``(flavor, resource)``."""


def assign_flavors(
    pod_sets: Iterable[PodSetView],
    cluster_queue: ClusterQueueView,
    flavors: Mapping[str, ResourceFlavorView],
    available: Mapping[FlavorResource, int],
) -> FitResult:
    """Assign flavors to every pod set within ``available`` quota, Kueue style.

    Returns the first assignment found (flavors in ClusterQueue order) or the reason for the first
    pod set and resource group that cannot be placed.
    """
    remaining = dict(available)
    chosen: dict[str, Mapping[str, str]] = {}
    usage: dict[FlavorResource, int] = {}
    for pod_set in pod_sets:
        total = quota_requests(pod_set, cluster_queue)
        per_group: dict[int, dict[str, int]] = {}
        for resource, amount in total.items():
            index = next(
                (i for i, g in enumerate(cluster_queue.resource_groups) if resource in g.covered),
                None,
            )
            if index is None:
                return FitResult(
                    fits=False,
                    reason=f"resource {resource} is not covered by ClusterQueue "
                    f"{cluster_queue.name}",
                )
            per_group.setdefault(index, {})[resource] = amount
        picks: dict[str, str] = {}
        for index in sorted(per_group):
            wanted = per_group[index]
            group = cluster_queue.resource_groups[index]
            why: list[str] = []
            picked: str | None = None
            for fq in group.flavors:
                view = flavors.get(fq.name)
                if view is None:
                    why.append(f"flavor {fq.name} not found")
                    continue
                mismatch = flavor_mismatch(pod_set, view)
                if mismatch is not None:
                    why.append(mismatch)
                    continue
                missing = [r for r in wanted if r not in fq.resources]
                if missing:
                    why.append(f"flavor {fq.name} has no quota for {', '.join(missing)}")
                    continue
                short = [
                    f"{r} (requested {format_quantity(a)}, available "
                    f"{format_quantity(remaining.get((fq.name, r), 0))})"
                    for r, a in wanted.items()
                    if remaining.get((fq.name, r), 0) < a
                ]
                if short:
                    why.append(f"insufficient quota in flavor {fq.name}: {'; '.join(short)}")
                    continue
                picked = fq.name
                break
            if picked is None:
                return FitResult(
                    fits=False,
                    reason=f"pod set {pod_set.name}: " + ("; ".join(why) or "no flavors"),
                )
            for resource, amount in wanted.items():
                key = (picked, resource)
                remaining[key] = remaining.get(key, 0) - amount
                usage[key] = usage.get(key, 0) + amount
                picks[resource] = picked
        chosen[pod_set.name] = frozen_map(picks)
    return FitResult(fits=True, flavors=frozen_map(chosen), usage=frozen_map(usage))


def cohort_lending(
    cluster_queue: ClusterQueueView, peers: Iterable[ClusterQueueView]
) -> tuple[dict[FlavorResource, int], dict[FlavorResource, int]]:
    """What the other members of a (flat) cohort can lend: ``(room now, most ever)``.

    Each peer lends its nominal quota, capped by ``lendingLimit``; *room now* counts only the part
    the peer does not reserve itself. Hierarchical cohorts are not modelled.
    """
    room: dict[FlavorResource, int] = {}
    limit: dict[FlavorResource, int] = {}
    if cluster_queue.cohort is None:
        return room, limit
    for peer in peers:
        if peer.name == cluster_queue.name or peer.cohort != cluster_queue.cohort:
            continue
        for group in peer.resource_groups:
            for fq in group.flavors:
                for resource, quota in fq.resources.items():
                    key = (fq.name, resource)
                    lendable = quota.nominal
                    if quota.lending_limit is not None:
                        lendable = min(lendable, quota.lending_limit)
                    unused = max(0, quota.nominal - peer.reserved.get(key, 0))
                    limit[key] = limit.get(key, 0) + lendable
                    room[key] = room.get(key, 0) + min(unused, lendable)
    return room, limit
