"""Real clusters as processes on loopback: etcd, kube-apiserver, a garbage collector and Kueue.

One :class:`RealCluster` per cluster of a topology. Each is

- an ``etcd`` on two free loopback ports (data in the cluster's folder, no fsync);
- a ``kube-apiserver`` on a free loopback port, TLS from the plane's CA (:mod:`.pki`), one
  static bearer token in ``system:masters`` (``--token-auth-file``), the
  ``MutatingAdmissionPolicy`` admission plugin on (for Kueue's
  ``clear-nominated-cluster-names`` policy);
- a ``kube-controller-manager`` that runs only the garbage collector, so that deleting a Job
  deletes the Workload it owns as on any cluster (there is no kubelet, scheduler or Job
  controller: no pod ever runs; :mod:`.finisher` finishes Jobs by writing their status, as
  Kueue's own integration tests do);
- Kueue's controller manager out of cluster with a generated Configuration (v1beta2): leader
  election off, internal certificate management off, its webhook server on a free port with
  the plane's certificate, the webhook configurations pointed at it by URL, only the
  ``batch/job`` integration, metrics off.

Kueue's CRDs, webhook configurations and admission policy come from the Kueue module in the Go
module cache (``go mod download -json sigs.k8s.io/kueue@VERSION``), never from this repository.

Stop order matters: Kueue and the garbage collector first, then the API server, then etcd (an
API server whose etcd is gone hangs on shutdown). Every process writes its log to
``<folder>/<cluster>/<component>.log``.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml

from dispatcher.topology import KUEUE_NAMESPACE
from dispatcher_sandbox.environment import Remedy
from dispatcher_sandbox.kube_client import MULTIKUEUE_CLUSTERS, KubeClient, KubeError, Resource
from dispatcher_sandbox.real_kueue.build import (
    BuildError,
    binary_path,
    load_versions,
    missing_reason,
    module_dir,
)
from dispatcher_sandbox.real_kueue.pki import Pki, make_pki

log = logging.getLogger(__name__)

Obj = dict[str, Any]
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", namespaced=False
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
)
ADMISSION_POLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies", namespaced=False
)
ADMISSION_POLICY_BINDINGS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings", namespaced=False
)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
# Kueue's conversion webhook serves these CRDs (its config/components/crd/patches).
CONVERTED_CRDS = {
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
}
# Only the webhooks of what runs here: Kueue's own objects and batch Jobs.
WEBHOOK_GROUPS = {"kueue.x-k8s.io", "batch"}
# Kueue opens these when internal certificate management is off (cmd/kueue/main.go).
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
FIELD_MANAGER = "mkd-real-harness"


class ControlPlaneError(RuntimeError):
    """A process of the real control plane did not start or stop (names it and its log)."""


# Listening ports come from below the kernel's ephemeral range (32768-60999 by default), where
# no outgoing connection of the many processes here can take a port between its choice and its
# bind; a process-wide set keeps two components from being handed the same one. Two processes
# that start control planes at the same time get disjoint ranges from $MKD_REAL_PORTS
# ("FIRST-LAST", e.g. the Makefile's e2e-real and outage-real), so neither can pick a port the
# other chose and has not bound yet.
PORTS_ENV = "MKD_REAL_PORTS"
_DEFAULT_PORT_RANGE = (20000, 32000)
_HANDED_OUT: set[int] = set()


def port_range() -> tuple[int, int]:
    """The range ``free_port`` picks from: ``$MKD_REAL_PORTS`` (inclusive bounds) or
    20000-31999."""
    raw = os.environ.get(PORTS_ENV, "").strip()
    if not raw:
        return _DEFAULT_PORT_RANGE
    first, sep, last = raw.partition("-")
    try:
        low, high = int(first), int(last)
    except ValueError:
        low, high = 0, -1
    if not sep or not 1024 <= low <= high <= 65535:
        raise ControlPlaneError(f"${PORTS_ENV}={raw!r}: expected FIRST-LAST, 1024 <= FIRST <= LAST")
    return low, high + 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, outside the ephemeral range, never handed out
    before by this process."""
    low, high = port_range()
    for _ in range(1000):
        port = low + secrets.randbelow(high - low)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise ControlPlaneError(f"no free port in {low}-{high - 1} on 127.0.0.1")


def _tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log, and before them its last lines that report an error."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    last = text[-lines:]
    errors = [
        line
        for line in text[:-lines]
        if '"level":"error"' in line or (line[:1] == "E" and line[1:5].isdigit())  # klog
    ]
    shown = [*errors[-10:], *(["..."] if errors else []), *last]
    return "\n".join(line[:2000] for line in shown)


@dataclass
class Process:
    """One child process with its log file."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (its output goes to the log file, appended across restarts)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        """Whether it was started and has not exited."""
        return self.popen is not None and self.popen.poll() is None

    def check_running(self) -> None:
        """Raise :class:`ControlPlaneError` with the log's tail when it exited."""
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.popen.returncode}; "
                f"last lines of {self.log_path}:\n{_tail(self.log_path)}"
            )

    async def stop(self, grace: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        popen = self.popen
        if popen is None or popen.poll() is not None:
            return
        popen.send_signal(signal.SIGTERM)
        try:
            await anyio.to_thread.run_sync(lambda: popen.wait(grace))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0f s: killed", self.name, grace)
            popen.kill()
            await anyio.to_thread.run_sync(popen.wait)

    def kill(self) -> None:
        """SIGKILL at once (a crash)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


async def wait_until(
    probe: Any, what: str, within: float, processes: Sequence[Process] = (), every: float = 0.2
) -> Any:
    """Call the async ``probe()`` until it returns a true value or ``within`` seconds pass.

    Fails early, with the process's log, when one of ``processes`` exited.
    """
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        for process in processes:
            process.check_running()
        try:
            value = await probe()
            if value:
                return value
        except (OSError, aiohttp.ClientError, KubeError, TimeoutError) as error:
            last = error
        if time.monotonic() > deadline:
            hint = f" (last error: {last})" if last else ""
            raise ControlPlaneError(f"not within {within:g} s: {what}{hint}")
        await anyio.sleep(every)  # polling a probe with a deadline, not synchronisation


async def answers_ok(
    url: str, *, ssl_context: ssl.SSLContext | None = None, headers: Mapping[str, str] | None = None
) -> bool:
    """Whether a GET of ``url`` answers 200 within 2 seconds (a probe)."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
        session.get(
            url, ssl=ssl_context if ssl_context is not None else False, headers=headers
        ) as answer,
    ):
        return answer.status == 200


@dataclass(frozen=True)
class KueueOptions:
    """What the Kueue Configuration of one cluster says beyond the harness's fixed choices."""

    dispatcher_name: str | None = None
    """``multiKueue.dispatcherName`` (manager only; None: not a MultiKueue manager)."""
    merge_patch_gate: bool = False
    """Kueue's ``WorkloadRequestUseMergePatch`` feature gate (a pitfall remedy)."""
    incremental_step_size: int | None = None
    worker_lost_timeout: str = "15s"
    """``multiKueue.workerLostTimeout`` (Kueue's default is 15 minutes; short for tests)."""
    gc_interval: str = "30s"
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    metrics: bool = False
    """Serve Kueue's Prometheus metrics on loopback (:meth:`RealCluster.kueue_metrics`): the
    benchmarks read its controllers' reconcile counts from there."""


def kueue_configuration(
    options: KueueOptions,
    *,
    webhook_port: int,
    health_port: int,
    cert_dir: Path,
    metrics_port: int | None = None,
) -> Obj:
    """The Kueue Configuration (v1beta2) the harness runs a cluster's Kueue with."""
    gates: dict[str, bool] = {"VisibilityOnDemand": False}
    if options.merge_patch_gate:
        gates["WorkloadRequestUseMergePatch"] = True
    gates.update(options.feature_gates)
    config: Obj = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {
            "bindAddress": f"127.0.0.1:{metrics_port}"
            if options.metrics and metrics_port is not None
            else "0"
        },
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 300, "burst": 500},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": gates,
    }
    if options.dispatcher_name is not None:
        multikueue: Obj = {
            "dispatcherName": options.dispatcher_name,
            "workerLostTimeout": options.worker_lost_timeout,
            "gcInterval": options.gc_interval,
        }
        if options.incremental_step_size is not None:
            multikueue["incrementalDispatcherConfig"] = {"stepSize": options.incremental_step_size}
        config["multiKueue"] = multikueue
    return config


def _load_documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


@dataclass(frozen=True)
class KueueManifests:
    """Kueue's CRDs, webhook configurations and admission policy, from its Go module."""

    crds: list[Obj]
    mutating: Obj
    validating: Obj
    policy: list[Obj]

    @classmethod
    def from_module(cls, directory: Path) -> KueueManifests:
        """Read them from ``config/components`` of Kueue's module directory."""
        components = directory / "config" / "components"
        crds = [
            doc
            for path in sorted((components / "crd" / "bases").glob("*.yaml"))
            for doc in _load_documents(path)
        ]
        webhooks = _load_documents(components / "webhook" / "manifests.yaml")
        mutating = next(d for d in webhooks if d["kind"] == "MutatingWebhookConfiguration")
        validating = next(d for d in webhooks if d["kind"] == "ValidatingWebhookConfiguration")
        policy = _load_documents(components / "map" / "manifests.yaml")
        return cls(crds, mutating, validating, policy)

    def crds_for(self, webhook_url: str, ca_bundle: str) -> list[Obj]:
        """The CRDs, with Kueue's conversion webhook reached at ``webhook_url``."""
        out = []
        for crd in copy.deepcopy(self.crds):
            if crd["metadata"]["name"] in CONVERTED_CRDS:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{webhook_url}/convert", "caBundle": ca_bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            out.append(crd)
        return out

    def webhooks_for(self, webhook_url: str, ca_bundle: str) -> list[tuple[Resource, Obj]]:
        """The webhook configurations of Kueue and batch Jobs, pointed at ``webhook_url``."""
        out: list[tuple[Resource, Obj]] = []
        for resource, config in (
            (MUTATING_WEBHOOKS, self.mutating),
            (VALIDATING_WEBHOOKS, self.validating),
        ):
            body = copy.deepcopy(config)
            body["metadata"] = {"name": f"kueue-{config['metadata']['name']}"}
            kept = []
            for hook in body["webhooks"]:
                groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups", [])}
                if not groups or not groups <= WEBHOOK_GROUPS:
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"{webhook_url}{path}", "caBundle": ca_bundle}
                kept.append(hook)
            body["webhooks"] = kept
            out.append((resource, body))
        return out


def _kubeconfig(name: str, server: str, ca_pem: bytes, token: str) -> Obj:
    """A kubeconfig in the form Kueue accepts for a worker: inline CA data and a token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
        "current-context": name,
    }


class RealCluster:
    """One cluster: etcd, kube-apiserver, the garbage collector and Kueue (module docstring)."""

    def __init__(
        self, name: str, directory: Path, pki: Pki, manifests: KueueManifests, kueue: KueueOptions
    ) -> None:
        self.name = name
        self.directory = directory
        self.pki = pki
        self.manifests = manifests
        self.kueue_options = kueue
        self.token = secrets.token_hex(24)
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.apiserver_port = free_port()
        self.webhook_port = free_port()
        self.kueue_health_port = free_port()
        self.kueue_metrics_port = free_port()
        self.gc_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.kubeconfig: Obj = _kubeconfig(name, self.server, pki.ca_pem, self.token)
        self.kubeconfig_path = directory / f"{name}.kubeconfig"
        self.etcd = Process(f"{name}/etcd", self._etcd_argv(), directory / "etcd.log")
        self.apiserver = Process(
            f"{name}/kube-apiserver", self._apiserver_argv(), directory / "kube-apiserver.log"
        )
        env = os.environ | {"KUBECONFIG": str(self.kubeconfig_path)}
        self.gc = Process(
            f"{name}/kube-controller-manager",
            self._gc_argv(),
            directory / "kube-controller-manager.log",
        )
        self.kueue = Process(
            f"{name}/kueue",
            [str(binary_path("kueue")), f"--config={directory / 'kueue-config.yaml'}"],
            directory / "kueue.log",
            env=env,
        )

    # --- command lines ----------------------------------------------------------------------

    def _etcd_argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        return [
            str(binary_path("etcd")),
            f"--name={self.name}",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.name}={peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        return [
            str(binary_path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={self.pki.server_cert}",
            f"--tls-private-key-file={self.pki.server_key}",
            f"--client-ca-file={self.pki.ca_cert}",
            f"--token-auth-file={self.directory / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={self.pki.service_account_pub}",
            f"--service-account-signing-key-file={self.pki.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--endpoint-reconciler-type=none",
            "--enable-admission-plugins=MutatingAdmissionPolicy",
            f"--cert-dir={self.directory / 'apiserver-certs'}",
            "--profiling=false",
            "--v=1",
        ]

    def _gc_argv(self) -> list[str]:
        return [
            str(binary_path("kube-controller-manager")),
            f"--kubeconfig={self.kubeconfig_path}",
            "--controllers=garbagecollector",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.gc_port}",
            f"--cert-dir={self.directory / 'gc-certs'}",
            "--use-service-account-credentials=false",
            "--v=1",
        ]

    # --- life cycle -------------------------------------------------------------------------

    def client(self, user_agent: str = FIELD_MANAGER) -> KubeClient:
        """A client of this cluster's API server (the caller closes it)."""
        return KubeClient(self.kubeconfig, user_agent=user_agent)

    async def _healthy(self, url: str, *, token: bool = False) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        headers = {"Authorization": f"Bearer {self.token}"} if token else {}
        return await answers_ok(url, ssl_context=context, headers=headers)

    async def kueue_metrics(self) -> str:
        """Kueue's metrics in the Prometheus text format (Kueue must run with
        ``KueueOptions.metrics``). Kueue serves them over TLS with the certificate of
        :func:`ensure_metrics_certs`, which may predate this plane's CA: loopback only, that
        certificate is not verified; the request carries this cluster's admin token, which
        Kueue checks with the API server."""
        if not self.kueue_options.metrics:
            raise ControlPlaneError(f"{self.name}: Kueue runs without KueueOptions.metrics")
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return await self._metrics(f"https://127.0.0.1:{self.kueue_metrics_port}/metrics", context)

    async def apiserver_metrics(self) -> str:
        """kube-apiserver's metrics in the Prometheus text format."""
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        return await self._metrics(f"{self.server}/metrics", context)

    async def _metrics(self, url: str, context: ssl.SSLContext) -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                url,
                ssl=context,
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=aiohttp.ClientTimeout(total=30),
            ) as response,
        ):
            if response.status != 200:
                raise ControlPlaneError(f"{self.name}: {url} answered {response.status}")
            return await response.text()

    async def start_etcd(self) -> None:
        """Start etcd and wait for ``/health``."""
        self.etcd.start()
        url = f"http://127.0.0.1:{self.etcd_port}/health"
        await wait_until(lambda: answers_ok(url), f"{self.name}: etcd healthy", 60, [self.etcd])

    async def start_apiserver(self) -> None:
        """Start kube-apiserver (again, on the same port) and wait for ``/readyz``."""
        self.apiserver.start()
        await wait_until(
            lambda: self._healthy(f"{self.server}/readyz", token=True),
            f"{self.name}: kube-apiserver ready",
            90,
            [self.apiserver],
        )

    async def stop_apiserver(self) -> None:
        """Take the API server off at once, as a network loss does: SIGKILL, so its clients get
        refused connections from this moment until it is back. A graceful SIGTERM lets
        kube-apiserver serve for up to 20 s more while it drains, during which Kueue could
        still create and admit copies on a worker a test considers lost."""
        self.apiserver.kill()

    async def install_kueue_api(self, remedy: Remedy) -> None:
        """Kueue's CRDs, its namespace, webhook configurations and (with ``policy``) the
        ``clear-nominated-cluster-names`` admission policy."""
        ca_bundle = base64.b64encode(self.pki.ca_pem).decode()
        url = f"https://127.0.0.1:{self.webhook_port}"
        async with self.client() as api:
            for crd in self.manifests.crds_for(url, ca_bundle):
                await api.apply(CRDS, crd, field_manager=FIELD_MANAGER, force=True)
            await api.apply(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
                field_manager=FIELD_MANAGER,
                force=True,
            )
            for resource, body in self.manifests.webhooks_for(url, ca_bundle):
                await api.apply(resource, body, field_manager=FIELD_MANAGER, force=True)
            if remedy == "policy":
                await self.install_policy(api)

            async def established() -> bool:
                for crd in self.manifests.crds:
                    got = await api.get(CRDS, crd["metadata"]["name"])
                    conditions = ((got or {}).get("status") or {}).get("conditions") or []
                    if not any(
                        c.get("type") == "Established" and c.get("status") == "True"
                        for c in conditions
                    ):
                        return False
                return True

            await wait_until(established, f"{self.name}: Kueue CRDs established", 60)

            # Established is not yet served: the API server's discovery documents take the
            # new kinds a moment later, and a Kueue started in between exits on "no matches
            # for kind" (seen in CI under load). Wait until discovery lists every kind.
            wanted: dict[str, set[str]] = {}
            for crd in self.manifests.crds:
                spec = crd["spec"]
                for version in spec.get("versions") or []:
                    if version.get("served"):
                        path = f"/apis/{spec['group']}/{version['name']}"
                        wanted.setdefault(path, set()).add(spec["names"]["plural"])

            async def discoverable() -> bool:
                for path, plurals in wanted.items():
                    try:
                        listed = await api.request("GET", path)
                    except KubeError:
                        return False
                    names = {r.get("name") for r in (listed or {}).get("resources") or []}
                    if not plurals <= names:
                        return False
                return True

            await wait_until(discoverable, f"{self.name}: Kueue's kinds in discovery", 60)

    def _policy_objects(self) -> list[tuple[Resource, Obj]]:
        return [
            (
                ADMISSION_POLICIES
                if doc["kind"] == "MutatingAdmissionPolicy"
                else ADMISSION_POLICY_BINDINGS,
                doc,
            )
            for doc in self.manifests.policy
        ]

    async def install_policy(self, api: KubeClient) -> None:
        """Kueue's ``clear-nominated-cluster-names`` MutatingAdmissionPolicy and binding."""
        for resource, doc in self._policy_objects():
            await api.apply(resource, doc, field_manager=FIELD_MANAGER, force=True)

    def _write_kueue_config(self) -> None:
        cert_dir = self.directory / "webhook-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.pki.server_cert, cert_dir / "tls.crt")
        shutil.copy(self.pki.server_key, cert_dir / "tls.key")
        config = kueue_configuration(
            self.kueue_options,
            webhook_port=self.webhook_port,
            health_port=self.kueue_health_port,
            cert_dir=cert_dir,
            metrics_port=self.kueue_metrics_port,
        )
        (self.directory / "kueue-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    async def start_kueue(self, options: KueueOptions | None = None) -> None:
        """Start Kueue (with new options, if given) and wait until its webhooks answer."""
        if options is not None:
            self.kueue_options = options
        self._write_kueue_config()
        self.kueue.start()
        await wait_until(
            lambda: self._healthy(f"http://127.0.0.1:{self.kueue_health_port}/readyz"),
            f"{self.name}: Kueue ready",
            120,
            [self.kueue],
        )

        async def webhook_serves() -> bool:
            # A dry-run create through the API server reaches Kueue's defaulting webhook.
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "mkd-webhook-probe"},
                "spec": {},
            }
            async with self.client() as api:
                await api.request(
                    "POST",
                    "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
                    query={"dryRun": "All"},
                    body=body,
                )
            return True

        await wait_until(webhook_serves, f"{self.name}: Kueue webhooks answer", 60, [self.kueue])

    async def stop_kueue(self) -> None:
        """Stop Kueue (the API keeps serving; Kueue's objects stay)."""
        await self.kueue.stop()

    async def start(self, remedy: Remedy) -> None:
        """Start every process of the cluster and install Kueue's API."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "tokens.csv").write_text(
            f'{self.token},admin,admin-uid,"system:masters"\n'
        )
        self.kubeconfig_path.write_text(yaml.safe_dump(self.kubeconfig, sort_keys=False))
        await self.start_etcd()
        await self.start_apiserver()
        await self.install_kueue_api(remedy)
        self.gc.start()
        await self.start_kueue()

    async def stop(self) -> None:
        """Stop Kueue and the garbage collector, then the API server, then etcd."""
        with anyio.CancelScope(shield=True):
            await self.kueue.stop()
            await self.gc.stop()
            await self.apiserver.stop()
            await self.etcd.stop()

    @property
    def processes(self) -> list[Process]:
        """Every process of the cluster."""
        return [self.etcd, self.apiserver, self.gc, self.kueue]


def kueue_manifests() -> KueueManifests:
    """Kueue's manifests at the pinned version (downloaded into the module cache if needed)."""
    versions = load_versions()
    return KueueManifests.from_module(module_dir(versions.kueue_module, versions.kueue))


def ensure_metrics_certs(pki: Pki) -> None:
    """Kueue opens ``/etc/kueue/metrics/certs/tls.{crt,key}`` when internal certificate
    management is off, even with metrics disabled: put the plane's certificate there unless a
    pair is already present."""
    crt, key = KUEUE_METRICS_CERTS / "tls.crt", KUEUE_METRICS_CERTS / "tls.key"
    if crt.is_file() and key.is_file():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(pki.server_cert, crt)
        shutil.copy(pki.server_key, key)
    except OSError as error:
        raise ControlPlaneError(
            f"Kueue needs {crt} and {key} when its internal certificate management is off, "
            f"and they cannot be written ({error}); create them (any key pair) and retry"
        ) from error


def require_binaries() -> None:
    """Fail with the build command when a binary is missing."""
    reason = missing_reason()
    if reason is not None:
        raise BuildError(reason)


@dataclass
class RealPlane:
    """A manager and its workers as real clusters (see :func:`real_plane`)."""

    directory: Path
    pki: Pki
    manager: RealCluster
    workers: dict[str, RealCluster]
    remedy: Remedy

    @property
    def clusters(self) -> list[RealCluster]:
        """The manager, then the workers."""
        return [self.manager, *self.workers.values()]

    def cluster(self, name: str) -> RealCluster:
        """A cluster by name."""
        if name == self.manager.name:
            return self.manager
        return self.workers[name]

    async def restart_manager_kueue(self, options: KueueOptions) -> None:
        """Restart the manager's Kueue with another Configuration (as a ConfigMap change and a
        rollout restart do in a cluster).

        The MultiKueueClusters' conditions are cleared while Kueue is down: the ``Active=True``
        the previous process wrote would otherwise claim connections the new process has not
        made yet, and a workload submitted then is dispatched to the workers connected so far
        only (seen: AllAtOnce made 1.67 copies per workload on two workers)."""
        await self.manager.stop_kueue()
        async with self.manager.client() as api:
            listed = await api.list(MULTIKUEUE_CLUSTERS)
            for mkc in listed.get("items") or []:
                await api.merge_patch(
                    MULTIKUEUE_CLUSTERS,
                    mkc["metadata"]["name"],
                    {"status": {"conditions": None}},
                    subresource="status",
                    field_manager=FIELD_MANAGER,
                )
        await self.manager.start_kueue(options)

    async def stop(self) -> None:
        """Stop every cluster (in parallel)."""
        async with anyio.create_task_group() as group:
            for cluster in self.clusters:
                group.start_soon(cluster.stop)


@contextlib.asynccontextmanager
async def real_plane(
    directory: Path,
    manager: str,
    workers: Sequence[str],
    *,
    dispatcher_name: str,
    remedy: Remedy = "policy",
    kueue: KueueOptions | None = None,
) -> AsyncIterator[RealPlane]:
    """Start a manager and workers as real clusters in ``directory``; stop them on exit.

    ``kueue`` sets the manager's Kueue options (its ``dispatcher_name`` and the remedy's gate
    are filled in from the arguments). The caller creates the topology's objects.
    """
    require_binaries()
    pki = make_pki(directory / "pki")
    ensure_metrics_certs(pki)
    manifests = kueue_manifests()
    manager_options = kueue or KueueOptions()
    manager_options = dataclasses.replace(
        manager_options,
        dispatcher_name=dispatcher_name,
        merge_patch_gate=remedy == "gate" or manager_options.merge_patch_gate,
    )
    plane = RealPlane(
        directory=directory,
        pki=pki,
        manager=RealCluster(manager, directory / manager, pki, manifests, manager_options),
        workers={w: RealCluster(w, directory / w, pki, manifests, KueueOptions()) for w in workers},
        remedy=remedy,
    )
    try:
        started = time.monotonic()
        async with anyio.create_task_group() as group:
            for cluster in plane.clusters:
                group.start_soon(cluster.start, remedy if cluster is plane.manager else "none")
        log.info(
            "real control plane: %d clusters ready in %.1f s (%s)",
            len(plane.clusters),
            time.monotonic() - started,
            directory,
        )
        yield plane
    finally:
        await plane.stop()


def describe(plane: RealPlane) -> str:
    """One line per cluster: its API server and kubeconfig."""
    return "\n".join(
        f"{c.name}: {c.server} (kubeconfig {c.kubeconfig_path}, logs {c.directory})"
        for c in plane.clusters
    )
