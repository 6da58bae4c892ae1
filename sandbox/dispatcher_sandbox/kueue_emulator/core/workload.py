"""Workload status as Kueue's ``pkg/workload/`` writes it: the strict admission-status write
(with the written object assumed, :class:`~.cache.CoreCache`), ``SyncAdmittedCondition``, the
eviction (``evict.Evict``, ``resetClusterNomination``), the release of an evicted workload's
quota, and the small predicates the controllers share.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dispatcher_sandbox.kube_client import (
    KubeError,
)
from dispatcher_sandbox.kueue_emulator.core.cache import CoreCache, key_of
from dispatcher_sandbox.kueue_emulator.core.constants import (
    EVICTED_DEACTIVATED,
    EVICTED_NODE_FAILURES,
    EVICTED_PREEMPTED,
    NO_RESERVATION,
    NOT_ALL_CHECKS_READY,
    PENDING,
    PENDING_EVALUATION,
    UNSATISFIED_CHECKS_V019,
    UNSATISFIED_CHECKS_V020,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    Clock,
    Obj,
    condition,
    set_condition,
    timestamp,
    write_admission_status,
)


def has_closed_preemption_gate(wl: Mapping[str, Any]) -> bool:
    """Kueue's ``HasClosedPreemptionGate``: a gate of ``spec.preemptionGates`` whose state in
    ``status.preemptionGates`` is ``Closed`` or absent (a gate only in the spec is closed)."""
    states = {
        str(g.get("name")): g.get("position")
        for g in (wl.get("status") or {}).get("preemptionGates") or []
    }
    return any(
        states.get(str(gate.get("name")), "Closed") == "Closed"
        for gate in (wl.get("spec") or {}).get("preemptionGates") or []
    )


def job_owned(wl: Mapping[str, Any]) -> bool:
    """Whether a batch/v1 Job is the Workload's controller (the Job reconciler then handles its
    eviction, :class:`..jobs.JobAdapter`)."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job":
            return str(ref.get("apiVersion", "")).startswith("batch/")
    return False


def sync_admitted_condition(status: Obj, clock: Clock, *, observability: bool) -> bool:
    """Kueue's ``SyncAdmittedCondition`` (``pkg/workload/admissionchecks.go``) on a status dict.

    ``Admitted`` follows the quota reservation and the admission checks (all ``Ready``; none
    counts as all): True with both, else False with the reason of what is missing. Without the
    UnadmittedWorkloadsObservability gate (v0.19) nothing is written while ``Admitted`` already
    agrees; with it (v0.20) the condition is kept up to date once ``QuotaReserved`` exists.
    Returns whether the status changed. Topology-aware scheduling is not modelled.
    """
    reserved = condition(status, "QuotaReserved")
    admitted = condition(status, "Admitted")
    has_reservation = reserved is not None and reserved.get("status") == "True"
    checks_ready = all(c.get("state") == "Ready" for c in status.get("admissionChecks") or [])
    is_admitted = admitted is not None and admitted.get("status") == "True"
    if observability:
        if reserved is None and admitted is None:
            return False
    elif is_admitted == (has_reservation and checks_ready):
        return False
    value, reason, message = True, "Admitted", "The workload is admitted"
    if not has_reservation and not checks_ready:
        value = False
        if observability:
            reason, message = NO_RESERVATION, "The workload has no reservation"
        else:
            reason = "NoReservationUnsatisfiedChecks"
            message = "The workload has no reservation and not all checks ready"
    elif not has_reservation:
        value, reason, message = False, NO_RESERVATION, "The workload has no reservation"
    elif not checks_ready:
        value = False
        reason = UNSATISFIED_CHECKS_V020 if observability else UNSATISFIED_CHECKS_V019
        message = NOT_ALL_CHECKS_READY
    before = copy.deepcopy(admitted)
    set_condition(status, "Admitted", value, reason, message, clock)
    return condition(status, "Admitted") != before


def release_after_eviction(status: Obj, clock: Clock, *, observability: bool) -> Obj:
    """The status with which an evicted Workload gives its quota back; ``status`` is changed
    in place and returned.

    As Kueue's Job reconciler writes it once the job is stopped and has no active pods
    (``pkg/controller/jobframework/reconciler.go``, eviction step, C13, C37): ``Requeued`` True
    only after an eviction by preemption or node failures, otherwise False (the workload
    controller turns it True again later), both with the eviction's reason and message;
    ``QuotaReserved=False`` (reason ``Pending``, v0.20 ``PendingEvaluation``) with the
    eviction's message; ``status.admission`` cleared; ``Admitted`` synced
    (:func:`sync_admitted_condition`). The nomination was already reset by the eviction.
    """
    evicted = condition(status, "Evicted") or {}
    reason = str(evicted.get("reason") or "")
    message = str(evicted.get("message") or "")[:32768]
    requeue = reason in (EVICTED_PREEMPTED, EVICTED_NODE_FAILURES)
    set_condition(status, "Requeued", requeue, reason, message, clock)
    pending = PENDING_EVALUATION if observability else PENDING
    set_condition(status, "QuotaReserved", False, pending, message, clock)
    status.pop("admission", None)
    sync_admitted_condition(status, clock, observability=observability)
    return status


class WorkloadStatusWriter(CoreCache):
    """The status writes the workload controller and the scheduler share. Not used alone."""

    async def _write(self, wl: Obj, status: Obj) -> Obj | None:
        """A strict admission-status write; the result is assumed until the cache has it."""
        try:
            written = await write_admission_status(
                self.conn.client, wl, status, self.config, strict=True
            )
        except KubeError as error:
            self._write_failed(error, wl)
            return None
        if written:
            self._assumed[key_of(written)] = written
        return written

    def _status(self, wl: Mapping[str, Any]) -> Obj:
        return copy.deepcopy(dict(wl.get("status") or {}))

    def _sync_unadmitted(self, status: Obj) -> None:
        """v0.20 ``SyncAdmittedCondition`` after ``QuotaReserved=False``: ``Admitted=False``
        reason ``NoReservation`` (v0.19 writes nothing for a workload never admitted)."""
        if self._observability:
            set_condition(
                status,
                "Admitted",
                False,
                NO_RESERVATION,
                "The workload has no reservation",
                self.clock,
            )

    def _new_check(self, name: str) -> Obj:
        return {
            "name": name,
            "state": "Pending",
            "message": "",
            "lastTransitionTime": timestamp(self.clock),
        }

    def _reset_nomination(self, status: Obj) -> None:
        """C37 (``resetClusterNomination`` and the checks' reset on eviction)."""
        status.pop("clusterName", None)
        status.pop("nominatedClusterNames", None)
        for check in status.get("admissionChecks") or []:
            previous = check.get("state")
            if previous == "Pending":
                continue
            if previous == "Retry":
                check["retryCount"] = int(check.get("retryCount") or 0) + 1
            check["state"] = "Pending"
            check["message"] = f"Reset to Pending after eviction. Previously: {previous}"
            check["lastTransitionTime"] = timestamp(self.clock)

    @staticmethod
    def _record_eviction(status: Obj, reason: str, cause: str) -> None:
        stats = status.setdefault("schedulingStats", {})
        evictions: list[Obj] = stats.setdefault("evictions", [])
        for item in evictions:
            if item.get("reason") == reason and item.get("underlyingCause") == cause:
                item["count"] = int(item.get("count") or 0) + 1
                return
        evictions.append({"reason": reason, "underlyingCause": cause, "count": 1})

    async def _evict(
        self,
        wl: Obj,
        reason: str,
        message: str,
        *,
        cause: str = "",
        preempted: bool = False,
    ) -> None:
        """Set ``Evicted=True`` (and ``Preempted=True``) and reset the nomination (C37).

        A deactivation with a cause (the ``DeactivationTarget`` reason) is recorded as Kueue's
        ``evict.Evict`` records it: reason ``Deactivated`` + ``DueTo`` + the cause (for
        instance ``DeactivatedDueToEvictedOnManagerCluster``, seen on real Kueue v0.19.2 by the
        differential comparison); the scheduling stats keep the two apart."""
        status = self._status(wl)
        shown = f"{reason}DueTo{cause}" if reason == EVICTED_DEACTIVATED and cause else reason
        set_condition(status, "Evicted", True, shown, message, self.clock)
        if preempted:
            set_condition(status, "Preempted", True, cause, message, self.clock)
        if reason == EVICTED_DEACTIVATED:
            status["conditions"] = [
                c for c in status.get("conditions") or [] if c.get("type") != "DeactivationTarget"
            ]
        self._reset_nomination(status)
        self._record_eviction(status, reason, cause)
        if await self._write(wl, status) is not None:
            cq = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", ""))
            self.counters.inc("kueue_evicted_workloads_total", cluster_queue=cq, reason=reason)
            if preempted:
                self.counters.inc(
                    "kueue_preempted_workloads_total", preempting_cluster_queue=cq, reason=cause
                )
