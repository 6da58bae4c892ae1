"""Run a workload mix on real Kueue and count what happened to it.

:func:`run_mix` starts a topology on the real control plane (:mod:`.topology`), runs the real
dispatcher in this event loop (or none, for Kueue's built-in dispatchers), submits the mix as
Jobs and follows every manager Workload and every remote copy through list-then-watch
informers until each workload that the topology can hold either reached a worker (its copy
admitted there) or finished, then gives the manager ``settle`` more seconds to record the
admission. The outcome counts the workloads Kueue admitted on the manager (``clusterName``
set), those that finished on a worker while the manager never recorded the admission (the
field-manager pitfall's signature), the remote copies made per workload, and the dispatcher's
``AdmissionStuck`` Events.

Used by the pitfall-and-remedies test (``tests/real``) and its README table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc

from dispatcher.sandbox.environment import DISPATCHER_NAME, Remedy, start_dispatcher_with
from dispatcher.sandbox.kubeclient import WORKLOADS, Informer
from dispatcher.sandbox.real.plane import KueueOptions
from dispatcher.sandbox.real.topology import RealTopology, real_topology
from dispatcher.sandbox.serve import BUILTIN_DISPATCHERS
from dispatcher.sandbox.topology import Topology, WorkloadLine, submit_workloads

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Dispatcher = Literal["external", "all-at-once", "incremental"]
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"


def _true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return bool(item.get("status") == "True")
    return False


def _job_of(workload: Mapping[str, Any]) -> str | None:
    for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "Job":
            return f"{workload['metadata']['namespace']}/{owner['name']}"
    return None


@dataclass
class Followed:
    """What was seen of one submitted Job's Workload."""

    workload: str = ""
    cluster: str | None = None
    finished: bool = False
    copies: set[str] = field(default_factory=set)
    admitted_copy_on: str | None = None
    last: Obj | None = None


@dataclass
class MixOutcome:
    """What happened to a mix (see the module docstring)."""

    submitted: int
    admittable: int
    admitted: int
    """Workloads whose manager Workload got ``status.clusterName``."""
    finished_unrecorded: int
    """Workloads that finished on a worker while the manager never set ``clusterName``."""
    reached_worker: int
    """Workloads whose copy a worker admitted (or that were admitted on the manager)."""
    copies_per_admitted: float
    stuck_events: int
    seconds: float
    followed: dict[str, Followed]

    def ratio(self) -> str:
        """``admitted/submitted``."""
        return f"{self.admitted}/{self.submitted}"


class _Observer:
    def __init__(self, running: RealTopology, jobs: set[str]) -> None:
        self.jobs = jobs
        self.followed: dict[str, Followed] = {j: Followed() for j in jobs}
        self.by_workload: dict[str, str] = {}
        self.changed = anyio.Event()
        self.clients = {c.name: c.client("mkd-real-mix") for c in running.plane.clusters}
        self.manager_name = running.plane.manager.name
        self.informers = {
            name: Informer(api, WORKLOADS, self._listener(name))
            for name, api in self.clients.items()
        }

    def _listener(self, cluster: str) -> Any:
        def changed(kind: str, obj: Obj) -> None:
            if obj and kind != "DELETED":
                self._seen(cluster, obj)
            self.changed.set()
            self.changed = anyio.Event()

        return changed

    def _seen(self, cluster: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if cluster == self.manager_name:
            job = _job_of(obj)
            if job not in self.followed:
                return
            assert job is not None
            self.by_workload[key] = job
            item = self.followed[job]
            item.workload = key
            item.last = obj
            cluster_name = (obj.get("status") or {}).get("clusterName")
            if cluster_name:
                item.cluster = str(cluster_name)
            item.finished = item.finished or _true(obj, "Finished")
            return
        if not (meta.get("labels") or {}).get(ORIGIN_LABEL):
            return
        job = self.by_workload.get(key)
        if job is None:
            return
        item = self.followed[job]
        item.copies.add(cluster)
        if _true(obj, "Admitted"):
            item.admitted_copy_on = cluster

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group() as group:
            for informer in self.informers.values():
                group.start_soon(informer.run)
            for informer in self.informers.values():
                await informer.synced.wait()
            task_status.started()

    async def wait(self, predicate: Any, within: float) -> bool:
        """Until ``predicate()`` holds (True) or ``within`` seconds pass (False)."""
        with anyio.move_on_after(within):
            while True:
                changed = self.changed
                if predicate():
                    return True
                await changed.wait()
        return bool(predicate())

    async def close(self) -> None:
        for api in self.clients.values():
            await api.close()


async def run_mix(
    directory: Path,
    topology: Topology,
    lines: Sequence[WorkloadLine],
    admittable: set[str],
    *,
    remedy: Remedy = "policy",
    dispatcher: Dispatcher = "external",
    settings: Mapping[str, Any] | None = None,
    time_scale: float = 10.0,
    deadline: float = 240.0,
    settle: float = 10.0,
) -> MixOutcome:
    """Run ``lines`` (``namespace/name`` keys in ``admittable`` can be admitted) on real
    Kueue with ``remedy``; see the module docstring."""
    name = {"external": DISPATCHER_NAME} | BUILTIN_DISPATCHERS
    kueue = KueueOptions(incremental_step_size=1 if dispatcher == "incremental" else None)
    async with (
        real_topology(
            directory,
            topology,
            dispatcher_name=name[dispatcher],
            remedy=remedy,
            kueue=kueue,
            time_scale=time_scale,
        ) as running,
        anyio.create_task_group() as group,
    ):
        jobs = {f"{line.namespace}/{line.name}" for line in lines}
        observer = _Observer(running, jobs)
        try:
            await group.start(observer.run)
            if dispatcher == "external":  # cancelled with the group when the run ends
                await start_dispatcher_with(
                    group,
                    running.kubeconfig_path(running.plane.manager.name),
                    DISPATCHER_NAME,
                    {"log_level": "warning"} | dict(settings or {}),
                )
            started = time.monotonic()
            async with running.plane.manager.client("mkd-real-mix-submit") as api:
                await submit_workloads(api, lines, topology)

            def placed(key: str) -> bool:
                item = observer.followed[key]
                return bool(item.cluster or item.finished or item.admitted_copy_on)

            reached = await observer.wait(lambda: all(placed(k) for k in admittable), deadline)
            if not reached:
                log.warning(
                    "not every admittable workload reached a worker within %.0f s", deadline
                )
            await observer.wait(
                lambda: all(
                    observer.followed[k].cluster or observer.followed[k].finished
                    for k in admittable
                ),
                settle,
            )
            seconds = time.monotonic() - started
            async with running.plane.manager.client("mkd-real-mix-events") as api:
                events = await api.request("GET", "/api/v1/events")
            stuck = sum(1 for e in events.get("items") or [] if e.get("reason") == "AdmissionStuck")
        finally:
            await observer.close()
            group.cancel_scope.cancel()
    followed = observer.followed
    admitted = [f for f in followed.values() if f.cluster]
    return MixOutcome(
        submitted=len(lines),
        admittable=len(admittable),
        admitted=len(admitted),
        finished_unrecorded=sum(1 for f in followed.values() if f.finished and not f.cluster),
        reached_worker=sum(1 for f in followed.values() if f.cluster or f.admitted_copy_on),
        copies_per_admitted=(
            sum(len(f.copies) for f in admitted) / len(admitted) if admitted else 0.0
        ),
        stuck_events=stuck,
        seconds=seconds,
        followed=followed,
    )
