"""The registry of worker clusters: kubeconfig Secrets in, one supervised mirror per worker out.

The manager mirror watches ``MultiKueueCluster``, ``MultiKueueConfig`` and ``AdmissionCheck``
objects, the Secrets of Kueue's namespace, and the manager's Workloads, ClusterQueues and (where
RBAC allows) LocalQueues. For
every MultiKueueCluster the registry resolves its kubeconfig Secret (contract C10), validates it
as Kueue does (C62) and runs a supervisor that builds a client and a worker :class:`Mirror`
(ClusterQueues, LocalQueues, ResourceFlavors, Workloads, and Nodes where RBAC allows).

One broken worker never affects the others: a bad Secret marks that worker ``Unusable`` with the
reason, a failing client is retried with backoff inside its own supervisor, and a changed Secret
(rotation) or a deleted MultiKueueCluster replaces or stops just that supervisor.

Whether a worker is dispatched to combines Kueue's ``Active`` condition with our mirror's
freshness (:mod:`dispatcher.clusters.activeness`): a mirror that lost its streams stays usable
for ``stale_grace`` seconds, and the registry reports the moment that grace runs out.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from dispatcher.clusters import slim
from dispatcher.clusters.activeness import (
    DEFAULT_STALE_GRACE_SECONDS,
    Activeness,
    MirrorHealth,
    judge,
)
from dispatcher.clusters.mirror import Mirror, Watched
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.clock import SYSTEM_CLOCK, Clock
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.kubeconfig import (
    BAD,
    SECRET_KEY,
    KubeconfigError,
    ValidKubeconfig,
    kubeconfig_from_secret,
)
from dispatcher.k8s.resources import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    RESOURCE_FLAVORS,
    SECRETS,
    WORKLOADS,
)
from dispatcher.k8s.watching import (
    Backoff,
    BackoffPolicy,
    Disconnected,
    ObjectEvent,
    WatchItem,
    WatchSettings,
)
from dispatcher.kueue.eligibility import MULTIKUEUE_CONTROLLER
from dispatcher.kueue.hints import CLUSTER_TAINTS, Taint, parse_taints
from dispatcher.kueue.objects import InvalidField
from dispatcher.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

__all__ = [
    "MANAGER",
    "MAX_CONFIG_CLUSTERS",
    "Candidate",
    "ClusterRegistry",
    "Worker",
    "WorkerState",
    "resolve_kubeconfig",
]

MAX_CONFIG_CLUSTERS = 20
"""Kueue's limit on a MultiKueueConfig's ``spec.clusters`` (and on a nomination, C19)."""

MANAGER = ""
"""The cluster name callbacks use for the manager cluster."""

ClientFactory = Callable[[Mapping[str, Any], str], Awaitable[KubeApi]]
ChangeCallback = Callable[[str, str, WatchItem], None]
"""``(cluster, resource, event)``; cluster is :data:`MANAGER` for the manager."""

MANAGER_RESOURCES = ("workloads", "clusterqueues", "multikueueclusters", "multikueueconfigs")
WORKER_RESOURCES: dict[str, Watched] = {
    # Each keeps only what the dispatcher reads of it (dispatcher.clusters.slim).
    "clusterqueues": Watched(CLUSTER_QUEUES, transform=slim.worker_cluster_queue),
    "localqueues": Watched(LOCAL_QUEUES, transform=slim.worker_local_queue),
    "resourceflavors": Watched(RESOURCE_FLAVORS, transform=slim.worker_resource_flavor),
    "workloads": Watched(WORKLOADS, transform=slim.worker_workload),
    # The same-name guard's: which Jobs exist there that are not copies of ours. Optional: a
    # worker that does not let us list Jobs keeps the guard to same-named Workloads.
    "jobs": Watched(JOBS, optional=True, transform=slim.worker_job),
}


@dataclass
class WorkerState:
    """What the dispatcher knows about its connection to one worker."""

    phase: str
    """``Unusable`` (bad configuration), ``Connecting``, ``Connected`` or ``Disconnected``."""
    reason: str
    message: str
    since: float


@dataclass
class Worker:
    """One MultiKueueCluster and its supervisor."""

    name: str
    fingerprint: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    mirror: Mirror | None = None
    state: WorkerState = field(
        default_factory=lambda: WorkerState("Connecting", "Connecting", "", 0.0)
    )
    settled: bool = False
    """The first connection attempt has an outcome (synced, optional resources included unless
    the worker refuses them; failed; or the kubeconfig is unusable): until then the dispatcher
    does not know what is on this worker."""
    stale_since: float | None = None
    """When our synced mirror stopped being connected (the registry's monotonic clock); None
    while it is connected or has never synced."""
    usable: bool = False
    """What the registry last reported of :meth:`ClusterRegistry.mirror_usable` (a change of it
    is notified as a ``connection`` change)."""

    @property
    def connected(self) -> bool:
        """Our own mirror of the worker is synced and streaming."""
        return self.mirror is not None and self.mirror.connected

    def health(self) -> MirrorHealth:
        """Our side of this worker, for :func:`~dispatcher.clusters.activeness.judge`."""
        state = self.state
        detail = ": ".join(
            part
            for part in (state.reason if state.reason != state.phase else "", state.message)
            if part
        )
        synced = self.mirror is not None and self.mirror.listed
        return MirrorHealth(
            state.phase, detail, synced, None if self.connected else self.stale_since
        )


@dataclass(frozen=True, slots=True)
class _Verdict:
    """A worker's activeness and its inputs: objects compared by identity (a cache replaces
    an object on every change), values by equality."""

    inputs: tuple[Any, ...]
    verdict: Activeness

    def same(self, inputs: tuple[Any, ...]) -> bool:
        mkc, state, message, mirror, listed, connected = self.inputs
        return (
            inputs[0] is mkc
            and inputs[1] is state
            and inputs[2] == message
            and inputs[3] is mirror
            and inputs[4] == listed
            and inputs[5] == connected
        )


@dataclass(frozen=True)
class Candidate:
    """A cluster of a MultiKueueConfig, as the controller sees it for one decision."""

    name: str
    order: int
    active: bool
    reason: str
    labels: Mapping[str, str]
    worker: Worker | None
    taints: tuple[Taint, ...] = ()
    """The MultiKueueCluster's taints (:func:`~dispatcher.kueue.hints.parse_taints`)."""
    taints_error: str = ""
    """Why its taints annotation cannot be read (empty when it can, or is absent)."""


def resolve_kubeconfig(
    mkc: Mapping[str, Any],
    secret: Callable[[str], Mapping[str, Any] | None],
    namespace: str,
) -> tuple[str, ValidKubeconfig | KubeconfigError]:
    """The validated kubeconfig of a MultiKueueCluster (C10, C62), or why it cannot be used,
    with a fingerprint of where it came from (a rotation changes the fingerprint).

    ``secret(name)`` looks a Secret up in Kueue's ``namespace``.
    """
    name = (mkc.get("metadata") or {}).get("name", "")
    source = (mkc.get("spec") or {}).get("clusterSource") or {}
    kubeconfig = source.get("kubeConfig")
    if not kubeconfig:
        if source.get("clusterProfileRef"):
            error = KubeconfigError(
                BAD, "spec.clusterSource.clusterProfileRef: ClusterProfile is not supported"
            )
        else:
            error = KubeconfigError(BAD, "spec.clusterSource.kubeConfig: not set")
        return f"error:{error.message}", error
    if kubeconfig.get("locationType", "Secret") != "Secret":
        error = KubeconfigError(
            BAD,
            "spec.clusterSource.kubeConfig.locationType: Path is not supported: the "
            f"dispatcher reads worker kubeconfigs from Secrets only (MultiKueueCluster {name})",
        )
        return f"error:{error.message}", error
    secret_name = str(kubeconfig.get("location") or "")
    found = secret(secret_name)
    if found is None:
        error = KubeconfigError(
            BAD,
            f'spec.clusterSource.kubeConfig.location: secret "{namespace}/{secret_name}" not '
            f"found (MultiKueueCluster {name})",
        )
        return f"error:{error.message}", error
    data = str((found.get("data") or {}).get("kubeconfig") or "")
    fingerprint = hashlib.sha256(f"{secret_name}\0{data}".encode()).hexdigest()
    try:
        return fingerprint, kubeconfig_from_secret(found)
    except KubeconfigError as error:
        # Name the Secret, and the key for problems inside the kubeconfig document.
        ref = f'secret "{namespace}/{secret_name}"'
        if ref in error.message:
            return fingerprint, error
        where = "" if error.message.startswith(f"data.{SECRET_KEY}") else f"data.{SECRET_KEY}: "
        return fingerprint, KubeconfigError(error.reason, f"{ref}: {where}{error.message}")


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            found: Mapping[str, Any] = item
            return found
    return None


async def _default_client(config: Mapping[str, Any], name: str) -> KubeApi:
    return await KubeApi.from_kubeconfig(config, name=name)


class ClusterRegistry:
    """The manager mirror, the worker supervisors, and the candidate clusters of each check."""

    def __init__(
        self,
        manager_api: KubeApi,
        *,
        kueue_namespace: str = "kueue-system",
        watch_settings: WatchSettings | None = None,
        manager_watch_settings: WatchSettings | None = None,
        reconnect: BackoffPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_change: ChangeCallback | None = None,
        client_factory: ClientFactory = _default_client,
        metrics: Metrics | None = None,
        stale_grace: float = DEFAULT_STALE_GRACE_SECONDS,
    ) -> None:
        self.kueue_namespace = kueue_namespace
        self.stale_grace = stale_grace
        """How long a synced worker mirror may be disconnected before the worker is lost for
        dispatch (see :mod:`dispatcher.clusters.activeness`)."""
        self.workers: dict[str, Worker] = {}
        self._verdicts: dict[str, _Verdict] = {}
        """The last activeness verdict of each fresh worker, with what it was judged from."""
        self._taints: dict[str, tuple[str | None, tuple[Taint, ...], str]] = {}
        """Each MultiKueueCluster's taints annotation as last read, with its taints or why they
        cannot be read (parsed once per value)."""
        self.judged = 0
        """Activeness verdicts computed, not reused (operation-count tests)."""
        self._clock = clock
        self._settings = watch_settings or WatchSettings()
        self._reconnect = reconnect or BackoffPolicy(initial=1.0, maximum=60.0)
        self._on_change = on_change
        self._client_factory = client_factory
        self._metrics = metrics
        self._group: TaskGroup | None = None
        bare = slim.without_managed_fields
        self.manager = Mirror(
            "manager",
            manager_api,
            {
                # Whole objects but for managedFields, of which the Workloads keep what the
                # nomination's time is read from (dispatcher.clusters.slim).
                "workloads": Watched(WORKLOADS, transform=slim.manager_workload),
                "clusterqueues": Watched(CLUSTER_QUEUES, transform=bare),
                # Optional: only to name the ClusterQueue of a workload starved behind
                # unplaceable ones (dispatcher.controller.outage); RBAC may not grant it.
                "localqueues": Watched(LOCAL_QUEUES, optional=True, transform=bare),
                "multikueueclusters": Watched(MULTIKUEUE_CLUSTERS, transform=bare),
                "multikueueconfigs": Watched(MULTIKUEUE_CONFIGS, transform=bare),
                "admissionchecks": Watched(ADMISSION_CHECKS, transform=bare),
                "secrets": Watched(SECRETS, namespace=kueue_namespace, transform=bare),
            },
            settings=manager_watch_settings or self._settings,
            clock=clock,
            on_change=self._manager_changed,
            metrics=metrics,
        )

    # --- running ------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Mirror the manager and supervise the workers until cancelled."""
        async with anyio.create_task_group() as group:
            self._group = group
            await group.start(self.manager.run)
            task_status.started()
            self._resync()
        self._group = None

    def _manager_changed(self, resource: str, item: WatchItem) -> None:
        if resource in ("multikueueclusters", "secrets"):
            self._resync()
        if resource == "multikueueclusters" and isinstance(item, ObjectEvent):
            self._kueue_reaches(item.object)
        if self._on_change is not None and resource not in ("secrets", "localqueues"):
            self._on_change(MANAGER, resource, item)

    def _kueue_reaches(self, mkc: Mapping[str, Any]) -> None:
        """Kueue reports a worker ``Active``: its API server answers Kueue, so streams of our
        mirror that are waiting out a backoff delay try again now rather than up to a minute
        after Kueue dispatches there again."""
        active = _condition(mkc, "Active")
        worker = self.workers.get(str((mkc.get("metadata") or {}).get("name") or ""))
        if active is None or active.get("status") != "True" or worker is None:
            return
        if worker.mirror is not None:
            worker.mirror.retry_now()

    def _now(self) -> float:
        return self._clock.monotonic()

    def _resync(self) -> None:
        """Start, replace or stop worker supervisors to match MultiKueueClusters and Secrets."""
        if self._group is None:
            return
        if not (
            self.manager.cache("multikueueclusters").synced and self.manager.cache("secrets").synced
        ):
            # Not listed yet: a Secret missing from a half-filled cache is not a bad Secret.
            return
        wanted: dict[str, tuple[str, ValidKubeconfig | KubeconfigError]] = {}
        for mkc in self.manager.cache("multikueueclusters").items():
            name = mkc["metadata"]["name"]
            wanted[name] = self._resolve(mkc)
        for name in list(self.workers):
            if name not in wanted:
                self._stop(name, "MultiKueueCluster deleted")
        for name, (fingerprint, resolved) in wanted.items():
            current = self.workers.get(name)
            if current is not None and current.fingerprint == fingerprint:
                continue
            if current is not None:
                self._stop(name, "kubeconfig changed")
            worker = Worker(name, fingerprint)
            self.workers[name] = worker
            if isinstance(resolved, KubeconfigError):
                worker.state = WorkerState(
                    "Unusable", resolved.reason, resolved.message, self._now()
                )
                worker.settled = True
                if self._metrics is not None:
                    self._metrics.error("kubeconfig")
                log.warning(
                    "worker %s is unusable: %s",
                    name,
                    resolved,
                    extra={"cluster": name, "reason": resolved.reason},
                )
                self._notify(name)
                continue
            self._notify(name)  # a new worker starts as Connecting
            self._group.start_soon(self._supervise, worker, resolved)

    def _resolve(self, mkc: Mapping[str, Any]) -> tuple[str, ValidKubeconfig | KubeconfigError]:
        return resolve_kubeconfig(
            mkc,
            lambda name: self.manager.cache("secrets").get(name, self.kueue_namespace),
            self.kueue_namespace,
        )

    def _stop(self, name: str, why: str) -> None:
        worker = self.workers.pop(name, None)
        self._verdicts.pop(name, None)
        if worker is not None:
            log.info("worker %s: stopping (%s)", name, why, extra={"cluster": name})
            worker.scope.cancel()
            self._notify(name)

    def _notify(self, name: str) -> None:
        if self._on_change is not None:
            self._on_change(name, "connection", Disconnected("state changed", 0, 0.0))

    def _set_state(
        self, worker: Worker, phase: str, reason: str, message: str, *, complete: bool = True
    ) -> None:
        # ``complete`` False: connected, but an optional resource is still being listed.
        settles = not worker.settled and complete and (phase != "Connecting" or bool(message))
        worker.settled = worker.settled or settles
        if (worker.state.phase, worker.state.reason) != (phase, reason):
            worker.state = WorkerState(phase, reason, message, self._now())
            log.info(
                "worker %s: %s (%s) %s",
                worker.name,
                phase,
                reason,
                message,
                extra={"cluster": worker.name, "reason": reason},
            )
            self._notify(worker.name)
        else:
            worker.state.message = message
            if settles:
                self._notify(worker.name)

    async def _supervise(self, worker: Worker, config: ValidKubeconfig) -> None:
        """Connect to one worker and keep its mirror running; retry with backoff on failure."""
        backoff = Backoff(self._reconnect)
        with worker.scope:
            while True:
                try:
                    api = await self._client_factory(config.config, worker.name)
                except KubeconfigError as error:
                    if self._metrics is not None:
                        self._metrics.error("kubeconfig")
                    self._set_state(worker, "Unusable", error.reason, error.message)
                    return
                except (ApiError, ssl.SSLError, OSError, ValueError) as error:
                    self._set_state(
                        worker, "Disconnected", "ClientConnectionFailed", type(error).__name__
                    )
                    await self._clock.sleep(backoff.next_delay())
                    continue
                try:
                    mirror = Mirror(
                        worker.name,
                        api,
                        WORKER_RESOURCES,
                        settings=self._settings,
                        clock=self._clock,
                        on_change=functools.partial(self._worker_changed, worker),
                        metrics=self._metrics,
                    )
                    worker.mirror = mirror
                    await mirror.run()
                finally:
                    worker.mirror = None
                    with anyio.CancelScope(shield=True):
                        await api.close()

    def _worker_changed(self, worker: Worker, resource: str, item: WatchItem) -> None:
        mirror = worker.mirror
        if mirror is not None:
            self._track_freshness(worker, mirror)
            if mirror.connected:
                # Settled once the optional resources are listed too, or known to be refused:
                # the same-name guard reads the worker's Jobs, and a decision taken before their
                # first list could nominate a worker where a Job of the name is in the way
                # (real Kueue at 3c4c007: a restarted dispatcher nominated such a worker).
                self._set_state(worker, "Connected", "Connected", "", complete=mirror.synced)
            elif mirror.synced:
                self._set_state(worker, "Disconnected", "ClientConnectionFailed", mirror.last_error)
            else:
                self._set_state(worker, "Connecting", "Connecting", mirror.last_error)
            usable = self.mirror_usable(worker.name)
            if usable != worker.usable:
                # Not always a phase change (the first list of every required resource).
                worker.usable = usable
                self._notify(worker.name)
        if self._on_change is not None:
            self._on_change(worker.name, resource, item)

    def _track_freshness(self, worker: Worker, mirror: Mirror) -> None:
        """Start or end a stale period of a synced mirror (before the state change is
        reported, so that callbacks see both together)."""
        if mirror.connected:
            if worker.stale_since is not None:
                stale = self._now() - worker.stale_since
                lost = stale >= self.stale_grace
                log.info(
                    "worker %s: our mirror is connected again after %.1fs%s",
                    worker.name,
                    stale,
                    ": dispatched to again" if lost else " (within the grace: nothing moved)",
                    extra={"cluster": worker.name},
                )
                worker.stale_since = None
            return
        if not mirror.listed or worker.stale_since is not None:
            return
        since = worker.stale_since = self._now()
        log.info(
            "worker %s: our mirror is disconnected (%s); still dispatched to for %gs unless "
            "Kueue reports it inactive",
            worker.name,
            mirror.last_error,
            self.stale_grace,
            extra={"cluster": worker.name},
        )
        if self._group is not None:
            self._group.start_soon(self._grace_expiry, worker, since)

    async def _grace_expiry(self, worker: Worker, since: float) -> None:
        """Report the worker lost when its mirror is still stale, from ``since``, at the end of
        the grace; nothing when it reconnected meanwhile (or was stopped)."""
        await self._clock.sleep(self.stale_grace)
        if worker.stale_since != since or self.workers.get(worker.name) is not worker:
            return
        worker.usable = False
        log.warning(
            "worker %s: our mirror has been disconnected for %gs (%s): not dispatched to until "
            "it reconnects; its nominations are moved",
            worker.name,
            self.stale_grace,
            worker.mirror.last_error if worker.mirror is not None else "no mirror",
            extra={"cluster": worker.name, "reason": "MirrorStale"},
        )
        self._notify(worker.name)

    # --- queries ------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """The manager mirror has listed everything once (readiness)."""
        return self.manager.synced

    def multikueue_checks(self) -> set[str]:
        """Names of AdmissionChecks handled by MultiKueue (C8, C21)."""
        return {
            ac["metadata"]["name"]
            for ac in self.manager.cache("admissionchecks").items()
            if (ac.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER
        }

    def config_of(self, check: str) -> tuple[str | None, list[str], str]:
        """``(config name, its clusters in order, problem)`` for a MultiKueue check (C50)."""
        ac = self.manager.cache("admissionchecks").get(check)
        if ac is None:
            return None, [], f"AdmissionCheck {check} not found"
        params = (ac.get("spec") or {}).get("parameters") or {}
        if params.get("kind") != "MultiKueueConfig" or not params.get("name"):
            return None, [], f"AdmissionCheck {check}: spec.parameters names no MultiKueueConfig"
        config_name = str(params["name"])
        config = self.manager.cache("multikueueconfigs").get(config_name)
        if config is None:
            return config_name, [], f"MultiKueueConfig {config_name} not found"
        clusters = [str(c) for c in (config.get("spec") or {}).get("clusters") or []]
        if len(clusters) > MAX_CONFIG_CLUSTERS:
            # Kueue's CRD refuses this; a manager served without the schema still gets a
            # warning, and every listed cluster stays a candidate.
            return (
                config_name,
                clusters,
                f"MultiKueueConfig {config_name} spec.clusters: {len(clusters)} clusters, Kueue "
                f"allows at most {MAX_CONFIG_CLUSTERS}; all are used as candidates",
            )
        return config_name, clusters, ""

    def candidates(self, check: str) -> tuple[list[Candidate], str]:
        """The clusters a workload gated by ``check`` may go to, with their state, in config
        order; plus a problem text when the configuration itself is broken.

        A cluster is active when Kueue reports its MultiKueueCluster ``Active=True`` (Kueue
        creates copies only there, C32, C50) **and** our own mirror of it is synced and either
        connected or disconnected for less than ``stale_grace`` seconds (see
        :meth:`activeness`).
        """
        config_name, names, problem = self.config_of(check)
        found: list[Candidate] = []
        for order, name in enumerate(names):
            mkc = self.manager.cache("multikueueclusters").get(name)
            worker = self.workers.get(name)
            labels: Mapping[str, str] = ((mkc or {}).get("metadata") or {}).get("labels") or {}
            if mkc is None:
                missing = (
                    f'MultiKueueCluster "{name}" not found '
                    f"(MultiKueueConfig {config_name} spec.clusters[{order}])"
                )
                found.append(Candidate(name, order, False, missing, {}, None))
                self._taints.pop(name, None)
                continue
            verdict = self._judge(mkc, worker)
            taints, taints_error = self._taints_of(name, mkc)
            found.append(
                Candidate(
                    name,
                    order,
                    verdict.active,
                    verdict.reason,
                    labels,
                    worker,
                    taints,
                    taints_error,
                )
            )
        return found, problem

    def _taints_of(self, name: str, mkc: Mapping[str, Any]) -> tuple[tuple[Taint, ...], str]:
        """The MultiKueueCluster's taints, parsed once per value of its annotation; an
        unreadable one is logged once per value and reported with the field."""
        annotations = (mkc.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(CLUSTER_TAINTS.key) if isinstance(annotations, Mapping) else None
        cached = self._taints.get(name)
        if cached is not None and cached[0] == text:
            return cached[1], cached[2]
        taints: tuple[Taint, ...] = ()
        error = ""
        if text is not None:
            try:
                taints = parse_taints({CLUSTER_TAINTS.key: str(text)})
            except InvalidField as problem:
                error = f"MultiKueueCluster {name}: {problem}"
                log.warning("%s; the cluster is taken for tainted until it is fixed", error)
        self._taints[name] = (text, taints, error)
        return taints, error

    def _judge(self, mkc: Mapping[str, Any], worker: Worker | None) -> Activeness:
        """:func:`judge` of one worker. Every decision reads each candidate's verdict; a fresh
        worker's (connected, never stale: no clock in it) is reused until one of its inputs is
        replaced (the cached MultiKueueCluster object, the connection state, the mirror) or
        changes (the state's message, the mirror listed or connected)."""
        if worker is None:
            return self._judge_now(mkc, None)
        if worker.stale_since is not None:
            # A stale worker's verdict depends on the clock: judged at every read, none kept.
            self._verdicts.pop(worker.name, None)
            return self._judge_now(mkc, worker)
        mirror = worker.mirror
        inputs = (
            mkc,
            worker.state,
            worker.state.message,
            mirror,
            mirror is not None and mirror.listed,
            worker.connected,
        )
        cached = self._verdicts.get(worker.name)
        if cached is not None and cached.same(inputs):
            return cached.verdict
        verdict = self._judge_now(mkc, worker)
        self._verdicts[worker.name] = _Verdict(inputs, verdict)
        return verdict

    def _judge_now(self, mkc: Mapping[str, Any], worker: Worker | None) -> Activeness:
        self.judged += 1
        return judge(
            _condition(mkc, "Active"),
            worker.health() if worker is not None else None,
            now=self._now(),
            grace=self.stale_grace,
        )

    def activeness(self, name: str) -> Activeness | None:
        """Whether the worker ``name`` is dispatched to, with Kueue's view and our mirror's
        (``explain``); None when no MultiKueueCluster has that name."""
        mkc = self.manager.cache("multikueueclusters").get(name)
        return None if mkc is None else self._judge(mkc, self.workers.get(name))

    def mirror_usable(self, name: str) -> bool:
        """Our side alone: the worker's mirror is synced, and connected or stale for less than
        the grace (a decision may read it)."""
        worker = self.workers.get(name)
        if worker is None:
            return False
        health = worker.health()
        if not health.synced:
            return False
        return health.stale_since is None or self._now() - health.stale_since < self.stale_grace

    def states(self) -> dict[str, WorkerState]:
        """Connection state of every known worker."""
        return {name: worker.state for name, worker in sorted(self.workers.items())}
