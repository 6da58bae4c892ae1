"""Throughput of the fake Kubernetes API server on one core (docs/fake-apiserver.md).

Not a test: it prints figures, so later benchmarks (controller, sandbox) can quote the fake's own
limit instead of guessing whether they measured the controller or the server.

Set-up. The server runs in a **subprocess pinned to one CPU** (``os.sched_setaffinity``); the
client runs in this process, pinned to another CPU when the machine has one. The subprocess
serves two things on loopback, both over HTTPS with the same kind of certificate:

- a **baseline**: a bare aiohttp application answering ``GET /healthz`` with ``ok`` (no token, no
  middleware, no Kubernetes logic): the cost of Python + aiohttp + TLS per request;
- one **FakeCluster** with the real Kueue v0.19.2 CRDs when ``KUEUE_CRDS_DIR`` (or
  ``../shared/kueue-v0.19.2/crds``) exists, else the Kueue kinds without a schema.

Figures (each measured for ``--seconds``, default 3 s, with ``--concurrency`` client tasks):

- ``baseline-healthz``: the bare aiohttp ``GET /healthz``;
- ``fake-healthz``: the fake's ``GET /healthz`` (token check, journal, fault middleware);
- ``get-workload``: ``GET`` of one Workload;
- ``patch-workload-status``: a merge patch of ``/status`` (``nominatedClusterNames`` set to a new
  value each time, so every patch is a real write: managedFields, schema and CEL validation,
  history, watch fan-out to no one);
- ``watch-fanout``: ``--watchers`` watches on the Workloads of a namespace while the client patches
  status for ``--seconds``; the figure is events delivered per second (watchers × events / time
  from the first patch until every watcher has received every event). The server's CPU time
  includes the patches that cause the events, so with the real CRDs (where a status patch costs
  about ten times more than without a schema) this figure is bounded by the writes.

Each figure is given as requests (or events) per wall-clock second and per **server CPU second**
(the server process's user + system time from ``/proc``). The second does not depend on whether
the client kept the server busy, and hardly on other load on the machine; the server's CPU use
during the run is printed next to it (near 100 % means the server was the bottleneck; well below,
the client or other processes were). Quote the per-CPU figures; ratios to the baseline are
computed from them, in the same run. The load average at the start is recorded too.

    .venv/bin/python benchmarks/fake_apiserver.py [--seconds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"
NAMESPACE = "default"
WORKLOADS = f"/apis/{KUEUE}/{V1BETA2}/namespaces/{NAMESPACE}/workloads"
MERGE = "application/merge-patch+json"
READY_TIMEOUT = 60.0
SCRIPT = Path(__file__).resolve()


# --- the server subprocess ---------------------------------------------------------------------


async def _serve(cpu: int | None) -> None:
    """Serve the baseline app and one fake cluster until SIGTERM; print READY with their URLs."""
    from dispatcher_sandbox.fake_apiserver import FakeCluster
    from dispatcher_sandbox.fake_apiserver.tls import issue_serving_certificate, process_ca
    from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS, kueue_crds_dir

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    crds = kueue_crds_dir()
    cluster = FakeCluster(
        "bench",
        crd_paths=[crds] if crds else [],
        resources=() if crds else KUEUE_SHORT_FORMS,
        admin_port=None,
    )
    await cluster.start()

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    baseline = web.Application()
    baseline.router.add_get("/healthz", healthz)
    runner = web.AppRunner(baseline, access_log=None)
    await runner.setup()
    certificate = issue_serving_certificate(process_ca(), ())
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.server_context())
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    info = {
        "url": cluster.url,
        "token": cluster.token,
        "ca": (cluster.ca_pem or b"").decode(),
        "baseline_url": f"https://127.0.0.1:{port}",
        "baseline_ca": certificate.ca_pem.decode(),
        "schema": f"Kueue CRDs from {crds}" if crds else "schema-less Kueue kinds",
    }
    print("READY " + json.dumps(info), flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await cluster.stop()


# --- the client --------------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured figure."""

    name: str
    operations: int
    seconds: float
    server_cpu_seconds: float
    unit: str = "requests"

    @property
    def per_second(self) -> float:
        return self.operations / self.seconds if self.seconds else 0.0

    @property
    def per_server_cpu_second(self) -> float:
        return self.operations / self.server_cpu_seconds if self.server_cpu_seconds else 0.0

    @property
    def server_busy(self) -> float:
        return self.server_cpu_seconds / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "per_second": round(self.per_second, 1),
            "per_server_cpu_second": round(self.per_server_cpu_second, 1),
            "server_busy": round(self.server_busy, 3),
        }


class ServerProcess:
    """The pinned server subprocess and its CPU clock."""

    def __init__(self, process: asyncio.subprocess.Process, info: dict[str, Any]) -> None:
        self.process = process
        self.info = info
        self._ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._ticks


@contextlib.asynccontextmanager
async def server_process(cpu: int | None) -> AsyncIterator[ServerProcess]:
    argv = [sys.executable, str(SCRIPT), "--serve"]
    if cpu is not None:
        argv += ["--server-cpu", str(cpu)]
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
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
        yield ServerProcess(process, json.loads(line[len("READY ") :]))
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


def _ssl(info: dict[str, Any]) -> ssl.SSLContext:
    """Trust the fake's CA and the baseline's (the same per-process CA, loaded twice if so)."""
    return ssl.create_default_context(cadata=info["ca"] + info["baseline_ca"])


async def _measure(
    name: str,
    server: ServerProcess,
    seconds: float,
    concurrency: int,
    request: Callable[[int, int], Awaitable[None]],
) -> Figure:
    """Run ``request(worker, i)`` in ``concurrency`` loops for ``seconds``."""
    count = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def worker(index: int) -> None:
        nonlocal count
        i = 0
        while loop.time() < deadline:
            await request(index, i)
            i += 1
            count += 1

    cpu0, t0 = server.cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed, cpu = time.perf_counter() - t0, server.cpu_seconds() - cpu0
    return Figure(name, count, elapsed, cpu)


def _workload(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/{V1BETA2}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"bench": "yes"}},
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": "1"}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


async def _check(response: aiohttp.ClientResponse) -> bytes:
    body = await response.read()
    if response.status >= 300:
        raise RuntimeError(f"{response.method} {response.url}: {response.status} {body[:300]!r}")
    return body


async def _watch_fanout(
    session: aiohttp.ClientSession,
    server: ServerProcess,
    headers: dict[str, str],
    seconds: float,
    watchers: int,
    writers: int,
) -> Figure:
    """``watchers`` watches; ``writers`` tasks patch status for ``seconds``; time until every
    watcher has every event."""
    url = server.info["url"]
    async with session.get(url + WORKLOADS, headers=headers) as response:
        rv = json.loads(await _check(response))["metadata"]["resourceVersion"]
    counts = [0] * watchers
    target: int | None = None
    streams: list[aiohttp.ClientResponse] = []
    try:
        for _ in range(watchers):
            # Headers arrive once the server has subscribed the watch: no event can be missed.
            response = await session.get(
                f"{url}{WORKLOADS}?watch=true&resourceVersion={rv}",
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            )
            streams.append(response)
            if response.status != 200:
                raise RuntimeError(f"watch: {response.status}")

        async def read(index: int) -> None:
            async for chunk in streams[index].content.iter_any():
                counts[index] += chunk.count(b"\n")
                if target is not None and counts[index] >= target:
                    return

        readers = [asyncio.create_task(read(i)) for i in range(watchers)]
        patches = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds

        async def write(index: int) -> None:
            nonlocal patches
            i = 0
            while loop.time() < deadline:
                await _patch_status(session, url, headers, f"wl-{index}", i)
                i += 1
                patches += 1

        cpu0, t0 = server.cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(write(w) for w in range(writers)))
        target = patches
        for task, count in zip(readers, counts, strict=True):
            if count >= target:
                task.cancel()
        async with asyncio.timeout(max(60.0, 10 * seconds)):
            await asyncio.gather(*readers, return_exceptions=True)
        elapsed, cpu = time.perf_counter() - t0, server.cpu_seconds() - cpu0
        if min(counts) < target:
            raise RuntimeError(f"watchers missed events: {min(counts)} of {target}")
        return Figure(
            f"watch-fanout ({watchers} watchers x {patches} events)",
            watchers * patches,
            elapsed,
            cpu,
            unit="events",
        )
    finally:
        for response in streams:
            response.close()


_SEQUENCE = itertools.count()


async def _patch_status(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], name: str, i: int
) -> None:
    # A value never sent before: every patch is a real write and emits one watch event.
    body = {"status": {"nominatedClusterNames": [f"worker-{next(_SEQUENCE)}"]}}
    async with session.patch(
        f"{url}{WORKLOADS}/{name}/status?fieldManager=bench",
        data=json.dumps(body),
        headers={**headers, "Content-Type": MERGE},
    ) as response:
        await _check(response)


async def _client(args: argparse.Namespace) -> dict[str, Any]:
    load_average = os.getloadavg()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[0]
    client_cpu = cpus[1] if len(cpus) > 1 else None
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    figures: list[Figure] = []
    async with server_process(server_cpu) as server:
        headers = {"Authorization": f"Bearer {server.info['token']}"}
        connector = aiohttp.TCPConnector(limit=0, ssl=_ssl(server.info))
        async with aiohttp.ClientSession(connector=connector) as session:
            url, base = server.info["url"], server.info["baseline_url"]
            for i in range(max(args.concurrency, args.writers)):
                async with session.post(
                    url + WORKLOADS, json=_workload(f"wl-{i}"), headers=headers
                ) as response:
                    await _check(response)

            async def baseline(worker: int, i: int) -> None:
                async with session.get(base + "/healthz") as r:
                    await _check(r)

            async def fake_healthz(worker: int, i: int) -> None:
                async with session.get(url + "/healthz", headers=headers) as r:
                    await _check(r)

            async def get_workload(worker: int, i: int) -> None:
                async with session.get(f"{url}{WORKLOADS}/wl-{worker}", headers=headers) as r:
                    await _check(r)

            async def patch_status(worker: int, i: int) -> None:
                await _patch_status(session, url, headers, f"wl-{worker}", i)

            # Warm-up (connections, TLS sessions, caches), not measured.
            for request in (baseline, fake_healthz, get_workload, patch_status):
                await _measure("warm-up", server, 0.2, args.concurrency, request)
            for name, request in (
                ("baseline-healthz", baseline),
                ("fake-healthz", fake_healthz),
                ("get-workload", get_workload),
                ("patch-workload-status", patch_status),
            ):
                figure = await _measure(name, server, args.seconds, args.concurrency, request)
                figures.append(figure)
                _print_figure(figure)

        # Watches need TLS on every stream; a fresh session keeps the figures apart.
        connector = aiohttp.TCPConnector(limit=0, ssl=_ssl(server.info))
        async with aiohttp.ClientSession(connector=connector) as session:
            figure = await _watch_fanout(
                session, server, headers, args.seconds, args.watchers, args.writers
            )
            figures.append(figure)
            _print_figure(figure)
        schema = server.info["schema"]

    base_cpu = figures[0].per_server_cpu_second
    ratios = {
        f.name: round(f.per_server_cpu_second / base_cpu, 3) if base_cpu else None
        for f in figures[1:]
    }
    print("\nper server CPU second, as a fraction of baseline-healthz:")
    for name, ratio in ratios.items():
        print(f"  {name:<48} {ratio}")
    return {
        "setup": {
            "server": "subprocess pinned to one CPU; client in this process",
            "server_cpu": server_cpu,
            "client_cpu": client_cpu,
            "cpus_available": len(cpus),
            "load_average_at_start": [round(x, 2) for x in load_average],
            "python": platform.python_version(),
            "aiohttp": aiohttp.__version__,
            "schema": schema,
            "seconds": args.seconds,
            "concurrency": args.concurrency,
            "watchers": args.watchers,
            "writers": args.writers,
        },
        "figures": {f.name.split(" ")[0]: f.to_dict() for f in figures},
        "ratio_to_baseline_per_server_cpu_second": ratios,
    }


def _print_figure(figure: Figure) -> None:
    print(
        f"{figure.name:<48} {figure.per_second:>9.0f} {figure.unit}/s"
        f"  {figure.per_server_cpu_second:>9.0f} per server CPU s"
        f"  (server busy {figure.server_busy:.0%}, n={figure.operations})",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each figure")
    parser.add_argument("--concurrency", type=int, default=8, help="client tasks for requests")
    parser.add_argument("--watchers", type=int, default=50, help="watches for the fan-out figure")
    parser.add_argument("--writers", type=int, default=2, help="patching tasks during fan-out")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--server-cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.server_cpu))
        return 0
    print(
        f"fake API server throughput: server subprocess pinned to one CPU, client in this "
        f"process; {args.seconds:g} s per figure, concurrency {args.concurrency}\n",
        flush=True,
    )
    result = asyncio.run(_client(args))
    print(f"\nschema: {result['setup']['schema']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
