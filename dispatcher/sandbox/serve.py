"""``multikueue-dispatcher sandbox`` and ``sandbox serve``: emulated clusters on this machine.

``sandbox serve --dir DIR [--workers N]`` starts a manager and N workers (``worker-1`` …), each
a fake API server over HTTPS with the Kueue CRDs registered, writes ``DIR/<cluster>.kubeconfig``
(inline CA data and a token: the form Kueue accepts for workers), prints ``READY`` and serves
until SIGINT or SIGTERM. On the manager, namespace ``kueue-system`` holds one Secret per worker
(``<worker>-kubeconfig``, key ``kubeconfig``), ready to be named by MultiKueueCluster objects.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from dispatcher.sandbox.fakeapi.kubeconfig import dump
from dispatcher.sandbox.fakeapi.server import FakeCluster
from dispatcher.sandbox.kueue_crds import KUEUE_SHORT_FORMS, kueue_crds_dir

KUEUE_NAMESPACE = "kueue-system"
DEFAULT_WORKERS = ("worker-a100", "worker-h100", "worker-cpu")


@dataclass
class Sandbox:
    """Running emulated clusters and where their kubeconfigs are."""

    manager: FakeCluster
    workers: list[FakeCluster]
    directory: Path
    schemas: bool

    @property
    def clusters(self) -> list[FakeCluster]:
        """Manager first, then the workers."""
        return [self.manager, *self.workers]

    def kubeconfig_path(self, cluster: FakeCluster) -> Path:
        """``DIR/<cluster>.kubeconfig``."""
        return self.directory / f"{cluster.name}.kubeconfig"


def _new_cluster(name: str, crds: Path | None) -> FakeCluster:
    if crds is not None:
        return FakeCluster(name, crd_paths=[crds])
    return FakeCluster(name, resources=KUEUE_SHORT_FORMS)


def _seed(cluster: FakeCluster, objects: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
    for group, plural, body in objects:
        cluster._seed_object(group, plural, "v1", body)


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


@contextlib.asynccontextmanager
async def run_sandbox(
    directory: Path, worker_names: Sequence[str], *, crds: Path | None = None
) -> AsyncIterator[Sandbox]:
    """Start the manager and workers, write kubeconfigs and the manager's worker Secrets."""
    crds = crds if crds is not None else kueue_crds_dir()
    await anyio.Path(directory).mkdir(parents=True, exist_ok=True)
    manager = _new_cluster("manager", crds)
    workers = [_new_cluster(name, crds) for name in worker_names]
    sandbox = Sandbox(manager, workers, directory, schemas=crds is not None)
    started: list[FakeCluster] = []
    try:
        for cluster in sandbox.clusters:
            await cluster.start()
            started.append(cluster)
            _seed(
                cluster,
                [
                    ("", "namespaces", {"metadata": {"name": KUEUE_NAMESPACE}}),
                    ("", "nodes", _node(f"{cluster.name}-control-plane")),
                ],
            )
            path = anyio.Path(sandbox.kubeconfig_path(cluster))
            await path.write_text(dump(cluster.kubeconfig))
            await path.chmod(0o600)
        _seed(
            manager,
            [
                (
                    "",
                    "secrets",
                    {
                        "metadata": {"name": f"{w.name}-kubeconfig", "namespace": KUEUE_NAMESPACE},
                        "stringData": {"kubeconfig": dump(w.kubeconfig)},
                    },
                )
                for w in workers
            ],
        )
        yield sandbox
    finally:
        for cluster in reversed(started):
            await cluster.stop()


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _describe(sandbox: Sandbox) -> str:
    lines = [
        f"{'cluster':<14} {'url':<28} kubeconfig",
    ]
    for cluster in sandbox.clusters:
        lines.append(f"{cluster.name:<14} {cluster.url:<28} {sandbox.kubeconfig_path(cluster)}")
    schema_note = (
        "Kueue CRDs: real v0.19.2 schemas and CEL rules enforced"
        if sandbox.schemas
        else "Kueue CRDs: not found (set KUEUE_CRDS_DIR); Kueue kinds served without validation"
    )
    lines.append(schema_note)
    return "\n".join(lines)


async def _serve(args: argparse.Namespace) -> int:
    names = [f"worker-{i}" for i in range(1, args.workers + 1)]
    async with run_sandbox(Path(args.dir), names) as sandbox:
        print(_describe(sandbox), flush=True)
        print("READY", flush=True)
        await _wait_for_signal()
    return 0


async def _demo(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        directory = (
            Path(args.dir)
            if args.dir
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mkd-sandbox-")))
        )
        async with run_sandbox(directory, DEFAULT_WORKERS) as sandbox:
            print("multikueue-dispatcher sandbox: emulated manager and workers\n")
            print(_describe(sandbox))
            worker = sandbox.kubeconfig_path(sandbox.workers[0])
            print("\nTry, in another terminal:")
            print(f"  kubectl --kubeconfig {worker} get workloads.kueue.x-k8s.io -A")
            print(f"  kubectl --kubeconfig {worker} get nodes")
            print(
                f"  kubectl --kubeconfig {sandbox.kubeconfig_path(sandbox.manager)} "
                f"-n {KUEUE_NAMESPACE} get secrets"
            )
            if args.duration is not None:
                print(f"\nServing for {args.duration:g} s.", flush=True)
                await asyncio.sleep(args.duration)
            else:
                print("\nServing until Ctrl-C.", flush=True)
                await _wait_for_signal()
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``sandbox`` or ``sandbox serve`` from parsed command-line arguments."""
    if args.sandbox_command == "serve":
        if args.workers < 0:
            print("error: --workers must be 0 or more", file=sys.stderr)
            return 2
        return asyncio.run(_serve(args))
    return asyncio.run(_demo(args))
