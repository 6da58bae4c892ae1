"""The stuck eviction (contract C93): reported once, only when no copy is left to finish it.

Kueue v0.19 gives an evicted manager Workload's quota back only once the manager Job shows no
active pods, a count MultiKueue copies from a worker that still has a copy (C37). A Workload
evicted while its Job ran whose copies are all gone keeps the quota for good: after
``stuck_after_seconds`` the dispatcher reports it (log, ``EvictionStuck`` Event, metric), once
per eviction. With a copy left, or a worker that cannot be seen, the release may still come:
nothing is reported and the workload is looked at again after the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.records import Record, parse_time
from dispatcher.k8s.patching import MERGE_PATCH
from dispatcher.k8s.resources import JOBS, WORKLOADS
from dispatcher.telemetry.metrics import Metrics
from dispatcher_sandbox.harness.controller import batch_job, capture_reports, workload, world
from dispatcher_sandbox.metrics_text import samples_of

EVICTED_AT = "2026-01-01T00:01:00Z"
THRESHOLD = 15.0  # ControllerConfig.stuck_after_seconds' default
KEY = "default/job-train-1a2b3"


def _condition(kind: str, status: str, at: str = EVICTED_AT, reason: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason or kind,
        "message": "At least one admission check is false" if kind == "Evicted" else "",
        "lastTransitionTime": at,
    }


def _manager_workload(
    *conditions: dict[str, Any], checks: tuple[str, ...] = ("multikueue",)
) -> dict[str, Any]:
    wl = workload("job-train-1a2b3")
    wl["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
    ]
    wl["status"] = {
        "conditions": list(conditions),
        "admission": {"clusterQueue": "cluster-queue"},
        "admissionChecks": [{"name": check, "state": "Pending"} for check in checks],
    }
    return wl


STUCK = (
    _condition("QuotaReserved", "True", "2026-01-01T00:00:00Z"),
    _condition("Evicted", "True", reason="AdmissionCheck"),
)


@dataclass(frozen=True)
class Case:
    conditions: tuple[dict[str, Any], ...]
    seconds_after: float
    checks: tuple[str, ...] = ("multikueue",)
    copy_on: str | None = None
    down: str | None = None
    reported_before: str | None = None
    copy_lost_on: str | None = None
    reported: bool = False
    requeued_after: float | None = None


CASES = [
    pytest.param(Case(STUCK, 20.0, reported=True), id="evicted-long-ago-no-copy-left-reported"),
    pytest.param(
        Case(STUCK, 20.0, copy_lost_on="w1", reported=True),
        id="reported-naming-the-worker-where-the-copy-vanished",
    ),
    pytest.param(Case(STUCK, 5.0, requeued_after=10.0), id="evicted-lately-looked-at-again-later"),
    pytest.param(
        Case(STUCK, 20.0, copy_on="w2", requeued_after=THRESHOLD),
        id="a-copy-left-on-a-worker-may-still-finish-it",
    ),
    pytest.param(
        Case(STUCK, 20.0, down="w1", requeued_after=THRESHOLD),
        id="a-worker-of-its-config-out-of-sight-may-hold-a-copy",
    ),
    pytest.param(Case(STUCK, 20.0, reported_before=EVICTED_AT), id="this-eviction-reported-once"),
    pytest.param(
        Case(STUCK, 20.0, reported_before="2026-01-01T00:00:30Z", reported=True),
        id="a-new-eviction-reported-again",
    ),
    pytest.param(Case((_condition("QuotaReserved", "False"), STUCK[1]), 20.0), id="quota-released"),
    pytest.param(
        Case((*STUCK, _condition("Finished", "True")), 20.0), id="finished-nothing-to-release"
    ),
    pytest.param(Case(STUCK[:1], 20.0), id="not-evicted"),
    pytest.param(Case(STUCK, 20.0, checks=()), id="no-multikueue-check-its-job-runs-here"),
]


@pytest.mark.parametrize("case", CASES)
async def test_a_stuck_eviction_is_reported_once_when_no_copy_is_left(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    prometheus = CollectorRegistry()
    async with world(workers=("w1", "w2")) as w:
        w.metrics = Metrics(registry=prometheus)
        nominator = await w.start_dispatcher()
        if case.copy_on is not None:
            copy_ = workload(
                "job-train-1a2b3", labels={"kueue.x-k8s.io/multikueue-origin": "multikueue"}
            )
            mirror = w.mirrors.workers[case.copy_on].mirror
            assert mirror is not None
            await mirror.api.create(WORKLOADS, copy_, namespace="default")
            copy_on = case.copy_on
            await w.wait(lambda: KEY in getattr(nominator._index(copy_on), "copies", ()))
        if case.down is not None:
            worker = w.mirrors.workers[case.down]
            await w.workers[case.down].down()
            await w.wait(lambda: not worker.connected)
        reports = capture_reports(nominator, monkeypatch.setattr)
        events, requeued = reports.events, reports.requeued
        record = Record(eviction_reported=parse_time(case.reported_before))
        if case.copy_lost_on is not None:
            record.copies_lost[case.copy_lost_on] = 0.0
        evicted = parse_time(EVICTED_AT)
        assert evicted is not None
        wl = _manager_workload(*case.conditions, checks=case.checks)

        await nominator.stuck.check_eviction(KEY, wl, record, evicted + case.seconds_after)

        if case.reported:
            [(reason, message, kind)] = events
            assert (reason, kind) == ("EvictionStuck", "Warning")
            assert message.startswith(
                "evicted 20s ago (AdmissionCheck: At least one admission check is false) and "
                "still holding the manager's quota, with no copy left on any worker"
            ), message
            assert "contract C93" in message, message
            vanished = f"(its admitted copy vanished on {case.copy_lost_on}: check that its Job "
            assert (vanished in message) == (case.copy_lost_on is not None), message
            assert "Job default/train to 0" in message, message
            assert "kubectl patch job train -n default --subresource=status" in message, message
            assert _counted(prometheus, STUCK_EVICTIONS) == 1.0
            assert record.eviction_reported == evicted
        else:
            assert events == []
            assert _counted(prometheus, STUCK_EVICTIONS) == 0.0
            assert record.eviction_reported == parse_time(case.reported_before)
        assert requeued == ([case.requeued_after] if case.requeued_after is not None else [])


@dataclass(frozen=True)
class ReleaseCase:
    worker_job: tuple[str, dict[str, str], int] | None = None
    """A Job of the workload's name on a worker: (worker, its labels, its active pods)."""
    manager_job: bool = True
    reported_before: bool = False
    released: bool = True


OURS = {"kueue.x-k8s.io/multikueue-origin": "multikueue"}
RELEASES = [
    pytest.param(ReleaseCase(), id="no-job-left-on-any-worker-released"),
    pytest.param(
        ReleaseCase(worker_job=("w1", OURS, 1), released=False),
        id="its-job-on-a-worker-still-has-pods-waits",
    ),
    pytest.param(ReleaseCase(worker_job=("w2", OURS, 0)), id="its-job-there-stopped-released"),
    pytest.param(
        ReleaseCase(worker_job=("w1", {}, 1)), id="a-same-named-job-not-ours-does-not-hold-it"
    ),
    pytest.param(ReleaseCase(reported_before=True), id="reported-earlier-released-on-a-later-look"),
    pytest.param(ReleaseCase(manager_job=False), id="the-job-is-gone-nothing-to-write"),
]


@pytest.mark.parametrize("case", RELEASES)
async def test_the_opt_in_release_sets_the_manager_jobs_active_pods_to_zero(
    case: ReleaseCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stuck_eviction_release``: once the eviction is reported, the manager Job's
    ``status.active``/``ready`` go to 0 (what MultiKueue would copy from a worker whose Job has
    no pods), unless a Job of ours on a worker of the config still has active pods."""
    prometheus = CollectorRegistry()
    config = ControllerConfig(
        resync_seconds=3600.0, sync_grace_seconds=10.0, stuck_eviction_release=True
    )
    async with world(workers=("w1", "w2"), config=config) as w:
        w.metrics = Metrics(registry=prometheus)
        nominator = await w.start_dispatcher()
        if case.manager_job:
            await w.api.create(JOBS, batch_job("train"), namespace="default")
            await w.api.request(
                "PATCH",
                JOBS.path("default", "train", "status"),
                body={"status": {"active": 1, "ready": 1}},
                content_type=MERGE_PATCH,
            )
        if case.worker_job is not None:
            cluster, labels, active = case.worker_job
            mirror = w.mirrors.workers[cluster].mirror
            assert mirror is not None
            await mirror.api.create(JOBS, batch_job("train", labels=labels), namespace="default")
            await mirror.api.request(
                "PATCH",
                JOBS.path("default", "train", "status"),
                body={"status": {"active": active}},
                content_type=MERGE_PATCH,
            )
        reports = capture_reports(nominator, monkeypatch.setattr)
        requeued = reports.requeued
        evicted = parse_time(EVICTED_AT)
        assert evicted is not None
        record = Record(eviction_reported=evicted if case.reported_before else None)

        await nominator.stuck.check_eviction(KEY, _manager_workload(*STUCK), record, evicted + 20)

        stuck = [] if case.reported_before else [("EvictionStuck", "Warning")]

        def events() -> list[tuple[str, str]]:
            return [(reason, kind) for reason, _, kind in reports.events]

        if case.manager_job:
            job = await w.api.get(JOBS, "train", "default")
            status = job.get("status") or {}
            after = (status.get("active"), status.get("ready"))
            assert after == ((0, 0) if case.released else (1, 1)), status
        if case.released and case.manager_job:
            assert events() == [*stuck, ("EvictionReleased", "Normal")]
            assert _counted(prometheus, STUCK_EVICTION_RELEASES) == 1.0
        else:
            assert events() == stuck
            assert _counted(prometheus, STUCK_EVICTION_RELEASES) == 0.0
        assert record.eviction_released == (evicted if case.released else None)
        assert requeued == ([] if case.released else [THRESHOLD])


STUCK_EVICTIONS = "multikueue_dispatcher_stuck_evictions_total"
STUCK_EVICTION_RELEASES = "multikueue_dispatcher_stuck_eviction_releases_total"


def _counted(prometheus: CollectorRegistry, name: str) -> float:
    """A counter's total over its series (cluster_queue ``cluster-queue`` only here)."""
    series = samples_of(generate_latest(prometheus).decode()).get(name, [])
    for labels, _ in series:
        assert labels["cluster_queue"] == "cluster-queue", labels
    return sum(value for _, value in series)
