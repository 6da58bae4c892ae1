"""Kueue's workload controller (``pkg/controller/core/workload_controller.go``) for the
workloads that hold quota: deactivation and its target, stopped queues, admission checks in
``Rejected`` and ``Retry``, the checks' list kept to the ClusterQueue's, ``Admitted`` once every
check is ``Ready``, ``Requeued`` turned True again, v0.20's preemption-gate states; and, on a
worker, the stand-in for the job that "runs" an admitted workload (:data:`RUN_SECONDS_ANNOTATION`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dispatcher.topology.runs import RUN_SECONDS_ANNOTATION, hold_of, pods_refused
from dispatcher_sandbox.kube_client import (
    CONFIGMAPS,
    WORKLOADS,
    KubeError,
)
from dispatcher_sandbox.kueue_emulator.core.cache import (
    PassState,
    is_active,
    is_deleting,
    key_of,
    stop_policy,
    time_of,
    uid_of,
)
from dispatcher_sandbox.kueue_emulator.core.constants import (
    CHECK_EVICTION_MESSAGE,
    EVICTED_CHECK,
    EVICTED_CQ_STOPPED,
    EVICTED_DEACTIVATED,
    EVICTED_LQ_STOPPED,
    EVICTED_PODS_READY_TIMEOUT,
    NOT_ALL_CHECKS_READY,
    UNSATISFIED_CHECKS_V019,
    UNSATISFIED_CHECKS_V020,
)
from dispatcher_sandbox.kueue_emulator.core.workload import (
    WorkloadStatusWriter,
    job_owned,
    release_after_eviction,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    KUEUE_MANAGER,
    Obj,
    condition,
    is_true,
    parse_time,
    set_condition,
    timestamp,
)

log = logging.getLogger(__name__)

HOLD_POLL_SECONDS = 0.5
"""How often (clock seconds) a held workload whose run time is over looks for its ConfigMap."""


class WorkloadReconciler(WorkloadStatusWriter):
    """Phase 1 of a pass: advance each quota-holding workload by at most one write. Not used
    alone (a part of :class:`~dispatcher_sandbox.kueue_emulator.core.CoreKueue`)."""

    async def _lifecycle(self, state: PassState, wl: Obj) -> float | None:
        """Advance one quota-holding workload by at most one write; seconds until due again."""
        status = wl.get("status") or {}
        cq_name = str((status.get("admission") or {}).get("clusterQueue", ""))
        cq = state.cluster_queues.get(cq_name)
        lq = state.local_queue(wl)
        admitted = is_true(wl, "Admitted")
        if is_true(wl, "Evicted"):
            if not job_owned(wl):  # a Job's quota is released by the Job reconciler (item 6)
                await self._release(wl)
            return None
        if is_active(wl) and is_true(wl, "DeactivationTarget"):
            # Kueue's workload controller writes spec.active=false, and its own update event
            # brings the next reconcile, which evicts, within milliseconds. Here the next pass
            # waits for the informer and the pass before it; under load that took up to a
            # second, long enough for MultiKueue's batched reconcile on the manager to see a
            # deactivated copy not yet evicted, take it for spec drift (C27) and delete it with
            # its Job, so the manager's Job never showed no active pods and its quota was
            # never released (item 4's lost-worker test, CI). The eviction follows at once.
            deactivated = await self._deactivate(wl)
            if deactivated is None:
                return None
            wl, status = deactivated, deactivated.get("status") or {}
        if not is_active(wl):
            target = condition(status, "DeactivationTarget")
            cause = str((target or {}).get("reason") or "")
            message = "The workload is deactivated"
            if target and target.get("status") == "True":
                message += f" due to {target.get('message')}"
            await self._evict(wl, EVICTED_DEACTIVATED, message, cause=cause)
            return None
        for queue, reason in ((cq, EVICTED_CQ_STOPPED), (lq, EVICTED_LQ_STOPPED)):
            policy = stop_policy(queue)
            if policy == "HoldAndDrain" or (policy == "Hold" and not admitted):
                kind = "ClusterQueue" if reason == EVICTED_CQ_STOPPED else "LocalQueue"
                await self._evict(wl, reason, f"The {kind} is stopped")
                return None
        checks = list(status.get("admissionChecks") or [])
        rejected = [c["name"] for c in checks if c.get("state") == "Rejected"]
        if rejected:  # C39
            new = self._status(wl)
            set_condition(
                new,
                "DeactivationTarget",
                True,
                EVICTED_CHECK,
                f"Admission check(s): {', '.join(rejected)}, were rejected",
                self.clock,
            )
            if await self._write(wl, new) is not None:
                await self._deactivate(wl)
            return None
        if any(c.get("state") == "Retry" for c in checks):  # C38
            await self._evict(wl, EVICTED_CHECK, CHECK_EVICTION_MESSAGE)
            return None
        if cq is not None and await self._sync_checks(wl, cq):
            return None
        ready = all(c.get("state") == "Ready" for c in checks)
        if not admitted and ready:
            return await self._admit(wl)
        unsatisfied = self._reason(UNSATISFIED_CHECKS_V019, UNSATISFIED_CHECKS_V020)
        if admitted and not ready:
            new = self._status(wl)
            set_condition(new, "Admitted", False, unsatisfied, NOT_ALL_CHECKS_READY, self.clock)
            await self._write(wl, new)
            return None
        if not admitted and self._observability:
            # v0.20: SyncAdmittedCondition writes Admitted=False while checks are not all Ready.
            current = condition(status, "Admitted")
            if current is None or current.get("reason") != unsatisfied:
                new = self._status(wl)
                set_condition(new, "Admitted", False, unsatisfied, NOT_ALL_CHECKS_READY, self.clock)
                await self._write(wl, new)
            return None
        if admitted and self.role == "worker":
            return await self._run(wl)
        return None

    async def _release(self, wl: Obj) -> None:
        """After the eviction of a Workload no job integration owns: give the quota back.

        The stand-in for a job integration (C13, C37, C72): Kueue's core never releases an
        evicted Workload itself; for a Job the Job reconciler does it once the Job has no active
        pods (:class:`..jobs.JobAdapter`, issue 14 item 6), and Kueue's own integration tests
        release bare Workloads by hand (``util.FinishEvictionForWorkloads``). Here a Workload
        without a Job owner is released at once, with the same status as for a Job
        (:func:`release_after_eviction`).
        """
        status = release_after_eviction(
            self._status(wl), self.clock, observability=self._observability
        )
        await self._write(wl, status)

    async def _sync_requeued(self, state: PassState, wl: Obj) -> float | None:
        """Kueue's workload controller turning ``Requeued=False`` back to True (C13).

        After a release with ``Requeued=False`` (any eviction but preemption), the workload is
        not queued until: reactivated (reason ``Deactivated``, now active), its backoff is over
        (``AdmissionCheck``, ``PodsReadyTimeout``: at once unless ``requeueState.requeueAt`` is
        later), or its stopped LocalQueue/ClusterQueue runs again. Returns seconds until a
        backoff ends, if one is pending.
        """
        requeued = condition(wl.get("status"), "Requeued")
        if requeued is None or requeued.get("status") != "False" or is_deleting(wl):
            return None
        reason = str(requeued.get("reason") or "")
        status = self._status(wl)
        wanted: tuple[str, str] | None = None
        if is_active(wl) and reason == EVICTED_DEACTIVATED:
            wanted = ("Reactivated", "The workload was reactivated")
        elif is_active(wl) and reason in (EVICTED_CHECK, EVICTED_PODS_READY_TIMEOUT):
            requeue_at = parse_time((status.get("requeueState") or {}).get("requeueAt"))
            if requeue_at is not None and requeue_at > self.clock.now():
                return (requeue_at - self.clock.now()).total_seconds()
            if status.get("requeueState"):
                status["requeueState"].pop("requeueAt", None)
            wanted = ("BackoffFinished", "The workload backoff was finished")
        elif reason == EVICTED_LQ_STOPPED:
            lq = state.local_queue(wl)
            if lq is not None and stop_policy(lq) == "None" and not is_deleting(lq):
                wanted = ("LocalQueueRestarted", "The LocalQueue was restarted after being stopped")
        elif reason == EVICTED_CQ_STOPPED:
            lq = state.local_queue(wl) or {}
            cq = state.cluster_queues.get(str((lq.get("spec") or {}).get("clusterQueue", "")))
            if cq is not None and stop_policy(cq) == "None":
                wanted = (
                    "ClusterQueueRestarted",
                    "The ClusterQueue was restarted after being stopped",
                )
        if wanted is not None:
            set_condition(status, "Requeued", True, wanted[0], wanted[1], self.clock)
            await self._write(wl, status)
        return None

    async def _deactivate(self, wl: Obj) -> Obj | None:
        """C39: ``spec.active=false`` (a spec write, as Kueue's workload controller does); the
        Workload as written, or None when the write failed."""
        namespace, name = key_of(wl)
        try:
            return await self.conn.client.merge_patch(
                WORKLOADS,
                name,
                {"spec": {"active": False}},
                namespace=namespace,
                field_manager=KUEUE_MANAGER,
            )
        except KubeError as error:
            self._write_failed(error, wl)
            return None

    async def _sync_checks(self, wl: Obj, cq: Mapping[str, Any]) -> bool:
        """Keep ``status.admissionChecks`` to the ClusterQueue's list; True when it wrote. The
        status is copied only for a write (a pass visits every quota holder)."""
        status: Mapping[str, Any] = wl.get("status") or {}
        assigned = {
            str(f)
            for psa in (status.get("admission") or {}).get("podSetAssignments") or []
            for f in (psa.get("flavors") or {}).values()
        }
        wanted = self._check_names(cq, assigned)
        current = list(status.get("admissionChecks") or [])
        if {c.get("name") for c in current} == set(wanted):
            return False  # the order is whoever wrote last's: not a reason to write
        have = {c.get("name") for c in current}
        written = self._status(wl)
        checks = [c for c in written.get("admissionChecks") or [] if c.get("name") in wanted]
        checks += [self._new_check(n) for n in wanted if n not in have]
        written["admissionChecks"] = checks
        if not checks:
            written.pop("admissionChecks")
        await self._write(wl, written)
        return True

    async def _admit(self, wl: Obj) -> float | None:
        """``Admitted=True`` in a write of its own once every admission check is ``Ready``, at
        least ``admit_delay_seconds`` after the reservation (C72; without admission checks it
        comes with the reservation, :meth:`.scheduler.Scheduler._reserve`, unless the delay knob
        is set)."""
        uid = uid_of(wl)
        since = self._reserved_at.get(uid) or time_of(condition(wl.get("status"), "QuotaReserved"))
        if since is not None:
            remaining = self.config.admit_delay_seconds - self._elapsed(since)
            if remaining > 0:
                return remaining
        status = self._status(wl)
        set_condition(status, "Admitted", True, "Admitted", "The workload is admitted", self.clock)
        if await self._write(wl, status) is not None:
            self._admitted_at[uid] = self.clock.now()
            cq = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", ""))
            self.counters.inc("kueue_admitted_workloads_total", cluster_queue=cq)
        return None

    async def _run(self, wl: Obj) -> float | None:
        """A worker "runs" an admitted workload, then finishes it (``Finished``/``Succeeded``);
        once its run time is over, a held one (:mod:`dispatcher.topology.runs`) finishes only
        when the ConfigMap of its hold exists, looked for every :data:`HOLD_POLL_SECONDS` of the
        clock."""
        text = ((wl.get("metadata") or {}).get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
        if text is None or pods_refused(wl):
            return None  # runs until deleted; a Job whose pods are refused never finishes
        try:
            seconds = float(text)
        except ValueError:
            log.warning("%s: %s: bad %s %r", self.name, key_of(wl), RUN_SECONDS_ANNOTATION, text)
            return None
        uid = uid_of(wl)
        since = self._admitted_at.get(uid) or time_of(condition(wl.get("status"), "Admitted"))
        if since is not None:
            remaining = seconds - self._elapsed(since)
            if remaining > 0:
                return remaining
        hold = hold_of(wl)
        if hold is not None:
            namespace = str(wl["metadata"].get("namespace", ""))
            if await self.conn.client.get(CONFIGMAPS, hold, namespace) is None:
                return HOLD_POLL_SECONDS
        status = self._status(wl)
        set_condition(
            status, "Finished", True, "Succeeded", "Job finished successfully", self.clock
        )
        await self._write(wl, status)
        return None

    async def _sync_preemption_gates(self, state: PassState) -> None:
        """v0.20 ``syncPreemptionGateStates``: every gate of ``spec.preemptionGates`` gets a
        ``status.preemptionGates`` entry (``Closed`` when new); entries without a gate go."""
        for _, wl in sorted(state.workloads.items()):
            if is_deleting(wl):
                continue
            gates = (wl.get("spec") or {}).get("preemptionGates") or []
            wanted = [str(g.get("name")) for g in gates]
            current = list((wl.get("status") or {}).get("preemptionGates") or [])
            kept = [g for g in current if g.get("name") in wanted]
            have = {g.get("name") for g in kept}
            added = [
                {"name": name, "position": "Closed", "lastTransitionTime": timestamp(self.clock)}
                for name in wanted
                if name not in have
            ]
            if not added and len(kept) == len(current):
                continue
            status = self._status(wl)
            status["preemptionGates"] = kept + added
            if not status["preemptionGates"]:
                status.pop("preemptionGates")
            await self._write(wl, status)
