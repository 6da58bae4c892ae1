"""Kueue's scheduler (``pkg/scheduler/scheduler.go``, with ``flavorassigner/`` and
``preemption/``) on the pending workloads of one pass: the plan of
:func:`dispatcher.kueue.admission.plan_admissions` (queue order, flavors, borrowing, preemption;
the arithmetic lives there) written back as reservations, preemptions and ``QuotaReserved=False``
reasons.
"""

from __future__ import annotations

import re

from dispatcher.kueue.admission import (
    Evaluation,
    format_resource_quantity,
    plan_admissions,
)
from dispatcher.kueue.flavorfit import quota_requests
from dispatcher.kueue.objects import (
    parse_pod_set,
)
from dispatcher.kueue.quantities import parse_quantity
from dispatcher_sandbox.kueue_emulator.core.cache import PassState, uid_of
from dispatcher_sandbox.kueue_emulator.core.constants import (
    ADMISSION_GATED,
    EVICTED_PREEMPTED,
    EXCEEDS_MAX_QUOTA,
    INADMISSIBLE,
    MISCONFIGURED,
    PENDING,
    PREEMPTION_GATED,
    PREEMPTION_GATED_MESSAGE,
    SUSPENDED,
    WAITING_FOR_PREEMPTED,
    WAITING_FOR_QUOTA,
)
from dispatcher_sandbox.kueue_emulator.core.workload import (
    WorkloadStatusWriter,
    has_closed_preemption_gate,
    sync_admitted_condition,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    Obj,
    condition,
    is_true,
    set_condition,
)

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
_NUMBERS = re.compile(r"\d[\w.]*")


_SHORT_FLAVOR = re.compile(r"insufficient quota in flavor (\S+): ((?:[^;()\s]+ \([^)]*\)(?:; )?)+)")
_SHORT_RESOURCE = re.compile(r"(\S+) \(requested ([^,]+), available ([^)]+)\)")


def kueue_wait_message(reason: str) -> str:
    """Kueue's wording for a workload that fits its ClusterQueue but not the quota free now:
    each ``insufficient quota in flavor F: R (requested A, available B)`` of the shared flavor
    fit becomes ``insufficient unused quota for R in flavor F, A-B more needed`` (Kueue's
    flavor assigner, ``flavorassigner.go``)."""

    def flavor(match: re.Match[str]) -> str:
        name = match[1]
        return "; ".join(
            f"insufficient unused quota for {resource} in flavor {name}, "
            f"{format_resource_quantity(resource, parse_quantity(wanted) - parse_quantity(free))}"
            " more needed"
            for resource, wanted, free in _SHORT_RESOURCE.findall(match[2])
        ) + ("; " if match[2].endswith("; ") else "")

    return _SHORT_FLAVOR.sub(flavor, reason)


def _granular_inadmissible(message: str) -> str:
    """The v0.20 reason for a workload that cannot be queued (``getQueueBlocker``)."""
    return SUSPENDED if message.endswith("is inactive") else MISCONFIGURED


class Scheduler(WorkloadStatusWriter):
    """Phase 2 of a pass: schedule the pending workloads. Not used alone (a part of
    :class:`~dispatcher_sandbox.kueue_emulator.core.CoreKueue`)."""

    async def _schedule_pending(self, state: PassState) -> None:
        queued, inadmissible, _ = self._pending(state)
        for wl, message in inadmissible:
            reason = self._reason(INADMISSIBLE, _granular_inadmissible(message))
            await self._set_pending(wl, reason, message)
        if not queued:
            return
        queues, policies, cohorts = self._snapshot_inputs(state)
        plan = plan_admissions(
            [view for _, view in queued],
            self._reserving(state),
            queues,
            state.flavors,
            policies,
            cohorts,
        )
        by_key = {f"{k[0]}/{k[1]}": wl for k, wl in state.workloads.items()}
        gated = {
            ev.key
            for ev in plan.preempting
            if self.config.orchestrated_preemption and has_closed_preemption_gate(by_key[ev.key])
        }
        preemptor_of = {v.key: ev.key for ev in plan.preempting for v in ev.victims}
        for victim in plan.victims:
            if preemptor_of[victim.key] in gated:
                continue
            preemptor = by_key[preemptor_of[victim.key]]
            message = (
                f"Preempted to accommodate a workload (UID: {uid_of(preemptor)}, JobUID: "
                f"{(preemptor['metadata'].get('labels') or {}).get(JOB_UID_LABEL, 'UNKNOWN')})"
                " due to prioritization in the ClusterQueue"
            )
            await self._evict(
                by_key[victim.key],
                EVICTED_PREEMPTED,
                message,
                cause="InClusterQueue",
                preempted=True,
            )
        for ev in plan.preempting:
            if ev.key in gated:
                await self._set_gated(by_key[ev.key])
                continue
            reason = self._reason(PENDING, WAITING_FOR_PREEMPTED)
            await self._set_pending(by_key[ev.key], reason, ev.reason)
        for ev in plan.admitted:
            await self._reserve(state, by_key[ev.key], ev)
        for ev in plan.pending:
            message = kueue_wait_message(ev.reason) if ev.mode == "wait" else ev.reason
            await self._set_pending(by_key[ev.key], self._pending_reason(ev), message)

    async def _set_pending(self, wl: Obj, reason: str, message: str) -> None:
        """``QuotaReserved=False`` with Kueue's reason and message, written only on change.

        A message that differs only in its numbers (how much quota is free) is not rewritten,
        so that every admission does not rewrite every pending workload of the queue.
        """
        current = condition(wl.get("status"), "QuotaReserved")
        if (
            current is not None
            and current.get("status") == "False"
            and current.get("reason") == reason
            and _NUMBERS.sub("#", str(current.get("message"))) == _NUMBERS.sub("#", message)
            and (not self._observability or condition(wl.get("status"), "Admitted") is not None)
        ):
            return
        status = self._status(wl)
        set_condition(status, "QuotaReserved", False, reason, message[:32768], self.clock)
        self._sync_unadmitted(status)
        await self._write(wl, status)

    def _pending_reason(self, ev: Evaluation) -> str:
        """v0.19: ``Pending``; v0.20: the granular reason of a workload that does not fit."""
        if not self._observability:
            return PENDING
        if ev.reason.endswith("doesn't exist"):
            return MISCONFIGURED
        return EXCEEDS_MAX_QUOTA if ev.mode == "never" else WAITING_FOR_QUOTA

    async def _set_gated(self, wl: Obj) -> None:
        """v0.20: the preemptor's gate is Closed: no preemption, ``BlockedOnPreemptionGates``."""
        current = condition(wl.get("status"), "BlockedOnPreemptionGates")
        reserved = condition(wl.get("status"), "QuotaReserved")
        reason = self._reason(PENDING, ADMISSION_GATED)
        if (
            current is not None
            and current.get("status") == "True"
            and reserved is not None
            and reserved.get("reason") == reason
        ):
            return
        status = self._status(wl)
        set_condition(status, "QuotaReserved", False, reason, PREEMPTION_GATED_MESSAGE, self.clock)
        self._sync_unadmitted(status)
        set_condition(
            status,
            "BlockedOnPreemptionGates",
            True,
            PREEMPTION_GATED,
            PREEMPTION_GATED_MESSAGE,
            self.clock,
        )
        await self._write(wl, status)

    async def _reserve(self, state: PassState, wl: Obj, ev: Evaluation) -> None:
        """``QuotaReserved=True`` and ``status.admission`` (C15, C72), in one write with
        ``Admitted=True`` where nothing else is awaited.

        Kueue's scheduler (``prepareWorkload``) syncs ``Admitted`` in the reservation write when
        the workload already lists every admission check its ClusterQueue requires: so a
        ClusterQueue without checks (a worker's) admits in the same write (issue 14 item 7),
        while one with checks (the manager's MultiKueue check) reserves first and admits
        later, once every check is ``Ready``
        (:meth:`.workload_controller.WorkloadReconciler._admit`). ``config.admit_delay_seconds``
        (a test knob, not Kueue's) keeps the two writes everywhere.
        """
        status = self._status(wl)
        view = state.views[ev.cluster_queue]
        assignments = []
        for raw in (wl.get("spec") or {}).get("podSets") or []:
            pod_set = parse_pod_set(raw)
            flavors = dict(ev.flavors.get(pod_set.name) or {})
            usage = {
                resource: format_resource_quantity(resource, amount)
                for resource, amount in quota_requests(pod_set, view).items()
                if resource in flavors
            }
            assignments.append(
                {
                    "name": pod_set.name,
                    "flavors": flavors,
                    "resourceUsage": usage,
                    "count": pod_set.count,
                }
            )
        status["admission"] = {"clusterQueue": ev.cluster_queue, "podSetAssignments": assignments}
        set_condition(
            status,
            "QuotaReserved",
            True,
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {ev.cluster_queue}",
            self.clock,
        )
        for kind in ("Evicted", "Preempted", "BlockedOnPreemptionGates"):
            previous = condition(status, kind)
            if previous is not None and previous.get("status") == "True":
                set_condition(
                    status,
                    kind,
                    False,
                    "QuotaReserved",
                    f"Previously: {previous.get('message', '')}"[:32768],
                    self.clock,
                )
        cq = state.cluster_queues[ev.cluster_queue]
        assigned = {f for per_pod_set in ev.flavors.values() for f in per_pod_set.values()}
        by_name = {c.get("name"): c for c in status.get("admissionChecks") or []}
        required = self._check_names(cq, assigned)
        has_all_required = set(required) <= set(by_name)  # HasAllRequiredChecks, before the
        checks = [by_name.get(n) or self._new_check(n) for n in required]  # checks are added
        if checks:
            status["admissionChecks"] = checks
        else:
            status.pop("admissionChecks", None)
        if has_all_required and self.config.admit_delay_seconds <= 0:
            sync_admitted_condition(status, self.clock, observability=self._observability)
        admitted = is_true({"status": status}, "Admitted")
        if await self._write(wl, status) is not None:
            now = self.clock.now()
            self._reserved_at[uid_of(wl)] = now
            self.counters.inc(
                "kueue_quota_reserved_workloads_total", cluster_queue=ev.cluster_queue
            )
            if admitted:
                self._admitted_at[uid_of(wl)] = now
                self.counters.inc("kueue_admitted_workloads_total", cluster_queue=ev.cluster_queue)
