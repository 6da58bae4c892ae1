"""Simulation traces: workloads with arrival times, fault events, a seeded generator, JSONL files.

A **trace file** is JSON Lines (blank lines and ``#`` comments are skipped). Each line is either

* a **workload**: a line of the sandbox's workload files (:class:`dispatcher.topology.
  WorkloadLine`: ``name``, ``namespace``, ``queue``, ``count``/``requests`` or ``podSets``,
  ``gpuType``, ``preferredGpuTypes``, ``priorityClass``/``priority``, ``labels``,
  ``annotations``) plus ``arrival`` (seconds since the start of the trace, when the Job is
  created on the manager) and a required ``runSeconds`` (how long it runs once admitted); or
* a **fault**: ``{"fault": "worker-down", "cluster": NAME, "start": S, "end": S}``: the worker is
  down (disconnected, admits nothing, loses what ran there) from ``start`` to ``end``; or
* an **outage**, the same event written as the issue-17 scenario states it:
  ``{"outage": NAME, "at": S, "until": S}`` (``until`` optional: the worker never comes back).

Two faults or outages of the same worker must not overlap.

Errors name the file, the line and the field (``trace.jsonl:12: runSeconds: ...``).

:func:`generate_trace` draws a trace from :class:`TraceParams` with a seeded ``random.Random``:
Poisson arrivals with bursts, sizes of 1/2/4/8 GPUs or CPU only, GPU wishes (required, preferred
or none), priority classes and log-normal run times.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dispatcher.topology import WorkloadFileError, WorkloadLine, parse_workload_lines

__all__ = [
    "DEFAULT_SEED",
    "DEFAULT_WORKLOADS",
    "FaultEvent",
    "Trace",
    "TraceError",
    "TraceParams",
    "TraceWorkload",
    "check_overlaps",
    "dump_trace",
    "generate_trace",
    "load_trace",
    "parse_trace_lines",
]

DEFAULT_SEED = 20261130
"""Seed of the default generated trace (``simulate`` without ``--trace``)."""
DEFAULT_WORKLOADS = 5000
"""Size of the default generated trace."""

FAULT_KIND = "worker-down"
OUTAGE_KEY = "outage"


class TraceError(ValueError):
    """A trace that does not validate; the message lists ``FILE:LINE: field: message`` lines."""


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    """One workload of a trace: a workload-file line and when it arrives."""

    arrival: float
    """Seconds since the start of the trace when the Job is created on the manager."""
    line: WorkloadLine
    """What is submitted (``runSeconds`` is set: how long it runs once admitted)."""

    @property
    def run_seconds(self) -> float:
        """How long the workload runs once admitted."""
        return float(self.line.run_seconds or 0.0)


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """A worker down from ``start`` to ``end`` (seconds; ``math.inf``: it never comes back)."""

    cluster: str
    start: float
    end: float
    where: str = field(default="", compare=False)
    """Where it was given (``trace.jsonl:3``, ``--outage``), for error messages."""
    outage: bool = field(default=False, compare=False)
    """Given as an outage (an ``outage`` line, ``--outage``): ``simulate`` prints the outage
    table for it."""

    @property
    def permanent(self) -> bool:
        """The worker never comes back."""
        return math.isinf(self.end)

    def covers(self, when: float) -> bool:
        """The worker is down at ``when``."""
        return self.start <= when < self.end


@dataclass(frozen=True)
class Trace:
    """Workloads in arrival order, fault events, and where the trace came from."""

    workloads: tuple[TraceWorkload, ...]
    faults: tuple[FaultEvent, ...] = ()
    source: str = "generated"
    """``generated`` or the file name."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The generator parameters (generated traces), for the report."""


@dataclass(frozen=True)
class TraceParams:
    """Parameters of :func:`generate_trace` (the defaults make the documented default trace)."""

    workloads: int = DEFAULT_WORKLOADS
    seed: int = DEFAULT_SEED
    mean_interarrival_s: float = 120.0
    """Mean gap between arrivals of the Poisson process (bursts come on top)."""
    burst_probability: float = 0.02
    """Probability that an arrival starts a burst."""
    burst_size: tuple[int, int] = (10, 40)
    """Inclusive range of extra workloads in a burst."""
    burst_spread_s: float = 30.0
    """A burst's workloads arrive uniformly within this many seconds."""
    gpu_sizes: Mapping[int, float] = field(
        default_factory=lambda: {0: 0.30, 1: 0.30, 2: 0.20, 4: 0.12, 8: 0.08}
    )
    """GPUs per workload (0: CPU only) and their weights."""
    cpu_per_gpu: int = 8
    memory_gi_per_gpu: int = 64
    cpu_only_cpus: Mapping[int, float] = field(default_factory=lambda: {4: 0.5, 8: 0.3, 16: 0.2})
    """CPUs of CPU-only workloads (4 GiB of memory per CPU) and their weights."""
    gpu_wish: Mapping[str, float] = field(
        default_factory=lambda: {"required": 0.35, "preferred": 0.30, "none": 0.35}
    )
    """How GPU workloads state a GPU type: required (nodeSelector), preferred (annotation)."""
    gpu_types: Mapping[str, float] = field(
        default_factory=lambda: {
            "NVIDIA-A100-SXM4-80GB": 0.60,
            "NVIDIA-H100-80GB-HBM3": 0.20,
            "NVIDIA-L4": 0.20,
        }
    )
    """GPU types wished for, and their weights."""
    priority_classes: Mapping[str, float] = field(
        default_factory=lambda: {"high": 0.15, "low": 0.45, "": 0.40}
    )
    """Priority classes ("" for none) and their weights."""
    namespaces: Sequence[str] = ("default", "team-a", "team-b")
    queue: str = "user-queue"
    median_run_s: float = 1200.0
    """Median of the log-normal run time."""
    run_sigma: float = 1.0
    """Sigma of the log-normal run time (of its logarithm)."""
    min_run_s: float = 30.0
    max_run_s: float = 86400.0
    faults: Sequence[tuple[str, float, float]] = (("worker-h100", 36000.0, 37800.0),)
    """Fault events ``(cluster, start, end)`` added to the trace."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (mapping keys as strings)."""
        raw = asdict(self)
        raw["gpu_sizes"] = {str(k): v for k, v in self.gpu_sizes.items()}
        raw["cpu_only_cpus"] = {str(k): v for k, v in self.cpu_only_cpus.items()}
        raw["burst_size"] = list(self.burst_size)
        raw["namespaces"] = list(self.namespaces)
        raw["faults"] = [[c, a, None if math.isinf(b) else b] for c, a, b in self.faults]
        return raw


def _pick(rng: random.Random, weights: Mapping[Any, float]) -> Any:
    items = list(weights.items())
    return rng.choices([k for k, _ in items], weights=[w for _, w in items])[0]


def generate_trace(params: TraceParams | None = None) -> Trace:
    """Draw a trace from ``params`` (deterministic for a given seed)."""
    p = params or TraceParams()
    rng = random.Random(p.seed)
    arrivals: list[float] = []
    now = 0.0
    while len(arrivals) < p.workloads:
        now += rng.expovariate(1.0 / p.mean_interarrival_s)
        arrivals.append(now)
        if rng.random() < p.burst_probability:
            extra = rng.randint(*p.burst_size)
            arrivals.extend(now + rng.uniform(0.0, p.burst_spread_s) for _ in range(extra))
    arrivals = sorted(arrivals[: p.workloads])
    mu = math.log(p.median_run_s)
    workloads = []
    for index, arrival in enumerate(arrivals):
        gpus = int(_pick(rng, p.gpu_sizes))
        data: dict[str, Any] = {
            "name": f"wl-{index:06d}",
            "namespace": p.namespaces[rng.randrange(len(p.namespaces))],
            "queue": p.queue,
        }
        if gpus:
            data["requests"] = {
                "cpu": str(p.cpu_per_gpu * gpus),
                "memory": f"{p.memory_gi_per_gpu * gpus}Gi",
                "nvidia.com/gpu": str(gpus),
            }
            wish = _pick(rng, p.gpu_wish)
            if wish == "required":
                data["gpuType"] = _pick(rng, p.gpu_types)
            elif wish == "preferred":
                first = _pick(rng, p.gpu_types)
                rest = sorted(t for t in p.gpu_types if t != first)
                data["preferredGpuTypes"] = [first, *rest[:1]]
        else:
            cpus = int(_pick(rng, p.cpu_only_cpus))
            data["requests"] = {"cpu": str(cpus), "memory": f"{4 * cpus}Gi"}
        priority = _pick(rng, p.priority_classes)
        if priority:
            data["priorityClass"] = priority
        run = rng.lognormvariate(mu, p.run_sigma)
        data["runSeconds"] = round(min(p.max_run_s, max(p.min_run_s, run)), 1)
        workloads.append(
            TraceWorkload(arrival=round(arrival, 3), line=WorkloadLine.model_validate(data))
        )
    faults = tuple(FaultEvent(c, float(s), float(e)) for c, s, e in p.faults)
    return Trace(tuple(workloads), faults, source="generated", params=p.as_dict())


def _fault(data: Mapping[str, Any], where: str, errors: list[str]) -> FaultEvent | None:
    extra = sorted(set(data) - {"fault", "cluster", "start", "end"})
    if extra:
        errors.append(f"{where}: {extra[0]}: unknown field of a fault line")
        return None
    if data.get("fault") != FAULT_KIND:
        errors.append(f"{where}: fault: must be {FAULT_KIND!r}, not {data.get('fault')!r}")
        return None
    cluster = data.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        errors.append(f"{where}: cluster: a worker name is required")
        return None
    times = []
    for key in ("start", "end"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            errors.append(f"{where}: {key}: must be a number of seconds >= 0")
            return None
        times.append(float(value))
    if times[1] <= times[0]:
        errors.append(f"{where}: end: must be after start ({times[0]:g})")
        return None
    return FaultEvent(cluster, times[0], times[1], where=where)


def _outage(data: Mapping[str, Any], where: str, errors: list[str]) -> FaultEvent | None:
    extra = sorted(set(data) - {OUTAGE_KEY, "at", "until"})
    if extra:
        errors.append(f"{where}: {extra[0]}: unknown field of an outage line (outage, at, until)")
        return None
    cluster = data.get(OUTAGE_KEY)
    if not isinstance(cluster, str) or not cluster:
        errors.append(f"{where}: outage: a worker name is required")
        return None
    at = data.get("at")
    if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at < math.inf:
        errors.append(f"{where}: at: required, a number of seconds >= 0")
        return None
    until = data.get("until")
    if until is None:
        return FaultEvent(cluster, float(at), math.inf, where=where, outage=True)
    if isinstance(until, bool) or not isinstance(until, int | float) or not until < math.inf:
        errors.append(f"{where}: until: must be a number of seconds (or left out: never back)")
        return None
    if until <= at:
        errors.append(f"{where}: until: must be after at ({float(at):g})")
        return None
    return FaultEvent(cluster, float(at), float(until), where=where, outage=True)


def check_overlaps(faults: Sequence[FaultEvent]) -> list[tuple[FaultEvent, str]]:
    """Faults of a worker that start while it is already down, each with its error message."""
    errors = []
    ordered = sorted(faults, key=lambda f: (f.cluster, f.start, f.end))
    for before, after in itertools.pairwise(ordered):
        if before.cluster == after.cluster and after.start < before.end:
            first = before.where or "an earlier fault"
            errors.append(
                (
                    after,
                    f"{after.where or after.cluster}: {after.cluster}: down from "
                    f"{after.start:g} while already down ({first}, until {before.end:g}); "
                    "outages of one worker must not overlap",
                )
            )
    return errors


def parse_trace_lines(lines: Iterable[str], *, source: str = "trace") -> Trace:
    """Validate trace JSON Lines (see the module docstring); raises :class:`TraceError`.

    Workload lines are validated by the sandbox's workload-file parser, so a trace line and a
    ``sandbox`` workload line mean the same; every error names ``SOURCE:LINE``.
    """
    errors: list[tuple[int, str]] = []
    rewritten: list[str] = []
    arrivals: dict[int, float] = {}
    faults: list[FaultEvent] = []
    line_of: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        where = f"{source}:{number}"
        if not text or text.startswith("#"):
            rewritten.append("")
            continue
        try:
            data = json.loads(text)
        except ValueError:
            rewritten.append(text)  # the workload parser reports it, with its line number
            continue
        if not isinstance(data, dict):
            rewritten.append(text)
            continue
        if "fault" in data or OUTAGE_KEY in data:
            found: list[str] = []
            parse = _outage if OUTAGE_KEY in data and "fault" not in data else _fault
            fault = parse(data, where, found)
            errors += [(number, e) for e in found]
            if fault is not None:
                faults.append(fault)
                line_of[where] = number
            rewritten.append("")
            continue
        arrival = data.pop("arrival", None)
        if isinstance(arrival, bool) or not isinstance(arrival, int | float) or arrival < 0:
            errors.append((number, f"{where}: arrival: required, a number of seconds >= 0"))
        else:
            arrivals[number] = float(arrival)
        if data.get("runSeconds") is None:
            errors.append((number, f"{where}: runSeconds: required in a simulation trace"))
        rewritten.append(json.dumps(data))
    for fault, message in check_overlaps(faults):
        errors.append((line_of[fault.where], message))
    parsed: list[WorkloadLine] = []
    try:
        parsed = parse_workload_lines(rewritten, source=source)
    except WorkloadFileError as error:
        for message in str(error).splitlines():
            line_no = message.removeprefix(f"{source}:").split(":", 1)[0]
            errors.append((int(line_no) if line_no.isdigit() else 0, message))
    if errors:
        raise TraceError("\n".join(m for _, m in sorted(errors, key=lambda e: e[0])))
    numbers = [n for n, text in enumerate(rewritten, start=1) if text]
    workloads = [
        TraceWorkload(arrival=arrivals[n], line=line)
        for n, line in zip(numbers, parsed, strict=True)
    ]
    workloads.sort(key=lambda w: (w.arrival, w.line.namespace, w.line.name))
    return Trace(tuple(workloads), tuple(faults), source=source)


def load_trace(path: str | Path) -> Trace:
    """Read and validate a JSONL trace file (see :func:`parse_trace_lines`)."""
    with Path(path).open(encoding="utf-8") as handle:
        return parse_trace_lines(handle, source=str(path))


def dump_trace(trace: Trace) -> str:
    """The trace as JSON Lines (loads back with :func:`parse_trace_lines`)."""
    out = []
    for fault in trace.faults:
        if fault.permanent or fault.outage:
            line: dict[str, Any] = {OUTAGE_KEY: fault.cluster, "at": fault.start}
            if not fault.permanent:
                line["until"] = fault.end
            out.append(json.dumps(line))
            continue
        out.append(
            json.dumps(
                {
                    "fault": FAULT_KIND,
                    "cluster": fault.cluster,
                    "start": fault.start,
                    "end": fault.end,
                }
            )
        )
    for item in trace.workloads:
        data = item.line.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
        out.append(json.dumps({"arrival": item.arrival, **data}))
    return "\n".join(out) + "\n"
