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

import contextlib
import logging
import resource
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
from prometheus_client import generate_latest

from dispatcher.app.manager import Manager
from dispatcher.topology import Topology, WorkloadLine
from dispatcher_sandbox.environment import DISPATCHER_NAME, Remedy, start_dispatcher_with
from dispatcher_sandbox.kube_client import WORKLOADS, Informer
from dispatcher_sandbox.metrics_text import samples_of
from dispatcher_sandbox.real_kueue.plane import ControlPlaneError, KueueOptions, wait_until
from dispatcher_sandbox.real_kueue.topology import RealTopology, real_topology
from dispatcher_sandbox.seeding import submit_workloads
from dispatcher_sandbox.serve import BUILTIN_DISPATCHERS

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


MILESTONES = (
    "created_at",
    "reserved_at",
    "nominated_at",
    "copied_at",
    "copy_admitted_at",
    "admitted_at",
)
"""A workload's way through MultiKueue, in order (the ``*_at`` fields of :class:`Followed`)."""


@dataclass
class Followed:
    """What was seen of one submitted Job's Workload."""

    workload: str = ""
    cluster: str | None = None
    finished: bool = False
    copies: set[str] = field(default_factory=set)
    nominations: list[tuple[str, ...]] = field(default_factory=list)
    """Every nomination the manager Workload was seen with, in order (repeats left out)."""
    admitted_copy_on: str | None = None
    evicted_on: set[str] = field(default_factory=set)
    """Workers whose Kueue was seen evicting its copy (``Evicted=True`` on the copy: a
    preemption there, C72), after which the workload may be sent to another worker."""
    last: Obj | None = None
    created_at: float | None = None
    """When the manager Workload was first seen (Kueue's Job reconciler made it); every
    ``*_at`` is ``time.monotonic()`` in this process, taken when the watch event arrived."""
    reserved_at: float | None = None
    """When the manager Workload was first seen with ``QuotaReserved`` (Kueue's scheduler)."""
    nominated_at: float | None = None
    """When the manager Workload was first seen nominated (the dispatcher's write)."""
    copied_at: float | None = None
    """When its first remote copy was seen on a worker (Kueue's MultiKueue controller created
    it through that worker's client)."""
    copy_admitted_at: float | None = None
    """When a worker was first seen to have admitted its copy (that worker's Kueue)."""
    admitted_at: float | None = None
    """When the manager Workload was first seen with ``clusterName`` (MultiKueue read the
    admission back through the worker's client)."""


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
    started: float = 0.0
    """When the submission began (``time.monotonic()``)."""
    cpu_seconds: float = 0.0
    """This process's CPU time (user + system) from the submission to the end of the run: the
    dispatcher's (when it runs, in this event loop) and the observer's informers."""
    kueue_counts: KueueCounts | None = None
    """What the manager's Kueue did during the run (``run_mix(count_kueue=True)``)."""

    def passed(self, attribute: str) -> list[float]:
        """The seconds from the submission at which each workload was first seen at the
        milestone ``attribute`` (one of :data:`MILESTONES`), in order; those never seen there
        are left out."""
        times = (getattr(f, attribute) for f in self.followed.values())
        return sorted(t - self.started for t in times if t is not None)

    def rate(self, attribute: str) -> float | None:
        """Workloads per second from the submission to the last one ``attribute``
        (``admitted_at``, ``nominated_at``) was seen; None when none was."""
        times = [getattr(f, attribute) for f in self.followed.values()]
        seen = [t for t in times if t is not None]
        if not seen:
            return None
        span = max(seen) - self.started
        return len(seen) / span if span > 0 else None

    def ratio(self) -> str:
        """``admitted/submitted``."""
        return f"{self.admitted}/{self.submitted}"


class _Observer:
    def __init__(self, running: RealTopology, jobs: set[str]) -> None:
        self.jobs = jobs
        self.followed: dict[str, Followed] = {j: Followed() for j in jobs}
        self.by_workload: dict[str, str] = {}
        self.early: dict[str, list[tuple[str, bool, bool, float]]] = {}
        """Copies seen (worker, admitted) before their manager Workload: the watches of the
        clusters are separate streams, and a copy AllAtOnce made on a worker that did not win
        may be gone before its next event."""
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
            for worker, admitted, evicted, at in self.early.pop(key, []):
                self._copy_seen(item, worker, admitted, evicted, at)
            item.last = obj
            status = obj.get("status") or {}
            cluster_name = status.get("clusterName")
            now = time.monotonic()
            if item.created_at is None:
                item.created_at = now
            if _true(obj, "QuotaReserved") and item.reserved_at is None:
                item.reserved_at = now
            if status.get("nominatedClusterNames") and item.nominated_at is None:
                item.nominated_at = now
            nominated = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
            if nominated and (not item.nominations or item.nominations[-1] != nominated):
                item.nominations.append(nominated)
            if cluster_name:
                item.cluster = str(cluster_name)
                if item.admitted_at is None:
                    item.admitted_at = now
            item.finished = item.finished or _true(obj, "Finished")
            return
        if not (meta.get("labels") or {}).get(ORIGIN_LABEL):
            return
        job = self.by_workload.get(key)
        now = time.monotonic()
        admitted, evicted = _true(obj, "Admitted"), _true(obj, "Evicted")
        if job is None:
            self.early.setdefault(key, []).append((cluster, admitted, evicted, now))
            return
        self._copy_seen(self.followed[job], cluster, admitted, evicted, now)

    @staticmethod
    def _copy_seen(item: Followed, cluster: str, admitted: bool, evicted: bool, at: float) -> None:
        item.copies.add(cluster)
        if evicted:
            item.evicted_on.add(cluster)
        if item.copied_at is None:
            item.copied_at = at
        if admitted:
            item.admitted_copy_on = cluster
            if item.copy_admitted_at is None:
                item.copy_admitted_at = at

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
    count_kueue: bool = False,
    expect_stuck: int | None = None,
) -> MixOutcome:
    """Run ``lines`` (``namespace/name`` keys in ``admittable`` can be admitted) on real
    Kueue with ``remedy``; see the module docstring. With ``count_kueue`` the manager's Kueue
    serves its metrics and the outcome carries :class:`KueueCounts` for the run. With
    ``expect_stuck`` the run waits, at most :data:`STUCK_EVENTS_WITHIN` seconds after it
    settled, until that many ``AdmissionStuck`` Events exist before counting them."""
    name = {"external": DISPATCHER_NAME} | BUILTIN_DISPATCHERS
    kueue = KueueOptions(
        incremental_step_size=1 if dispatcher == "incremental" else None, metrics=count_kueue
    )
    counts: KueueCounts | None = None
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
            counted = await _read_kueue_counts(running) if count_kueue else None
            started = time.monotonic()
            cpu_started = _cpu()
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
            cpu_seconds = _cpu() - cpu_started
            if counted is not None:
                counts = (await _read_kueue_counts(running)).minus(counted)
            async with running.plane.manager.client("mkd-real-mix-events") as api:

                async def stuck_events() -> int:
                    events = await api.request("GET", "/api/v1/events")
                    items = events.get("items") or []
                    return sum(1 for e in items if e.get("reason") == "AdmissionStuck")

                if expect_stuck is not None:
                    # The detector reports a workload stuck_after_seconds after its copy's
                    # admission, and later while Kueue still has copies to make on that
                    # worker: wait for the expected reports (bounded), then count.
                    async def enough() -> bool:
                        return await stuck_events() >= expect_stuck

                    with contextlib.suppress(ControlPlaneError):
                        await wait_until(
                            enough,
                            f"{expect_stuck} AdmissionStuck Events",
                            STUCK_EVENTS_WITHIN,
                            every=0.5,
                        )
                stuck = await stuck_events()
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
        started=started,
        cpu_seconds=cpu_seconds,
        kueue_counts=counts,
    )


STUCK_EVENTS_WITHIN = 60.0
"""How long ``run_mix(expect_stuck=N)`` waits for the N ``AdmissionStuck`` Events."""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class KueueCounts:
    """Work the manager's Kueue did from the submission to the end of a run:
    controller-runtime's ``controller_runtime_reconcile_total`` per controller, from Kueue's
    own metrics, and the single-object requests each worker's API server served on Workloads
    and Jobs (``apiserver_request_total``; Kueue v0.19.2's controller-runtime no longer counts
    client requests). On a worker, only the manager's Kueue makes those: the worker's own
    Kueue and the dispatcher read through informers (LIST and WATCH, left out) and the
    worker's Kueue writes its copies' status (PATCH, PUT: counted, named by verb)."""

    requests: Mapping[str, Mapping[str, int]]
    """Worker name -> ``"VERB resource"`` (``resource/subresource``) -> requests."""
    reconciles: Mapping[str, int]
    """Controller name -> reconciles."""

    def minus(self, before: KueueCounts) -> KueueCounts:
        """The counts since ``before``."""
        return KueueCounts(
            requests={
                cluster: {
                    what: count - before.requests.get(cluster, {}).get(what, 0)
                    for what, count in counted.items()
                }
                for cluster, counted in self.requests.items()
            },
            reconciles={
                name: count - before.reconciles.get(name, 0)
                for name, count in self.reconciles.items()
            },
        )


COUNTED_RESOURCES = frozenset({"workloads", "jobs"})
"""The resources whose requests :class:`KueueCounts` counts on each worker."""
INFORMER_VERBS = frozenset({"LIST", "WATCH"})
"""The reads of informers (the worker's own Kueue, the dispatcher): not counted."""


def kueue_counts(kueue_text: str, apiservers: Mapping[str, str]) -> KueueCounts:
    """Read :class:`KueueCounts` from the manager Kueue's metrics text and each worker API
    server's (``apiservers``: worker name -> its metrics text)."""
    reconciles: dict[str, int] = {}
    for labels, value in samples_of(kueue_text).get("controller_runtime_reconcile_total", []):
        name = labels.get("controller", "?")
        reconciles[name] = reconciles.get(name, 0) + int(value)
    requests: dict[str, dict[str, int]] = {}
    for cluster, text in apiservers.items():
        counted = requests.setdefault(cluster, {})
        for labels, value in samples_of(text).get("apiserver_request_total", []):
            verb, resource = labels.get("verb", ""), labels.get("resource", "")
            if resource not in COUNTED_RESOURCES or verb in INFORMER_VERBS:
                continue
            if labels.get("subresource"):
                resource += f"/{labels['subresource']}"
            what = f"{verb} {resource}"
            counted[what] = counted.get(what, 0) + int(value)
    return KueueCounts(requests=requests, reconciles=reconciles)


async def _read_kueue_counts(running: RealTopology) -> KueueCounts:
    plane = running.plane
    apiservers = {name: await w.apiserver_metrics() for name, w in plane.workers.items()}
    return kueue_counts(await plane.manager.kueue_metrics(), apiservers)


@dataclass
class OutageOutcome:
    """What happened to a mix when one worker's API server was killed mid-run (issue 17)."""

    submitted: int
    elsewhere: int
    """Jobs that another (reachable) worker can run."""
    admitted_elsewhere: int
    """Of those, admitted (``clusterName`` set) or finished by the end of the outage phase."""
    starved: list[str]
    """Of those, not admitted by then."""
    last_admission_seconds: float | None
    """From submission to the last admission of the outage phase (None: none)."""
    events: dict[str, int]
    """The dispatcher's Events by reason (Unplaceable, BlockedByUnplaceable, QuotaReleased,
    QuotaRestored) at the end of the outage phase, then after the worker came back."""
    held: int
    """Jobs only the killed worker can run."""
    held_admitted_after_back: int | None
    """Of those, admitted on the killed worker after it came back (None: not brought back)."""
    back_seconds: float | None
    """From the worker's return until the last held Job was admitted there (None: not all)."""
    followed: dict[str, Followed]
    unplaceable: dict[str, float] = field(default_factory=dict)
    """Our dispatcher's unplaceable series at the end of the outage phase, by sample:
    ``workloads/<cluster queue>`` and ``quota/<cluster queue>/<flavor>/<resource>`` (empty
    under AllAtOnce)."""

    def pending_messages(self) -> dict[str, str]:
        """The manager's ``QuotaReserved`` reason and message of each starved Job, as last
        seen."""
        out: dict[str, str] = {}
        for key in self.starved:
            last = self.followed[key].last or {}
            condition = next(
                (
                    c
                    for c in (last.get("status") or {}).get("conditions") or []
                    if c.get("type") == "QuotaReserved"
                ),
                None,
            )
            out[key] = (
                "no QuotaReserved condition"
                if condition is None
                else f"{condition.get('status')} {condition.get('reason')}: "
                f"{condition.get('message')}"
            )
        return out

    def line(self) -> str:
        """One line for logs and figures."""
        last = "-" if self.last_admission_seconds is None else f"{self.last_admission_seconds:.0f}"
        back = ""
        if self.held_admitted_after_back is not None:
            took = "-" if self.back_seconds is None else f"{self.back_seconds:.0f}"
            back = f"; back: {self.held_admitted_after_back}/{self.held} held admitted ({took} s)"
        return (
            f"admitted elsewhere {self.admitted_elsewhere}/{self.elsewhere}, starved "
            f"{len(self.starved)}, last admission at {last} s; events {self.events}{back}; "
            f"unplaceable {self.unplaceable}"
        )


def unplaceable_series(text: str) -> dict[str, float]:
    """The ``unplaceable_workloads`` and ``unplaceable_quota`` samples of a scrape."""
    out: dict[str, float] = {}
    for name, samples in samples_of(text).items():
        for labels, value in samples:
            if name == "multikueue_dispatcher_unplaceable_workloads":
                out[f"workloads/{labels.get('cluster_queue', '')}"] = value
            elif name == "multikueue_dispatcher_unplaceable_quota":
                where = "/".join(labels.get(k, "") for k in ("cluster_queue", "flavor", "resource"))
                out[f"quota/{where}"] = value
    return out


async def _events(running: RealTopology) -> dict[str, int]:
    async with running.plane.manager.client("mkd-real-outage-events") as api:
        events = await api.request("GET", "/api/v1/events")
    counts: dict[str, int] = {}
    for event in events.get("items") or []:
        if (event.get("source") or {}).get("component") == "multikueue-dispatcher":
            reason = str(event.get("reason"))
            counts[reason] = counts.get(reason, 0) + 1
    return counts


async def run_outage(
    directory: Path,
    topology: Topology,
    lines: Sequence[WorkloadLine],
    only_on: set[str],
    *,
    worker: str,
    kill_after: float,
    dispatcher: Dispatcher = "external",
    settings: Mapping[str, Any] | None = None,
    outage_seconds: float = 150.0,
    back: bool = False,
    back_deadline: float = 240.0,
    time_scale: float = 10.0,
) -> OutageOutcome:
    """Run ``lines`` on real Kueue; ``kill_after`` seconds after the submission, SIGKILL the API
    server of ``worker`` (the Jobs in ``only_on`` can run only there). Wait until every other
    Job is admitted or ``outage_seconds`` pass; then, with ``back``, start the API server again
    and wait until the ``only_on`` Jobs are admitted there (or ``back_deadline`` passes)."""
    name = {"external": DISPATCHER_NAME} | BUILTIN_DISPATCHERS
    async with (
        real_topology(
            directory, topology, dispatcher_name=name[dispatcher], time_scale=time_scale
        ) as running,
        anyio.create_task_group() as group,
    ):
        jobs = {f"{line.namespace}/{line.name}" for line in lines}
        elsewhere = jobs - only_on
        observer = _Observer(running, jobs)
        last: float | None = None
        manager: Manager | None = None
        try:
            await group.start(observer.run)
            if dispatcher == "external":
                manager = await start_dispatcher_with(
                    group,
                    running.kubeconfig_path(running.plane.manager.name),
                    DISPATCHER_NAME,
                    {"log_level": "warning"} | dict(settings or {}),
                )
            started = time.monotonic()
            async with running.plane.manager.client("mkd-real-outage-submit") as api:
                await submit_workloads(api, lines, topology)
            await anyio.sleep(max(0.0, started + kill_after - time.monotonic()))
            await running.plane.cluster(worker).stop_apiserver()
            log.warning("killed the API server of %s at %.1f s", worker, kill_after)
            admitted_at: dict[str, float] = {}

            def placed(key: str) -> bool:
                item = observer.followed[key]
                done = bool(item.cluster or item.finished)
                if done and key not in admitted_at:
                    admitted_at[key] = time.monotonic() - started
                return done

            # Every key is looked at on every change (no short cut), so each admission's time is
            # taken when it is first seen.
            await observer.wait(
                lambda: sum(placed(k) for k in elsewhere) == len(elsewhere), outage_seconds
            )
            for key in jobs:
                placed(key)
            starved = sorted(k for k in elsewhere if k not in admitted_at)
            times = [admitted_at[k] for k in elsewhere if k in admitted_at]
            last = max(times) if times else None
            events = await _events(running)
            unplaceable = (
                unplaceable_series(generate_latest(manager.metrics.registry).decode())
                if manager is not None
                else {}
            )
            held_admitted: int | None = None
            back_seconds: float | None = None
            if back:
                await running.plane.cluster(worker).start_apiserver()
                returned = time.monotonic()

                def there(key: str) -> bool:
                    return observer.followed[key].cluster == worker

                if await observer.wait(lambda: all(there(k) for k in only_on), back_deadline):
                    back_seconds = time.monotonic() - returned
                held_admitted = sum(1 for k in only_on if there(k))
                after = await _events(running)
                events = {
                    reason: events.get(reason, 0) for reason in sorted(set(events) | set(after))
                } | {f"{r}_after_back": after[r] - events.get(r, 0) for r in after}
        finally:
            await observer.close()
            group.cancel_scope.cancel()
    return OutageOutcome(
        submitted=len(lines),
        elsewhere=len(elsewhere),
        admitted_elsewhere=len(elsewhere) - len(starved),
        starved=starved,
        last_admission_seconds=last,
        events=events,
        held=len(only_on),
        held_admitted_after_back=held_admitted,
        back_seconds=back_seconds,
        followed=observer.followed,
        unplaceable=unplaceable,
    )
