"""Reasons and messages as Kueue v0.19 writes them (C13), and v0.20's additions.

Kueue keeps them beside its API types (``apis/kueue/v1beta1/workload_types.go``,
``v1beta2/workload_types.go``) and in ``pkg/workload/`` and ``pkg/scheduler/``; here every part
of :class:`~dispatcher_sandbox.kueue_emulator.core.CoreKueue` reads them from one place.
"""

from __future__ import annotations

PENDING = "Pending"
INADMISSIBLE = "Inadmissible"
EVICTED_PREEMPTED = "Preempted"
EVICTED_CHECK = "AdmissionCheck"
EVICTED_DEACTIVATED = "Deactivated"
EVICTED_CQ_STOPPED = "ClusterQueueStopped"
EVICTED_LQ_STOPPED = "LocalQueueStopped"
EVICTED_PODS_READY_TIMEOUT = "PodsReadyTimeout"
EVICTED_NODE_FAILURES = "NodeFailures"
CHECK_EVICTION_MESSAGE = "At least one admission check is false"
# v0.20 (UnadmittedWorkloadsObservability on by default): the granular QuotaReserved=False
# reasons (apis/kueue/v1beta2/workload_types.go WorkloadQuotaReservedReason*) and the Admitted=False
# reasons that SyncAdmittedCondition writes with the gate on (pkg/workload/admissionchecks.go).
WAITING_FOR_QUOTA = "WaitingForQuota"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
MISCONFIGURED = "Misconfigured"
SUSPENDED = "Suspended"
PENDING_EVALUATION = "PendingEvaluation"
ADMISSION_GATED = "AdmissionGated"
NO_RESERVATION = "NoReservation"
UNSATISFIED_CHECKS_V019 = "UnsatisfiedChecks"
UNSATISFIED_CHECKS_V020 = "UnsatisfiedAdmissionChecks"
NOT_ALL_CHECKS_READY = "The workload has not all checks ready"
# v0.20 (MultiKueueOrchestratedPreemption on by default): a preemptor whose preemption gate is
# Closed does not preempt (pkg/scheduler/scheduler.go, BlockedOnPreemptionGates/PreemptionGated).
PREEMPTION_GATED = "PreemptionGated"
PREEMPTION_GATED_MESSAGE = "Workload requires preemption, but it's gated"
