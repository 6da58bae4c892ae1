"""The command line on the real backend: ``sandbox --backend real`` and ``sandbox serve
--backend real``, run as a user runs them (a process, its output, its exit status)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
import yaml
from kubernetes_asyncio import client, config

pytestmark = [pytest.mark.slow, pytest.mark.real]

MANAGED_BY = "kueue.x-k8s.io/multikueue"


def test_the_demo_on_real_kueue(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dispatcher",
            "sandbox",
            "--backend",
            "real",
            "--json",
            str(summary),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=os.environ | {"TERM": "dumb"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "real v0.19.2 processes" in done.stdout
    report = json.loads(summary.read_text())["summary"]
    assert report["admitted"] == 9, report
    assert report["expected_pending"] == 1, report
    assert report["copies_per_admitted"] == 1.0, report
    assert report["ok"] is True, report


def _wait_ready(process: subprocess.Popen[str], within: float) -> list[str]:
    """The lines printed up to ``READY`` (fails when the process exits first)."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"exited {process.wait()} before READY: {lines}")
        lines.append(line.rstrip())
        if line.strip() == "READY":
            return lines
    raise AssertionError(f"no READY within {within:g} s: {lines}")


async def _plain_job_is_defaulted(kubeconfig: dict[str, object]) -> dict[str, object]:
    api = await config.new_client_from_config_dict(kubeconfig)
    try:
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "plain",
                "namespace": "team-a",
                "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "resources": {"requests": {"cpu": "1"}},
                            }
                        ],
                    }
                }
            },
        }
        created = await client.BatchV1Api(api).create_namespaced_job("team-a", body)
        return {"managedBy": created.spec.managed_by, "suspend": created.spec.suspend}
    finally:
        await api.close()


def test_serve_real_serves_kueue_whose_webhook_defaults_managed_by(tmp_path: Path) -> None:
    """A plain Job (no ``spec.managedBy``) created by a user on the manager: real Kueue's Job
    webhook sets ``managedBy: kueue.x-k8s.io/multikueue`` and suspends it, because its
    ClusterQueue has a MultiKueue admission check."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dispatcher",
            "sandbox",
            "serve",
            "--backend",
            "real",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = _wait_ready(process, 120)
        assert any(line.startswith("manager: https://127.0.0.1:") for line in lines), lines
        kubeconfig = tmp_path / "manager.kubeconfig"
        assert kubeconfig.is_file()
        job = anyio.run(_plain_job_is_defaulted, yaml.safe_load(kubeconfig.read_text()))
        assert job == {"managedBy": MANAGED_BY, "suspend": True}
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
        assert process.stdout is not None
        rest = process.stdout.read()
        process.stdout.close()
    assert code == 0, rest[-3000:]
