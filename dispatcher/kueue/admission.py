"""Kueue's quota admission, as a pure model: who fits a ClusterQueue now, where, and at whose cost.

This is the one admission model of the project (docs/simulator.md): the sandbox's Kueue emulator
(``dispatcher_sandbox.kueue_emulator.core``) runs it against the objects of a fake cluster, and the
simulator runs it in virtual time. It follows Kueue v0.19's scheduler for the parts that matter to
placement (contract C69, C71, C72):

* **Queue order** (:func:`queue_order`): priority descending, then the queue-order timestamp
  (creation time, or the eviction time after an eviction by an admission check, as Kueue's
  ``GetQueueOrderTimestamp`` does), then the Workload's UID, as Kueue breaks ties (C94; the
  timestamp has one-second resolution, so Jobs created in the same second often tie and their
  order is then as random as their UIDs), then the key when no UID is known (the simulator's
  workloads, hand-built models). ``BestEffortFIFO`` tries every
  pending workload in that order and skips those that do not fit; ``StrictFIFO`` stops a
  ClusterQueue behind its first workload that is not admitted.
* **Flavor assignment** per pod set and resource group, flavors in ClusterQueue order, honouring
  ``nodeSelector`` and required node affinity against flavor ``nodeLabels`` and tolerations
  against flavor taints (:func:`dispatcher.kueue.flavorfit.assign_flavors`). The first flavor
  that fits wins, borrowing included (Kueue's default ``whenCanBorrow: MayStopSearch``).
* **Quota arithmetic** in integer milli-units over ``(flavor, resource)`` pairs, with Kueue's
  cohort formula (``pkg/cache`` ``available``): a member's guaranteed part (``nominalQuota −
  lendingLimit``) is its own; the rest of every member's nominal quota (plus the Cohort object's
  own quota) is shared in the cohort; ``borrowingLimit`` caps what a member takes from the cohort
  beyond what it put in.
* **Preemption** within the ClusterQueue (``preemption.withinClusterQueue``: ``LowerPriority`` or
  ``LowerOrNewerEqualPriority``): candidates ordered as Kueue's ``CandidatesOrdering`` (already
  evicted first, then lowest priority, then most recently reserved), removed greedily until the
  workload fits, then added back in reverse order when not needed (``minimalPreemptions`` with
  ``fillBackWorkloads``), so the victim set is minimal. Preemption is only considered for a
  ``(flavor, resource)`` whose request fits the queue's nominal quota, unless
  ``preemption.borrowWithinCohort.policy`` is set (not ``Never``): a workload that can only be
  admitted by borrowing waits for free quota instead of preempting (C72; Kueue v0.19's
  ``fitsResourceQuota`` in ``pkg/scheduler/flavorassigner``: ``Preempt`` mode needs
  ``nominal >= request``, reclamation in a hierarchy, or ``canPreemptWhileBorrowing``; otherwise
  ``NoFit``). Once preemption is considered, the preemptor may still borrow after its victims
  are gone (``workloadFits`` with borrowing allowed when there are no candidates in other queues).
* **``pods`` quota**: a ClusterQueue covering the resource ``pods`` counts each pod of a pod set
  as one ``pods`` (:func:`dispatcher.kueue.flavorfit.quota_requests`, C69), in its admissions'
  ``resourceUsage`` as in its usage.
* **Never fits**: a workload bigger than what its ClusterQueue could ever get (nominal quota plus
  everything it may borrow from an otherwise idle cohort), or with no matching flavor.

Not modelled: hierarchical cohorts (``parentName``), preempting workloads of other queues of the
cohort (``reclaimWithinCohort``; ``borrowWithinCohort`` is read only for the rule above, so its
``maxPriorityThreshold`` plays no part), fair sharing, partial admission (``minCount``),
topology-aware scheduling, flavor-fungibility settings other than the defaults.

Every type here is an immutable dataclass and nothing performs I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from dispatcher.kueue.flavorfit import FitResult, assign_flavors
from dispatcher.kueue.objects import (
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    LOWER_PRIORITY,
    ClusterQueueView,
    FlavorResource,
    PodSetView,
    QueuePolicy,
    ResourceFlavorView,
    frozen_map,
    parse_queue_policy,
)
from dispatcher.kueue.quantities import MILLI, format_quantity, parse_quantity

__all__ = [
    "EPOCH",
    "AdmissionPlan",
    "Evaluation",
    "Mode",
    "PendingWorkload",
    "QueuePolicy",
    "QuotaSnapshot",
    "ReservingWorkload",
    "admission_usage",
    "candidates_order",
    "evaluate",
    "evaluate_available",
    "format_resource_quantity",
    "minimal_victims",
    "parse_cohort_quotas",
    "parse_queue_policy",
    "plan_admissions",
    "queue_order",
]

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

DEFAULT_POLICY = QueuePolicy()
"""A ClusterQueue's policy with every field at its CRD default."""
"""Default timestamp: sorts before every real one."""

Mode = Literal["fit", "preempt", "wait", "never"]
"""Outcome of :func:`evaluate`: reserve now; reserve after preempting; not now; not ever."""

# --- inputs -----------------------------------------------------------------------------------


def parse_cohort_quotas(raw: Mapping[str, Any]) -> Mapping[FlavorResource, int]:
    """The quota a Cohort object itself contributes (``spec.resourceGroups``), in milli-units."""
    out: dict[FlavorResource, int] = {}
    for group in (raw.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                key = (str(flavor.get("name")), str(res.get("name")))
                out[key] = out.get(key, 0) + parse_quantity(res.get("nominalQuota", 0))
    return frozen_map(out)


def admission_usage(admission: Mapping[str, Any] | None) -> Mapping[FlavorResource, int]:
    """Quota held by a workload, from its raw ``status.admission`` (as Kueue's cache counts it).

    Each pod set's ``resourceUsage`` is charged to the flavor its ``flavors`` map names for that
    resource; resources without a flavor hold no quota.
    """
    out: dict[FlavorResource, int] = {}
    for psa in (admission or {}).get("podSetAssignments") or []:
        flavors = psa.get("flavors") or {}
        for resource, amount in (psa.get("resourceUsage") or {}).items():
            flavor = flavors.get(resource)
            if flavor is None:
                continue
            key = (str(flavor), str(resource))
            out[key] = out.get(key, 0) + parse_quantity(amount)
    return frozen_map(out)


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    """A workload waiting for quota in a ClusterQueue."""

    key: str
    """``namespace/name`` (the queue order's last tie-breaker, after ``uid``)."""
    cluster_queue: str
    pod_sets: tuple[PodSetView, ...]
    priority: int = 0
    queued_at: datetime.datetime = EPOCH
    """Creation time, or the eviction time after an eviction by an admission check."""
    uid: str = ""
    """``metadata.uid``: Kueue's tie-breaker between equal priority and timestamp (C94); empty
    where no object exists (the simulator), which leaves the tie to ``key``."""


@dataclass(frozen=True, slots=True)
class ReservingWorkload:
    """A workload holding quota in a ClusterQueue (``QuotaReserved=True``, not finished)."""

    key: str
    cluster_queue: str
    usage: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """Quota held per ``(flavor, resource)``, in milli-units."""
    priority: int = 0
    reserved_at: datetime.datetime = EPOCH
    """When quota was reserved (``QuotaReserved`` transition time)."""
    queued_at: datetime.datetime = EPOCH
    """Its queue-order timestamp (for ``LowerOrNewerEqualPriority``)."""
    admitted: bool = True
    """``Admitted=True`` (counted in ``flavorsUsage``), not only reserving."""
    evicting: bool = False
    """Already ``Evicted=True`` but not released yet (preferred as a victim)."""
    max_execution_seconds: int | None = None
    """``spec.maximumExecutionTimeSeconds``: Kueue deactivates it once admitted this long."""


# --- quota arithmetic -------------------------------------------------------------------------


def _add(
    usage: Mapping[FlavorResource, int], delta: Mapping[FlavorResource, int], sign: int
) -> Mapping[FlavorResource, int]:
    out = dict(usage)
    for key, amount in delta.items():
        out[key] = out.get(key, 0) + sign * amount
    return frozen_map(out)


@dataclass(frozen=True, slots=True)
class QuotaSnapshot:
    """The quotas of some ClusterQueues (with their flat cohorts) and the usage reserved in them.

    ``usage`` counts every workload that holds quota (reserving and admitted), as Kueue's cache
    does for admission decisions.
    """

    queues: Mapping[str, ClusterQueueView]
    usage: Mapping[str, Mapping[FlavorResource, int]] = field(default_factory=frozen_map)
    cohort_quotas: Mapping[str, Mapping[FlavorResource, int]] = field(default_factory=frozen_map)
    """Quota that Cohort objects themselves hold, by cohort name."""

    @classmethod
    def build(
        cls,
        queues: Iterable[ClusterQueueView],
        reserving: Iterable[ReservingWorkload] = (),
        cohort_quotas: Mapping[str, Mapping[FlavorResource, int]] | None = None,
    ) -> QuotaSnapshot:
        """Snapshot of ``queues`` with the usage of ``reserving`` workloads added up."""
        by_name = {q.name: q for q in queues}
        usage: dict[str, dict[FlavorResource, int]] = {name: {} for name in by_name}
        for wl in reserving:
            if wl.cluster_queue not in usage:
                continue
            into = usage[wl.cluster_queue]
            for key, amount in wl.usage.items():
                into[key] = into.get(key, 0) + amount
        return cls(
            queues=frozen_map(by_name),
            usage=frozen_map({k: frozen_map(v) for k, v in usage.items()}),
            cohort_quotas=frozen_map(cohort_quotas or {}),
        )

    def with_usage(
        self, cluster_queue: str, delta: Mapping[FlavorResource, int], sign: int = 1
    ) -> QuotaSnapshot:
        """A copy with ``delta`` added to (``sign=-1``: removed from) a queue's usage."""
        usage = dict(self.usage)
        usage[cluster_queue] = _add(usage.get(cluster_queue, frozen_map()), delta, sign)
        return replace(self, usage=frozen_map(usage))

    def used(self, cluster_queue: str, fr: FlavorResource) -> int:
        """Quota reserved in a queue for ``fr``."""
        return self.usage.get(cluster_queue, {}).get(fr, 0)

    def nominal(self, cluster_queue: str, fr: FlavorResource) -> int:
        """``nominalQuota`` of a queue for ``fr`` (0 when it defines none)."""
        quota = self.queues[cluster_queue].quota(fr[0], fr[1])
        return quota.nominal if quota is not None else 0

    def _cohort(self, cluster_queue: str) -> str | None:
        return self.queues[cluster_queue].cohort

    def guaranteed(self, cluster_queue: str, fr: FlavorResource) -> int:
        """The part of a member's nominal quota it does not lend (``nominal − lendingLimit``)."""
        quota = self.queues[cluster_queue].quota(fr[0], fr[1])
        if quota is None:
            return 0
        if self._cohort(cluster_queue) is None:
            return quota.nominal
        if quota.lending_limit is None:
            return 0
        return max(0, quota.nominal - quota.lending_limit)

    def _members(self, cohort: str) -> list[str]:
        return sorted(name for name, q in self.queues.items() if q.cohort == cohort)

    def cohort_capacity(self, cohort: str, fr: FlavorResource) -> int:
        """What a cohort shares: the lendable part of its members' quota plus its own."""
        total = self.cohort_quotas.get(cohort, {}).get(fr, 0)
        for member in self._members(cohort):
            total += self.nominal(member, fr) - self.guaranteed(member, fr)
        return total

    def cohort_used(self, cohort: str, fr: FlavorResource) -> int:
        """How much of the shared part the members use (beyond their guaranteed quota)."""
        return sum(max(0, self.used(m, fr) - self.guaranteed(m, fr)) for m in self._members(cohort))

    def _from_cohort(self, cluster_queue: str, fr: FlavorResource, cohort_free: int) -> int:
        quota = self.queues[cluster_queue].quota(fr[0], fr[1])
        if quota is not None and quota.borrowing_limit is not None:
            stored = self.nominal(cluster_queue, fr) - self.guaranteed(cluster_queue, fr)
            used_in_cohort = max(
                0, self.used(cluster_queue, fr) - self.guaranteed(cluster_queue, fr)
            )
            cohort_free = min(cohort_free, stored - used_in_cohort + quota.borrowing_limit)
        return cohort_free

    def available(self, cluster_queue: str, fr: FlavorResource) -> int:
        """Quota a queue can reserve now for ``fr`` (Kueue's ``available``; may be negative)."""
        cohort = self._cohort(cluster_queue)
        if cohort is None:
            return self.nominal(cluster_queue, fr) - self.used(cluster_queue, fr)
        local = max(0, self.guaranteed(cluster_queue, fr) - self.used(cluster_queue, fr))
        cohort_free = self.cohort_capacity(cohort, fr) - self.cohort_used(cohort, fr)
        return local + self._from_cohort(cluster_queue, fr, cohort_free)

    def potential(self, cluster_queue: str, fr: FlavorResource) -> int:
        """The most a queue could ever reserve for ``fr`` (with the whole cohort idle)."""
        cohort = self._cohort(cluster_queue)
        if cohort is None:
            return self.nominal(cluster_queue, fr)
        idle = replace(self, usage=frozen_map())
        return idle.available(cluster_queue, fr)

    def borrowed(self, cluster_queue: str, fr: FlavorResource) -> int:
        """Usage above the nominal quota (what ``status.flavorsReservation[].borrowed`` shows)."""
        if self._cohort(cluster_queue) is None:
            return 0
        return max(0, self.used(cluster_queue, fr) - self.nominal(cluster_queue, fr))

    def flavor_resources(self, cluster_queue: str) -> list[FlavorResource]:
        """Every ``(flavor, resource)`` a queue defines quota for, in spec order."""
        out: list[FlavorResource] = []
        for group in self.queues[cluster_queue].resource_groups:
            for fq in group.flavors:
                out.extend((fq.name, r) for r in group.covered if r in fq.resources)
        return out

    def availability(self, cluster_queue: str) -> dict[FlavorResource, int]:
        """:meth:`available` for every ``(flavor, resource)`` of a queue, floored at zero."""
        return {
            fr: max(0, self.available(cluster_queue, fr))
            for fr in self.flavor_resources(cluster_queue)
        }

    def fits(self, cluster_queue: str, usage: Mapping[FlavorResource, int]) -> bool:
        """Whether ``usage`` can be reserved in a queue now."""
        return all(amount <= self.available(cluster_queue, fr) for fr, amount in usage.items())


# --- one workload -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What :func:`evaluate` found for one pending workload."""

    key: str
    cluster_queue: str
    mode: Mode
    reason: str = ""
    """Why it is not admitted now (empty for ``fit``), in Kueue's wording where possible."""
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=frozen_map)
    """Pod set name → resource → flavor (for ``fit`` and ``preempt``)."""
    usage: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """Quota the placement takes per ``(flavor, resource)``."""
    borrowing: Mapping[FlavorResource, int] = field(default_factory=frozen_map)
    """Quota taken beyond the queue's nominal quota (borrowed from the cohort)."""
    victims: tuple[ReservingWorkload, ...] = ()
    """For ``preempt``: the minimal set of workloads to evict, in Kueue's candidate order."""

    @property
    def admissible(self) -> bool:
        """Whether quota can be reserved now."""
        return self.mode == "fit"


def _borrowing(
    snapshot: QuotaSnapshot, cluster_queue: str, usage: Mapping[FlavorResource, int]
) -> Mapping[FlavorResource, int]:
    if snapshot.queues[cluster_queue].cohort is None:
        return frozen_map()
    out = {}
    for fr, amount in usage.items():
        before = snapshot.borrowed(cluster_queue, fr)
        after = max(
            0, snapshot.used(cluster_queue, fr) + amount - snapshot.nominal(cluster_queue, fr)
        )
        if after > before:
            out[fr] = after - before
    return frozen_map(out)


def candidates_order(candidates: Iterable[ReservingWorkload]) -> list[ReservingWorkload]:
    """Victim order of Kueue's ``CandidatesOrdering`` within one ClusterQueue.

    Already evicted first, then lower priority first, then the most recently reserved first, then
    the key (Kueue uses the UID) for determinism.
    """
    return sorted(
        candidates,
        key=lambda c: (not c.evicting, c.priority, -c.reserved_at.timestamp(), c.key),
    )


def _may_preempt(
    policy: QueuePolicy, preemptor: PendingWorkload, victim: ReservingWorkload
) -> bool:
    if victim.cluster_queue != preemptor.cluster_queue or victim.key == preemptor.key:
        return False
    if policy.within_cluster_queue == LOWER_PRIORITY:
        return victim.priority < preemptor.priority
    if policy.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY:
        return victim.priority < preemptor.priority or (
            victim.priority == preemptor.priority and victim.queued_at > preemptor.queued_at
        )
    return False


def _preemptible(
    snapshot: QuotaSnapshot, freed: QuotaSnapshot, cluster_queue: str, policy: QueuePolicy
) -> dict[FlavorResource, int]:
    """What a preemptor can get per ``(flavor, resource)`` once its candidates are gone.

    Free quota now, or, by preempting, what the candidates free; without ``borrowWithinCohort``
    the latter only up to the nominal quota (Kueue's ``fitsResourceQuota``: a request above
    nominal quota is ``NoFit`` rather than ``Preempt``, C72), so that a request that fits only by
    borrowing finds no flavor by preemption.
    """
    now = snapshot.availability(cluster_queue)
    after = freed.availability(cluster_queue)
    if policy.preempts_while_borrowing:
        return after
    return {fr: max(now[fr], min(after[fr], snapshot.nominal(cluster_queue, fr))) for fr in after}


def evaluate(
    workload: PendingWorkload,
    snapshot: QuotaSnapshot,
    flavors: Mapping[str, ResourceFlavorView],
    policy: QueuePolicy = DEFAULT_POLICY,
    reserving: Sequence[ReservingWorkload] = (),
) -> Evaluation:
    """Decide whether ``workload`` fits its ClusterQueue now, by preempting, later, or never.

    ``reserving`` are the workloads holding quota (victim candidates); their usage must already
    be part of ``snapshot``.
    """
    cq_name = workload.cluster_queue
    key = workload.key
    if cq_name not in snapshot.queues:
        return Evaluation(key, cq_name, "never", f"ClusterQueue {cq_name} doesn't exist")
    cq = snapshot.queues[cq_name]
    now = assign_flavors(workload.pod_sets, cq, flavors, snapshot.availability(cq_name))
    if now.fits:
        return Evaluation(
            key,
            cq_name,
            "fit",
            flavors=now.flavors,
            usage=now.usage,
            borrowing=_borrowing(snapshot, cq_name, now.usage),
        )
    ceiling = {fr: snapshot.potential(cq_name, fr) for fr in snapshot.flavor_resources(cq_name)}
    ever = assign_flavors(workload.pod_sets, cq, flavors, ceiling)
    if not ever.fits:
        return Evaluation(key, cq_name, "never", f"couldn't assign flavors to {ever.reason}")
    waiting = Evaluation(key, cq_name, "wait", f"couldn't assign flavors to {now.reason}")
    candidates = [c for c in reserving if _may_preempt(policy, workload, c)]
    if not candidates:
        return waiting
    freed = snapshot
    for c in candidates:
        freed = freed.with_usage(c.cluster_queue, c.usage, -1)
    target = assign_flavors(
        workload.pod_sets, cq, flavors, _preemptible(snapshot, freed, cq_name, policy)
    )
    if not target.fits:
        return waiting
    short = {fr for fr, amount in target.usage.items() if snapshot.available(cq_name, fr) < amount}
    found = minimal_victims(
        [c for c in candidates if any(c.usage.get(fr, 0) > 0 for fr in short)],
        snapshot,
        lambda state, victim, sign: state.with_usage(victim.cluster_queue, victim.usage, -sign),
        lambda state: state.fits(cq_name, target.usage),
    )
    if found is None:
        return waiting
    victims, trial = found
    return _preempting(key, cq_name, target, victims, _borrowing(trial, cq_name, target.usage))


State = TypeVar("State")


def minimal_victims(
    candidates: Iterable[ReservingWorkload],
    start: State,
    release: Callable[[State, ReservingWorkload, int], State],
    fits: Callable[[State], bool],
) -> tuple[list[ReservingWorkload], State] | None:
    """Kueue's ``minimalPreemptions``: the fewest candidates, in its victim order, to release
    for the preemptor to fit, or ``None`` when releasing them all is not enough.

    ``release(state, victim, +1)`` is the quota state with the victim's usage released (``-1``
    takes it back); ``fits(state)`` says whether the preemptor fits it. Candidates are taken in
    :func:`candidates_order` until it fits, then, in reverse order, every one not needed is put
    back (``fillBackWorkloads``). Returns the victims and the state they leave.
    """
    victims: list[ReservingWorkload] = []
    trial = start
    for c in candidates_order(candidates):
        trial = release(trial, c, +1)
        victims.append(c)
        if fits(trial):
            break
    else:
        return None
    for index in range(len(victims) - 2, -1, -1):
        back = release(trial, victims[index], -1)
        if fits(back):
            trial = back
            del victims[index]
    return victims, trial


def evaluate_available(
    workload: PendingWorkload,
    cluster_queue: ClusterQueueView,
    flavors: Mapping[str, ResourceFlavorView],
    available: Mapping[FlavorResource, int],
    reserving: Sequence[ReservingWorkload] = (),
) -> Evaluation:
    """:func:`evaluate` for one ClusterQueue seen from outside: what it can reserve now
    (``available``, per ``(flavor, resource)``: its free quota plus what its cohort would lend)
    and the workloads holding quota in it, under its own :attr:`ClusterQueueView.policy`.

    The dispatcher sees each worker's ClusterQueue this way. Releasing a victim makes its
    usage available again to the preemptor, which is exact for a queue without a cohort and,
    in a cohort, unless a ``borrowingLimit`` caps what the queue gets back. Without
    ``borrowWithinCohort`` preemption reaches only up to the nominal quota, as in
    :func:`evaluate` (C72). Returns ``fit``, ``preempt`` (with the minimal victims) or ``wait``;
    whether it can ever fit is the caller's to know. Never ``never``.
    """
    key, cq_name, policy = workload.key, cluster_queue.name, cluster_queue.policy
    now = assign_flavors(workload.pod_sets, cluster_queue, flavors, available)
    if now.fits:
        return Evaluation(key, cq_name, "fit", flavors=now.flavors, usage=now.usage)
    waiting = Evaluation(key, cq_name, "wait", f"couldn't assign flavors to {now.reason}")
    candidates = [
        c for c in reserving if c.cluster_queue == cq_name and _may_preempt(policy, workload, c)
    ]
    if not candidates:
        return waiting
    after = _add(available, _total_usage(candidates), +1)
    if not policy.preempts_while_borrowing:
        after = {
            fr: max(available.get(fr, 0), min(amount, _nominal(cluster_queue, fr)))
            for fr, amount in after.items()
        }
    target = assign_flavors(workload.pod_sets, cluster_queue, flavors, after)
    if not target.fits:
        return waiting
    short = {fr for fr, amount in target.usage.items() if available.get(fr, 0) < amount}
    found = minimal_victims(
        [c for c in candidates if any(c.usage.get(fr, 0) > 0 for fr in short)],
        available,
        lambda state, victim, sign: _add(state, victim.usage, sign),
        lambda state: all(amount <= state.get(fr, 0) for fr, amount in target.usage.items()),
    )
    if found is None:
        return waiting
    victims, _ = found
    return _preempting(key, cq_name, target, victims)


def _preempting(
    key: str,
    cq_name: str,
    target: FitResult,
    victims: Sequence[ReservingWorkload],
    borrowing: Mapping[FlavorResource, int] | None = None,
) -> Evaluation:
    """A ``preempt`` evaluation: the flavors and usage of ``target`` once ``victims`` are gone."""
    return Evaluation(
        key,
        cq_name,
        "preempt",
        f"Pending the preemption of {len(victims)} workload(s)",
        flavors=target.flavors,
        usage=target.usage,
        borrowing=borrowing or frozen_map(),
        victims=tuple(victims),
    )


def _total_usage(workloads: Iterable[ReservingWorkload]) -> Mapping[FlavorResource, int]:
    out: dict[FlavorResource, int] = {}
    for wl in workloads:
        for fr, amount in wl.usage.items():
            out[fr] = out.get(fr, 0) + amount
    return out


def _nominal(cluster_queue: ClusterQueueView, fr: FlavorResource) -> int:
    quota = cluster_queue.quota(fr[0], fr[1])
    return quota.nominal if quota is not None else 0


# --- a scheduling cycle -----------------------------------------------------------------------


def queue_order(pending: Iterable[PendingWorkload]) -> list[PendingWorkload]:
    """Kueue's queue order (C94): priority descending, then queue-order timestamp, then UID, then
    key."""
    return sorted(pending, key=lambda w: (-w.priority, w.queued_at, w.uid, w.key))


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """The outcome of one scheduling cycle over several ClusterQueues."""

    admitted: tuple[Evaluation, ...] = ()
    """Reserve quota now, in this order (their usage is already accounted for each other)."""
    preempting: tuple[Evaluation, ...] = ()
    """Waiting for their victims to release quota."""
    pending: tuple[Evaluation, ...] = ()
    """Not admissible now (``wait``) or ever (``never``), with the reason."""
    blocked: tuple[str, ...] = ()
    """Keys not evaluated: behind a ``StrictFIFO`` head that was not admitted."""

    @property
    def victims(self) -> tuple[ReservingWorkload, ...]:
        """Workloads to evict now (victims not already being evicted), without duplicates."""
        seen: set[str] = set()
        out = []
        for ev in self.preempting:
            for victim in ev.victims:
                if not victim.evicting and victim.key not in seen:
                    seen.add(victim.key)
                    out.append(victim)
        return tuple(out)


def plan_admissions(
    pending: Iterable[PendingWorkload],
    reserving: Iterable[ReservingWorkload],
    queues: Iterable[ClusterQueueView],
    flavors: Mapping[str, ResourceFlavorView],
    policies: Mapping[str, QueuePolicy] | None = None,
    cohort_quotas: Mapping[str, Mapping[FlavorResource, int]] | None = None,
) -> AdmissionPlan:
    """One scheduling cycle: walk the pending workloads in queue order and decide each.

    A workload that fits is admitted and its usage counts for the ones after it. One that can
    fit by preemption keeps its place: its victims are listed and its usage is set aside so that
    workloads behind it cannot take the quota it waits for (Kueue reserves it in the cycle's
    snapshot); a preemptor whose new victims overlap those of an earlier one waits. With
    ``StrictFIFO`` a ClusterQueue stops at its first workload that is not admitted.
    """
    policies = policies or {}
    holders = list(reserving)
    snapshot = QuotaSnapshot.build(queues, holders, cohort_quotas)
    admitted: list[Evaluation] = []
    preempting: list[Evaluation] = []
    waiting: list[Evaluation] = []
    blocked: list[str] = []
    stopped: set[str] = set()
    claimed: set[str] = set()
    for workload in queue_order(pending):
        cq = workload.cluster_queue
        if cq in stopped:
            blocked.append(workload.key)
            continue
        policy = policies.get(cq, QueuePolicy())
        result = evaluate(workload, snapshot, flavors, policy, holders)
        if result.mode == "preempt":
            fresh = {v.key for v in result.victims if not v.evicting}
            if fresh & claimed:
                result = replace(
                    result,
                    mode="wait",
                    reason="victims are already claimed by another preemptor",
                    victims=(),
                )
            else:
                claimed |= fresh
        if result.mode == "fit":
            admitted.append(result)
            snapshot = snapshot.with_usage(cq, result.usage)
        elif result.mode == "preempt":
            preempting.append(result)
            snapshot = snapshot.with_usage(cq, result.usage)
        else:
            waiting.append(result)
        if policy.strict and result.mode != "fit":
            stopped.add(cq)
    return AdmissionPlan(
        admitted=tuple(admitted),
        preempting=tuple(preempting),
        pending=tuple(waiting),
        blocked=tuple(blocked),
    )


# --- formatting -------------------------------------------------------------------------------

_BINARY_SUFFIXES = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)


def format_resource_quantity(resource: str, milli: int) -> str:
    """Render milli-units as Kubernetes would show a quantity of ``resource``.

    Byte-sized resources (``memory``, ``*storage*``) that are whole multiples of a binary unit
    use the binary suffix (``1Gi``); everything else uses :func:`format_quantity` (``500m``,
    ``2``).
    """
    if milli % MILLI == 0 and milli > 0 and ("memory" in resource or "storage" in resource):
        units = milli // MILLI
        for suffix, size in _BINARY_SUFFIXES:
            if units % size == 0:
                return f"{units // size}{suffix}"
    return format_quantity(milli)
