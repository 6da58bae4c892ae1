"""Backend ``kind``: the scenario suite against three kind clusters with the real Kueue.

``hack/kind-e2e.sh`` creates the clusters (``<prefix>-manager``, ``<prefix>-worker1``,
``<prefix>-worker2``), installs Kueue v0.19.2 with our ``dispatcherName``, deploys the
dispatcher (``manifests/overlays/kind``) and runs ``pytest tests/e2e --backend kind`` with
``E2E_KIND_PREFIX`` and ``E2E_KIND_KUBECONFIG_DIR`` (host kubeconfigs from ``kind get
kubeconfig``). Run by hand against kept clusters (``--keep``) the same way.

Environment controls: a worker is disconnected with ``docker pause`` of its control-plane
container (its API stops answering, as a network partition) and reconnected with ``docker
unpause``; the dispatcher is restarted with a rollout restart of its Deployment; Kueue's
dispatcher is switched by rewriting ``kueue-manager-config`` (``hack/kueue_config.py``) and
restarting ``kueue-controller-manager`` (as Kueue's ``UpdateKueueConfigurationAndRestart``,
contract C79), with our Deployment scaled to zero while a built-in dispatcher runs.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import yaml
from kubernetes_asyncio import client

from dispatcher.topology import HOLD_ANNOTATION, RUN_SECONDS_ANNOTATION, WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import WORKERS, KubeBackend, KueueMode, Obj, Timeouts
from dispatcher_sandbox.harness.paths import REPO

ROOT = REPO
DISPATCHER_NAMESPACE = "multikueue-dispatcher-system"
DISPATCHER_DEPLOYMENT = "multikueue-dispatcher"
DISPATCHER_REPLICAS = 2
DISPATCHER_CONTAINER = "dispatcher"  # manifests/base/deployment.yaml
HOLD_MOUNT = "/hold"
DISPATCHER_LEASE = "multikueue-dispatcher"
DISPATCHER_POD_SELECTOR = "app.kubernetes.io/name=multikueue-dispatcher"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
KUEUE_CONFIGMAP = "kueue-manager-config"
OUR_DISPATCHER = "multikueue-dispatcher.io/dispatcher"


def unavailable_reason() -> str | None:
    """Why the kind backend cannot run here (None when it can)."""
    for tool in ("docker", "kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"the kind backend needs {tool} on PATH (see docs/kind-e2e.md)"
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30)
    if probe.returncode != 0:
        return "the kind backend needs a running docker daemon (`docker info` failed)"
    prefix = os.environ.get("E2E_KIND_PREFIX", "mkd")
    listed = subprocess.run(
        ["kind", "get", "clusters"], capture_output=True, text=True, check=False, timeout=30
    )
    wanted = {f"{prefix}-{c}" for c in ("manager", *WORKERS)}
    missing = wanted - set(listed.stdout.split())
    if missing:
        return f"kind clusters {sorted(missing)} do not exist: run hack/kind-e2e.sh (--keep)"
    return None


def _kueue_config_module() -> Any:
    spec = importlib.util.spec_from_file_location("kueue_config", ROOT / "hack" / "kueue_config.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class KindBackend(KubeBackend):
    """The scenario backend on kind clusters (see the module docstring)."""

    name = "kind"
    timeouts = Timeouts(
        short=90, long=300, quiet=20
    )  # Kueue's e2e: LongTimeout, VeryLongTimeout (C79)

    def __init__(self) -> None:
        super().__init__()
        self.prefix = os.environ.get("E2E_KIND_PREFIX", "mkd")
        self.kubeconfig_dir = os.environ.get("E2E_KIND_KUBECONFIG_DIR")
        self._stack = contextlib.AsyncExitStack()
        self._dispatcher_env: set[str] = set()
        """Names of the environment variables ``set_dispatcher_env`` put on the container."""
        self._group: anyio.abc.TaskGroup | None = None

    def _kubeconfig(self, cluster: str) -> dict[str, Any]:
        if self.kubeconfig_dir:
            path = Path(self.kubeconfig_dir) / f"{cluster}.kubeconfig"
            loaded: dict[str, Any] = yaml.safe_load(path.read_text())
            return loaded
        text = subprocess.run(
            ["kind", "get", "kubeconfig", "--name", f"{self.prefix}-{cluster}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        found: dict[str, Any] = yaml.safe_load(text)
        return found

    async def __aenter__(self) -> KindBackend:
        self._group = await self._stack.enter_async_context(anyio.create_task_group())
        kubeconfigs = {c: self._kubeconfig(c) for c in ("manager", *WORKERS)}
        await self.connect(kubeconfigs, self._group)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.disconnect()
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._stack.__aexit__(exc_type, exc, tb)

    def job_body(self, job: WorkloadLine) -> Obj:
        """Real pods: a Job with ``runSeconds`` completes (agnhost ``entrypoint-tester`` exits at
        once); others run ``agnhost pause`` until deleted. A held Job
        (``holdUntilConfigMap``) runs a shell loop in the agnhost image (busybox-based) until
        its ConfigMap, mounted as an optional volume, holds the key ``released``
        (:meth:`~e2e_backend.KubeBackend.release_hold`; the kubelet refreshes the volume within
        its sync period, about a minute)."""
        body = super().job_body(job)
        annotations = body["metadata"].get("annotations") or {}
        if job.run_seconds is not None:
            annotations.pop(RUN_SECONDS_ANNOTATION, None)
            body["spec"]["template"]["spec"]["containers"][0]["args"] = ["entrypoint-tester"]
        if job.hold_until_config_map is not None:
            annotations.pop(HOLD_ANNOTATION, None)
            pod = body["spec"]["template"]["spec"]
            container = pod["containers"][0]
            container.pop("args", None)
            container["command"] = [
                "/bin/sh",
                "-c",
                f"until [ -e {HOLD_MOUNT}/released ]; do sleep 1; done",
            ]
            container["volumeMounts"] = [{"name": "hold", "mountPath": HOLD_MOUNT}]
            pod["volumes"] = [
                {
                    "name": "hold",
                    "configMap": {"name": job.hold_until_config_map, "optional": True},
                }
            ]
        return body

    # --- environment controls -------------------------------------------------------------------

    async def _docker(self, *args: str) -> None:
        await anyio.run_process(["docker", *args], check=True)

    async def disconnect_worker(self, worker: str) -> None:
        await self._docker("pause", f"{self.prefix}-{worker}-control-plane")

    async def reconnect_worker(self, worker: str) -> None:
        await self._docker("unpause", f"{self.prefix}-{worker}-control-plane")

    async def _restart(self, namespace: str, name: str) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        patch = {
            "spec": {
                "template": {
                    "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": now}}
                }
            }
        }
        apps = client.AppsV1Api(self.apis["manager"])
        await apps.patch_namespaced_deployment(name, namespace, patch)
        await self._rolled_out(namespace, name)

    async def _scale(self, namespace: str, name: str, replicas: int) -> None:
        apps = client.AppsV1Api(self.apis["manager"])
        await apps.patch_namespaced_deployment_scale(
            name, namespace, {"spec": {"replicas": replicas}}
        )
        await self._rolled_out(namespace, name)

    async def _rolled_out(self, namespace: str, name: str) -> None:
        """Wait for a rollout as ``kubectl rollout status`` does (re-reading the Deployment)."""
        apps = client.AppsV1Api(self.apis["manager"])
        with anyio.fail_after(self.timeouts.long):
            while True:
                deploy = await apps.read_namespaced_deployment(name, namespace)
                spec, status = deploy.spec, deploy.status
                want = spec.replicas or 0
                if (
                    (status.observed_generation or 0) >= (deploy.metadata.generation or 0)
                    and (status.updated_replicas or 0) == want
                    and (status.available_replicas or 0) == want
                    and (status.replicas or 0) == want
                ):
                    return
                await anyio.sleep(1.0)  # no watch on Deployments: re-read, bounded by the deadline

    async def stop_dispatcher(self) -> None:
        await self._scale(DISPATCHER_NAMESPACE, DISPATCHER_DEPLOYMENT, 0)

    async def start_dispatcher(self) -> None:
        await self._scale(DISPATCHER_NAMESPACE, DISPATCHER_DEPLOYMENT, DISPATCHER_REPLICAS)

    async def restart_dispatcher(self) -> None:
        await self._restart(DISPATCHER_NAMESPACE, DISPATCHER_DEPLOYMENT)

    async def set_dispatcher_env(self, env: Mapping[str, str]) -> None:
        """Set the container's environment (a strategic merge of its ``env`` list, the names
        set before and not now deleted), which rolls the Deployment out."""
        items: list[dict[str, str]] = [
            {"name": name, "$patch": "delete"} for name in sorted(self._dispatcher_env - set(env))
        ]
        items += [{"name": name, "value": value} for name, value in sorted(env.items())]
        self._dispatcher_env = set(env)
        patch = {
            "spec": {
                "template": {"spec": {"containers": [{"name": DISPATCHER_CONTAINER, "env": items}]}}
            }
        }
        apps = client.AppsV1Api(self.apis["manager"])
        await apps.patch_namespaced_deployment(DISPATCHER_DEPLOYMENT, DISPATCHER_NAMESPACE, patch)
        await self._rolled_out(DISPATCHER_NAMESPACE, DISPATCHER_DEPLOYMENT)

    async def _leader_pod(self) -> str:
        """The dispatcher pod holding the Lease (identity = pod name + a random suffix)."""
        pods = await client.CoreV1Api(self.apis["manager"]).list_namespaced_pod(
            DISPATCHER_NAMESPACE, label_selector=DISPATCHER_POD_SELECTOR
        )
        by_identity_prefix = {p.metadata.name: p.metadata.name for p in pods.items}
        lease = await client.CoordinationV1Api(self.apis["manager"]).read_namespaced_lease(
            DISPATCHER_LEASE, DISPATCHER_NAMESPACE
        )
        holder = (lease.spec.holder_identity if lease.spec else None) or ""
        for name in by_identity_prefix:
            if holder.startswith(name):
                return name
        raise AssertionError(f"no dispatcher pod holds the Lease (holder {holder!r})")

    async def leader_identity(self) -> str:
        with anyio.fail_after(self.timeouts.long):
            while True:
                try:
                    return await self._leader_pod()
                except (AssertionError, client.ApiException):
                    await anyio.sleep(1.0)  # a Lease is not mirrored: re-read until the deadline

    async def kill_leader(self) -> str:
        leader = await self.leader_identity()
        await client.CoreV1Api(self.apis["manager"]).delete_namespaced_pod(
            leader, DISPATCHER_NAMESPACE, grace_period_seconds=0
        )
        return leader

    async def use_kueue_dispatcher(self, mode: KueueMode) -> None:
        await self.reset()
        core = client.CoreV1Api(self.apis["manager"])
        current = await core.read_namespaced_config_map(KUEUE_CONFIGMAP, KUEUE_NAMESPACE)
        module = _kueue_config_module()
        options: dict[str, Any] = {"incremental_step_size": 1} if mode == "incremental" else {}
        patched = module.patch_configmap(
            self.apis["manager"].sanitize_for_serialization(current),
            OUR_DISPATCHER if mode == "external" else mode,
            **options,
        )
        if mode != "external":
            await self._scale(DISPATCHER_NAMESPACE, DISPATCHER_DEPLOYMENT, 0)
        await core.replace_namespaced_config_map(KUEUE_CONFIGMAP, KUEUE_NAMESPACE, patched)
        await self._restart(KUEUE_NAMESPACE, KUEUE_DEPLOYMENT)
        if mode == "external":
            await self._scale(DISPATCHER_NAMESPACE, DISPATCHER_DEPLOYMENT, DISPATCHER_REPLICAS)
