"""What one request costs the dispatcher's client: its HTTP session against kubernetes_asyncio's.

A fake API server runs as a separate process (``python -m dispatcher_sandbox.fake_apiserver``,
HTTPS,
a bearer token, the Workload kind without a schema) and holds one Workload. This process then
sends ``--requests`` sequential server-side-apply status patches of its
``nominatedClusterNames`` (the dispatcher's own ``apply_status``, as a nomination writes) through
two clients of the same kubeconfig, alternating ``--rounds`` times:

- **baseline**: the ``ApiClient`` exactly as kubernetes_asyncio builds it (its session has
  ``trust_env=True``: aiohttp reads ``.netrc`` and the proxy variables in the thread pool on
  every request);
- **dispatcher**: :func:`dispatcher.k8s.client.client_from_kubeconfig` (the proxy resolved once,
  ``dispatcher/k8s/transport.py``).

Per request it prints this process's CPU time (user + system), the wall time, and the calls of
the event loop's ``run_in_executor`` (thread-pool hops); the ratio is dispatcher / baseline,
both measured in the same run. The server's CPU is not counted (another process).

    .venv/bin/python benchmarks/client_overhead.py [--requests 1000] [--rounds 3] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import config as k8s_config

from dispatcher.k8s.client import KubeApi, client_from_kubeconfig
from dispatcher.k8s.patching import apply_status
from dispatcher.k8s.resources import WORKLOADS
from dispatcher_sandbox.harness.scenario import counting_executor_calls

KUEUE, VERSION, NAMESPACE, NAME = "kueue.x-k8s.io", "v1beta2", "default", "probe"
WARM_UP = 20


def _start_server(directory: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    kubeconfig = directory / "fake.kubeconfig"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dispatcher_sandbox.fake_apiserver",
            "--kubeconfig",
            str(kubeconfig),
            "--resource",
            f"{KUEUE}/{VERSION}/workloads=Workload+status",
            "--bookmark-interval",
            "3600",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline()  # the server prints READY once it serves
    if not line.startswith("READY"):
        server.kill()
        raise RuntimeError(f"the fake API server did not start: {line!r}")
    return server, yaml.safe_load(kubeconfig.read_text())


def _body(index: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "status": {"nominatedClusterNames": [f"worker-{1 + index % 2}"]},
    }


async def _round(api: KubeApi, requests: int) -> dict[str, float]:
    for index in range(WARM_UP):
        await apply_status(api, KUEUE, VERSION, NAMESPACE, "workloads", NAME, _body(index), "bench")
    with counting_executor_calls() as hops:
        cpu, wall = time.process_time(), time.perf_counter()
        for index in range(requests):
            await apply_status(
                api, KUEUE, VERSION, NAMESPACE, "workloads", NAME, _body(index), "bench"
            )
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "cpu_ms": 1000.0 * cpu / requests,
        "wall_ms": 1000.0 * wall / requests,
        "hops": hops() / requests,
    }


async def run(args: argparse.Namespace, kubeconfig: dict[str, Any]) -> dict[str, Any]:
    clients: dict[str, Callable[[], Awaitable[Any]]] = {
        "baseline": lambda: k8s_config.new_client_from_config_dict(kubeconfig),
        "dispatcher": lambda: client_from_kubeconfig(kubeconfig),
    }
    async with KubeApi(await client_from_kubeconfig(kubeconfig)) as setup:
        workload = {"metadata": {"name": NAME, "namespace": NAMESPACE}, "spec": {}}
        await setup.create(WORKLOADS, workload, NAMESPACE)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in clients}
    for _ in range(args.rounds):
        for name, build in clients.items():
            async with KubeApi(await build(), name=name) as api:
                rounds[name].append(await _round(api, args.requests))
    figures: dict[str, Any] = {"requests": args.requests, "rounds": args.rounds}
    for name, measured in rounds.items():
        figures[name] = {
            key: round(statistics.median(r[key] for r in measured), 3) for key in measured[0]
        }
        figures[name]["cpu_ms_rounds"] = [round(r["cpu_ms"], 3) for r in measured]
    figures["cpu_ratio"] = round(figures["dispatcher"]["cpu_ms"] / figures["baseline"]["cpu_ms"], 2)
    figures["wall_ratio"] = round(
        figures["dispatcher"]["wall_ms"] / figures["baseline"]["wall_ms"], 2
    )
    return figures


def report(figures: dict[str, Any]) -> str:
    lines = [
        f"client overhead: {figures['requests']} sequential status applies per round, "
        f"{figures['rounds']} rounds alternating, medians",
    ]
    for name in ("baseline", "dispatcher"):
        f = figures[name]
        lines.append(
            f"  {name:<11} CPU {f['cpu_ms']:.3f} ms/request (rounds {f['cpu_ms_rounds']}), "
            f"wall {f['wall_ms']:.3f} ms, thread-pool hops {f['hops']:.2f}/request"
        )
    lines.append(
        f"  dispatcher / baseline: CPU {figures['cpu_ratio']}x, wall {figures['wall_ratio']}x"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="client-overhead-") as scratch:
        server, kubeconfig = _start_server(Path(scratch))
        try:
            figures = asyncio.run(run(args, kubeconfig))
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
