"""The deployment shape as processes: ``sandbox serve`` (clusters + emulated Kueue) and
``multikueue-dispatcher run`` against its manager kubeconfig, talking only over HTTPS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
import yaml
from kubernetes_asyncio import client, config, watch

from dispatcher.topology import parse_workload_lines, workload_object
from dispatcher_sandbox.harness.scenario import free_port

pytestmark = pytest.mark.slow


@contextmanager
def process(args: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def wait_for_line(proc: subprocess.Popen[str], marker: str, limit: float = 60) -> list[str]:
    """Read output lines until one contains ``marker`` (the process is killed on timeout)."""
    assert proc.stdout is not None
    seen: list[str] = []
    timer = threading.Timer(limit, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            seen.append(line.rstrip())
            if marker in line:
                return seen
    finally:
        timer.cancel()
    raise AssertionError(f"no {marker!r} in output:\n" + "\n".join(seen[-40:]))


async def test_serve_and_run_as_processes_dispatch_a_job(tmp_path: Path, crds_dir: Path) -> None:
    with process(
        ["sandbox", "serve", "--dir", str(tmp_path)], {"KUEUE_CRDS_DIR": str(crds_dir)}
    ) as serve:
        await anyio.to_thread.run_sync(wait_for_line, serve, "READY")
        kubeconfig = tmp_path / "manager.kubeconfig"
        health = free_port()
        run_args = [
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--no-leader-election",
            "--health-address",
            f"127.0.0.1:{health}",
            "--metrics-address",
            f"127.0.0.1:{free_port()}",
            "--log-format",
            "json",
        ]
        with process(run_args) as run:
            [line] = parse_workload_lines(
                [
                    '{"name": "h100-job", "namespace": "team-a", "count": 1, '
                    '"requests": {"cpu": "4", "nvidia.com/gpu": 1}, '
                    '"gpuType": "NVIDIA-H100-80GB-HBM3", "runSeconds": 600}'
                ]
            )
            api = await config.new_client_from_config_dict(yaml.safe_load(kubeconfig.read_text()))
            async with api:
                await client.BatchV1Api(api).create_namespaced_job("team-a", workload_object(line))
                co = client.CustomObjectsApi(api)
                placed = ""
                with anyio.fail_after(60):
                    async with watch.Watch() as w:
                        async for event in w.stream(
                            co.list_namespaced_custom_object,
                            "kueue.x-k8s.io",
                            "v1beta2",
                            "team-a",
                            "workloads",
                        ):
                            placed = (event["object"].get("status") or {}).get("clusterName", "")
                            if placed:
                                break
                assert placed == "worker-h100"
            run.send_signal(signal.SIGTERM)
            output = await anyio.to_thread.run_sync(lambda: run.communicate(timeout=20)[0])
            assert run.returncode == 0, output[-3000:]
            assert '"message": "workload team-a/job-h100-job' in output
            # Secrets and tokens never reach the logs.
            token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
            assert token not in output
