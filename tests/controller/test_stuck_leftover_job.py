"""A workload admitted where a leftover Job of ours takes its Job's name (contract C68).

MultiKueue's Job adapter syncs a copy's status from whatever Job of the manager Job's name it
finds on the worker, when that Job carries this manager's origin label, and then creates
nothing. A Job of ours left by an earlier Job of that name (its ``prebuilt-workload-name`` label
names another Workload) therefore stands in for the workload's own: it is admitted there and
never runs. ``stuck_after_seconds`` after the admission the dispatcher reports it once (log,
``LeftoverJob`` Event, ``multikueue_dispatcher_leftover_jobs_total``), from its mirror alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dispatcher.controller.records import Record, parse_time
from dispatcher.k8s.resources import JOBS
from dispatcher.telemetry.metrics import Metrics
from dispatcher_sandbox.harness.controller import batch_job, capture_reports, workload, world
from dispatcher_sandbox.metrics_text import samples_of

ADMITTED_AT = "2026-01-01T00:01:00Z"
THRESHOLD = 15.0  # ControllerConfig.stuck_after_seconds' default
NAME = "job-train-1a2b3"
KEY = f"default/{NAME}"
ORIGIN = "kueue.x-k8s.io/multikueue-origin"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
LEFTOVER = {ORIGIN: "multikueue", PREBUILT: "job-train-00000"}
LEFTOVER_JOBS = "multikueue_dispatcher_leftover_jobs_total"


def _condition(kind: str, status: str = "True", at: str = ADMITTED_AT) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": kind, "lastTransitionTime": at}


def _admitted(cluster: str | None = "w1", *extra: dict[str, Any]) -> dict[str, Any]:
    wl = workload(NAME)
    wl["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
    ]
    wl["status"] = {
        "conditions": [_condition("QuotaReserved"), _condition("Admitted"), *extra],
        "admission": {"clusterQueue": "cluster-queue"},
        "admissionChecks": [{"name": "multikueue", "state": "Ready"}],
    }
    if cluster is not None:
        wl["status"]["clusterName"] = cluster
    return wl


@dataclass(frozen=True)
class Case:
    job_labels: dict[str, str] | None = None
    """Labels of a Job ``train`` on w1 (None: no such Job)."""
    seconds_after: float = 20.0
    cluster: str | None = "w1"
    finished: bool = False
    reported_before: bool = False
    unsettled: bool = False
    """w1 not settled yet (just started, its Jobs not listed)."""
    reported: bool = False
    requeued_after: float | None = None


CASES = [
    pytest.param(Case(LEFTOVER, reported=True), id="a-leftover-there-long-after-admission"),
    pytest.param(
        Case(LEFTOVER, seconds_after=5.0, requeued_after=10.0),
        id="admitted-lately-looked-at-again-at-the-threshold",
    ),
    pytest.param(
        Case({ORIGIN: "multikueue", PREBUILT: NAME}), id="its-own-job-there-nothing-to-report"
    ),
    pytest.param(Case({ORIGIN: "multikueue"}), id="a-job-of-ours-without-the-label-not-judged"),
    pytest.param(Case({"team": "a"}), id="a-foreign-job-is-the-c33-refusal-not-this"),
    pytest.param(Case(None), id="no-job-there-yet"),
    pytest.param(Case(LEFTOVER, reported_before=True), id="reported-once"),
    pytest.param(Case(LEFTOVER, finished=True), id="finished-nothing-to-report"),
    pytest.param(Case(LEFTOVER, cluster=None), id="not-admitted-on-a-worker"),
    pytest.param(Case(LEFTOVER, cluster="w2"), id="the-leftover-is-on-another-worker"),
    pytest.param(
        Case(None, unsettled=True, requeued_after=THRESHOLD),
        id="its-worker-not-listed-yet-after-a-start-looked-at-again",
    ),
]


@pytest.mark.parametrize("case", CASES)
async def test_an_admission_where_a_leftover_job_takes_the_name_is_reported_once(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    prometheus = CollectorRegistry()
    async with world(workers=("w1", "w2")) as w:
        w.metrics = Metrics(registry=prometheus)
        nominator = await w.start_dispatcher()
        if case.job_labels is not None:
            mirror = w.mirrors.workers["w1"].mirror
            assert mirror is not None
            await mirror.api.create(
                JOBS, batch_job("train", labels=case.job_labels), namespace="default"
            )
            ours = case.job_labels.get(ORIGIN) == "multikueue"

            def indexed() -> bool:
                index = nominator._index("w1")
                assert index is not None
                if ours:
                    return index.job_runs("default", "train") is not None
                return bool(index.name_taken("default", NAME, "train"))

            await w.wait(indexed)
        reports = capture_reports(nominator, monkeypatch.setattr)
        if case.unsettled:
            monkeypatch.setattr(w.mirrors.workers["w1"], "settled", False)
        record = Record(leftover_job_reported=case.reported_before)
        admitted = parse_time(ADMITTED_AT)
        assert admitted is not None
        extra = [_condition("Finished")] if case.finished else []
        wl = _admitted(case.cluster, *extra)

        nominator.stuck.check_leftover_job(KEY, wl, record, admitted + case.seconds_after)

        if case.reported:
            [(reason, message, kind)] = reports.events
            assert (reason, kind) == ("LeftoverJob", "Warning")
            assert message.startswith(
                "admitted on w1, but the Job default/train there runs another Workload "
                "(job-train-00000): a leftover of an earlier Job of that name."
            ), message
            assert "kubectl delete job train -n default" in message, message
            assert "contract C68" in message, message
            assert record.leftover_job_reported
        else:
            assert reports.events == []
            assert record.leftover_job_reported == case.reported_before
        assert _counted(prometheus) == (1.0 if case.reported else 0.0)
        assert reports.requeued == (
            [case.requeued_after] if case.requeued_after is not None else []
        )


def _counted(prometheus: CollectorRegistry) -> float:
    """The counter's total over its series (w1 and ``cluster-queue`` only here)."""
    series = samples_of(generate_latest(prometheus).decode()).get(LEFTOVER_JOBS, [])
    for labels, _ in series:
        assert (labels["cluster_queue"], labels["cluster"]) == ("cluster-queue", "w1"), labels
    return sum(value for _, value in series)
