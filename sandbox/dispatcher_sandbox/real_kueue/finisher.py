"""The Job controller's part that the real control plane leaves out: pods "run" and finish.

The real clusters have no kubelet, scheduler or Job controller, so no pod ever runs. Like
Kueue's own integration tests, which finish a Job by writing its status, this stand-in writes
the status the Job controller would write for the Jobs that would run pods on the cluster
(``spec.managedBy`` unset or the built-in controller; on a worker that is every copy MultiKueue
created, on the manager none):

- unsuspended: ``startTime`` and ``active``/``ready`` pods (the pod count);
- suspended again (Kueue evicted or preempted it): no active pods, no ``startTime``, condition
  ``Suspended=True`` — as the Job controller does after deleting the pods;
- after the seconds of the ``sandbox.multikueue-dispatcher.io/run-seconds`` annotation (divided
  by ``time_scale``) from ``startTime``: ``succeeded``, ``completionTime`` and the conditions
  ``SuccessCriteriaMet`` then ``Complete`` (the API server refuses ``Complete`` without the
  other). Jobs without the annotation run until deleted, and so do Jobs whose pods name a
  ServiceAccount (``pods_refused``: they start with no active pods). A Job with the hold annotation
  (:mod:`dispatcher.topology.runs`) does not finish before its ConfigMap exists on the cluster
  (the finisher watches ConfigMaps, so the release is a change like any other).

Only the Job status is written (``jobs/status``, field manager ``job-controller``); everything
after it — the Workload ``Finished``, MultiKueue copying the status to the manager, removing the
remote objects — is real Kueue's work.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
from collections.abc import Mapping
from typing import Any

import aiohttp
import anyio
import anyio.abc

from dispatcher.topology.runs import RUN_SECONDS_ANNOTATION, hold_of, pods_refused
from dispatcher_sandbox.kube_client import CONFIGMAPS, JOBS, Informer, KubeClient, KubeError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
JOB_CONTROLLER = "job-controller"
BUILTIN_JOB_CONTROLLER = "kubernetes.io/job-controller"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def _condition(status: Mapping[str, Any], kind: str) -> Obj | None:
    for item in status.get("conditions") or []:
        if item.get("type") == kind:
            found: Obj = item
            return found
    return None


def _with(status: Mapping[str, Any], kind: str, value: str, reason: str, message: str) -> list[Obj]:
    now = _now()
    out = [dict(c) for c in status.get("conditions") or [] if c.get("type") != kind]
    out.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }
    )
    return out


def runs_here(job: Mapping[str, Any]) -> bool:
    """Whether the built-in Job controller would run this Job's pods on its cluster."""
    return (job.get("spec") or {}).get("managedBy") in (None, "", BUILTIN_JOB_CONTROLLER)


def finished(job: Mapping[str, Any]) -> bool:
    """Whether the Job has a ``Complete`` or ``Failed`` condition that is True."""
    status = job.get("status") or {}
    return any(
        (_condition(status, kind) or {}).get("status") == "True" for kind in ("Complete", "Failed")
    )


def pod_count(job: Mapping[str, Any]) -> int:
    """The Job's pod count: parallelism (default 1), at most completions."""
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    count = 1 if parallelism is None else int(parallelism)
    completions = spec.get("completions")
    return min(count, int(completions)) if completions is not None else count


def run_seconds(job: Mapping[str, Any], time_scale: float) -> float | None:
    """How long the Job's pods run (None: until deleted)."""
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(RUN_SECONDS_ANNOTATION)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        log.warning(
            "Job %s: %s=%r is not a number", job["metadata"]["name"], RUN_SECONDS_ANNOTATION, text
        )
        return None
    return max(0.0, value / time_scale) if math.isfinite(value) else None


def next_status(
    job: Mapping[str, Any], now: datetime.datetime, time_scale: float, *, released: bool = True
) -> tuple[Obj | None, float | None]:
    """The status patch the Job controller would write now (None: nothing), and in how many
    seconds to look again (None: only on the next change). ``released``: whether the Job's hold
    (if it has one) is released; a held Job runs on but does not finish."""
    if not runs_here(job) or finished(job):
        return None, None
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    suspended = _condition(status, "Suspended")
    if spec.get("suspend"):
        if status.get("startTime") or status.get("active"):
            return {
                "active": 0,
                "ready": 0,
                "startTime": None,
                "conditions": _with(status, "Suspended", "True", "JobSuspended", "Job suspended"),
            }, None
        return None, None
    started = status.get("startTime")
    refused = pods_refused(job)
    # A Job whose pods are refused runs with none and, like one without a run time, never ends.
    seconds = None if refused else run_seconds(job, time_scale)
    if not started or (suspended is not None and suspended.get("status") == "True"):
        count = 0 if refused else pod_count(job)
        patch: Obj = {"startTime": _now(), "active": count, "ready": count}
        if suspended is not None:
            patch["conditions"] = _with(status, "Suspended", "False", "JobResumed", "Job resumed")
        return patch, seconds
    if seconds is None or not released:
        return None, None
    left = seconds - (now - _parse(started)).total_seconds()
    if left > 0:
        return None, left
    message = "Reached expected number of succeeded pods"
    conditions = _with(status, "SuccessCriteriaMet", "True", "CompletionsReached", message)
    conditions = _with(
        {"conditions": conditions}, "Complete", "True", "CompletionsReached", message
    )
    completions = spec.get("completions")
    return {
        "active": 0,
        "ready": 0,
        "terminating": 0,
        "succeeded": int(completions) if completions is not None else pod_count(job),
        "completionTime": _now(),
        "conditions": conditions,
    }, None


class JobFinisher:
    """Runs :func:`next_status` for every Job of one cluster (see the module docstring)."""

    def __init__(self, kubeconfig: Mapping[str, Any], name: str, time_scale: float = 1.0) -> None:
        self.name = name
        self.time_scale = time_scale
        self.client = KubeClient(kubeconfig, user_agent="mkd-real-job-controller")
        self._dirty = anyio.Event()
        self.informer = Informer(self.client, JOBS, self._changed)
        self.config_maps = Informer(self.client, CONFIGMAPS, self._changed)
        self._due: dict[tuple[str, str], float] = {}
        self.writes = 0

    def _changed(self, _kind: str, _obj: Obj) -> None:
        self._dirty.set()

    async def _pass(self) -> float | None:
        now = datetime.datetime.now(datetime.UTC)
        soonest: float | None = None
        for job in self.informer.values():
            hold = hold_of(job)
            released = hold is None or (
                self.config_maps.get(hold, job["metadata"]["namespace"]) is not None
            )
            patch, again = next_status(job, now, self.time_scale, released=released)
            if patch is not None:
                meta = job["metadata"]
                try:
                    await self.client.merge_patch(
                        JOBS,
                        meta["name"],
                        {"status": patch},
                        namespace=meta["namespace"],
                        subresource="status",
                        field_manager=JOB_CONTROLLER,
                    )
                    self.writes += 1
                except (OSError, TimeoutError, aiohttp.ClientError) as error:
                    # The worker's API server is down (a test took it off the network): try
                    # again later instead of ending the finisher and the backend with it.
                    log.info(
                        "%s: Job %s/%s status: %s",
                        self.name,
                        meta["namespace"],
                        meta["name"],
                        error,
                    )
                    again = 0.5
                except KubeError as error:
                    if error.status not in (404, 409):
                        log.warning(
                            "%s: Job %s/%s status: %s",
                            self.name,
                            meta["namespace"],
                            meta["name"],
                            error,
                        )
                    again = 0.5
            if again is not None:
                soonest = again if soonest is None else min(soonest, again)
        return soonest

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Until cancelled: one pass after every change, or when a running Job is due."""
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self.informer.run)
                group.start_soon(self.config_maps.run)
                await self.informer.synced.wait()
                await self.config_maps.synced.wait()
                task_status.started()
                while True:
                    self._dirty = anyio.Event()
                    wait = await self._pass()
                    with anyio.move_on_after(wait if wait is not None else math.inf):
                        await self._dirty.wait()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self.client.close()
