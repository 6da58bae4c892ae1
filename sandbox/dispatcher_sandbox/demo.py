"""``multikueue-dispatcher sandbox``: the whole product on this machine, in one command.

The demo starts the emulated manager and workers of a topology (default: the sandbox's
``worker-a100``, ``worker-h100``, ``worker-cpu``), the emulated Kueue on them, and the real
dispatcher (:func:`dispatcher.app.manager.run_manager`) connected over HTTPS through the kubeconfig
Secrets, exactly as in a cluster (:mod:`dispatcher_sandbox.environment`). Once the dispatcher has
every worker connected it submits a workload mix (default: ``demo-workloads.jsonl`` of
:mod:`dispatcher.topology`), shows a live view of the progress per cluster (``rich`` on a terminal;
one plain line per second otherwise, as in CI) and ends with a summary: where each workload went and
why (the dispatcher's ``Nominated`` Event), its time to admission, and how many remote copies Kueue
created for it.

**When it ends.** Before submitting, every workload is checked against the topology with the
shared admission model (:func:`dispatcher.kueue.admission.evaluate` on empty ClusterQueues): a
workload that can never fit the manager's ClusterQueue, or no worker's, is *expected pending*.
The demo ends as soon as every other workload has been admitted on a worker (finishing is not
required), or when ``timeout`` seconds have passed since the last submission. Job run times
(``runSeconds``) and trace times (``at``) are divided by ``time_scale`` (default 10) so that a
mix whose jobs run for minutes still shows workloads that wait for others to finish within
seconds; ``--time-scale 1`` runs in real time.

**Exit status.** 0 when every workload that could be admitted was admitted, each on a cluster
offering its required GPU type, and the dispatcher logged no error; 1 otherwise (the summary
lists each problem); 2 for unreadable input files.

**Times.** Time to admission (``tta_s``) is measured from the moment the demo's watch of the
manager saw ``QuotaReserved=True`` (Kueue's quota reservation, when the workload starts to wait
for a worker) to the moment it saw ``status.clusterName`` set, with millisecond resolution (the
Workload conditions only carry seconds). It is in wall-clock seconds, not scaled back.

**Traces** (``--trace FILE``) use the simulator's format (:mod:`dispatcher.sim.trace`): workload
lines (:class:`~dispatcher.topology.WorkloadLine`) with ``arrival`` (when to submit the
line, seconds after the start) and ``runSeconds``; ``simulate --write-trace`` writes one.
Workload files and traces are submitted to the MultiKueue manager as Jobs, as a user submits
them: a ``kind: Workload`` line is bad input (exit 2, the line and the ``kind`` field named),
since Kueue's MultiKueue rejects a Workload that no Job owns (contract C22). The demo's own
expectations still model each line as a Workload (the shared admission model reads pod sets).

The JSON written by ``--json FILE``::

    {"workloads": [{"namespace", "name", "cluster", "copies", "tta_s", "gpu_type", "outcome",
                    "wants", "nominated", "reason", "expected", "problem"}...],
     "summary": {"ok", "algorithm", "topology", "workloads", "admitted", "finished", "pending",
                 "expected_pending", "copies_per_admitted", "tta_p50_s", "tta_max_s",
                 "gpu_type_mismatches", "dispatcher_errors", "problems", "elapsed_s",
                 "time_scale", "directory"}}

``outcome`` is ``admitted`` (``status.clusterName`` set), ``finished`` (admitted and finished
since) or ``pending`` (never admitted); ``gpu_type`` is the GPU product of the flavor its GPUs
were assigned on the worker (``null`` for CPU-only work or when not admitted); ``copies`` counts
the workers on which Kueue created a remote copy of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

import anyio

from dispatcher.app.manager import Manager
from dispatcher.kueue.admission import PendingWorkload, QuotaSnapshot, evaluate
from dispatcher.kueue.objects import (
    ClusterQueueView,
    ResourceFlavorView,
    parse_cluster_queue,
    parse_pod_set,
    parse_resource_flavor,
)
from dispatcher.topology import (
    DEFAULT_TOPOLOGY,
    GPU_PRODUCT_LABEL,
    KUEUE_NAMESPACE,
    Topology,
    TopologyError,
    WorkloadFileError,
    WorkloadLine,
    load_topology,
    load_workloads,
    parse_workload_lines,
    topology_objects,
    workload_object,
)
from dispatcher.topology import _topology_problems as topology_problems
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.kube_client import (
    CLUSTER_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    KubeClient,
    Resource,
)
from dispatcher_sandbox.serve import wait_for_signal

__all__ = [
    "DemoOptions",
    "DemoReport",
    "Expectation",
    "TimedLine",
    "WorkloadResult",
    "expectations",
    "load_trace",
    "parse_trace_lines",
    "run_demo",
]

Obj = dict[str, Any]

DEFAULT_TIME_SCALE = 10.0
DEFAULT_TIMEOUT = 40.0
EVENT_COMPONENT = "multikueue-dispatcher"
GPU_RESOURCE_MARK = "gpu"


# --- input --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimedLine:
    """A workload line and when to submit it (seconds after the start, before scaling)."""

    at: float
    line: WorkloadLine


def parse_trace_lines(
    lines: Sequence[str], *, source: str = "trace", topology: Topology | None = None
) -> list[TimedLine]:
    """Validate a trace in the simulator's format (:mod:`dispatcher.sim.trace`): workload lines
    with ``arrival`` (seconds after the start) and ``runSeconds``, so that a trace replays the
    same in ``simulate`` and in the sandbox. Fault lines (``worker-down``) are refused: only the
    simulator replays them. With a ``topology``, each line's LocalQueue and priority class must
    exist in it. Errors are ``SOURCE:LINE: field: message`` lines, all at once.
    """
    from dispatcher.sim.trace import TraceError
    from dispatcher.sim.trace import parse_trace_lines as parse_sim_trace

    try:
        trace = parse_sim_trace(lines, source=source)
    except TraceError as error:
        raise WorkloadFileError(str(error)) from None
    errors: list[str] = []
    if trace.faults:
        errors.append(
            f"{source}: fault events (worker-down) are replayed by `simulate` only, not by the "
            "sandbox; remove them"
        )
    if topology is not None:
        for timed in trace.workloads:
            line = timed.line
            errors += [
                f"{source}: {line.namespace}/{line.name}: {problem}"
                for problem in topology_problems(line, topology)
            ]
    if errors:
        raise WorkloadFileError("\n".join(errors))
    return [TimedLine(w.arrival, w.line) for w in trace.workloads]


def load_trace(path: str | Path, topology: Topology | None = None) -> list[TimedLine]:
    """Read a trace file (see :func:`parse_trace_lines`)."""
    text = Path(path).read_text(encoding="utf-8")
    return parse_trace_lines(text.splitlines(), source=str(path), topology=topology)


class DemoEnvironment(Protocol):
    """What the demo reads of a running installation: the sandbox's
    :class:`~dispatcher_sandbox.environment.Environment` or, with ``--backend real``,
    :class:`~dispatcher_sandbox.real_kueue.environment.RealEnvironment` (same names; ``sandbox``
    holds the clusters and their kubeconfig files, ``kueue`` per cluster a connection with
    ``subscribe`` and ``cache``)."""

    topology: Topology
    sandbox: Any
    kueue: Any
    manager_client: KubeClient
    dispatcher: Manager | None

    async def submit(self, lines: Iterable[WorkloadLine]) -> list[Obj]:
        """Create the Jobs of ``lines`` on the manager."""
        ...


BACKENDS = ("sandbox", "real")


# --- what to expect -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """What the topology allows for one workload, before anything runs."""

    admittable: bool
    reason: str = ""
    """Why it can never be admitted (empty when it can)."""
    clusters: tuple[str, ...] = ()
    """Workers whose ClusterQueue could hold it when idle."""


@dataclass(frozen=True)
class _ClusterModel:
    queues: dict[str, ClusterQueueView]
    flavors: dict[str, ResourceFlavorView]


def _models(topology: Topology) -> dict[str, _ClusterModel]:
    out: dict[str, _ClusterModel] = {}
    for cluster, objects in topology_objects(topology).items():
        queues = [parse_cluster_queue(o) for r, o in objects if r == CLUSTER_QUEUES]
        flavors = [parse_resource_flavor(o) for r, o in objects if r == RESOURCE_FLAVORS]
        out[cluster] = _ClusterModel({q.name: q for q in queues}, {f.name: f for f in flavors})
    return out


def _pending(line: WorkloadLine, topology: Topology, cluster_queue: str) -> PendingWorkload:
    as_workload = line.model_copy(update={"kind": "Workload", "priority_class": None})
    raw = workload_object(as_workload, topology)
    pod_sets = tuple(parse_pod_set(p) for p in raw["spec"]["podSets"])
    return PendingWorkload(f"{line.namespace}/{line.name}", cluster_queue, pod_sets)


def expectations(lines: Sequence[WorkloadLine], topology: Topology) -> dict[str, Expectation]:
    """For each line (by ``namespace/name``): can it ever be admitted in ``topology``?

    It can when it fits the manager's ClusterQueue and at least one worker's when they are idle
    (the shared admission model, cohorts' borrowing included).
    """
    models = _models(topology)
    queue_of = {(q.namespace, q.name): q.cluster_queue for q in topology.local_queues}
    manager_queue = topology.manager.cluster_queue.name
    out: dict[str, Expectation] = {}
    for line in lines:
        key = f"{line.namespace}/{line.name}"
        manager = models[topology.manager.name]
        verdict = evaluate(
            _pending(line, topology, manager_queue),
            QuotaSnapshot.build(manager.queues.values()),
            manager.flavors,
        )
        if verdict.mode == "never":
            out[key] = Expectation(
                False, f"never fits the manager's ClusterQueue: {verdict.reason}"
            )
            continue
        fitting: list[str] = []
        reasons: list[str] = []
        worker_queue = queue_of.get((line.namespace, line.queue), "")
        for worker in topology.workers:
            model = models[worker.name]
            verdict = evaluate(
                _pending(line, topology, worker_queue),
                QuotaSnapshot.build(model.queues.values()),
                model.flavors,
            )
            if verdict.mode == "never":
                reasons.append(f"{worker.name}: {verdict.reason}")
            else:
                fitting.append(worker.name)
        if fitting:
            out[key] = Expectation(True, clusters=tuple(fitting))
        else:
            out[key] = Expectation(False, "fits no worker: " + "; ".join(reasons))
    return out


def demo_workload_text() -> str:
    """The built-in demo mix (``demo-workloads.jsonl`` of :mod:`dispatcher.topology`)."""
    resource = (
        importlib.resources.files("dispatcher.topology") / "topologies" / "demo-workloads.jsonl"
    )
    return resource.read_text(encoding="utf-8")


def _wants(line: WorkloadLine) -> str:
    if line.gpu_type:
        return f"{line.gpu_type} (required)"
    if line.preferred_gpu_types:
        return f"{', '.join(line.preferred_gpu_types)} (preferred)"
    gpus = any(GPU_RESOURCE_MARK in name for p in line.pod_set_lines() for name in p.requests)
    return "any GPU" if gpus else "CPU"


def _gpu_types_of(topology: Topology) -> dict[str, dict[str, str]]:
    """Worker → flavor → GPU product label (flavors without one are left out)."""
    return {
        w.name: {
            f.name: f.node_labels[GPU_PRODUCT_LABEL]
            for f in w.resource_flavors
            if GPU_PRODUCT_LABEL in f.node_labels
        }
        for w in topology.workers
    }


# --- observing ----------------------------------------------------------------------------------


def _condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return str(item.get("status"))
    return None


def _line_key(workload: Mapping[str, Any]) -> str:
    """``namespace/line name`` of a manager Workload (its Job's name for a Job's Workload)."""
    meta = workload.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    name = owners[0].get("name") if owners else meta.get("name")
    return f"{meta.get('namespace', '')}/{name}"


@dataclass
class WorkloadResult:
    """Everything the demo observed about one workload line."""

    line: WorkloadLine
    expectation: Expectation
    at: float = 0.0
    workload: str = ""
    """Name of the manager Workload (differs from the Job's name)."""
    submitted_at: float | None = None
    reserved_at: float | None = None
    admitted_at: float | None = None
    finished_at: float | None = None
    cluster: str | None = None
    gpu_type: str | None = None
    nominated: list[str] = field(default_factory=list)
    """Every cluster it was nominated to, in order."""
    nominated_now: tuple[str, ...] = ()
    copies: set[str] = field(default_factory=set)
    pending_message: str = ""
    reason: str = ""
    problem: str = ""

    @property
    def key(self) -> str:
        """``namespace/name`` of the line."""
        return f"{self.line.namespace}/{self.line.name}"

    @property
    def outcome(self) -> str:
        """``finished``, ``admitted`` or ``pending``."""
        if self.admitted_at is None:
            return "pending"
        return "finished" if self.finished_at is not None else "admitted"

    @property
    def tta(self) -> float | None:
        """Seconds from quota reservation on the manager to ``clusterName`` (as observed)."""
        if self.admitted_at is None or self.reserved_at is None:
            return None
        return max(0.0, self.admitted_at - self.reserved_at)

    def to_json(self) -> Obj:
        """This workload's entry in the ``--json`` output."""
        return {
            "namespace": self.line.namespace,
            "name": self.line.name,
            "workload": self.workload or None,
            "cluster": self.cluster,
            "copies": len(self.copies),
            "tta_s": None if self.tta is None else round(self.tta, 3),
            "gpu_type": self.gpu_type,
            "outcome": self.outcome,
            "wants": _wants(self.line),
            "nominated": list(self.nominated),
            "reason": self.reason,
            "expected": "admitted" if self.expectation.admittable else "pending",
            "problem": self.problem or None,
        }


class Tracker:
    """Follows the manager's and the workers' Workloads through the emulated Kueue's informers."""

    def __init__(
        self,
        env: DemoEnvironment,
        results: dict[str, WorkloadResult],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.env = env
        self.results = results
        self.clock = clock
        self.changed = anyio.Event()
        self.gpu_types = _gpu_types_of(env.topology)
        self._by_workload: dict[str, WorkloadResult] = {}
        env.kueue.manager.conn.subscribe(self._on_manager)
        for name, worker in env.kueue.workers.items():
            worker.conn.subscribe(self._worker_listener(name))
        for obj in env.kueue.manager.conn.cache(WORKLOADS).items():
            self._on_manager(WORKLOADS, "ADDED", obj)

    def _signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def _on_manager(self, resource: Resource, kind: str, obj: Obj) -> None:
        if resource != WORKLOADS or kind == "DELETED":
            return
        result = self.results.get(_line_key(obj))
        if result is None:
            return
        now = self.clock()
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        result.workload = str(meta.get("name", ""))
        self._by_workload[f"{meta.get('namespace', '')}/{result.workload}"] = result
        if result.reserved_at is None and _condition(obj, "QuotaReserved") == "True":
            result.reserved_at = now
        nominated = tuple(str(n) for n in status.get("nominatedClusterNames") or ())
        result.nominated_now = nominated
        for name in nominated:
            if name not in result.nominated:
                result.nominated.append(name)
        cluster = status.get("clusterName")
        if cluster and result.admitted_at is None:
            result.admitted_at = now
            result.cluster = str(cluster)
        if result.finished_at is None and _condition(obj, "Finished") == "True":
            result.finished_at = now
        if _condition(obj, "QuotaReserved") == "False":
            for item in status.get("conditions") or []:
                if item.get("type") == "QuotaReserved":
                    result.pending_message = str(item.get("message") or "")
        self._signal()

    def _worker_listener(self, worker: str) -> Callable[[Resource, str, Obj], None]:
        def listener(resource: Resource, kind: str, obj: Obj) -> None:
            if resource != WORKLOADS or kind == "DELETED":
                return
            meta = obj.get("metadata") or {}
            result = self._by_workload.get(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
            if result is None:
                return
            result.copies.add(worker)
            admission = (obj.get("status") or {}).get("admission") or {}
            for assignment in admission.get("podSetAssignments") or []:
                for resource_name, flavor in (assignment.get("flavors") or {}).items():
                    gpu = self.gpu_types.get(worker, {}).get(str(flavor))
                    if GPU_RESOURCE_MARK in str(resource_name) and gpu:
                        result.gpu_type = gpu
            if result.finished_at is None and _condition(obj, "Finished") == "True":
                result.finished_at = self.clock()
            self._signal()

        return listener

    def done(self) -> bool:
        """Every workload that can be admitted has been admitted (after all were submitted)."""
        return all(
            r.submitted_at is not None
            and (r.admitted_at is not None or not r.expectation.admittable)
            for r in self.results.values()
        )


# --- rendering ----------------------------------------------------------------------------------


def _progress_rows(env: DemoEnvironment, results: Sequence[WorkloadResult]) -> list[list[str]]:
    """Per cluster: submitted / nominated / admitted / finished."""
    rows = [
        [
            env.topology.manager.name,
            str(sum(r.submitted_at is not None for r in results)),
            str(sum(bool(r.nominated_now) for r in results)),
            str(sum(r.admitted_at is not None for r in results)),
            str(sum(r.finished_at is not None for r in results)),
        ]
    ]
    for worker in env.topology.workers:
        name = worker.name
        rows.append(
            [
                name,
                "",
                str(sum(name in r.nominated for r in results)),
                str(sum(r.cluster == name for r in results)),
                str(sum(r.cluster == name and r.finished_at is not None for r in results)),
            ]
        )
    return rows


def _live_table(
    env: DemoEnvironment, results: Sequence[WorkloadResult], elapsed: float, note: str
) -> Any:
    from rich.table import Table

    table = Table(title=f"multikueue-dispatcher sandbox  {elapsed:5.1f}s  {note}")
    for column in ("cluster", "submitted", "nominated", "admitted", "finished"):
        table.add_column(column, justify="left" if column == "cluster" else "right")
    for row in _progress_rows(env, results):
        table.add_row(*row)
    waiting = [r.key for r in results if r.submitted_at is not None and r.admitted_at is None]
    if waiting:
        table.caption = "waiting: " + ", ".join(waiting)
    return table


def _plain_progress(env: DemoEnvironment, results: Sequence[WorkloadResult], elapsed: float) -> str:
    rows = _progress_rows(env, results)
    manager = rows[0]
    workers = "  ".join(f"{r[0]} {r[2]}/{r[3]}/{r[4]}" for r in rows[1:])
    return (
        f"[{elapsed:5.1f}s] submitted {manager[1]}, nominated {manager[2]}, admitted {manager[3]},"
        f" finished {manager[4]} | per worker nominated/admitted/finished: {workers}"
    )


def _fmt_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


SUMMARY_COLUMNS = ("workload", "wants", "cluster", "gpu type", "copies", "tta", "outcome")


def _summary_rows(results: Sequence[WorkloadResult]) -> list[list[str]]:
    return [
        [
            r.key,
            _wants(r.line),
            r.cluster or "-",
            r.gpu_type or "-",
            str(len(r.copies)),
            _fmt_seconds(r.tta),
            r.outcome + ("" if not r.problem else " (!)"),
        ]
        for r in results
    ]


def _plain_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


# --- the demo -----------------------------------------------------------------------------------


@dataclass
class DemoOptions:
    """What the ``sandbox`` command was asked to do."""

    topology: Topology
    workloads: list[TimedLine]
    topology_name: str = "default"
    directory: Path | None = None
    algorithms: list[str] | None = None
    time_scale: float = DEFAULT_TIME_SCALE
    timeout: float = DEFAULT_TIMEOUT
    json_path: Path | None = None
    keep: bool = False
    keep_seconds: float | None = None
    live: bool | None = None
    """Live view with rich; ``None``: when the output is a terminal."""
    crds: Path | None = None
    backend: str = "sandbox"
    """``sandbox`` (emulated clusters and Kueue) or ``real`` (real kube-apiserver, etcd and
    Kueue processes, :mod:`dispatcher_sandbox.real_kueue`)."""


@dataclass
class DemoReport:
    """The outcome of a demo run."""

    results: list[WorkloadResult]
    summary: Obj

    @property
    def ok(self) -> bool:
        """Nothing failed."""
        return bool(self.summary["ok"])

    def to_json(self) -> Obj:
        """The ``--json`` document."""
        return {"workloads": [r.to_json() for r in self.results], "summary": self.summary}


class _ErrorLog(logging.Handler):
    """Collects ERROR records of the dispatcher (not of the sandbox around it)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("dispatcher.") and not record.name.startswith(
            "dispatcher_sandbox"
        ):
            self.messages.append(f"{record.name}: {record.getMessage()}")


@contextlib.contextmanager
def _collect_errors() -> Iterator[_ErrorLog]:
    handler = _ErrorLog()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def _scaled(line: WorkloadLine, scale: float) -> WorkloadLine:
    if line.run_seconds is None or scale == 1:
        return line
    return line.model_copy(update={"run_seconds": round(line.run_seconds / scale, 3)})


async def _wait_for_workers(env: DemoEnvironment, within: float) -> None:
    """Until the dispatcher's mirrors of every worker are connected and Kueue reports them
    active (polling its registry, which has no change notification for this)."""
    assert env.dispatcher is not None
    with anyio.fail_after(within):
        while True:
            registry = env.dispatcher.registry
            if registry is not None and registry.synced:
                checks = registry.multikueue_checks()
                candidates = [c for check in checks for c in registry.candidates(check)[0]]
                if checks and candidates and all(c.active for c in candidates):
                    return
            await anyio.sleep(0.05)


async def _events(env: DemoEnvironment) -> dict[str, list[Obj]]:
    """The dispatcher's Events per Workload (``namespace/name``), oldest first."""
    listed = await env.manager_client.request("GET", "/api/v1/events")
    out: dict[str, list[Obj]] = {}
    for event in listed.get("items") or []:
        source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
        if source != EVENT_COMPONENT:
            continue
        involved = event.get("involvedObject") or {}
        key = f"{involved.get('namespace', '')}/{involved.get('name', '')}"
        out.setdefault(key, []).append(event)

    def order(event: Obj) -> tuple[str, int]:
        meta = event.get("metadata") or {}
        version = str(meta.get("resourceVersion", "0"))
        return (str(meta.get("creationTimestamp", "")), int(version) if version.isdigit() else 0)

    for events in out.values():
        events.sort(key=order)
    return out


def _reason(result: WorkloadResult, events: list[Obj]) -> str:
    """Why the workload went where it went (or did not go anywhere)."""
    if result.admitted_at is not None:
        for event in events:
            if (
                event.get("reason") == "Nominated"
                and result.cluster
                and (
                    f"[{result.cluster}" in str(event.get("message", ""))
                    or f" {result.cluster}" in str(event.get("message", ""))
                )
            ):
                return str(event.get("message", ""))
        for event in events:
            if event.get("reason") == "Nominated":
                return str(event.get("message", ""))
        return "admitted (no Nominated event found)"
    for event in reversed(events):
        if event.get("reason") == "NotNominated":
            return "the dispatcher nominated no cluster: " + str(event.get("message", ""))
    if result.pending_message:
        return f"pending on the manager (QuotaReserved=False): {result.pending_message}"
    if not result.expectation.admittable:
        return result.expectation.reason
    if result.nominated_now:
        return f"nominated [{', '.join(result.nominated_now)}], not admitted yet"
    return "not nominated yet"


def _summarise(
    options: DemoOptions,
    env: DemoEnvironment,
    results: list[WorkloadResult],
    errors: Sequence[str],
    elapsed: float,
    directory: Path,
    timed_out: bool,
) -> Obj:
    problems: list[str] = []
    mismatches = 0
    for r in results:
        required = r.line.gpu_type
        if r.admitted_at is not None and required and r.gpu_type != required:
            mismatches += 1
            r.problem = f"GPU-type mismatch: requires {required}, got {r.gpu_type or 'no GPU'}"
        elif r.admitted_at is None and r.expectation.admittable:
            r.problem = (
                f"not admitted within {options.timeout:g}s"
                if timed_out
                else "not admitted (the demo stopped early)"
            )
        if r.problem:
            problems.append(f"{r.key}: {r.problem}")
    problems += [f"dispatcher error: {message}" for message in errors]
    admitted = [r for r in results if r.admitted_at is not None]
    ttas = sorted(t for r in admitted if (t := r.tta) is not None)
    copies = sum(len(r.copies) for r in admitted)
    settings = env.dispatcher.settings if env.dispatcher is not None else None
    algorithm = "+".join(settings.algorithms) if settings is not None else ""
    return {
        "ok": not problems,
        "algorithm": algorithm,
        "topology": options.topology_name,
        "workloads": len(results),
        "admitted": len(admitted),
        "finished": sum(r.finished_at is not None for r in results),
        "pending": sum(r.admitted_at is None for r in results),
        "expected_pending": sum(not r.expectation.admittable for r in results),
        "copies_per_admitted": round(copies / len(admitted), 3) if admitted else None,
        "tta_p50_s": round(statistics.median(ttas), 3) if ttas else None,
        "tta_max_s": round(ttas[-1], 3) if ttas else None,
        "gpu_type_mismatches": mismatches,
        "dispatcher_errors": len(errors),
        "problems": problems,
        "elapsed_s": round(elapsed, 2),
        "time_scale": options.time_scale,
        "directory": str(directory),
    }


def _print_summary(report: DemoReport, out: TextIO, rich_output: bool) -> None:
    summary = report.summary
    rows = _summary_rows(report.results)
    title = (
        f"Summary: {summary['workloads']} workloads, {summary['admitted']} admitted "
        f"({summary['finished']} finished), {summary['pending']} pending; algorithm "
        f"{summary['algorithm']}; copies per admitted workload "
        f"{summary['copies_per_admitted']}; time to admission p50 "
        f"{_fmt_seconds(summary['tta_p50_s'])}, max {_fmt_seconds(summary['tta_max_s'])}"
    )
    if rich_output:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = Console(file=out)
        table = Table(title=title, title_justify="left")
        for column in (*SUMMARY_COLUMNS, "why"):
            table.add_column(column, overflow="fold")
        for row, result in zip(rows, report.results, strict=True):
            table.add_row(*(Text(cell) for cell in (*row, _short_reason(result.reason))))
        console.print(table)
    else:
        print(title, file=out)
        print(_plain_table(rows, SUMMARY_COLUMNS), file=out)
        print("Why:", file=out)
        for result in report.results:
            print(f"  {result.key}: {result.reason}", file=out)
    if summary["ok"]:
        print(
            f"OK: every workload that fits the topology was admitted on a matching cluster; "
            f"{summary['expected_pending']} pending as expected (they fit nowhere).",
            file=out,
        )
    else:
        print("FAILED:", file=out)
        for problem in summary["problems"]:
            print(f"  - {problem}", file=out)
    out.flush()


def _short_reason(reason: str) -> str:
    """The decision part of a ``Nominated`` Event message: ``nominated [X] by ALG: REASON.
    verdicts`` gives ``REASON``; other texts are returned whole."""
    if reason.startswith("nominated [") and ": " in reason:
        _, _, rest = reason.partition(": ")
        head, _, _ = rest.partition(". ")
        return head
    return reason


def _kubectl_hints(env: DemoEnvironment, out: TextIO, seconds: float | None) -> None:
    manager = env.sandbox.kubeconfig_path(env.sandbox.manager)
    until = "until Ctrl-C" if seconds is None else f"for {seconds:g} s"
    print(f"\nExplore (the clusters and the dispatcher stay up {until}):", file=out)
    print(f"  kubectl --kubeconfig {manager} get workloads.kueue.x-k8s.io -A -o wide", file=out)
    print(f"  kubectl --kubeconfig {manager} get events -A", file=out)
    print(f"  kubectl --kubeconfig {manager} -n {KUEUE_NAMESPACE} get multikueueclusters", file=out)
    for worker in env.sandbox.workers:
        path = env.sandbox.kubeconfig_path(worker)
        print(f"  kubectl --kubeconfig {path} get workloads.kueue.x-k8s.io -A", file=out)
    print(
        f"  multikueue-dispatcher explain NAMESPACE/WORKLOAD --kubeconfig {manager}",
        file=out,
    )
    out.flush()


async def run_demo(options: DemoOptions, out: TextIO | None = None) -> DemoReport:
    """Run the demo; print the live view and the summary on ``out`` (default stdout)."""
    out = out if out is not None else sys.stdout
    live = options.live if options.live is not None else out.isatty()
    lines = [t.line for t in options.workloads]
    expected = expectations(lines, options.topology)
    results = {
        f"{t.line.namespace}/{t.line.name}": WorkloadResult(
            t.line, expected[f"{t.line.namespace}/{t.line.name}"], at=t.at
        )
        for t in options.workloads
    }
    ordered = list(results.values())
    settings: dict[str, Any] = {"log_level": "error"}
    if options.algorithms:
        settings["algorithms"] = list(options.algorithms)
    with contextlib.ExitStack() as stack:
        directory = options.directory or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="mkd-sandbox-"))
        )
        kind = "emulated" if options.backend == "sandbox" else "real"
        print(
            f"multikueue-dispatcher sandbox: starting {len(options.topology.workers)} {kind} "
            f"workers, the manager, Kueue and the dispatcher in {directory}",
            file=out,
            flush=True,
        )
        errors = stack.enter_context(_collect_errors())
        async with _installation(options, directory, settings) as env:
            await _wait_for_workers(env, within=60)
            if options.backend == "real":
                note = "Kueue: real v0.19.2 processes (kube-apiserver, etcd, Kueue) on loopback"
            elif env.sandbox.schemas:
                note = "Kueue CRDs: real v0.19.2 schemas and CEL rules enforced"
            else:
                note = (
                    "Kueue CRDs: not found (set KUEUE_CRDS_DIR); Kueue kinds served without "
                    "validation"
                )
            print(note, file=out, flush=True)
            tracker = Tracker(env, results)
            started = time.monotonic()
            print(
                f"Submitting {len(ordered)} workloads (algorithm "
                f"{'+'.join(env.dispatcher.settings.algorithms) if env.dispatcher else '?'}; "
                f"job run times divided by {options.time_scale:g})",
                file=out,
                flush=True,
            )
            timed_out = await _drive(options, env, tracker, ordered, started, out, live)
            elapsed = time.monotonic() - started
            events = await _events(env)
            for result in ordered:
                key = f"{result.line.namespace}/{result.workload}"
                result.reason = _reason(result, events.get(key, []))
            summary = _summarise(
                options, env, ordered, errors.messages, elapsed, directory, timed_out
            )
            report = DemoReport(ordered, summary)
            _print_summary(report, out, live)
            if options.json_path is not None:
                options.json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
                print(f"Wrote {options.json_path}", file=out, flush=True)
            if options.keep:
                _kubectl_hints(env, out, options.keep_seconds)
                await wait_for_signal(options.keep_seconds)
    return report


def _installation(
    options: DemoOptions, directory: Path, settings: Mapping[str, Any]
) -> contextlib.AbstractAsyncContextManager[DemoEnvironment]:
    """The clusters, Kueue and the dispatcher of the chosen backend."""
    if options.backend == "real":
        from dispatcher_sandbox.real_kueue.environment import real_environment

        return real_environment(directory, options.topology, settings=settings)
    return environment(directory, options.topology, settings=settings, crds=options.crds)


async def _drive(
    options: DemoOptions,
    env: DemoEnvironment,
    tracker: Tracker,
    ordered: list[WorkloadResult],
    started: float,
    out: TextIO,
    live: bool,
) -> bool:
    """Submit the workloads on time and show progress until done; True when it timed out."""
    scale = options.time_scale

    async def submit_all() -> None:
        for result in ordered:
            delay = started + result.at / scale - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            await env.submit([_scaled(result.line, scale)])
            result.submitted_at = time.monotonic()
            tracker._signal()

    last_submission = max((r.at for r in ordered), default=0.0) / scale
    deadline = started + last_submission + options.timeout
    timed_out = False
    async with anyio.create_task_group() as group:
        group.start_soon(submit_all)
        view = _LiveView(env, ordered, out, started) if live else None
        with view if view is not None else contextlib.nullcontext():
            last_line = ""
            last_print = 0.0
            while not tracker.done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                with anyio.move_on_after(min(1.0, remaining)):
                    await tracker.changed.wait()
                now = time.monotonic()
                if view is None and now - last_print >= 1.0:
                    line = _plain_progress(env, ordered, now - started)
                    if line.split("] ", 1)[1] != last_line:
                        print(line, file=out, flush=True)
                        last_line = line.split("] ", 1)[1]
                    last_print = now
            if view is None:
                print(_plain_progress(env, ordered, time.monotonic() - started), file=out)
        group.cancel_scope.cancel()
    return timed_out


class _LiveView:
    """The rich live table (refreshed four times a second)."""

    def __init__(
        self, env: DemoEnvironment, results: list[WorkloadResult], out: TextIO, started: float
    ) -> None:
        from rich.console import Console
        from rich.live import Live

        self._env = env
        self._results = results
        self._started = started
        self._live = Live(
            get_renderable=self._render,
            console=Console(file=out),
            refresh_per_second=4,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def _render(self) -> Any:
        elapsed = time.monotonic() - self._started
        return _live_table(self._env, self._results, elapsed, "")

    def __enter__(self) -> _LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)


# --- command line -------------------------------------------------------------------------------


def options_from_args(args: Any) -> DemoOptions:
    """Build :class:`DemoOptions` from the ``sandbox`` command's arguments.

    Raises :class:`TopologyError`, :class:`WorkloadFileError` or :class:`OSError` for bad files.
    """
    topology_name = args.topology or DEFAULT_TOPOLOGY
    topology = load_topology(topology_name)
    if args.trace and args.workloads:
        raise WorkloadFileError("give --workloads or --trace, not both")
    if args.trace:
        timed = load_trace(args.trace, topology)
    elif args.workloads:
        timed = [TimedLine(0.0, line) for line in load_workloads(args.workloads, topology)]
    else:
        try:
            lines = parse_workload_lines(
                demo_workload_text().splitlines(),
                source="demo-workloads.jsonl",
                topology=topology,
            )
        except WorkloadFileError as error:
            raise WorkloadFileError(
                f"the built-in demo mix does not fit topology {topology_name} "
                f"(give --workloads FILE):\n{error}"
            ) from error
        timed = [TimedLine(0.0, line) for line in lines]
    if args.time_scale <= 0:
        raise WorkloadFileError("--time-scale must be > 0")
    return DemoOptions(
        topology=topology,
        workloads=timed,
        topology_name=topology_name,
        directory=Path(args.dir) if args.dir else None,
        algorithms=[a for a in args.algorithm.split(",") if a] if args.algorithm else None,
        time_scale=args.time_scale,
        timeout=args.timeout,
        json_path=Path(args.json) if args.json else None,
        keep=args.keep,
        keep_seconds=args.duration,
        backend=getattr(args, "backend", None) or "sandbox",
    )


def main(args: Any) -> int:
    """The ``sandbox`` command (without a subcommand): 0 ok, 1 something failed, 2 bad input."""
    try:
        options = options_from_args(args)
    except (TopologyError, WorkloadFileError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(run_demo(options))
    except KeyboardInterrupt:
        return 130
    return 0 if report.ok else 1
