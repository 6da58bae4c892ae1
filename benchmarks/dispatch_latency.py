"""Dispatch latency: a burst of W eligible Workloads over K emulated workers, against the real
dispatcher, with the bare status-PATCH round trip on the same fake server as the floor.

Not a test: it prints figures (and writes them as JSON with ``--json FILE``).

Set-up (two processes, two CPUs):

- a **server subprocess**, pinned to CPU 0: one fake API server per cluster (the manager and
  ``worker-1`` … ``worker-K``, the generic topology of ``sandbox serve --workers K``) over HTTPS,
  the MultiKueueClusters marked ``Active`` (what Kueue would report), and W Workloads created in
  the manager (``default/bench-N``, 10m CPU and 16Mi each, not yet eligible). **No Kueue
  emulation runs**: the subprocess plays Kueue's part itself, so that the measured path is the
  dispatcher's alone. The fake serves the Kueue kinds without their OpenAPI/CEL schema unless
  ``--crds`` is given: the fake's Python CEL evaluation costs about 2 ms per Workload status
  write, which caps it near 450 writes per CPU-second (``benchmarks/fake_apiserver.py``), below
  the rate being measured; a real API server validates in Go.
- **this process**, pinned to CPU 1: first the floor, then the real dispatcher
  (:func:`dispatcher.app.manager.run_manager`, default settings: apply mode, 4 reconcile
  workers, the default pipeline) connected to the manager through its kubeconfig file and to the
  workers through the kubeconfig Secrets, exactly as in a cluster.

What is measured:

- **nomination latency** of each workload: from the moment the server commits the status write
  that makes it eligible (``QuotaReserved=True``, ``admission``, the MultiKueue check ``Pending``:
  Kueue's quota reservation, after which the watch event goes out) to the moment the server
  commits the dispatcher's ``status.nominatedClusterNames`` write (the nomination accepted; its
  answer reaches the dispatcher about 0.1 ms later on loopback). Both instants are taken in the
  server process with ``time.monotonic()``, so no clocks are compared. The path in between: watch
  event to the dispatcher, work queue, eligibility, snapshots, the pipeline (in a worker thread,
  serialised with the in-flight ledger), the server-side apply request.
- The workloads become eligible at ``--rate`` per second (default 500, the target rate; 0: all at
  once, to measure the maximum throughput; then latency is mostly queueing).
- **nominations/s**: W / (last nomination − first eligibility).
- **patch floor**: before the dispatcher starts, this process sends ``--floor-patches``
  sequential server-side-apply patches of ``status.nominatedClusterNames`` (alternating values,
  so each is a real write) to one Workload of the same manager server, with the dispatcher's own
  client code (``dispatcher.k8s.patching.apply_status``); the round trip is timed around the call.
  The ratio is nomination latency / floor (p50 and p99 each).
- **CPU seconds per nomination**: this process's CPU time (user + system) from the first
  eligibility until the last nomination, over W. It includes everything the dispatcher does per
  workload: watch decoding, the reconcile, the decision, the write, the Event it records. Its
  baseline, measured in the same run: this process's CPU per bare PATCH of the floor (the same
  client code, sequential), so the ratio says how many bare writes' worth of CPU a nomination is.
- **peak RSS** of this process (the dispatcher), and the server's CPU use during the burst.

Mode (b), ``--kueue``: the server subprocess runs the **Kueue emulation** on the same clusters
(``dispatcher_sandbox.environment.environment``, no dispatcher there; ``--kueue-version``, and
``--kueue-worker-qps`` to lift the emulated worker clients' limit, 5 QPS per kind on v0.19 as
client-go's default) and submits the burst as **Jobs** at ``--rate`` through the API, as users
do. The emulated Kueue creates each Job's Workload, reserves quota on the manager (the
eligibility instant, as above), and after the nomination copies it to the nominated worker,
where the worker's Kueue reserves and admits and the manager records the admission: every one of
those writes is an event some watch of the dispatcher receives, and the dispatcher's CPU per
nomination includes them all (counted by kind: ``watch events applied``; and the dispatcher's
reconciles by outcome). The server is then the Kueue emulation's process, and its busy share
says whether it, rather than the dispatcher, bounds the rate.

    .venv/bin/python benchmarks/dispatch_latency.py [-W 2000] [-K 20] [--rate 500] [--json F]
    .venv/bin/python benchmarks/dispatch_latency.py --kueue --rate 25 [--kueue-worker-qps inf]

Mode (c), ``--real``: real Kueue v0.19.2 (``make real-binaries``), this dispatcher and Kueue's
AllAtOnce on the same topology in one run; ``benchmarks/dispatch_real.py`` does it and says what
it reports (nominations/s, admissions/s, copies per admitted workload, and where the time goes,
milestone by milestone).

    .venv/bin/python benchmarks/dispatch_latency.py --real [--real-jobs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
READY_TIMEOUT = 120.0
NAMESPACE = "default"
KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"
PROBE = "floor-probe"
CHECK = "multikueue"


# --- the server subprocess ---------------------------------------------------------------------


def _now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _workload(name: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "registry.k8s.io/e2e-test-images/agnhost:2.52",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    return {
        "apiVersion": f"{KUEUE}/{V1BETA2}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
                }
            ],
        },
    }


def _eligible_status() -> dict[str, Any]:
    """What Kueue writes when it reserves quota on the manager (C49: eligible from then on)."""
    now = _now_text()
    return {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "Quota reserved in ClusterQueue cluster-queue",
                "lastTransitionTime": now,
                "observedGeneration": 1,
            }
        ],
        "admission": {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
                    "resourceUsage": {"cpu": "10m", "memory": "16Mi"},
                    "count": 1,
                }
            ],
        },
        "admissionChecks": [
            {"name": CHECK, "state": "Pending", "message": "", "lastTransitionTime": now}
        ],
    }


def _server_setup(args: argparse.Namespace) -> tuple[list[str], Path]:
    """The server process's CPU and schema choice; the worker names and the directory."""
    if args.server_cpu is not None:
        os.sched_setaffinity(0, {args.server_cpu})
    if not args.crds:
        os.environ["KUEUE_CRDS_DIR"] = str(Path(tempfile.gettempdir()) / "no-kueue-crds-here")
    return [f"worker-{i}" for i in range(1, args.K + 1)], Path(args.dir)


async def _ready_then_command(ready: dict[str, Any]) -> tuple[asyncio.Event, str]:
    """Print READY (with ``ready``), then read the parent's command; the event is set on
    SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("READY " + json.dumps(ready), flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return stop, (await reader.readline()).decode().strip()


async def _paced(index: int, started: float, rate: float) -> None:
    """Wait for the ``index``-th slot at ``rate`` per second from ``started`` (0: no pacing, a
    yield every 100)."""
    if rate > 0:
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    elif index % 100 == 0:
        await asyncio.sleep(0)


def _print_result(
    latencies: list[float],
    eligible_at: Mapping[Any, float],
    nominated_at: Mapping[Any, float],
    cpu_before: float,
    started: float,
    finished: float,
    extra: dict[str, Any],
) -> None:
    """Print the burst's RESULT line for the parent process."""
    result = {
        "latencies_ms": latencies,
        "nominated": len(nominated_at),
        "first_eligible": min(eligible_at.values(), default=started),
        "last_eligible": max(eligible_at.values(), default=started),
        "last_nominated": max(nominated_at.values(), default=finished),
        "server_cpu_s": time.process_time() - cpu_before,
        "server_wall_s": finished - started,
        "server_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **extra,
    }
    print("RESULT " + json.dumps(result), flush=True)


async def _serve(args: argparse.Namespace) -> None:
    """Start the clusters, print READY, flip workloads on GO, print RESULT, wait for SIGTERM."""
    names, directory = _server_setup(args)
    from dispatcher.topology import generic_topology
    from dispatcher_sandbox.serve import start_topology

    sandbox = await start_topology(directory, generic_topology(names))
    manager = sandbox.manager
    store = manager.store
    workloads = manager.registry.get(KUEUE, "workloads")
    mkcs = manager.registry.get(KUEUE, "multikueueclusters")
    assert workloads is not None
    assert mkcs is not None
    for name in names:
        obj = copy.deepcopy(store.get(mkcs.key, ("", name)))
        assert obj is not None
        obj["status"] = {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Active",
                    "message": "Connected",
                    "lastTransitionTime": _now_text(),
                }
            ]
        }
        store.write(mkcs.key, ("", name), obj, "MODIFIED")
    keys = [(NAMESPACE, f"bench-{i:05d}") for i in range(args.W)]
    for _, name in [*keys, (NAMESPACE, PROBE)]:
        manager._seed_object(KUEUE, "workloads", V1BETA2, _workload(name))

    eligible_at: dict[tuple[str, str], float] = {}
    nominated_at: dict[tuple[str, str], float] = {}
    all_nominated = asyncio.Event()
    original_write = store.write

    def write(resource_key: Any, key: Any, obj: Any, event_type: str) -> Any:
        result = original_write(resource_key, key, obj, event_type)
        if (
            resource_key == workloads.key
            and key in eligible_at
            and key not in nominated_at
            and (obj.get("status") or {}).get("nominatedClusterNames")
        ):
            nominated_at[key] = time.monotonic()
            if len(nominated_at) == len(keys):
                all_nominated.set()
        return result

    store.write = write  # type: ignore[method-assign]

    stop, command = await _ready_then_command({"dir": str(directory), "schema": sandbox.schemas})
    if command == "GO":
        cpu_before = time.process_time()
        started = time.monotonic()
        for index, key in enumerate(keys):
            await _paced(index, started, args.rate)
            obj = copy.deepcopy(store.get(workloads.key, key))
            assert obj is not None
            obj["status"] = _eligible_status()
            eligible_at[key] = time.monotonic()
            original_write(workloads.key, key, obj, "MODIFIED")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(args.timeout):
                await all_nominated.wait()
        finished = time.monotonic()
        latencies = [(nominated_at[k] - eligible_at[k]) * 1000.0 for k in keys if k in nominated_at]
        _print_result(latencies, eligible_at, nominated_at, cpu_before, started, finished, {})
    await stop.wait()
    await sandbox.stop()


def _eligible(obj: dict[str, Any]) -> bool:
    """The dispatcher's eligibility (C49): quota reserved, the MultiKueue check Pending."""
    status = obj.get("status") or {}
    reserved = any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return reserved and any(
        c.get("name") == CHECK and c.get("state") == "Pending"
        for c in status.get("admissionChecks") or []
    )


async def _serve_kueue(args: argparse.Namespace) -> None:
    """Mode (b): the Kueue emulation on the same clusters, the burst submitted as Jobs.

    The Jobs (10m CPU, 16Mi, running an hour once admitted) are created on the manager at
    ``--rate`` per second through the API, as users do; the emulated Kueue creates their
    Workloads, reserves quota on the manager (the eligibility instant), and, once the dispatcher
    nominates, copies them to the nominated worker, where the worker's Kueue reserves and admits,
    and the manager records the admission and starts the Job. Every one of those writes is an
    event some watch of the dispatcher receives. Prints READY, waits for GO, prints RESULT.
    """
    names, directory = _server_setup(args)
    from dispatcher.topology import WorkloadLine, generic_topology
    from dispatcher_sandbox.environment import environment

    overrides: dict[str, Any] = {"version": args.kueue_version}
    if args.kueue_worker_qps is not None:
        overrides["worker_client_qps"] = args.kueue_worker_qps
        overrides["worker_client_burst"] = max(1, int(min(args.kueue_worker_qps, 1e6)))
    async with environment(
        directory, generic_topology(names), run_dispatcher=False, kueue=overrides
    ) as env:
        manager = env.sandbox.manager
        store = manager.store
        workloads = manager.registry.get(KUEUE, "workloads")
        assert workloads is not None
        manager._seed_object(KUEUE, "workloads", V1BETA2, _workload(PROBE) | {"spec": {}})
        jobs = [f"bench-{i:05d}" for i in range(args.W)]
        job_of: dict[tuple[str, str], str] = {}  # Workload key -> Job name (its owner)
        eligible_at: dict[str, float] = {}
        nominated_at: dict[str, float] = {}
        admitted_at: dict[str, float] = {}
        all_nominated = asyncio.Event()
        original_write = store.write

        def write(resource_key: Any, key: Any, obj: Any, event_type: str) -> Any:
            result = original_write(resource_key, key, obj, event_type)
            if resource_key != workloads.key:
                return result
            job = job_of.get(key)
            if job is None:
                owners = (obj.get("metadata") or {}).get("ownerReferences") or []
                job = next((o.get("name") for o in owners if o.get("kind") == "Job"), None)
                if job is None:
                    return result
                job_of[key] = job
            now = time.monotonic()
            if job not in eligible_at and _eligible(obj):
                eligible_at[job] = now
            status = obj.get("status") or {}
            if (
                job in eligible_at
                and job not in nominated_at
                and status.get("nominatedClusterNames")
            ):
                nominated_at[job] = now
                if len(nominated_at) == len(jobs):
                    all_nominated.set()
            if job not in admitted_at and status.get("clusterName"):
                admitted_at[job] = now
            return result

        store.write = write  # type: ignore[method-assign]
        stop, command = await _ready_then_command({"dir": str(directory), "kueue": "emulated"})
        if command == "GO":
            cpu_before = time.process_time()
            started = time.monotonic()
            for index, name in enumerate(jobs):
                await _paced(index, started, args.rate)
                line = WorkloadLine(
                    name=name,
                    namespace=NAMESPACE,
                    count=1,
                    requests={"cpu": "10m", "memory": "16Mi"},
                    run_seconds=3600,
                )
                await env.submit([line])
            submitted = time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(args.timeout):
                    await all_nominated.wait()
            finished = time.monotonic()
            latencies = [(nominated_at[j] - eligible_at[j]) * 1000.0 for j in nominated_at]
            extra = {
                "eligible": len(eligible_at),
                "admitted": len(admitted_at),
                "submitted_per_s": args.W / max(submitted - started, 1e-9),
            }
            _print_result(
                latencies, eligible_at, nominated_at, cpu_before, started, finished, extra
            )
        await stop.wait()


# --- this process: floor, dispatcher, figures ---------------------------------------------------


@contextlib.asynccontextmanager
async def server_process(
    args: argparse.Namespace, directory: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The server subprocess, until READY; SIGTERM on the way out."""
    argv = [sys.executable, str(SCRIPT), "--serve", "--dir", str(directory)]
    argv += ["-W", str(args.W), "-K", str(args.K), "--rate", str(args.rate)]
    argv += ["--timeout", str(args.timeout)]
    if args.crds:
        argv.append("--crds")
    if args.kueue:
        argv += ["--kueue", "--kueue-version", args.kueue_version]
        if args.kueue_worker_qps is not None:
            argv += ["--kueue-worker-qps", str(args.kueue_worker_qps)]
    if args.server_cpu is not None:
        argv += ["--server-cpu", str(args.server_cpu)]
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(READY_TIMEOUT):
            while True:
                line = (await process.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("the server process exited before READY")
                if line.startswith("READY "):
                    break
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(15):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


async def measure_floor(kubeconfig: Path, count: int) -> tuple[list[float], float]:
    """Sequential server-side-apply status patches, timed around the dispatcher's own call.

    Returns the round trips (ms) and this process's CPU seconds per patch after the warm-up: what
    one bare write costs the client, the unit the dispatcher's CPU per nomination is compared to.
    """
    from dispatcher.k8s.client import KubeApi, client_from_kubeconfig_file
    from dispatcher.k8s.patching import apply_status

    api = KubeApi(await client_from_kubeconfig_file(str(kubeconfig)), name="floor")
    rtts: list[float] = []
    cpu_started = 0.0
    try:
        for index in range(count + 20):
            if index == 20:
                cpu_started = time.process_time()
            body = {
                "apiVersion": f"{KUEUE}/{V1BETA2}",
                "kind": "Workload",
                "metadata": {"name": PROBE, "namespace": NAMESPACE},
                "status": {"nominatedClusterNames": [f"worker-{1 + index % 2}"]},
            }
            started = time.perf_counter()
            await apply_status(
                api, KUEUE, V1BETA2, NAMESPACE, "workloads", PROBE, body, "floor-probe"
            )
            if index >= 20:  # warm-up: connection set-up, first-use caches
                rtts.append((time.perf_counter() - started) * 1000.0)
        cpu = (time.process_time() - cpu_started) / max(1, count)
    finally:
        await api.close()
    return rtts, cpu


async def _wait_for_workers(manager: Any, count: int, within: float) -> None:
    async with asyncio.timeout(within):
        while True:
            registry = manager.registry
            if registry is not None and registry.synced:
                candidates = [
                    c for ch in registry.multikueue_checks() for c in registry.candidates(ch)[0]
                ]
                if len(candidates) == count and all(c.active for c in candidates):
                    return
            await asyncio.sleep(0.05)


def _start_profiler(path: str | None) -> Any:
    """pyinstrument (not a project dependency: ``pip install pyinstrument``) around the burst."""
    if not path:
        return None
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    return profiler


def _stop_profiler(profiler: Any, path: str | None) -> None:
    if profiler is None or not path:
        return
    profiler.stop()
    # Frames down to 0.2 % of the burst's wall time (pyinstrument's default hides those under
    # 1 %, which in a mostly idle light-load run is most of the dispatcher's work).
    text = profiler.output_text(
        unicode=False,
        color=False,
        show_all=False,
        processor_options={"filter_threshold": 0.002},
    )
    Path(path).write_text(text)


@contextlib.contextmanager
def counting_events() -> Iterator[tuple[collections.Counter[str], list[bool]]]:
    """Count the watch events the dispatcher's caches apply (by object kind) while the flag is
    set: every change some watch of the dispatcher delivered, re-list items aside."""
    from dispatcher.k8s.watching import ObjectCache, ObjectEvent

    counts: collections.Counter[str] = collections.Counter()
    on = [False]
    original = ObjectCache.apply

    def apply(self: ObjectCache, item: Any) -> Any:
        if on[0] and isinstance(item, ObjectEvent) and item.type != "LISTED":
            counts[str(item.object.get("kind") or "?")] += 1
        return original(self, item)

    ObjectCache.apply = apply  # type: ignore[method-assign]
    try:
        yield counts, on
    finally:
        ObjectCache.apply = original  # type: ignore[method-assign]


@contextlib.contextmanager
def counting_reconciles(on: list[bool]) -> Iterator[collections.Counter[str]]:
    """Count the dispatcher's reconciles by outcome while ``on[0]`` is set."""
    from dispatcher.controller.nominator import Nominator

    outcomes: collections.Counter[str] = collections.Counter()
    original = Nominator._reconcile

    async def reconcile(self: Nominator, key: str, namespace: str, name: str) -> str:
        outcome = await original(self, key, namespace, name)
        if on[0]:
            outcomes[outcome] += 1
        return outcome

    Nominator._reconcile = reconcile  # type: ignore[method-assign]
    try:
        yield outcomes
    finally:
        Nominator._reconcile = original  # type: ignore[method-assign]


@contextlib.contextmanager
def counting_assignments(on: list[bool]) -> Iterator[list[int]]:
    """Count the flavor assignments the decision stages make (the fits and the in-flight
    replays) while ``on[0]`` is set: ``[count]``."""
    from dispatcher.algorithms import stages

    counted = [0]
    original = stages.assign_flavors

    def assign(*args: Any, **kwargs: Any) -> Any:
        if on[0]:
            counted[0] += 1
        return original(*args, **kwargs)

    stages.assign_flavors = assign  # type: ignore[assignment]
    try:
        yield counted
    finally:
        stages.assign_flavors = original


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    import anyio

    from dispatcher.app.manager import Manager, run_manager
    from dispatcher.app.settings import load_settings

    cpus = sorted(os.sched_getaffinity(0))
    if args.server_cpu is None and len(cpus) >= 2:
        args.server_cpu = cpus[0]
    with (
        tempfile.TemporaryDirectory(prefix="mkd-bench-") as tmp,
        counting_events() as (events, counting),
        counting_reconciles(counting) as outcomes,
        counting_assignments(counting) as assignments,
    ):
        directory = Path(tmp)
        async with server_process(args, directory) as server:
            if len(cpus) >= 2:
                os.sched_setaffinity(0, {cpus[1]})
            kubeconfig = directory / "manager.kubeconfig"
            floor, floor_cpu = await measure_floor(kubeconfig, args.floor_patches)
            settings = load_settings(
                {
                    "leader_election.enabled": False,
                    "health_address": "127.0.0.1:0",
                    "metrics_address": "127.0.0.1:0",
                    "log_format": "text",
                    "log_level": "warning",
                },
                None,
            )
            started = asyncio.Event()
            holder: list[Manager] = []

            def on_started(manager: Manager) -> None:
                holder.append(manager)
                started.set()

            result: dict[str, Any] = {}
            async with anyio.create_task_group() as group:

                async def dispatcher() -> None:
                    await run_manager(
                        settings, kubeconfig=kubeconfig, handle_signals=False, on_started=on_started
                    )

                group.start_soon(dispatcher)
                async with asyncio.timeout(60):
                    await started.wait()
                await _wait_for_workers(holder[0], args.K, within=60)
                # The baseline of the dispatcher's CPU: connected to every cluster and nothing
                # happening (watch bookmarks, timers), over a fixed window before the burst.
                idle_cpu = time.process_time()
                await asyncio.sleep(args.idle_seconds)
                idle_cpu = (time.process_time() - idle_cpu) / args.idle_seconds
                profiler = _start_profiler(args.profile)
                cpu_before, wall_before = time.process_time(), time.monotonic()
                counting[0] = True
                assert server.stdin is not None
                assert server.stdout is not None
                server.stdin.write(b"GO\n")
                await server.stdin.drain()
                async with asyncio.timeout(args.timeout + 60):
                    while True:
                        line = (await server.stdout.readline()).decode()
                        if not line:
                            raise RuntimeError("the server process exited before RESULT")
                        if line.startswith("RESULT "):
                            result = json.loads(line[len("RESULT ") :])
                            break
                cpu_used = time.process_time() - cpu_before
                wall_used = time.monotonic() - wall_before
                counting[0] = False
                _stop_profiler(profiler, args.profile)
                nominator = holder[0].nominator
                writes = nominator.writes if nominator is not None else 0
                group.cancel_scope.cancel()
    latencies: list[float] = result["latencies_ms"]
    span = result["last_nominated"] - result["first_eligible"]
    nomination = {
        "p50": round(percentile(latencies, 0.50), 3),
        "p99": round(percentile(latencies, 0.99), 3),
        "max": round(max(latencies), 3) if latencies else None,
        "mean": round(statistics.fmean(latencies), 3) if latencies else None,
    }
    patch = {
        "p50": round(percentile(floor, 0.50), 3),
        "p99": round(percentile(floor, 0.99), 3),
        "max": round(max(floor), 3),
        "mean": round(statistics.fmean(floor), 3),
    }
    cpu_per_nomination = cpu_used / max(1, result["nominated"])
    return {
        "W": args.W,
        "K": args.K,
        "offered_rate_per_s": args.rate or None,
        "schema": "Kueue CRDs (OpenAPI + CEL)" if args.crds else "schema-less Kueue kinds",
        "nominated": result["nominated"],
        "nomination_latency_ms": nomination,
        "patch_rtt_ms": patch,
        "ratio_p50": round(nomination["p50"] / patch["p50"], 2),
        "ratio_p99": round(nomination["p99"] / patch["p99"], 2),
        "nominations_per_s": round(result["nominated"] / span, 1) if span > 0 else None,
        "eligible_per_s": round(args.W / (result["last_eligible"] - result["first_eligible"]), 1)
        if result["last_eligible"] > result["first_eligible"]
        else None,
        "cpu_s_per_nomination": round(cpu_per_nomination, 6),
        "cpu_s_per_floor_patch": round(floor_cpu, 6),
        "cpu_ratio_to_floor": round(cpu_per_nomination / floor_cpu, 2) if floor_cpu > 0 else None,
        "dispatcher_cpu_s": round(cpu_used, 3),
        "dispatcher_idle_cpu_per_s": round(idle_cpu, 6),
        "cpu_s_per_nomination_above_idle": round(
            max(0.0, cpu_used - idle_cpu * wall_used) / max(1, result["nominated"]), 6
        ),
        "dispatcher_writes": writes,
        "events": dict(sorted(events.items())),
        "events_per_nomination": round(sum(events.values()) / max(1, result["nominated"]), 2),
        "reconciles": dict(sorted(outcomes.items())),
        "reconciles_per_nomination": round(sum(outcomes.values()) / max(1, result["nominated"]), 2),
        "flavor_assignments": assignments[0],
        "flavor_assignments_per_nomination": round(assignments[0] / max(1, result["nominated"]), 1),
        "kueue": (
            {
                "emulated": args.kueue_version,
                "worker_client_qps": args.kueue_worker_qps,
                "eligible": result["eligible"],
                "admitted": result["admitted"],
                "jobs_submitted_per_s": round(result["submitted_per_s"], 1),
            }
            if args.kueue
            else None
        ),
        "burst_wall_s": round(span, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "server_cpu_s": round(result["server_cpu_s"], 3),
        "server_busy": round(result["server_cpu_s"] / span, 3) if span > 0 else None,
        "server_peak_rss_mb": round(result["server_peak_rss_mb"], 1),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "pinned": args.server_cpu is not None,
        },
    }


def report(figures: dict[str, Any]) -> str:
    """The figures as text."""
    n, p = figures["nomination_latency_ms"], figures["patch_rtt_ms"]
    rate = figures["offered_rate_per_s"]
    return "\n".join(
        [
            f"dispatch latency: W={figures['W']} workloads over K={figures['K']} workers, "
            f"eligible at {rate or 'once (burst)'}{'/s' if rate else ''}; "
            f"{figures['schema']}",
            f"  nominated                 {figures['nominated']} of {figures['W']}",
            f"  nomination latency (ms)   p50 {n['p50']:.2f}  p99 {n['p99']:.2f}  "
            f"max {n['max']:.2f}  mean {n['mean']:.2f}",
            f"  bare status PATCH (ms)    p50 {p['p50']:.2f}  p99 {p['p99']:.2f}  "
            f"max {p['max']:.2f}  (floor, sequential, same server)",
            f"  ratio to the floor        p50 {figures['ratio_p50']:.2f}  "
            f"p99 {figures['ratio_p99']:.2f}",
            f"  nominations/s             {figures['nominations_per_s']}  "
            f"(eligibility offered at {figures['eligible_per_s']}/s)",
            f"  CPU s per nomination      {figures['cpu_s_per_nomination'] * 1000:.3f} ms "
            f"(dispatcher process {figures['dispatcher_cpu_s']} s over "
            f"{figures['burst_wall_s']} s; "
            f"{figures['cpu_s_per_nomination_above_idle'] * 1000:.3f} ms above its idle CPU, "
            f"{figures['dispatcher_idle_cpu_per_s'] * 1000:.1f} ms per second connected and idle)",
            f"  CPU s per bare PATCH      {figures['cpu_s_per_floor_patch'] * 1000:.3f} ms "
            f"(the floor's client; a nomination costs {figures['cpu_ratio_to_floor']}x)",
            f"  peak RSS                  dispatcher {figures['peak_rss_mb']} MB, "
            f"server {figures['server_peak_rss_mb']} MB",
            f"  server CPU during burst   {figures['server_cpu_s']} s "
            f"(busy {figures['server_busy']:.0%})",
            f"  watch events applied      {sum(figures['events'].values())} "
            f"({figures['events_per_nomination']} per nomination: "
            + ", ".join(f"{k} {v}" for k, v in figures["events"].items())
            + ")",
            f"  reconciles                {sum(figures['reconciles'].values())} "
            f"({figures['reconciles_per_nomination']} per nomination: "
            + ", ".join(f"{k} {v}" for k, v in figures["reconciles"].items())
            + ")",
            f"  flavor assignments        {figures['flavor_assignments']} "
            f"({figures['flavor_assignments_per_nomination']} per nomination: the decisions' "
            "fits and in-flight replays)",
            *_kueue_lines(figures["kueue"]),
        ]
    )


def _kueue_lines(kueue: dict[str, Any] | None) -> list[str]:
    if kueue is None:
        return ["  Kueue                     none (the server plays its part)"]
    qps = kueue["worker_client_qps"] or "its default"
    return [
        f"  Kueue                     emulated {kueue['emulated']}, worker client QPS {qps}; "
        f"Jobs submitted at {kueue['jobs_submitted_per_s']}/s, {kueue['eligible']} eligible, "
        f"{kueue['admitted']} admitted when the last was nominated"
    ]


def main() -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-W", type=int, default=2000, help="workloads in the burst")
    parser.add_argument("-K", type=int, default=20, help="worker clusters (at most 20)")
    parser.add_argument(
        "--rate", type=float, default=500.0, help="eligibility rate per second (0: all at once)"
    )
    parser.add_argument("--floor-patches", type=int, default=300)
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=5.0,
        help="window in which the connected dispatcher's idle CPU is measured before the burst",
    )
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--crds", action="store_true", help="serve the real Kueue CRD schemas")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument(
        "--profile", metavar="FILE", help="profile the dispatcher with pyinstrument into FILE"
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="mode (b): run the Kueue emulation and submit the burst as Jobs",
    )
    parser.add_argument(
        "--kueue-version", default="v0.19", help="the emulated Kueue version (with --kueue)"
    )
    parser.add_argument(
        "--kueue-worker-qps",
        type=float,
        help="the emulated Kueue's worker client QPS (and burst); default: the version's own",
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="mode (c): a burst of --real-jobs Jobs on real Kueue v0.19.2, this dispatcher and "
        "Kueue's AllAtOnce side by side (benchmarks/dispatch_real.py)",
    )
    parser.add_argument("--real-jobs", type=int, default=300, help="Jobs in mode (c)'s burst")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--server-cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve_kueue(args) if args.kueue else _serve(args))
        return 0
    if args.real:
        import dispatch_real  # the sibling script: this file's directory leads sys.path

        return dispatch_real.main(
            ["-N", str(args.real_jobs)] + (["--json", args.json] if args.json else [])
        )
    figures = asyncio.run(run(args))
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["nominated"] == args.W else 1


if __name__ == "__main__":
    sys.exit(main())
