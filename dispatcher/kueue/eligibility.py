"""Which manager Workloads an external dispatcher may nominate clusters for (contract C49, C31,
C32, C35).

Pure functions of a raw Workload dict and the names of the AdmissionChecks whose
``spec.controllerName`` is ``kueue.x-k8s.io/multikueue``. The dispatcher applies the same gating
Kueue applies to itself, so it never writes a nomination Kueue would ignore.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADMITTING_REMOTE_GONE",
    "COMPONENT_INDEX_ANNOTATION",
    "EVICTED_ON_WORKER",
    "MULTIKUEUE_CONTROLLER",
    "Eligibility",
    "copy_evicted_on",
    "copy_lost_on",
    "eligibility",
    "is_follower_component",
    "multikueue_check_state",
]

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
"""``spec.controllerName`` of MultiKueue AdmissionChecks (C8)."""
COMPONENT_INDEX_ANNOTATION = "kueue.x-k8s.io/component-workload-index"
"""Index of a component workload of a multi-workload job such as a LeaderWorkerSet (C32)."""


@dataclass(frozen=True, slots=True)
class Eligibility:
    """The verdict for one workload, with the check that gates it."""

    eligible: bool
    reason: str
    check: str | None = None
    """Name of the workload's MultiKueue admission check, when it has one."""


def _conditions(workload: Mapping[str, Any]) -> dict[str, str]:
    status = workload.get("status") or {}
    return {
        str(c.get("type")): str(c.get("status"))
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    }


def multikueue_check_state(
    workload: Mapping[str, Any], multikueue_checks: Collection[str]
) -> tuple[str | None, str | None]:
    """``(check name, state)`` of the workload's MultiKueue admission check, if any (C21)."""
    status = workload.get("status") or {}
    for entry in status.get("admissionChecks") or []:
        if isinstance(entry, Mapping) and entry.get("name") in multikueue_checks:
            return str(entry["name"]), str(entry.get("state", ""))
    return None, None


ADMITTING_REMOTE_GONE = "Admitting remote no longer exists"
"""How the message of the ``Retry`` Kueue sets on the MultiKueue check starts when the admitting
worker is reachable and the admitted copy is gone from it (C29; Kueue appends the state it left,
``, Previously: "Ready"``)."""


EVICTED_ON_WORKER = "Workload evicted on worker cluster"
"""How the message of the ``Retry`` Kueue sets on the MultiKueue check starts when the admitting
worker evicted the copy (C26; Kueue goes on with the worker's name and "resetting for
re-admission")."""


def _retry_on(
    workload: Mapping[str, Any], multikueue_checks: Collection[str], message: str
) -> str | None:
    """The worker ``status.clusterName`` names while the MultiKueue check is ``Retry`` with a
    message that starts with ``message``; None otherwise."""
    status = workload.get("status") or {}
    cluster = status.get("clusterName")
    if not isinstance(cluster, str) or not cluster:
        return None
    for entry in status.get("admissionChecks") or []:
        if (
            isinstance(entry, Mapping)
            and entry.get("state") == "Retry"
            and str(entry.get("message", "")).startswith(message)
            and entry.get("name") in multikueue_checks
        ):
            return cluster
    return None


def copy_lost_on(workload: Mapping[str, Any], multikueue_checks: Collection[str]) -> str | None:
    """The worker whose admitted copy of this Workload vanished, while Kueue says so: its
    MultiKueue check is ``Retry`` with a message that starts with :data:`ADMITTING_REMOTE_GONE`
    and ``status.clusterName`` still names the worker (the eviction that follows empties it,
    C37). None otherwise."""
    return _retry_on(workload, multikueue_checks, ADMITTING_REMOTE_GONE)


def copy_evicted_on(workload: Mapping[str, Any], multikueue_checks: Collection[str]) -> str | None:
    """The worker that evicted the admitted copy of this Workload, while Kueue says so: its
    MultiKueue check is ``Retry`` with a message that starts with :data:`EVICTED_ON_WORKER`
    and ``status.clusterName`` still names the worker (C26; the manager's eviction that follows
    empties it). None otherwise."""
    return _retry_on(workload, multikueue_checks, EVICTED_ON_WORKER)


def is_follower_component(workload: Mapping[str, Any]) -> bool:
    """Whether this is a non-primary component of a multi-workload job (C32).

    Kueue nominates those itself, onto the cluster of the primary component (index 0).
    """
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    index = annotations.get(COMPONENT_INDEX_ANNOTATION)
    return index is not None and str(index) != "0"


def eligibility(
    workload: Mapping[str, Any],
    multikueue_checks: Collection[str],
    *,
    require_other_checks_ready: bool = True,
) -> Eligibility:
    """Whether the dispatcher should nominate clusters for ``workload`` now (C49).

    Eligible when the workload has a MultiKueue admission check in state ``Pending``, no
    ``status.clusterName``, ``QuotaReserved=True``, is neither ``Finished`` nor ``Evicted``,
    is active, every other admission check is ``Ready`` (Kueue does not create copies before,
    C32), and it is not a follower component of a multi-workload job.
    """
    check, state = multikueue_check_state(workload, multikueue_checks)
    if check is None:
        return Eligibility(False, "no MultiKueue admission check")
    if state != "Pending":
        return Eligibility(False, f"admission check {check} is {state}, not Pending", check)
    status = workload.get("status") or {}
    if status.get("clusterName"):
        return Eligibility(False, f"already admitted on {status['clusterName']}", check)
    conditions = _conditions(workload)
    if conditions.get("Finished") == "True":
        return Eligibility(False, "finished", check)
    if conditions.get("Evicted") == "True":
        return Eligibility(False, "evicted; waiting for requeue", check)
    if conditions.get("QuotaReserved") != "True":
        return Eligibility(False, "no quota reserved on the manager yet", check)
    if (workload.get("spec") or {}).get("active") is False:
        return Eligibility(False, "deactivated", check)
    if require_other_checks_ready:
        for entry in status.get("admissionChecks") or []:
            other = isinstance(entry, Mapping) and entry.get("name") != check
            if other and entry.get("state") != "Ready":
                return Eligibility(
                    False,
                    f"admission check {entry.get('name')} is {entry.get('state')}, not Ready",
                    check,
                )
    if is_follower_component(workload):
        return Eligibility(
            False, "follower component; Kueue pins it to the primary's cluster", check
        )
    return Eligibility(True, "eligible", check)
