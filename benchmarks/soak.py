"""Soak: steady arrivals with random faults on the sandbox; is the dispatcher flat over time?

Not a test (tests/faults/test_soak_script.py only smoke-runs it for a few seconds): it prints a
table over time, least-squares slopes after warm-up and a verdict, and writes them as JSON
(``--json FILE``) and as a plot (``--plot FILE``, needs matplotlib from the ``sim`` extra).
docs/soak.md explains the set-up, the thresholds and the figures of a 30-minute run.

Set-up (two OS processes):

- **this process**: the sandbox (fake API servers for the manager and the three workers of the
  default topology, over HTTPS) and the Kueue emulation (``environment(...,
  run_dispatcher=False)``), the arrival generator, the fault injector, the reaper (it deletes
  the Job of every finished Workload, as a TTL controller would, so the population stays
  bounded and memory growth means retention, not more objects) and the sampler;
- **the dispatcher**, ``python -m dispatcher run --kubeconfig <manager> --no-leader-election
  --log-format json``, alone in its process so its memory, file descriptors, TCP connections
  and asyncio tasks are its own.

Arrivals: Poisson at ``--rate`` Jobs per second (default 0.5, see docs/soak.md): 70% CPU Jobs
(1-4 CPUs, team-b), 30% GPU Jobs (1-2 GPUs, team-a: a third require A100, a sixth H100, the
rest prefer H100 then A100 or state nothing), each running ``runSeconds`` uniform in [2, 10]
(``--max-run-seconds``) once admitted on a worker.

Faults (seeded with ``--seed``): on the manager and every worker, for the whole run, 1% of
requests answer 500, 1% 503, 1% 429 with ``Retry-After: 1`` and 5% are delayed by 0.1-0.5 s.
On top, an episode every ``--episode-seconds`` on average (exponential gaps), in rounds of nine
in a seeded random order, with these counts per round: watch streams of one cluster dropped (3;
abruptly or cleanly, 50/50), watches dropped with the next resumes answered 410 Expired (2), a
worker down for 2-6 s then up (1), a worker slow (1 s per request) for 10 s (1), nothing (2;
the draw that leaves the dispatcher alone).
These faults hit every client of a cluster (the Kueue emulation and this script too), as a
failing API server would; both retry.

Sampled every ``--interval`` seconds: the dispatcher's RSS, open file descriptors, TCP
connections and threads (psutil), its asyncio tasks (``multikueue_dispatcher_event_loop_tasks``)
and decision latency over the interval (mean from ``_sum``/``_count``, p50/p95 interpolated in
the histogram's buckets as Prometheus' ``histogram_quantile``) from its ``/metrics``; Jobs
submitted, Workloads admitted on a worker, pending (on the manager, not yet admitted on a
worker), finished and reaped; faults fired.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--seed 1] [--rate 2] [--interval 20]
        [--json soak.json] [--plot soak.png] [--dispatcher-log dispatcher.log]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import psutil

from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import Environment, environment
from dispatcher_sandbox.fake_apiserver.faults import Fault, Faults
from dispatcher_sandbox.fake_apiserver.server import FakeCluster
from dispatcher_sandbox.harness.scenario import (
    A100,
    H100,
    cluster_of,
    cpu_jobs,
    free_port,
    gpu_job,
    job_name,
    run_command,
    scrape_url,
)
from dispatcher_sandbox.kube_client import JOBS, WORKLOADS, KubeError
from dispatcher_sandbox.kueue_crds import kueue_crds_dir

PREFIX = "multikueue_dispatcher_"
WARM_UP_FRACTION = 0.2
MIB = 1024 * 1024

# Verdict thresholds (per hour, after warm-up); docs/soak.md justifies them.
THRESHOLDS = {
    "rss_mib_per_h": 4.0,
    "tasks_per_h": 10.0,
    "fds_per_h": 10.0,
    "connections_per_h": 10.0,
    "latency_mean_ms_per_h": 5.0,
}

EPISODES = (
    ("watch-drop", 3),
    ("watch-expire", 2),
    ("worker-down", 1),
    ("worker-slow", 1),
    ("nothing", 2),
)


# --- the dispatcher process ---------------------------------------------------------------------


@dataclass
class Dispatcher:
    """The dispatcher OS process and where it serves."""

    process: anyio.abc.Process
    metrics_url: str
    ready_url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


async def start_dispatcher(kubeconfig: Path, log: Path) -> Dispatcher:
    """Run ``python -m dispatcher run`` and wait until ``/readyz`` answers 200."""
    health, metrics = free_port(), free_port()
    command = run_command(kubeconfig, health=health, metrics=metrics)
    output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        process = await anyio.open_process(command, stdout=output, stderr=output, stdin=None)
    finally:
        os.close(output)  # the child keeps its own descriptor
    dispatcher = Dispatcher(
        process,
        f"http://127.0.0.1:{metrics}/metrics",
        f"http://127.0.0.1:{health}/readyz",
        log,
    )
    async with aiohttp.ClientSession() as session:
        with anyio.fail_after(90):
            while True:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"the dispatcher exited with {process.returncode}; see {log}"
                    )
                try:
                    async with session.get(dispatcher.ready_url) as response:
                        if response.status == 200:
                            return dispatcher
                except aiohttp.ClientError:
                    pass
                await anyio.sleep(0.25)


async def stop_dispatcher(dispatcher: Dispatcher) -> int:
    """SIGTERM, then wait (SIGKILL after 20 s); the exit code."""
    if dispatcher.process.returncode is None:
        dispatcher.process.terminate()
        with anyio.move_on_after(20):
            await dispatcher.process.wait()
        if dispatcher.process.returncode is None:
            dispatcher.process.kill()
            await dispatcher.process.wait()
    code = dispatcher.process.returncode
    return -1 if code is None else code


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(value for _, value in samples.get(name, ()))


def latency_buckets(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[float, float]:
    """Cumulative decision-latency bucket counts, summed over label sets, by upper bound."""
    buckets: dict[float, float] = {}
    for labels, value in samples.get(PREFIX + "decision_latency_seconds_bucket", ()):
        bound = float(labels["le"])
        buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """``histogram_quantile`` over cumulative buckets (linear inside a bucket)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    count = buckets[bounds[-1]]
    rank = q * count
    lower, below = 0.0, 0.0
    for bound in bounds:
        cumulative = buckets[bound]
        if cumulative >= rank:
            if math.isinf(bound):
                return lower  # beyond the last finite bucket: its bound, as Prometheus
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower


# --- arrivals and the reaper ---------------------------------------------------------------------


@dataclass
class Flow:
    """What the workload side did so far."""

    submitted: int = 0
    submit_retries: int = 0
    admitted: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    reaped: int = 0
    finish_reasons: Counter[str] = field(default_factory=Counter)
    reaping: dict[str, float] = field(default_factory=dict)


def random_job(rng: random.Random, index: int, max_run_seconds: float) -> Any:
    name = f"soak-{index:06d}"
    run_seconds = round(rng.uniform(min(2.0, max_run_seconds), max_run_seconds), 1)
    if rng.random() < 0.7:
        [line] = cpu_jobs(name, 1, cpu=str(rng.choice((1, 2, 4))))
        return line.model_copy(update={"name": name, "run_seconds": run_seconds})
    gpus = rng.choice((1, 1, 2))
    draw = rng.random()
    if draw < 1 / 3:
        return gpu_job(name, gpus=gpus, required=A100, runSeconds=run_seconds)
    if draw < 1 / 2:
        return gpu_job(name, gpus=1, required=H100, runSeconds=run_seconds)
    if draw < 5 / 6:
        return gpu_job(name, gpus=gpus, preferredGpuTypes=[H100, A100], runSeconds=run_seconds)
    return gpu_job(name, gpus=gpus, runSeconds=run_seconds)


async def submit_with_retry(env: Environment, line: Any, flow: Flow) -> None:
    """Create the Job, retrying injected errors (409: an earlier attempt got through)."""
    for attempt in range(60):
        try:
            await env.submit([line])
            return
        except KubeError as error:
            if error.status == 409:
                return
            flow.submit_retries += 1
        except (aiohttp.ClientError, TimeoutError):
            flow.submit_retries += 1
        await anyio.sleep(min(0.1 * 2**attempt, 2.0))
    raise RuntimeError(f"could not submit {line.name} in 60 attempts")


async def arrivals(
    env: Environment,
    rng: random.Random,
    rate: float,
    max_run_seconds: float,
    flow: Flow,
    stop: anyio.Event,
) -> None:
    async with anyio.create_task_group() as group:
        index = 0
        while not stop.is_set():
            with anyio.move_on_after(rng.expovariate(rate)):
                await stop.wait()
            if stop.is_set():
                break
            group.start_soon(submit_with_retry, env, random_job(rng, index, max_run_seconds), flow)
            flow.submitted += 1
            index += 1


def soak_workloads(env: Environment) -> list[dict[str, Any]]:
    """The manager Workloads of this run, from the Kueue emulation's informer (no request)."""
    cache = env.kueue.manager.conn.cache(WORKLOADS)
    return [w for w in list(cache.objects.values()) if job_name(w).startswith("soak-")]


def has_condition(workload: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (workload.get("status") or {}).get("conditions") or ()
    )


def is_finished(workload: dict[str, Any]) -> bool:
    return has_condition(workload, "Finished")


def finish_reason(workload: dict[str, Any]) -> str:
    """``reason: message`` of the Finished condition, and whether it ran on a worker."""
    for c in (workload.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Finished":
            where = "on a worker" if cluster_of(workload) else "without clusterName"
            return f"{c.get('reason')} ({where}): {str(c.get('message', ''))[:80]}"
    return "?"


async def reaper(env: Environment, flow: Flow, stop: anyio.Event) -> None:
    """Delete the Job of every finished Workload (its Workload goes with it)."""
    while not stop.is_set():
        now = time.monotonic()
        for workload in soak_workloads(env):
            name = job_name(workload)
            if cluster_of(workload):
                flow.admitted.add(name)
            if not is_finished(workload):
                continue
            flow.admitted.add(name)  # finished: it ran on a worker (finish_reasons says how)
            if name not in flow.finished:
                flow.finished.add(name)
                flow.finish_reasons[finish_reason(workload)] += 1
            if now - flow.reaping.get(name, -math.inf) < 30:
                continue
            flow.reaping[name] = now
            try:
                await env.manager_client.delete(JOBS, name, workload["metadata"]["namespace"])
                flow.reaped += 1
            except (KubeError, aiohttp.ClientError, TimeoutError):
                flow.reaping[name] = now - 28  # injected error: try again in about 2 s
        with anyio.move_on_after(1.0):
            await stop.wait()


# --- faults --------------------------------------------------------------------------------------


@dataclass
class FaultLog:
    episodes: Counter[str] = field(default_factory=Counter)
    retired_fired: int = 0
    background: list[Fault] = field(default_factory=list)

    def fired(self, clusters: list[FakeCluster]) -> int:
        return self.retired_fired + sum(f.fired for c in clusters for f in c.faults.list())


def install_background(
    clusters: list[FakeCluster], seed: int, error_rate: float, latency_rate: float, log: FaultLog
) -> None:
    """Errors (500, 503, 429 with Retry-After, a third of ``error_rate`` each) and delays."""
    for index, cluster in enumerate(clusters):
        cluster.faults = Faults(seed * 100 + index)
        if error_rate > 0:
            for code in (500, 503):
                log.background.append(cluster.faults.error(code, probability=error_rate / 3))
            log.background.append(
                cluster.faults.error(429, retry_after=1, probability=error_rate / 3)
            )
        if latency_rate > 0:
            log.background.append(cluster.faults.latency(0.1, jitter=0.4, probability=latency_rate))


async def episodes(
    env: Environment, rng: random.Random, mean_gap: float, log: FaultLog, stop: anyio.Event
) -> None:
    # Rounds of the weighted kinds in a seeded random order: every kind comes up in proportion
    # (independent draws left a 30-minute run without a single worker-down).
    round_: list[str] = []
    clusters = env.sandbox.clusters
    while not stop.is_set():
        with anyio.move_on_after(rng.expovariate(1.0 / mean_gap)):
            await stop.wait()
        if stop.is_set():
            return
        if not round_:
            round_ = [kind for kind, weight in EPISODES for _ in range(weight)]
            rng.shuffle(round_)
        kind = round_.pop()
        log.episodes[kind] += 1
        if kind == "watch-drop":
            rng.choice(clusters).drop_watches(abrupt=rng.random() < 0.5)
        elif kind == "watch-expire":
            cluster = rng.choice(clusters)
            cluster.expire_next_watches(2)
            cluster.drop_watches()
        elif kind == "worker-down":
            worker = rng.choice(env.sandbox.workers)
            await worker.down()
            try:
                with anyio.move_on_after(rng.uniform(2.0, 6.0)):
                    await stop.wait()
            finally:
                await worker.up()
        elif kind == "worker-slow":
            worker = rng.choice(env.sandbox.workers)
            slow = worker.faults.latency(1.0)
            try:
                with anyio.move_on_after(10.0):
                    await stop.wait()
            finally:
                log.retired_fired += slow.fired
                worker.faults.remove(slow.id)


# --- sampling ------------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float  # seconds since the start of arrivals
    rss_mib: float
    fds: int
    connections: int
    threads: int
    tasks: float
    cpu_percent: float
    sandbox_cpu_percent: float  # this process: fake API servers, Kueue emulation, driver
    decisions: float  # in the interval
    latency_mean_ms: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    submitted: int
    admitted: int
    pending: int
    reserved: int  # of pending: quota reserved on the manager (eligible for the dispatcher)
    finished: int
    reaped: int
    faults_fired: int
    episodes: int
    dispatcher_errors: float
    queue_depth: float
    connected_workers: float
    load1: float | None = None  # the machine's 1-minute load average (shared with others)


@dataclass
class Sampler:
    dispatcher: Dispatcher
    env: Environment
    flow: Flow
    faults: FaultLog
    start: float
    session: aiohttp.ClientSession
    process: psutil.Process = field(init=False)
    own: psutil.Process = field(default_factory=psutil.Process)
    previous: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.process = psutil.Process(self.dispatcher.pid)

    async def take(self) -> Sample:
        metrics = await scrape_url(self.session, self.dispatcher.metrics_url)
        now = time.monotonic()
        proc = self.process
        with proc.oneshot():
            rss = proc.memory_info().rss / MIB
            fds = proc.num_fds()
            threads = proc.num_threads()
            times = proc.cpu_times()
        connections = len(proc.net_connections(kind="tcp"))
        cpu = times.user + times.system
        own_times = self.own.cpu_times()
        own_cpu = own_times.user + own_times.system
        buckets = latency_buckets(metrics)
        count = total(metrics, PREFIX + "decision_latency_seconds_count")
        seconds = total(metrics, PREFIX + "decision_latency_seconds_sum")
        before = self.previous or {
            "buckets": {},
            "count": 0.0,
            "sum": 0.0,
            "cpu": 0.0,
            "own_cpu": 0.0,
            "t": 0.0,
        }
        delta = {b: v - before["buckets"].get(b, 0.0) for b, v in buckets.items()}
        decisions = count - before["count"]
        elapsed = (now - before["t"]) if before["t"] else None
        self.previous = {
            "buckets": buckets,
            "count": count,
            "sum": seconds,
            "cpu": cpu,
            "own_cpu": own_cpu,
            "t": now,
        }

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000, 3)

        workloads = soak_workloads(self.env)
        waiting = [w for w in workloads if not cluster_of(w) and not is_finished(w)]
        connected = sum(
            value
            for labels, value in metrics.get(PREFIX + "worker_connection_state", ())
            if labels.get("state") == "connected"
        )
        return Sample(
            t=round(now - self.start, 1),
            rss_mib=round(rss, 2),
            fds=fds,
            connections=connections,
            threads=threads,
            tasks=total(metrics, PREFIX + "event_loop_tasks"),
            cpu_percent=round(100 * (cpu - before["cpu"]) / elapsed, 1) if elapsed else 0.0,
            sandbox_cpu_percent=(
                round(100 * (own_cpu - before["own_cpu"]) / elapsed, 1) if elapsed else 0.0
            ),
            decisions=decisions,
            latency_mean_ms=ms((seconds - before["sum"]) / decisions) if decisions else None,
            latency_p50_ms=ms(quantile(0.5, delta)) if decisions else None,
            latency_p95_ms=ms(quantile(0.95, delta)) if decisions else None,
            submitted=self.flow.submitted,
            admitted=len(self.flow.admitted),
            pending=len(waiting),
            reserved=sum(1 for w in waiting if has_condition(w, "QuotaReserved")),
            finished=len(self.flow.finished),
            reaped=self.flow.reaped,
            faults_fired=self.faults.fired(self.env.sandbox.clusters),
            episodes=sum(self.faults.episodes.values()),
            dispatcher_errors=total(metrics, PREFIX + "errors_total"),
            queue_depth=total(metrics, PREFIX + "queue_depth"),
            connected_workers=connected,
            load1=round(os.getloadavg()[0], 2),
        )


# --- analysis ------------------------------------------------------------------------------------


def slope_per_hour(points: list[tuple[float, float]]) -> dict[str, float | None]:
    """Least-squares slope of value over time (per hour), its standard error, and the mean."""
    if len(points) < 3:
        return {"slope": None, "stderr": None, "mean": None}
    hours = [t / 3600 for t, _ in points]
    values = [v for _, v in points]
    mean_h, mean_v = statistics.fmean(hours), statistics.fmean(values)
    sxx = sum((h - mean_h) ** 2 for h in hours)
    if sxx == 0:
        return {"slope": None, "stderr": None, "mean": mean_v}
    slope = sum((h - mean_h) * (v - mean_v) for h, v in zip(hours, values, strict=True)) / sxx
    residuals = [v - (mean_v + slope * (h - mean_h)) for h, v in zip(hours, values, strict=True)]
    stderr = math.sqrt(sum(r * r for r in residuals) / (len(points) - 2) / sxx)
    return {"slope": slope, "stderr": stderr, "mean": mean_v}


SLOPED = (
    ("rss_mib_per_h", "rss_mib"),
    ("tasks_per_h", "tasks"),
    ("fds_per_h", "fds"),
    ("connections_per_h", "connections"),
    ("latency_mean_ms_per_h", "latency_mean_ms"),
    ("latency_p95_ms_per_h", "latency_p95_ms"),
    ("threads_per_h", "threads"),
    ("pending_per_h", "pending"),
)


def analyse(samples: list[Sample]) -> dict[str, Any]:
    skip = math.ceil(len(samples) * WARM_UP_FRACTION)
    kept = samples[skip:]
    slopes: dict[str, dict[str, float | None]] = {}
    for key, attribute in SLOPED:
        points = [(s.t, float(v)) for s in kept if (v := getattr(s, attribute)) is not None]
        slopes[key] = slope_per_hour(points)
    checks = {}
    for key, limit in THRESHOLDS.items():
        slope = slopes[key]["slope"]
        checks[key] = {"slope": slope, "limit": limit, "ok": slope is not None and slope <= limit}
    flat = all(c["ok"] for c in checks.values())
    enough = all(c["slope"] is not None for c in checks.values())
    return {
        "warm_up_samples": skip,
        "samples_used": len(kept),
        "from_t": kept[0].t if kept else None,
        "slopes": slopes,
        "checks": checks,
        "verdict": "flat" if flat else "not flat" if enough else "inconclusive (too few samples)",
    }


# --- output --------------------------------------------------------------------------------------

COLUMNS = (
    ("t", "t s", "{:.0f}"),
    ("rss_mib", "RSS MiB", "{:.1f}"),
    ("tasks", "tasks", "{:.0f}"),
    ("fds", "fds", "{}"),
    ("connections", "conns", "{}"),
    ("threads", "thr", "{}"),
    ("cpu_percent", "CPU%", "{:.0f}"),
    ("sandbox_cpu_percent", "sbx CPU%", "{:.0f}"),
    ("decisions", "decis.", "{:.0f}"),
    ("latency_mean_ms", "mean ms", "{:.2f}"),
    ("latency_p50_ms", "p50 ms", "{:.2f}"),
    ("latency_p95_ms", "p95 ms", "{:.2f}"),
    ("submitted", "subm.", "{}"),
    ("admitted", "admit.", "{}"),
    ("pending", "pend.", "{}"),
    ("reserved", "resv.", "{}"),
    ("faults_fired", "faults", "{}"),
    ("episodes", "episodes", "{}"),
    ("load1", "load", "{:.1f}"),
)


def header() -> str:
    return "  ".join(f"{title:>8}" for _, title, _ in COLUMNS)


def row(sample: Sample) -> str:
    cells = []
    for attribute, _, spec in COLUMNS:
        value = getattr(sample, attribute)
        cells.append(f"{'-' if value is None else spec.format(value):>8}")
    return "  ".join(cells)


def markdown_table(samples: list[Sample], rows: int = 13) -> str:
    step = max(1, math.ceil(len(samples) / rows))
    chosen = samples[::step]
    if chosen and chosen[-1] is not samples[-1]:
        chosen.append(samples[-1])
    lines = [
        "| " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|" + "---:|" * len(COLUMNS),
    ]
    for sample in chosen:
        cells = []
        for attribute, _, spec in COLUMNS:
            value = getattr(sample, attribute)
            cells.append("-" if value is None else spec.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def slope_text(analysis: dict[str, Any]) -> str:
    units = {
        "rss_mib_per_h": "MiB/h",
        "tasks_per_h": "tasks/h",
        "fds_per_h": "fds/h",
        "connections_per_h": "conns/h",
        "latency_mean_ms_per_h": "ms/h",
        "latency_p95_ms_per_h": "ms/h",
        "threads_per_h": "threads/h",
        "pending_per_h": "workloads/h",
    }
    lines = []
    for key, unit in units.items():
        fit = analysis["slopes"][key]
        check = analysis["checks"].get(key)
        if fit["slope"] is None:
            text = "n/a (fewer than 3 samples after warm-up, or no decisions)"
        else:
            text = f"{fit['slope']:+.2f} ± {fit['stderr']:.2f} {unit} (mean {fit['mean']:.2f})"
        if check is not None and fit["slope"] is not None:
            text += f"  limit {check['limit']:g}: {'ok' if check['ok'] else 'EXCEEDED'}"
        lines.append(f"  {key:<24} {text}")
    return "\n".join(lines)


def plot(samples: list[Sample], analysis: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed (pip install -e '.[sim]')", file=sys.stderr)
        return False
    panels = (
        ("RSS (MiB)", ("rss_mib",), "rss_mib_per_h"),
        ("asyncio tasks", ("tasks",), "tasks_per_h"),
        ("open fds / TCP connections", ("fds", "connections"), "fds_per_h"),
        ("decision latency (ms)", ("latency_mean_ms", "latency_p50_ms", "latency_p95_ms"), None),
        ("workloads", ("pending", "queue_depth"), None),
        ("dispatcher CPU (%)", ("cpu_percent",), None),
    )
    figure, axes = plt.subplots(3, 2, figsize=(12, 10), sharex=True)
    start = analysis["from_t"]
    for axis, (title, attributes, fit_key) in zip(axes.flat, panels, strict=True):
        for attribute in attributes:
            xs = [s.t / 60 for s in samples if getattr(s, attribute) is not None]
            ys = [getattr(s, attribute) for s in samples if getattr(s, attribute) is not None]
            axis.plot(xs, ys, marker=".", label=attribute)
        if fit_key and analysis["slopes"][fit_key]["slope"] is not None and start is not None:
            fit = analysis["slopes"][fit_key]
            kept = [s.t for s in samples if s.t >= start]
            mean_t = statistics.fmean(kept) / 3600
            xs = [kept[0] / 60, kept[-1] / 60]
            ys = [fit["mean"] + fit["slope"] * (x / 60 - mean_t) for x in xs]
            axis.plot(xs, ys, "k--", label=f"fit {fit['slope']:+.2f}/h")
        if start is not None:
            axis.axvline(start / 60, color="grey", linewidth=0.8)
        axis.set_title(title)
        axis.legend(fontsize=7)
    for axis in axes[-1]:
        axis.set_xlabel("minutes")
    figure.suptitle(f"soak: {analysis['verdict']} (grey line: end of warm-up)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return True


# --- main ----------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    crds = None if args.no_crds else kueue_crds_dir()
    log_path = work / "dispatcher.log"
    flow = Flow()
    faults = FaultLog()
    samples: list[Sample] = []
    result: dict[str, Any] = {}
    try:
        async with environment(work, default_topology(), run_dispatcher=False, crds=crds) as env:
            dispatcher = await start_dispatcher(
                env.sandbox.kubeconfig_path(env.sandbox.manager), log_path
            )
            print(f"dispatcher pid {dispatcher.pid}; work dir {work}", flush=True)
            stop = anyio.Event()
            start = time.monotonic()
            duration = args.minutes * 60
            async with aiohttp.ClientSession() as session, anyio.create_task_group() as group:
                sampler = Sampler(dispatcher, env, flow, faults, start, session)
                await sampler.take()  # baseline for the first interval's deltas
                install_background(
                    env.sandbox.clusters, args.seed, args.error_rate, args.latency_rate, faults
                )
                group.start_soon(arrivals, env, rng, args.rate, args.max_run_seconds, flow, stop)
                group.start_soon(reaper, env, flow, stop)
                group.start_soon(
                    episodes, env, random.Random(args.seed + 1), args.episode_seconds, faults, stop
                )
                print(header(), flush=True)
                while time.monotonic() - start < duration:
                    await anyio.sleep(
                        min(args.interval, max(0.0, start + duration - time.monotonic()))
                    )
                    if dispatcher.process.returncode is not None:
                        raise RuntimeError(
                            f"the dispatcher exited with {dispatcher.process.returncode}"
                        )
                    sample = await sampler.take()
                    samples.append(sample)
                    print(row(sample), flush=True)
                # Faults stop; everything submitted must finish (stuck: what does not).
                stop.set()
            fired = faults.fired(env.sandbox.clusters)
            for cluster in env.sandbox.clusters:
                faults.retired_fired += sum(f.fired for f in cluster.faults.clear())
                await cluster.up()
            drained = await drain(env, flow, args.drain_seconds)
            async with aiohttp.ClientSession() as session:
                final = await scrape_url(session, dispatcher.metrics_url)
            code = await stop_dispatcher(dispatcher)
        logs = log_summary(log_path)
        analysis = analyse(samples)
        result = {
            "parameters": {
                "minutes": args.minutes,
                "seed": args.seed,
                "rate": args.rate,
                "interval": args.interval,
                "episode_seconds": args.episode_seconds,
                "max_run_seconds": args.max_run_seconds,
                "error_rate": args.error_rate,
                "latency_rate": args.latency_rate,
                "crds": crds is not None,
            },
            "machine": {
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                "python": platform.python_version(),
            },
            "samples": [asdict(s) for s in samples],
            "analysis": analysis,
            "faults": {"fired": fired, "episodes": dict(faults.episodes)},
            "workloads": {
                "submitted": flow.submitted,
                "submit_retries": flow.submit_retries,
                "admitted": len(flow.admitted),
                "finished": len(flow.finished),
                "stuck_after_drain": drained,
                "finish_reasons": dict(flow.finish_reasons),
            },
            "dispatcher": {
                "exit_code": code,
                "errors_by_kind": {
                    labels["kind"]: value
                    for labels, value in final.get(PREFIX + "errors_total", ())
                },
                "nominations": total(final, PREFIX + "nominations_total"),
                "log": logs,
            },
        }
        if args.dispatcher_log:
            shutil.copyfile(log_path, args.dispatcher_log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


async def drain(env: Environment, flow: Flow, within: float) -> int:
    """Reap until no Workload of the run is left; returns how many are left after ``within``."""
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(reaper, env, flow, stop)
        with contextlib.suppress(TimeoutError):
            await env.wait_for_manager(
                lambda _: not soak_workloads(env) and len(flow.finished) >= flow.submitted,
                within=within,
            )
        stop.set()
    return max(len(soak_workloads(env)), flow.submitted - len(flow.finished))


def log_summary(path: Path) -> dict[str, Any]:
    """Log lines of the dispatcher by level, and lines that hint at leaks or crashes."""
    levels: Counter[str] = Counter()
    suspicious: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
            levels[str(record.get("level", "?"))] += 1
            text = str(record.get("message", "")) + str(record.get("exc_info", ""))
        except (json.JSONDecodeError, AttributeError):
            levels["unstructured"] += 1
            text = line
        if any(m in text for m in ("Traceback", "never retrieved", "Unclosed", "was destroyed")):
            suspicious.append(line[:300])
    return {"lines_by_level": dict(levels), "suspicious": suspicious[:20]}


def report(result: dict[str, Any]) -> str:
    samples = [Sample(**s) for s in result["samples"]]
    analysis = result["analysis"]
    work = result["workloads"]
    load = ", ".join(f"{v:.2f}" for v in result["machine"]["load_average"])
    lines = [
        "",
        markdown_table(samples),
        "",
        f"slopes after warm-up (first {analysis['warm_up_samples']} samples discarded, "
        f"{analysis['samples_used']} used, from t = {analysis['from_t']} s):",
        slope_text(analysis),
        f"verdict: {analysis['verdict']}",
        f"workloads: {work['submitted']} submitted, {work['admitted']} admitted, "
        f"{work['finished']} finished, {work['stuck_after_drain']} stuck after the drain; "
        f"{work['submit_retries']} submit retries",
        f"faults fired: {result['faults']['fired']}; episodes: {result['faults']['episodes']}",
        f"dispatcher: exit {result['dispatcher']['exit_code']}, errors "
        f"{result['dispatcher']['errors_by_kind']}, log lines "
        f"{result['dispatcher']['log']['lines_by_level']}, suspicious "
        f"{len(result['dispatcher']['log']['suspicious'])}",
        f"machine: {result['machine']['cpus']} CPUs, load average at the end {load}",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="steady phase (default 30)")
    parser.add_argument("--seed", type=int, default=1, help="arrivals and faults (default 1)")
    parser.add_argument("--rate", type=float, default=0.5, help="Jobs per second (default 0.5)")
    parser.add_argument("--interval", type=float, default=20.0, help="seconds between samples")
    parser.add_argument(
        "--max-run-seconds",
        type=float,
        default=10.0,
        help="runSeconds are uniform in [2, this] (default 10)",
    )
    parser.add_argument(
        "--episode-seconds", type=float, default=45.0, help="mean gap between fault episodes"
    )
    parser.add_argument(
        "--error-rate",
        type=float,
        default=0.03,
        help="fraction of requests answered 500/503/429 on every cluster (default 0.03)",
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=0.05,
        help="fraction of requests delayed by 0.1-0.5 s (default 0.05)",
    )
    parser.add_argument(
        "--drain-seconds", type=float, default=120.0, help="limit for the drain after the run"
    )
    parser.add_argument("--json", type=Path, help="write samples, slopes and verdict to FILE")
    parser.add_argument("--plot", type=Path, help="write a PNG plot to FILE (needs matplotlib)")
    parser.add_argument("--dispatcher-log", type=Path, help="keep the dispatcher's log in FILE")
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="no run: re-analyse the samples of an earlier --json FILE with the current "
        "thresholds and print (and --json/--plot) its report",
    )
    parser.add_argument(
        "--no-crds", action="store_true", help="serve Kueue kinds without their CRD schemas"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        result = json.loads(args.report.read_text())
        result["analysis"] = analyse([Sample(**s) for s in result["samples"]])
    else:
        result = anyio.run(run, args)
    print(report(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot and result["samples"]:
        plot([Sample(**s) for s in result["samples"]], result["analysis"], args.plot)
    ok = result["dispatcher"]["exit_code"] == 0 and result["workloads"]["stuck_after_drain"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
