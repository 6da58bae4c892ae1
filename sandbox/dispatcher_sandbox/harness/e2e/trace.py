"""The observable trace of every Workload an e2e test creates, for the differential comparison.

Issue 14's differential runner runs one scenario on the ``sandbox`` backend (emulated Kueue)
and on the ``real`` backend (Kueue v0.19.2 processes) and compares what each run showed. This
module records what a run shows: the :class:`ClusterView` mirrors of ``e2e_backend`` hand every
watch event to :func:`record`, which keeps, per manager Workload (one per submitted Job; a Job
name submitted again later, as S10 does once per Kueue dispatcher, gets one entry per
submission, in order):

- the nominations written (``status.nominatedClusterNames``, each distinct value in order);
- ``status.clusterName`` (each distinct value in order: the admission cluster);
- the manager conditions (every change of a type's status or reason, in order) and the
  AdmissionCheck states (every change of a check's state);
- per worker, the remote copies (``kueue.x-k8s.io/multikueue-origin`` label) appearing and
  disappearing, the copies' own condition changes, and the quota each copy holds while its
  ``QuotaReserved`` is True (``status.admission``: ClusterQueue, flavors, resource usage);
- the number of remote copies ever created (distinct copy uids) and the final state.

Times are seconds since the Job was first seen on the manager (its submission, as observed),
taken when the event reached this process; ``write`` numbers the observed revisions of an
object (1 = the first seen), so changes made in one write share a number.

Workloads a worker's own Kueue creates for a Job submitted directly to it (S6's preemptor)
are recorded under ``local``: their condition changes and quota.

The conftest's autouse fixture takes a :func:`mark` before each test and writes
:func:`export` of what was submitted after it to ``<trace dir>/<backend>-<kueue version>/
<test>.json``; ``scripts/differential.py`` compares two such directories.

A trace ends where the scenario does: the harness's ``reset`` (the teardown, and S10's switch
between Kueue dispatchers) runs in :meth:`TraceRecorder.scenario_end`: once no finished Job
still has a remote copy (at most ``SETTLE_MAX``), it freezes the records of every Job seen so
far, with the copies of their Workloads. What the deletions then cause (a copy removed before or
after its manager Workload, a requeued victim admitted for a moment once quota is freed) is each
backend's teardown timing, not the scenario's behaviour, and is not recorded.

Nothing here imports ``e2e_backend`` (which imports this module): the few Kueue names it needs
are repeated below.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

Obj = dict[str, Any]

TRACE_FORMAT = 1
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"  # C32, C41: marks a remote copy
COPY_GRACE = 0.5
SETTLE_MAX = 15.0
"""The longest the harness waits for a run to come to rest (a finished Job's copy removed, which
waits for the worker clients' rate limit) before it writes a trace or starts a teardown."""


def _round(seconds: float) -> float:
    return round(seconds, 3)


def _owner(obj: Obj, kind: str = "Job") -> tuple[str, str] | None:
    """``(name, uid)`` of the owner of that kind."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == kind:
            return str(owner.get("name", "")), str(owner.get("uid", ""))
    return None


def _conditions(obj: Obj) -> dict[str, tuple[str, str, str]]:
    """type → (status, reason, message)."""
    out = {}
    for item in (obj.get("status") or {}).get("conditions") or []:
        out[str(item.get("type"))] = (
            str(item.get("status", "")),
            str(item.get("reason", "")),
            str(item.get("message", "")),
        )
    return out


def _checks(obj: Obj) -> dict[str, tuple[str, str]]:
    """AdmissionCheck name → (state, message)."""
    out = {}
    for item in (obj.get("status") or {}).get("admissionChecks") or []:
        out[str(item.get("name"))] = (str(item.get("state", "")), str(item.get("message", "")))
    return out


def quota_held(obj: Obj) -> Obj | None:
    """What a Workload holds of its ClusterQueue's quota: None unless ``QuotaReserved`` is
    True, else the ClusterQueue and, per pod set, the flavor of each resource and the usage."""
    if _conditions(obj).get("QuotaReserved", ("",))[0] != "True":
        return None
    admission = (obj.get("status") or {}).get("admission") or {}
    pod_sets = []
    for item in admission.get("podSetAssignments") or []:
        pod_sets.append(
            {
                "name": str(item.get("name", "")),
                "count": item.get("count"),
                "flavors": {str(k): str(v) for k, v in (item.get("flavors") or {}).items()},
                "usage": {str(k): str(v) for k, v in (item.get("resourceUsage") or {}).items()},
            }
        )
    return {"clusterQueue": str(admission.get("clusterQueue", "")), "podSets": pod_sets}


@dataclass
class _Object:
    """The changes seen of one object (a Workload on one cluster)."""

    name: str
    uid: str
    first_seen: float
    writes: int = 0
    last_rv: str = ""
    gone_at: float | None = None
    last: Obj = field(default_factory=dict)
    conditions: list[Obj] = field(default_factory=list)
    quota: list[Obj] = field(default_factory=list)
    frozen: bool = False  # its run ended (TraceRecorder.end_runs): nothing more is recorded
    _conditions_now: dict[str, tuple[str, str]] = field(default_factory=dict)
    _quota_now: Obj | None = None

    def seen(self, now: float, obj: Obj) -> bool:
        """Record a new revision; False when it is one already seen."""
        rv = str(obj["metadata"].get("resourceVersion", ""))
        if rv and rv == self.last_rv:
            return False
        self.last_rv = rv
        self.writes += 1
        self.last = obj
        current = _conditions(obj)
        for kind, (status, reason, message) in sorted(current.items()):
            if self._conditions_now.get(kind) != (status, reason):
                self._conditions_now[kind] = (status, reason)
                self.conditions.append(
                    {
                        "t": now,
                        "write": self.writes,
                        "type": kind,
                        "status": status,
                        "reason": reason,
                        "message": message,
                    }
                )
        for kind in sorted(set(self._conditions_now) - set(current)):
            del self._conditions_now[kind]
            self.conditions.append(
                {
                    "t": now,
                    "write": self.writes,
                    "type": kind,
                    "status": "",
                    "reason": "",
                    "message": "",
                }
            )
        held = quota_held(obj)
        if held != self._quota_now:
            self._quota_now = held
            self.quota.append({"t": now, "write": self.writes, "held": held})
        return True

    def gone(self, now: float) -> None:
        if self.gone_at is None:
            self.gone_at = now
            if self._quota_now is not None:
                self._quota_now = None
                self.quota.append({"t": now, "write": self.writes, "held": None})


@dataclass
class _Manager(_Object):
    """A manager Workload: also its nominations, clusterName and check states."""

    job: str = ""
    job_uid: str = ""
    nominations: list[Obj] = field(default_factory=list)
    cluster_names: list[Obj] = field(default_factory=list)
    checks: list[Obj] = field(default_factory=list)
    _checks_now: dict[str, str] = field(default_factory=dict)

    def seen(self, now: float, obj: Obj) -> bool:
        if not super().seen(now, obj):
            return False
        status = obj.get("status") or {}
        nominated = [str(n) for n in status.get("nominatedClusterNames") or []]
        if not self.nominations or self.nominations[-1]["value"] != nominated:
            self.nominations.append({"t": now, "write": self.writes, "value": nominated})
        cluster = str(status["clusterName"]) if status.get("clusterName") else None
        if not self.cluster_names or self.cluster_names[-1]["value"] != cluster:
            self.cluster_names.append({"t": now, "write": self.writes, "value": cluster})
        for name, (state, message) in sorted(_checks(obj).items()):
            if self._checks_now.get(name) != state:
                self._checks_now[name] = state
                self.checks.append(
                    {
                        "t": now,
                        "write": self.writes,
                        "name": name,
                        "state": state,
                        "message": message,
                    }
                )
        return True


@dataclass
class _Job:
    """A Job seen on the manager: its first sighting is the submission time."""

    name: str
    uid: str
    first_seen: float
    mode: str
    ended: bool = False  # TraceRecorder.end_runs was called after it was seen


class TraceRecorder:
    """Everything :func:`record` was told, kept for the whole life of a backend (it survives
    the backend reconnecting its mirrors, as S10 does for each Kueue dispatcher)."""

    def __init__(self, mode: Callable[[], str] = lambda: "external") -> None:
        self.mode = mode
        self.jobs: dict[str, _Job] = {}  # uid → Job
        self.manager: dict[str, _Manager] = {}  # Workload uid → record
        self.copies: dict[tuple[str, str], _Object] = {}  # (worker, copy uid) → record
        self.local: dict[tuple[str, str], _Manager] = {}  # (worker, uid) → local Workload
        self._present: dict[tuple[str, str], dict[str, str]] = {}  # (cluster, key) → name→uid
        self.clock: Callable[[], float] = time.monotonic
        self._waiters: list[anyio.Event] = []
        self._tearing_down = False

    # --- recording ----------------------------------------------------------------------------

    def observe(self, cluster: str, key: str, obj: Obj, current: Mapping[str, Obj]) -> None:
        """One observation of a mirror: ``obj`` was added, changed or (when its name is no
        longer in ``current``, the mirror's collection) deleted; an empty ``obj`` ends a list,
        after which everything not in ``current`` is gone."""
        if key not in ("workloads", "jobs") or (key == "jobs" and cluster != "manager"):
            return
        now = self.clock()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()
        present = self._present.setdefault((cluster, key), {})
        if not obj:
            for name, uid in list(present.items()):
                if name not in current or _uid(current[name]) != uid:
                    del present[name]
                    self._gone(cluster, key, uid, now)
            return
        name, uid = str(obj["metadata"]["name"]), _uid(obj)
        if name not in current:
            if present.get(name) == uid:
                del present[name]
            self._gone(cluster, key, uid, now)
            return
        previous = present.get(name)
        if previous is not None and previous != uid:
            self._gone(cluster, key, previous, now)
        present[name] = uid
        if key == "jobs":
            if uid not in self.jobs:
                self.jobs[uid] = _Job(name, uid, now, self.mode())
            return
        if cluster == "manager":
            owner = _owner(obj) or ("", "")
            record = self.manager.get(uid)
            if record is None:
                job = self._job_of(owner[1])
                if job is not None and job.ended:
                    return  # a Workload Kueue made for a Job whose run has ended
                record = _Manager(name, uid, now, job=owner[0], job_uid=owner[1])
                self.manager[uid] = record
            if not record.frozen:
                record.seen(now, obj)
        elif (obj["metadata"].get("labels") or {}).get(ORIGIN_LABEL):
            copy = self.copies.get((cluster, uid))
            if copy is None:
                copy = _Object(name, uid, now)
                made_from = self._manager_of(copy)
                if self._tearing_down and made_from is not None and made_from.frozen:
                    return  # a copy made during the teardown of an ended run
                self.copies[(cluster, uid)] = copy
            if not copy.frozen:
                copy.seen(now, obj)
        else:
            owner = _owner(obj) or ("", "")
            local = self.local.get((cluster, uid))
            if local is None:
                local = _Manager(name, uid, now, job=owner[0], job_uid=owner[1])
                self.local[(cluster, uid)] = local
            if not local.frozen:
                local.seen(now, obj)

    def _gone(self, cluster: str, key: str, uid: str, now: float) -> None:
        if key == "jobs":
            return
        if cluster == "manager":
            found: _Object | None = self.manager.get(uid)
        else:
            found = self.copies.get((cluster, uid)) or self.local.get((cluster, uid))
        if found is not None and not found.frozen:
            found.gone(now)

    def _job_of(self, uid: str) -> _Job | None:
        return self.jobs.get(uid) if uid else None

    def end_runs(self) -> None:
        """End the run of every Job seen so far: their records (manager Workloads, remote
        copies, workers' own Workloads) keep what they hold now, and Workloads made for them
        from now on are not recorded."""
        for job in self.jobs.values():
            job.ended = True
        for records in (self.manager.values(), self.copies.values(), self.local.values()):
            for record in records:
                record.frozen = True

    async def wait_settled(self, within: float = SETTLE_MAX) -> bool:
        """Until no Job whose run has not ended is :meth:`unsettled` (a finished Job's remote
        copy still there), at most ``within`` seconds; whether that happened. The harness calls
        this before a teardown, so that the removal Kueue was about to make (C24, C41) is part
        of the trace on every backend rather than cut off by :meth:`teardown` on one of them."""
        with anyio.move_on_after(within):
            while self.unsettled(-math.inf):
                await self.next_event()
            return True
        return False

    @contextlib.contextmanager
    def teardown(self) -> Iterator[None]:
        """:meth:`end_runs`, then, while the block deletes the ended runs' Jobs, leave out the
        remote copies Kueue still makes for their Workloads. The harness's ``reset`` runs in
        this block and returns only once every Workload is gone, so a copy first seen after it
        belongs to a new run (S10 submits the same Job names again; a new copy is told from an
        old one by the Workload it was made from, which is only known within half a second)."""
        self.end_runs()
        self._tearing_down = True
        try:
            yield
        finally:
            self._tearing_down = False

    @contextlib.asynccontextmanager
    async def scenario_end(self) -> AsyncIterator[None]:
        """What the harness wraps a teardown in: :meth:`wait_settled`, then :meth:`teardown`."""
        await self.wait_settled()
        with self.teardown():
            yield

    # --- exporting ----------------------------------------------------------------------------

    def mark(self) -> float:
        """A point in time: :meth:`export` keeps the Jobs first seen after it."""
        return self.clock()

    def submitted_at(self, job: str, since: float) -> float | None:
        """When the Job ``job`` was first seen on the manager after ``since`` (clock time)."""
        seen = [j.first_seen for j in self.jobs.values() if j.name == job and j.first_seen >= since]
        return min(seen, default=None)

    async def next_event(self) -> None:
        """Return once the next event is observed."""
        waiter = anyio.Event()
        self._waiters.append(waiter)
        await waiter.wait()

    def unsettled(self, since: float) -> list[str]:
        """The Jobs first seen after ``since`` whose run has not come to rest, in either of two
        ways. The Job's traced Workload is finished (or deleted) on the manager and a remote
        copy of it is still there: Kueue removes such a copy in its next reconcile (C24, C41),
        which the worker clients' rate limit (C10) can put seconds after the last watch event,
        and a trace cut before that records a leftover copy that neither backend keeps. Or the
        manager Workload names its ``clusterName`` while the copy recorded there has not shown
        ``Admitted``: Kueue sets clusterName only after reading the copy admitted (C36), so
        this recorder's watch of that worker is behind the manager's, and a trace cut then
        records a copy that never held quota."""
        out = []
        for job in self.jobs.values():
            if job.first_seen < since or job.ended:
                continue  # before the test, or frozen by end_runs: nothing left to wait for
            workload = self._traced_workload(job)
            if workload is None:
                continue
            done = workload.gone_at is not None or (
                _conditions(workload.last).get("Finished", ("",))[0] == "True"
            )
            copies = [
                (worker, c)
                for (worker, _), c in self.copies.items()
                if c.gone_at is None and self._manager_of(c) is workload
            ]
            if done and copies:
                out.append(job.name)
                continue
            cluster = (workload.last.get("status") or {}).get("clusterName")
            if workload.gone_at is None and any(
                worker == cluster and _conditions(c.last).get("Admitted", ("",))[0] != "True"
                for worker, c in copies
            ):
                out.append(job.name)
        return sorted(out)

    def export(self, since: float) -> Obj:
        """The traces of the Jobs first seen on the manager at or after ``since``: ``jobs``
        (Job name → one entry per submission, in order) and ``local`` (Job name → the
        Workloads of Jobs submitted directly to a worker, first seen after ``since``)."""
        jobs = sorted(
            (j for j in self.jobs.values() if j.first_seen >= since), key=lambda j: j.first_seen
        )
        out: dict[str, list[Obj]] = {}
        for job in jobs:
            out.setdefault(job.name, []).append(self._job_trace(job))
        local: dict[str, list[Obj]] = {}
        for (worker, _), record in sorted(self.local.items(), key=lambda i: i[1].first_seen):
            if record.first_seen >= since and record.job:
                local.setdefault(record.job, []).append(
                    {
                        "worker": worker,
                        "workload": record.name,
                        "conditions": _relative(record.conditions, record.first_seen),
                        "quota": _relative(record.quota, record.first_seen),
                        "final": _final_of(record, []),
                    }
                )
        return {"jobs": out, "local": local}

    def _job_trace(self, job: _Job) -> Obj:
        t0 = job.first_seen
        trace: Obj = {"job": job.name, "mode": job.mode}
        workload = self._traced_workload(job)
        if workload is None:
            trace.update(workload=None, final={"outcome": "no-workload"})
            return trace
        trace["workloads"] = sum(1 for w in self.manager.values() if w.job_uid == job.uid)
        trace["workload"] = workload.name
        trace["nominations"] = _relative(workload.nominations, t0)
        trace["clusterName"] = _relative(workload.cluster_names, t0)
        trace["conditions"] = _relative(workload.conditions, t0)
        trace["checks"] = _relative(workload.checks, t0)
        copies: dict[str, list[Obj]] = {}
        copy_conditions: dict[str, list[Obj]] = {}
        quota: dict[str, list[Obj]] = {}
        present: list[str] = []
        created = 0
        mine = [
            (worker, c) for (worker, _), c in self.copies.items() if self._manager_of(c) is workload
        ]
        for worker, copy in sorted(mine, key=lambda item: item[1].first_seen):
            created += 1
            events = copies.setdefault(worker, [])
            events.append({"t": _round(copy.first_seen - t0), "event": "appeared"})
            if copy.gone_at is not None:
                events.append({"t": _round(copy.gone_at - t0), "event": "disappeared"})
            else:
                present.append(worker)
            copy_conditions.setdefault(worker, []).extend(_relative(copy.conditions, t0))
            quota.setdefault(worker, []).extend(_relative(copy.quota, t0))
        trace["copies"] = copies
        trace["copyConditions"] = copy_conditions
        trace["quota"] = quota
        trace["remoteCopiesCreated"] = created
        trace["final"] = _final_of(workload, sorted(present))
        return trace

    def _traced_workload(self, job: _Job) -> _Manager | None:
        """The manager Workload a Job's trace follows. A Job has one Workload (Kueue recreates
        it only when the Job's pod template changes, which no scenario does); should there be
        more, the last one first seen is traced, and the trace's ``workloads`` count says so."""
        workloads = [w for w in self.manager.values() if w.job_uid == job.uid]
        return max(workloads, key=lambda w: w.first_seen, default=None)

    def _manager_of(self, copy: _Object) -> _Manager | None:
        """The manager Workload a remote copy was made from: of those with its name, the last
        one first seen before it (a second submission of a Job reuses the Workload name), with
        half a second's grace for watch events of two clusters arriving out of order."""
        same = [w for w in self.manager.values() if w.name == copy.name]
        before = [w for w in same if w.first_seen <= copy.first_seen + COPY_GRACE]
        return max(before, key=lambda w: w.first_seen, default=None)


def _uid(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name"))


def _relative(events: list[Obj], t0: float) -> list[Obj]:
    return [{**e, "t": _round(e["t"] - t0)} for e in events]


def outcome(obj: Obj | None) -> str:
    """A Workload's outcome in one word: ``deleted``, ``finished:<reason>``, ``admitted``,
    ``evicted``, ``quota-reserved`` or ``pending``."""
    if obj is None:
        return "deleted"
    conditions = _conditions(obj)

    def true(kind: str) -> bool:
        return conditions.get(kind, ("",))[0] == "True"

    if true("Finished"):
        return f"finished:{conditions['Finished'][1]}"
    if true("Admitted"):
        return "admitted"
    if true("Evicted"):
        return "evicted"
    if true("QuotaReserved"):
        return "quota-reserved"
    return "pending"


def _final_of(record: _Object, copies: list[str]) -> Obj:
    obj = None if record.gone_at is not None else record.last
    status = (obj or {}).get("status") or {}
    return {
        "outcome": outcome(obj),
        "clusterName": status.get("clusterName") or None,
        "conditions": {k: [s, r] for k, (s, r, _) in sorted(_conditions(obj or {}).items())},
        "checks": {k: s for k, (s, _) in sorted(_checks(obj or {}).items())},
        "nominated": [str(n) for n in status.get("nominatedClusterNames") or []],
        "copies": copies,
    }


# --- the hook ---------------------------------------------------------------------------------

_RECORDERS: weakref.WeakKeyDictionary[Any, TraceRecorder] = weakref.WeakKeyDictionary()


def recorder_of(backend: Any) -> TraceRecorder:
    """The recorder of a backend (created on first use; its ``mode``, when it has one, is the
    Kueue dispatcher a Job was submitted under)."""
    found = _RECORDERS.get(backend)
    if found is None:
        found = TraceRecorder(lambda: str(getattr(backend, "mode", "external")))
        _RECORDERS[backend] = found
    return found


def record(backend: Any, cluster: str, key: str, obj: Obj) -> None:
    """Called by ``KubeBackend._observed`` for every mirror event (see :meth:`observe`)."""
    view = backend.views.get(cluster)
    current = view.objects.get(key, {}) if view is not None else {}
    recorder_of(backend).observe(cluster, key, obj, current)


SANITISE = re.compile(r"[^A-Za-z0-9._-]+")


def trace_file_name(nodeid: str) -> str:
    """The file name of a test's trace: its node id with every run of other characters than
    letters, digits, ``.``, ``_`` and ``-`` replaced by one ``_``, the e2e folder left out."""
    short = nodeid.removeprefix("tests/e2e/")
    return SANITISE.sub("_", short).strip("_") + ".json"
