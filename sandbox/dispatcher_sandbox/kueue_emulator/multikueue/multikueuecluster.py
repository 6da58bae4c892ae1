"""The MultiKueueCluster reconciler: kubeconfig validation, the remote clients and their
reconnects.

Mirrors Kueue v0.19.2 ``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``
(``clustersReconciler``, ``remoteClient``, ``validateKubeconfig``) and ``remote_client.go``. The
orphan GC, which Kueue keeps in ``multikueuecluster.go`` (``remoteClient.runGC``), stays a method
of :class:`~.workload.WorkloadController` here, as it works on that controller's state.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import ipaddress
import logging
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import yaml

from dispatcher_sandbox.kube_client import (
    JOBS,
    MULTIKUEUE_CLUSTERS,
    SECRETS,
    WORKLOADS,
    Informer,
    KubeClient,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.multikueue.controllers import (
    Key,
    _key,
    _RetryingLoop,
    _write_condition,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    ORIGIN_LABEL,
    PREBUILT_WORKLOAD_LABEL,
    Clock,
    ClusterConnection,
    KueueConfig,
    Obj,
    RateLimitedKubeClient,
    WorkerClientLimit,
    cancel_and_wait,
)

log = logging.getLogger(__name__)

SECRET_KEY = "kubeconfig"  # C10: MultiKueueConfigSecretKey

# C11: reconnect backoff starts at 5 s and doubles for 7 steps.
RECONNECT_BASE_SECONDS = 5.0
RECONNECT_MAX_STEPS = 7

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


# --- kubeconfig validation (C62) -------------------------------------------------------------


class KubeconfigError(Exception):
    """The kubeconfig cannot be used; ``reason`` is the MultiKueueCluster condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _valid_host(server: str) -> bool:
    """Kueue's ``isValidHostname``: the host is an IP address or a DNS-1123 subdomain."""
    try:
        host = urlsplit(server).hostname or ""
    except ValueError:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    return len(host) <= 253 and bool(_DNS1123_SUBDOMAIN.match(host.lower()))


def validate_kubeconfig(text: str) -> Obj:
    """Parse and validate a worker kubeconfig exactly as Kueue does (C62).

    Raises :class:`KubeconfigError` with reason ``InsecureKubeConfig`` (as Kueue's
    ``validateKubeconfig`` failures are reported) and Kueue's messages.
    """
    insecure = "InsecureKubeConfig"
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KubeconfigError(
            insecure, f"failed to parse kubeconfig(apiconfig): {error}"
        ) from error
    if not isinstance(parsed, dict):
        raise KubeconfigError(insecure, "failed to parse kubeconfig(apiconfig): not a mapping")
    # client-go decodes the file into typed lists: another type fails the whole parse, with
    # the JSON decoder's message (measured on Kueue v0.19.2).
    for section, item_type in (
        ("clusters", "NamedCluster"),
        ("users", "NamedAuthInfo"),
        ("contexts", "NamedContext"),
    ):
        value = parsed.get(section)
        if value is not None and not isinstance(value, list):
            kind = "string" if isinstance(value, str) else "object"
            if isinstance(value, bool):
                kind = "bool"
            elif isinstance(value, int | float):
                kind = "number"
            raise KubeconfigError(
                insecure,
                f"failed to parse kubeconfig(apiconfig): json: cannot unmarshal {kind} into Go "
                f"struct field Config.{section} of type []v1.{item_type}",
            )
        if isinstance(value, list) and not all(isinstance(entry, dict) for entry in value):
            raise KubeconfigError(
                insecure,
                f"failed to parse kubeconfig(apiconfig): json: cannot unmarshal a non-object "
                f"into Go struct field Config.{section} of type v1.{item_type}",
            )
    for entry in parsed.get("users") or []:
        if (entry.get("user") or {}).get("tokenFile"):
            raise KubeconfigError(insecure, "tokenFile is not allowed")
    for entry in parsed.get("clusters") or []:
        name, cluster = entry.get("name", ""), entry.get("cluster") or {}
        if cluster.get("insecure-skip-tls-verify"):
            raise KubeconfigError(
                insecure, f"insecure TLS verification is not allowed for cluster {name}"
            )
        if cluster.get("certificate-authority"):
            raise KubeconfigError(
                insecure,
                "certificate-authority file paths are not allowed, use "
                f"certificate-authority-data for cluster {name}",
            )
        if not cluster.get("server"):
            raise KubeconfigError(insecure, f"server URL is required for cluster {name}")
    # The REST config of the current context (clientcmd.RESTConfigFromKubeConfig).
    contexts = {c.get("name"): c.get("context") or {} for c in parsed.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster") or {} for c in parsed.get("clusters") or []}
    users = {u.get("name"): u.get("user") or {} for u in parsed.get("users") or []}
    current = parsed.get("current-context")
    if not current or current not in contexts:
        raise KubeconfigError(insecure, "invalid configuration: no configuration has been provided")
    context = contexts[current]
    cluster = clusters.get(context.get("cluster"))
    if cluster is None:
        raise KubeconfigError(
            insecure, f'invalid configuration: cluster "{context.get("cluster")}" not found'
        )
    user = users.get(context.get("user"), {})
    if user.get("tokenFile"):
        raise KubeconfigError(insecure, "bearerTokenFile is not allowed")
    if not _valid_host(str(cluster.get("server", ""))):
        raise KubeconfigError(insecure, "untrusted server endpoint")
    if user.get("username") or user.get("password"):
        raise KubeconfigError(insecure, "basic auth is not allowed")
    if user.get("exec"):
        raise KubeconfigError(insecure, "exec plugins are not allowed")
    if user.get("auth-provider"):
        raise KubeconfigError(insecure, "auth providers are not allowed")
    return parsed


# --- remote clusters (C10, C11, C23, C41) ----------------------------------------------------


class RemoteCluster:
    """A connection to one worker: a client and an informer on its copies (origin label).

    The client is rate-limited as Kueue's worker clients are (``KueueConfig.worker_client_qps``,
    C10). ``lost_since`` is when the connection was lost, on the injected clock (Kueue's
    ``connectionState.disconnectedSince``, C29): the moment the remote was created until its
    first connection, kept through failed reconnects, cleared once connected.
    """

    def __init__(
        self,
        name: str,
        source: str,
        kubeconfig: Mapping[str, Any],
        origin: str,
        on_change: Callable[[str, str, Obj], None],
        *,
        reconnect_base_seconds: float,
        limit: WorkerClientLimit,
        clock: Clock,
    ) -> None:
        self.name = name
        self.source = source  # the kubeconfig text, to notice a rotation
        self.client: KubeClient = RateLimitedKubeClient(kubeconfig, limit)
        self._on_change = on_change
        self._clock = clock
        self.lost_since: datetime.datetime | None = clock.now()

        def ours(resource: Resource, on_change: Callable[[str, Obj], None]) -> Informer:
            """An informer of the objects this manager put on the worker (origin label)."""
            return Informer(
                self.client,
                resource,
                on_change,
                label_selector=f"{ORIGIN_LABEL}={origin}",
                initial_backoff=reconnect_base_seconds,
                max_backoff=reconnect_base_seconds * 2 ** (RECONNECT_MAX_STEPS - 1),
            )

        self.workloads = ours(WORKLOADS, self._changed)
        # Jobs created on this worker for the manager's Jobs (C28 step 2): their status changes
        # are synced back to the manager Job (C25), so they wake the owning Workload's key.
        self.jobs = ours(JOBS, self._job_changed)
        self.failed_attempts = 0
        self._tasks: list[asyncio.Task[None]] = []

    def _job_changed(self, kind: str, obj: Obj) -> None:
        if kind in ("SYNCED", "DISCONNECTED"):
            return
        meta = obj.get("metadata") or {}
        workload = (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
        if workload:
            self._on_change(
                self.name,
                "MODIFIED",
                {"metadata": {"namespace": meta.get("namespace", ""), "name": workload}},
            )

    def _changed(self, kind: str, obj: Obj) -> None:
        if kind == "DISCONNECTED":
            self.failed_attempts += 1
            if self.lost_since is None:
                self.lost_since = self._clock.now()
        elif kind == "SYNCED":
            self.failed_attempts = 0
            self.lost_since = None
        self._on_change(self.name, kind, obj)

    def keys(self) -> set[Key]:
        """The manager Workloads this remote holds a copy or a Job of (what a new watch of
        Kueue's reports at once, as ADDED events)."""
        keys = {_key(o) for o in self.workloads.values()}
        for job in self.jobs.values():
            meta = job.get("metadata") or {}
            workload = (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
            if workload:
                keys.add((str(meta.get("namespace", "")), str(workload)))
        return keys

    @property
    def connected(self) -> bool:
        """Whether the informer has listed and its watch is up (C11 ``Active``)."""
        return self.workloads.connected and self.workloads.synced.is_set()

    def copy_of(self, key: Key) -> Obj | None:
        """The cached remote copy of a manager Workload."""
        return self.workloads.get(key[1], key[0])

    def job_of(self, key: Key) -> Obj | None:
        """The cached Job created on this worker for a manager Workload, if any (the cached
        object itself: read-only)."""
        for job in self.jobs.values():
            meta = job.get("metadata") or {}
            if (
                meta.get("namespace") == key[0]
                and (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL) == key[1]
            ):
                return job
        return None

    def start(self) -> None:
        """Start connecting (and reconnecting, with backoff)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.workloads.run()), loop.create_task(self.jobs.run())]

    async def stop(self) -> None:
        """Stop watching and close the client, also when the stopping controller is itself
        cancelled meanwhile or a watch task ended with an error (the pool is never left open)."""
        tasks, self._tasks = self._tasks, []
        try:
            await cancel_and_wait(tasks)
        finally:
            await self.client.close()


class ClusterController(_RetryingLoop):
    """``MultiKueueCluster`` reconciler: connections and the ``Active`` condition (C10–C11, C62)."""

    name = "multikueue_cluster"

    def __init__(
        self,
        conn: ClusterConnection,
        config: KueueConfig,
        clock: Clock,
        on_remote_change: Callable[[str, str, Obj], None],
        *,
        reconnect_base_seconds: float = RECONNECT_BASE_SECONDS,
    ) -> None:
        super().__init__(config, clock)
        self.conn = conn
        self.remotes: dict[str, RemoteCluster] = {}
        self._lost: dict[str, datetime.datetime] = {}  # clusters whose client is gone (C29)
        self._on_remote_change = on_remote_change
        self.reconnect_base_seconds = reconnect_base_seconds

    def connected(self, name: str) -> RemoteCluster | None:
        """The remote of that MultiKueueCluster, if it is connected now."""
        remote = self.remotes.get(name)
        return remote if remote is not None and remote.connected else None

    def lost_since(self, name: str) -> datetime.datetime:
        """Since when the worker has been unreachable (Kueue's ``admittingWorkerLostSince``):
        the recorded loss, or now when there is no remote (or it is connected)."""
        remote = self.remotes.get(name)
        if remote is not None and remote.lost_since is not None:
            return remote.lost_since
        if remote is None and name in self._lost:
            return self._lost[name]
        return self.clock.now()

    def _remote_changed(self, cluster: str, kind: str, obj: Obj) -> None:
        if kind in ("SYNCED", "DISCONNECTED"):
            self.mark_dirty()
        self._on_remote_change(cluster, kind, obj)

    def _load(self, mkc: Obj) -> str:
        """The kubeconfig text of a MultiKueueCluster (C10), or :class:`KubeconfigError`."""
        source = (mkc.get("spec") or {}).get("clusterSource") or {}
        kubeconfig = source.get("kubeConfig")
        if kubeconfig is None:
            if source.get("clusterProfileRef") is not None:
                raise KubeconfigError(
                    "MultiKueueClusterProfileFeatureDisabled",
                    "MultiKueueClusterProfile feature gate is disabled",
                )
            raise KubeconfigError("BadKubeConfig", "kubeconfig reference is nil")
        location = kubeconfig.get("location", "")
        if kubeconfig.get("locationType", "Secret") == "Path":
            raise KubeconfigError(
                "BadKubeConfig",
                f"kubeconfig path {location!r}: locationType Path is not supported by the "
                "emulation; use a Secret",
            )
        secret = self.conn.cache(SECRETS).get(location, self.config.namespace)
        if secret is None:
            raise KubeconfigError("BadKubeConfig", f'secrets "{location}" not found')
        data = (secret.get("data") or {}).get(SECRET_KEY)
        if data is None:
            raise KubeconfigError(
                "BadKubeConfig", f'key "{SECRET_KEY}" not found in secret "{location}"'
            )
        try:
            return base64.b64decode(data).decode()
        except (binascii.Error, UnicodeDecodeError) as error:
            raise KubeconfigError("BadKubeConfig", f"secret data: {error}") from error

    async def _teardown(self, name: str, *, keep_loss: bool = False) -> None:
        """Stop the remote of ``name``. ``keep_loss`` (its MultiKueueCluster still exists, only
        its client goes): remember since when the worker has been unreachable, as Kueue keeps
        the remote client marked disconnected (``disconnectCluster``, C29); a deleted cluster
        forgets it (``stopAndRemoveCluster``)."""
        remote = self.remotes.pop(name, None)
        if keep_loss:
            lost = remote.lost_since if remote is not None else None
            self._lost.setdefault(name, lost or self.clock.now())
        else:
            self._lost.pop(name, None)
        if remote is not None:
            await remote.stop()
            self._on_remote_change(name, "DISCONNECTED", {})

    async def _reconcile(self) -> float | None:
        """One pass: connections and ``Active`` conditions in line with the MultiKueueClusters."""
        if not (
            self.conn.cache(MULTIKUEUE_CLUSTERS).synced.is_set()
            and self.conn.cache(SECRETS).synced.is_set()
        ):
            return None
        seen: set[str] = set()
        for mkc in self.conn.cache(MULTIKUEUE_CLUSTERS).items():
            name = mkc["metadata"]["name"]
            if mkc["metadata"].get("deletionTimestamp"):
                continue
            seen.add(name)
            try:
                text = self._load(mkc)
                kubeconfig = validate_kubeconfig(text)
            except KubeconfigError as error:
                await self._teardown(name, keep_loss=True)
                await self._status(mkc, False, error.reason, f"load client config failed: {error}")
                continue
            remote = self.remotes.get(name)
            if remote is None or remote.source != text:  # new, or the Secret was rotated
                await self._teardown(name, keep_loss=True)
                try:
                    remote = RemoteCluster(
                        name,
                        text,
                        kubeconfig,
                        self.config.origin,
                        self._remote_changed,
                        reconnect_base_seconds=self.reconnect_base_seconds,
                        limit=self.config.worker_client_limit,
                        clock=self.clock,
                    )
                except (ValueError, KeyError, TypeError, ssl.SSLError, binascii.Error) as error:
                    await self._status(mkc, False, "ClientConnectionFailed", str(error))
                    continue
                remote.lost_since = self._lost.pop(name, remote.lost_since)
                self.remotes[name] = remote
                remote.start()
            if remote.connected:
                await self._status(mkc, True, "Active", "Connected")
            elif remote.failed_attempts:
                message = remote.workloads.last_error or "connection failed"
                await self._status(mkc, False, "ClientConnectionFailed", message)
        for name in list(self.remotes):
            if name not in seen:  # deleted MultiKueueCluster: tear down
                await self._teardown(name)
        return None

    async def _status(self, mkc: Obj, value: bool, reason: str, message: str) -> None:
        await _write_condition(
            self.conn.client, MULTIKUEUE_CLUSTERS, mkc, "Active", value, reason, message, self.clock
        )

    async def close(self) -> None:
        """Stop every remote."""
        for name in list(self.remotes):
            await self._teardown(name)
