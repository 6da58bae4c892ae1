"""What the stuck report blames, read from the admitting worker's Job (C43, C33).

Kueue v0.19.2 syncs a Workload's Job to the admitting worker before it writes ``clusterName``
(``pkg/controller/admissionchecks/multikueue/workload.go``, ``SyncJob`` then
``syncAdmittingRemoteState``). So the worker's Job tells the causes apart: Kueue's own Job there
(our origin label) is the field-manager pitfall; a same-named Job without it is Kueue's
ownership refusal; no Job yet means Kueue has not reached that step (its worker clients are
rate limited), so the workload is behind, not stuck. The last case was a false "stuck" report
in the 500-workload API-fault burst of CI at 3e9ce8f.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.records import PITFALL_ADVICE, Record, parse_time
from dispatcher.controller.stuck import StuckDetector
from dispatcher.controller.workqueue import WorkQueue
from dispatcher.k8s.resources import JOBS
from dispatcher_sandbox.harness.controller import batch_job, world


def _manager_workload() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "job-train-1a2b3",
            "namespace": "default",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
            ],
        }
    }


@pytest.mark.parametrize(
    ("job_labels", "blamed"),
    [
        pytest.param(None, None, id="no-job-yet-kueue-is-behind"),
        pytest.param(
            {"kueue.x-k8s.io/multikueue-origin": "multikueue"}, "pitfall", id="our-job-pitfall"
        ),
        pytest.param({}, "ownership", id="foreign-job-ownership-refusal"),
        pytest.param(
            {"kueue.x-k8s.io/multikueue-origin": "other-manager"},
            "ownership",
            id="other-managers-job-ownership-refusal",
        ),
    ],
)
async def test_the_workers_job_names_the_cause(
    job_labels: dict[str, str] | None, blamed: str | None
) -> None:
    async with world(workers=("w1",)) as w:
        nominator = await w.start_dispatcher()
        if job_labels is not None:
            worker = w.mirrors.workers["w1"].mirror
            assert worker is not None
            await worker.api.create(
                JOBS, batch_job("train", labels=job_labels), namespace="default"
            )
        cause = await nominator.stuck.cause("w1", _manager_workload())
        if blamed is None:
            assert cause is None
        elif blamed == "pitfall":
            assert cause == PITFALL_ADVICE
        else:
            assert cause is not None
            assert "already exists on w1 and was not created by this manager's Kueue" in cause


class _Index:
    def __init__(self, admitted: dict[str, str]) -> None:
        self.admitted = admitted


class _Events:
    def __init__(self) -> None:
        self.recorded: list[str] = []

    def record(self, workload: Any, reason: str, message: str, kind: str) -> None:
        self.recorded.append(reason)


class _Registry:
    workers: dict[str, Any] = {}


COPY_ADMITTED = "2026-12-04T10:00:00Z"


def _detector(
    backlog: Callable[[str], int] | None = None,
) -> tuple[WorkQueue, _Events, StuckDetector]:
    """A detector whose only worker index holds ``default/wl`` admitted at COPY_ADMITTED
    (threshold 15 s), with its queue and Events."""
    queue = WorkQueue(clock=lambda: 0.0)
    events = _Events()
    detector = StuckDetector(
        registry=_Registry(),  # type: ignore[arg-type]
        index=lambda cluster: _Index({"default/wl": COPY_ADMITTED}),  # type: ignore[arg-type,return-value]
        queue=queue,
        events=events,  # type: ignore[arg-type]
        config=ControllerConfig(stuck_after_seconds=15.0),
        metrics=None,
        backlog=backlog,
    )
    return queue, events, detector


@pytest.mark.parametrize(
    ("recorded", "reported"),
    [
        pytest.param(None, True, id="no-admission-recorded-on-w1-stuck"),
        pytest.param(("w1", 55.0), False, id="w1-recorded-another-5s-ago-behind"),
        pytest.param(("w2", 55.0), True, id="progress-on-another-worker-stuck"),
        pytest.param(("w1", 20.0), True, id="w1-last-recorded-40s-ago-stuck"),
    ],
)
async def test_a_worker_whose_admissions_kueue_records_is_behind_not_stuck(
    recorded: tuple[str, float] | None, reported: bool
) -> None:
    """The copy on w1 was admitted 60 s ago (the threshold: 15 s) and the manager has no
    clusterName. Under the pitfall Kueue records no admission of ours anywhere; one that it
    recorded on w1 within the threshold says Kueue is working through its worker clients'
    backlog (the 300-Job burst on real Kueue v0.19.2: 88 false reports of 300 before this)."""
    base = parse_time(COPY_ADMITTED)
    assert base is not None
    queue, events, detector = _detector()
    if recorded is not None:
        cluster, at = recorded
        detector.admission_recorded(cluster, base + at)
    record = Record()
    await detector.check_admitted("default/wl", _manager_workload(), record, ("w1",), base + 60)
    assert (record.stuck_reported, events.recorded) == (
        (True, ["AdmissionStuck"]) if reported else (False, [])
    )
    assert queue.deadline("default/wl") == (None if reported else 10.0)


@pytest.mark.parametrize(
    ("backlog", "admitted_ago", "read_back_ago", "reported"),
    [
        pytest.param(0, 60.0, None, True, id="no-backlog-stuck"),
        pytest.param(3, 60.0, None, False, id="backlog-on-w1-first-admission-behind"),
        pytest.param(3, 150.0, None, True, id="backlog-but-ten-thresholds-stuck"),
        pytest.param(3, 60.0, 50.0, False, id="backlog-after-an-old-read-back-behind"),
    ],
)
async def test_a_backlog_of_copies_to_make_is_behind_not_stuck(
    backlog: int, admitted_ago: float, read_back_ago: float | None, reported: bool
) -> None:
    """The copy admitted on w1 60 s ago (threshold 15 s), not recorded: while Kueue still has
    copies of ours to make on w1 (nominations with no copy holding quota there), it is a burst,
    not the pitfall, even when Kueue recorded one admission there long ago (a false report in
    each 300-Job burst on real Kueue v0.19.2 at e13c378, and at 9184b68 in the burst without
    spreading); after ten thresholds it is reported all the same."""
    base = parse_time(COPY_ADMITTED)
    assert base is not None
    queue, events, detector = _detector(lambda cluster: backlog if cluster == "w1" else 0)
    if read_back_ago is not None:
        # One admission recorded on w1 early in the burst: no sign of the pitfall.
        detector.admission_recorded("w1", base + admitted_ago - read_back_ago)
    record = Record()
    await detector.check_admitted(
        "default/wl", _manager_workload(), record, ("w1",), base + admitted_ago
    )
    assert (record.stuck_reported, events.recorded) == (
        (True, ["AdmissionStuck"]) if reported else (False, [])
    )
    assert queue.deadline("default/wl") == (None if reported else 15.0)
