"""The eligibility predicate of the dispatcher (contract C49, C31, C32)."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.kueue.eligibility import (
    copy_evicted_on,
    copy_lost_on,
    eligibility,
    is_follower_component,
)

MK = "multikueue"


def workload(
    *,
    checks: dict[str, str] | None = None,
    conditions: dict[str, str] | None = None,
    cluster_name: str | None = None,
    active: bool | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A manager Workload with the given check states and condition statuses."""
    checks = {MK: "Pending"} if checks is None else checks
    conditions = {"QuotaReserved": "True"} if conditions is None else conditions
    status: dict[str, Any] = {
        "admissionChecks": [{"name": n, "state": s} for n, s in checks.items()],
        "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
    }
    if cluster_name:
        status["clusterName"] = cluster_name
    spec: dict[str, Any] = {"queueName": "q"}
    if active is not None:
        spec["active"] = active
    return {
        "metadata": {"name": "w", "namespace": "ns", "annotations": annotations or {}},
        "spec": spec,
        "status": status,
    }


@pytest.mark.parametrize(
    ("wl", "eligible", "reason"),
    [
        pytest.param(workload(), True, "eligible", id="c49-pending-reserved"),
        pytest.param(workload(checks={}), False, "no MultiKueue admission check", id="no-check"),
        pytest.param(
            workload(checks={"other": "Pending"}),
            False,
            "no MultiKueue admission check",
            id="only-a-foreign-check",
        ),
        pytest.param(
            workload(checks={MK: "Ready"}), False, "is Ready, not Pending", id="c31-check-ready"
        ),
        pytest.param(
            workload(checks={MK: "Retry"}), False, "is Retry, not Pending", id="c31-check-retry"
        ),
        pytest.param(
            workload(cluster_name="w1"), False, "already admitted on w1", id="c31-cluster-set"
        ),
        pytest.param(workload(conditions={}), False, "no quota reserved", id="c49-not-reserved"),
        pytest.param(
            workload(conditions={"QuotaReserved": "True", "Finished": "True"}),
            False,
            "finished",
            id="c49-finished",
        ),
        pytest.param(
            workload(conditions={"QuotaReserved": "True", "Evicted": "True"}),
            False,
            "evicted",
            id="c49-evicted",
        ),
        pytest.param(workload(active=False), False, "deactivated", id="deactivated"),
        pytest.param(
            workload(checks={MK: "Pending", "prov": "Pending"}),
            False,
            "prov is Pending, not Ready",
            id="c32-other-check-not-ready",
        ),
        pytest.param(
            workload(checks={MK: "Pending", "prov": "Ready"}),
            True,
            "eligible",
            id="c32-other-check-ready",
        ),
        pytest.param(
            workload(annotations={"kueue.x-k8s.io/component-workload-index": "1"}),
            False,
            "follower component",
            id="c32-lws-follower",
        ),
        pytest.param(
            workload(annotations={"kueue.x-k8s.io/component-workload-index": "0"}),
            True,
            "eligible",
            id="c32-lws-primary",
        ),
    ],
)
def test_c49_eligibility(wl: dict[str, Any], eligible: bool, reason: str) -> None:
    verdict = eligibility(wl, {MK})
    assert verdict.eligible is eligible
    assert reason in verdict.reason


def test_c32_other_checks_may_be_ignored_on_request() -> None:
    wl = workload(checks={MK: "Pending", "prov": "Pending"})
    assert eligibility(wl, {MK}, require_other_checks_ready=False).eligible


def test_check_name_is_reported() -> None:
    assert eligibility(workload(), {MK}).check == MK


def test_follower_detection_needs_the_index_annotation() -> None:
    assert not is_follower_component(workload())


def retried(message: str, *, cluster_name: str | None = "w1", check: str = MK) -> dict[str, Any]:
    """A manager Workload whose check ``check`` is ``Retry`` with ``message``."""
    wl = workload(checks={check: "Retry"}, cluster_name=cluster_name)
    wl["status"]["admissionChecks"][0]["message"] = message
    return wl


EVICTED = (
    'Workload evicted on worker cluster: "w1", resetting for re-admission. Previously: "Ready"'
)
GONE = 'Admitting remote no longer exists, Previously: "Ready"'


@pytest.mark.parametrize(
    ("wl", "lost", "evicted"),
    [
        pytest.param(retried(EVICTED), None, "w1", id="c26-evicted-on-worker"),
        pytest.param(retried(GONE), "w1", None, id="c29-copy-gone"),
        pytest.param(
            retried('Admitting remote lost, Previously: "Ready"'), None, None, id="c29-lost"
        ),
        pytest.param(retried(EVICTED, cluster_name=None), None, None, id="no-cluster-name"),
        pytest.param(retried(EVICTED, check="other"), None, None, id="not-a-multikueue-check"),
        pytest.param(workload(checks={MK: "Ready"}, cluster_name="w1"), None, None, id="ready"),
    ],
)
def test_which_worker_a_retry_names(
    wl: dict[str, Any], lost: str | None, evicted: str | None
) -> None:
    """C26, C29: the worker a ``Retry`` of the MultiKueue check names, by its message's start,
    while ``clusterName`` still names it: the copy gone there, or evicted there."""
    assert copy_lost_on(wl, {MK}) == lost
    assert copy_evicted_on(wl, {MK}) == evicted
