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

from typing import Any

import pytest
from controller_kit import world

from dispatcher.controller.records import PITFALL_ADVICE
from dispatcher.controller.stuck import WORKER_JOBS


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


def _job(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "default", "labels": labels},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            }
        },
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
            await worker.api.create(WORKER_JOBS, _job(job_labels), namespace="default")
        cause = await nominator.stuck.cause("w1", _manager_workload())
        if blamed is None:
            assert cause is None
        elif blamed == "pitfall":
            assert cause == PITFALL_ADVICE
        else:
            assert cause is not None
            assert "already exists on w1 and was not created by this manager's Kueue" in cause
