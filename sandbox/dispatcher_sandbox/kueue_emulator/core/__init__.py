"""The core of Kueue on one cluster: queues, quota reservation, admission, preemption, eviction.

Worker clusters run this alone (contract C72: workers run Kueue's core without MultiKueue); the
manager runs it under the MultiKueue controllers of :mod:`..multikueue`, on the same
:class:`~..runtime.ClusterConnection`::

    conn = ClusterConnection("worker-1", kubeconfig, CoreKueue.RESOURCES)
    core = CoreKueue(conn, config, clock, role="worker")
    await run_all(conn.run, core.run)

Every pass of :meth:`CoreKueue.reconcile` recomputes everything from the cached objects:

1. **Lifecycle of workloads holding quota** (C13, C37–C39, C72): an inactive one
   (``spec.active=false``) is evicted with reason ``Deactivated``; an admission check in
   ``Rejected`` marks it ``DeactivationTarget`` and deactivates it (a spec write, C39); a check
   in ``Retry`` evicts it with reason ``AdmissionCheck``; every eviction resets
   ``clusterName``, ``nominatedClusterNames`` and the admission checks (C37). An
   ``Evicted=True`` workload keeps its quota until it is released (``QuotaReserved=False``,
   ``status.admission`` cleared, ``Admitted`` synced, ``Requeued`` set,
   :func:`release_after_eviction`): for a Workload owned by a Job, by the Job reconciler once the
   Job is stopped and has no active pods (:class:`..jobs.JobAdapter`; issue 14 item 6), for any
   other Workload by this controller at once (a stand-in for a job integration, see
   :meth:`CoreKueue._release`). ``Requeued=False`` holds a released workload out of the queue
   until the workload controller's conditions for turning it True hold again
   (:meth:`CoreKueue._sync_requeued`). On a ClusterQueue with admission checks,
   ``Admitted=True`` follows the reservation as a separate write once every check is ``Ready``
   (``config.admit_delay_seconds`` later). On a worker, an admitted workload "runs" for the
   seconds in :data:`RUN_SECONDS_ANNOTATION` (injected clock) and then gets ``Finished=True``
   reason ``Succeeded``; finished and deleted workloads hold no quota.
2. **Scheduling**: pending workloads (active, not finished, no quota) go through their
   LocalQueue to a ClusterQueue and the pure model
   :func:`dispatcher.kueue.admission.plan_admissions` decides (queue order, flavors, cohort
   borrowing, ``pods`` quota, ``LowerPriority`` preemption within nominal quota unless
   ``borrowWithinCohort`` allows more); a reservation writes ``QuotaReserved=True`` and
   ``status.admission`` (with, on a ClusterQueue with admission checks, every check
   ``Pending``), and on a ClusterQueue without admission checks ``Admitted=True`` in the same
   write (issue 14 item 7); victims get ``Evicted=True`` reason ``Preempted`` and
   ``Preempted=True`` reason ``InClusterQueue``; workloads that do not fit get
   ``QuotaReserved=False`` with Kueue's reason and message.
3. **Queue status** (C69): ClusterQueue ``flavorsReservation`` (reserving and admitted),
   ``flavorsUsage`` (admitted), the three counters and condition ``Active``; the same counters
   on LocalQueues; merge patches to ``/status`` as field manager ``kueue``, only on change.

Workload status writes all go through :func:`..runtime.write_admission_status` (server-side apply
as ``kueue-admission`` with force and the full admission body, or a merge patch under the C45
gate), with ``strict`` set, as Kueue's scheduler writes: a stale decision fails with 409 and is
recomputed. Like Kueue's cache "assumes" a workload it has just admitted, the controller keeps
the objects its writes returned until the informer catches up, so quota is never handed out
twice.

``config.version`` ``"v0.20"`` switches on what Kueue v0.20 does by default
(``docs/kueue-versions.md``): the granular ``QuotaReserved=False`` reasons and the
``Admitted=False`` conditions of UnadmittedWorkloadsObservability, and, for
MultiKueueOrchestratedPreemption, ``status.preemptionGates`` mirrored from the spec and no
preemption while a gate is ``Closed`` (``BlockedOnPreemptionGates=True`` instead).

Differences from Kueue, on purpose: the ``role`` only decides whether admitted workloads "run"
(workers) or wait for MultiKueue to finish them (manager); no finalizers are managed; no events
are emitted; hierarchical cohorts, fair sharing, partial admission and topology-aware scheduling
are not modelled (see :mod:`dispatcher.kueue.admission`). An evicted Workload that no Job owns
is released by this controller at once, where real Kueue leaves it holding its quota until
something releases it (Kueue's integration tests do it by hand); ``config.admit_delay_seconds``
above 0 (a test knob) writes ``Admitted`` apart from the reservation even without admission
checks; the reservation write also lists the ClusterQueue's admission checks (``Pending``),
which Kueue's workload controller writes on its own, already while the workload is pending
(``reconcileSyncAdmissionChecks``).

The package follows Kueue v0.19.2's files; :class:`CoreKueue` is one controller whose pass runs
the parts in Kueue's order, each part a class of its own module sharing :class:`~.cache.CoreCache`:

* :mod:`.cache` -- ``pkg/cache/`` and ``pkg/queue/`` (:class:`~.cache.PassState`: the cached
  objects with the assumed workloads laid over them; which workloads hold quota, which are
  queued, inadmissible or held back; a ClusterQueue's problems and admission checks);
* :mod:`.workload` -- ``pkg/workload/`` (the strict admission-status write, eviction,
  :func:`sync_admitted_condition`, :func:`release_after_eviction`);
* :mod:`.workload_controller` -- ``pkg/controller/core/workload_controller.go`` (phase 1,
  :class:`~.workload_controller.WorkloadReconciler`);
* :mod:`.scheduler` -- ``pkg/scheduler/scheduler.go`` with ``flavorassigner/`` and
  ``preemption/`` (phase 2, :class:`~.scheduler.Scheduler`; the fit and preemption arithmetic
  itself is :mod:`dispatcher.kueue.admission`);
* :mod:`.queue_controllers` -- ``pkg/controller/core/clusterqueue_controller.go`` and
  ``localqueue_controller.go`` (phase 3, :class:`~.queue_controllers.QueueStatusReconciler`);
* :mod:`.constants` -- the reasons and messages Kueue writes;
* this ``__init__`` -- the pass itself (:meth:`CoreKueue.reconcile`) and the public names.
"""

from __future__ import annotations

import datetime

from dispatcher.topology.runs import RUN_SECONDS_ANNOTATION
from dispatcher_sandbox.kueue_emulator.core.cache import uid_of
from dispatcher_sandbox.kueue_emulator.core.queue_controllers import QueueStatusReconciler
from dispatcher_sandbox.kueue_emulator.core.scheduler import JOB_UID_LABEL, Scheduler
from dispatcher_sandbox.kueue_emulator.core.workload import (
    has_closed_preemption_gate,
    job_owned,
    release_after_eviction,
    sync_admitted_condition,
)
from dispatcher_sandbox.kueue_emulator.core.workload_controller import WorkloadReconciler
from dispatcher_sandbox.kueue_emulator.runtime import is_true

__all__ = [
    "JOB_UID_LABEL",
    "RUN_SECONDS_ANNOTATION",
    "CoreKueue",
    "has_closed_preemption_gate",
    "job_owned",
    "release_after_eviction",
    "sync_admitted_condition",
]


class CoreKueue(WorkloadReconciler, Scheduler, QueueStatusReconciler):
    """Kueue's core controllers and scheduler for one cluster (C13–C15, C37–C39, C69–C72).

    ``role="worker"``: admitted workloads run for :data:`RUN_SECONDS_ANNOTATION` seconds and
    finish. ``role="manager"``: they wait for MultiKueue to finish them (C25). Admission checks
    listed by a ClusterQueue are honoured in both roles (workers usually have none).
    """

    async def reconcile(self) -> float | None:
        """One pass over the cluster (see the module docstring); seconds until a timer is due."""
        if not all(self.conn.cache(r).synced.is_set() for r in self.RESOURCES):
            return None  # the informers' SYNCED notification marks the controller dirty again
        state = self._read()
        live = {uid_of(wl) for wl in state.workloads.values()}
        for table in (self._reserved_at, self._admitted_at):
            for uid in [u for u in table if u not in live]:
                del table[uid]
        if self.config.orchestrated_preemption:
            await self._sync_preemption_gates(state)
            state = self._read()
        due: list[float] = []
        for _, wl in sorted(state.workloads.items()):
            if self._holds_quota(wl):
                wait = await self._lifecycle(state, wl)
            elif not is_true(wl, "Finished"):
                wait = await self._sync_requeued(state, wl)
            else:
                wait = None
            if wait is not None:
                due.append(wait)
        state = self._read()
        await self._schedule_pending(state)
        await self._queue_statuses(self._read())
        return self._next_timer(min(due)) if due else None

    def _next_timer(self, seconds: float) -> float | None:
        """``seconds``, unless an earlier or equal timer is already pending (one at a time)."""
        now = self.clock.now()
        deadline = now + datetime.timedelta(seconds=seconds)
        if self._timer_at is not None and now < self._timer_at <= deadline:
            return None
        self._timer_at = deadline
        return seconds
