"""``multikueue-dispatcher run``: the manager process, wired as one anyio task tree.

::

    root task group
    ├── signal watcher: SIGTERM/SIGINT → stop
    ├── HTTP: /healthz, /readyz, /metrics (bound before anything else starts)
    └── leader elector (or standalone) → while leading:
        ├── cluster registry: manager mirror + one supervised mirror per worker
        ├── nomination loop: K reconcile workers on a de-duplicating queue
        └── state publisher: worker connection states as metrics

Shutdown (SIGTERM): stop taking work (cancel the leading scope) → reconciles are abandoned at
their next await (every write is idempotent and based on a resourceVersion) → the Lease is
released → clients are closed → the HTTP server stops; each step in a shielded, bounded scope,
within 10 seconds in total (README, *Operations*; why shielded:
``docs/fake-apiserver.md#9-client-facts``).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from opentelemetry.trace import Tracer

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.app.errors import CommandError, ManagerApiError
from dispatcher.app.settings import Settings
from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.nominator import Nominator
from dispatcher.http import CheckResult, serve_http
from dispatcher.k8s.client import USER_AGENT, KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.loading import manager_client, resolve_manager_connection
from dispatcher.k8s.ratelimit import TokenBucket
from dispatcher.k8s.watching import BackoffPolicy, WatchItem, WatchSettings
from dispatcher.kueue.hints import DISPATCH_MODES
from dispatcher.leader.elector import LeaderElector, LeadershipLost, Role
from dispatcher.logs import configure_logging
from dispatcher.plugins import PluginError, PluginHost
from dispatcher.plugins.host import pipeline_for
from dispatcher.telemetry.metrics import Metrics
from dispatcher.telemetry.tracing import setup_tracing

log = logging.getLogger(__name__)

__all__ = [
    "Manager",
    "build_decide",
    "check_pipeline",
    "controller_config",
    "open_manager_api",
    "run_manager",
]

SHUTDOWN_SECONDS = 10.0


def controller_config(settings: Settings, host: PluginHost | None = None) -> ControllerConfig:
    """The nomination loop's part of the settings; with the plugin ``host`` the pipeline runs,
    whether its decisions may run on the event loop (built-in stages only)."""
    return ControllerConfig(
        inline_decisions=host is not None
        and host.builtin_only((*settings.algorithms, *DISPATCH_MODES.values())),
        write_mode=settings.write_mode,
        field_manager=settings.field_manager,
        workers=settings.workers,
        resync_seconds=settings.resync_seconds,
        decision_timeout_seconds=settings.decision_timeout_seconds,
        stuck_after_seconds=settings.stuck_after_seconds,
        lost_copy_cooldown_seconds=settings.lost_copy_cooldown_seconds,
        algorithm="+".join(settings.algorithms),
        origin=settings.multikueue_origin,
        unplaceable_release=settings.unplaceable_release,
        stuck_eviction_release=settings.stuck_eviction_release,
        unplaceable_patience_seconds=settings.unplaceable_patience_seconds,
    )


def build_decide(
    settings: Settings, host: PluginHost
) -> Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]:
    """The pipeline the settings name, bound to the plugin host (errors name the algorithm).

    A plugin that hangs costs one decision timeout, not one per decision: the host skips it
    while its call from an abandoned decision runs on (decisions are serialised, so a call
    older than half the deadline is one), and calls it again every ten deadlines.
    """
    options: dict[str, Any] = {
        name: dict(opts) for name, opts in settings.algorithm_options.items()
    }
    if "capacity-first" in settings.algorithms:
        # The top-level patience applies unless the algorithm's own options set one.
        options.setdefault("capacity-first", {}).setdefault(
            "patience_seconds", settings.patience_seconds
        )
    pipeline = host.pipeline(
        settings.algorithms,
        options,
        plugin_weights=settings.plugin_weights,
        fail_closed=settings.fail_closed_plugins,
    )
    # A workload's dispatch-mode hint picks one of these instead (dispatcher.kueue.hints).
    modes = host.mode_pipelines(
        options,
        plugin_weights=settings.plugin_weights,
        fail_closed=settings.fail_closed_plugins,
    )
    timeout = settings.decision_timeout_seconds
    host.guard_hung_calls(hung_after=timeout / 2, retry_after=timeout * 10)

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        return host.decide(pipeline_for(request, pipeline, modes), request, snapshots)

    return decide


def check_pipeline(settings: Settings, host: PluginHost | None = None) -> None:
    """Raise :class:`CommandError` (exit 2, ``algorithms: …``) when the settings name
    algorithms, options or fail-closed plugins the plugin host does not have."""
    try:
        build_decide(settings, host if host is not None else PluginHost.load())
    except (PluginError, ValueError) as error:
        raise CommandError(f"algorithms: {error}") from error


@dataclass
class Manager:
    """The running parts of one process, exposed for tests and the readiness check."""

    settings: Settings
    api: KubeApi
    metrics: Metrics
    host: PluginHost
    elector: LeaderElector
    registry: ClusterRegistry | None = None
    nominator: Nominator | None = None
    bound: Any = None
    tracer: Tracer | None = None
    stopped: anyio.Event = field(default_factory=anyio.Event)

    async def ready(self) -> CheckResult:
        """Ready when the manager API answers, and, when leading, the manager mirror synced.

        Never depends on a single worker; followers are ready while idle.
        """
        try:
            await self.api.request("GET", "/version", request_timeout=2.0)
        except ApiError as error:
            return CheckResult(False, f"manager API: {error.reason or error.status}")
        leading = self.elector.role in (Role.LEADER, Role.STANDALONE)
        if leading and (self.registry is None or not self.registry.synced):
            return CheckResult(False, "manager caches not synced yet")
        return CheckResult(True, self.elector.role.value)

    async def lead(self) -> None:
        """The work done while leading."""
        self.metrics.set_replica_role(
            "standalone" if self.elector.role == Role.STANDALONE else "leader"
        )
        settings = self.settings
        workers = settings.worker_client

        async def worker_client(config: Mapping[str, Any], name: str) -> KubeApi:
            return await KubeApi.from_kubeconfig(
                config,
                name=name,
                request_timeout=workers.request_timeout_seconds,
                limiter=TokenBucket(workers.qps, workers.burst),
            )

        self.registry = ClusterRegistry(
            self.api,
            kueue_namespace=settings.kueue_namespace,
            watch_settings=WatchSettings(server_timeout=max(1, workers.watch_timeout_seconds)),
            manager_watch_settings=WatchSettings(
                server_timeout=max(1, settings.manager_client.watch_timeout_seconds)
            ),
            client_factory=worker_client,
            reconnect=BackoffPolicy(initial=1.0, maximum=60.0),
            on_change=self._changed,
            metrics=self.metrics,
            stale_grace=settings.worker_stale_grace_seconds,
        )
        self.nominator = Nominator(
            self.registry,
            build_decide(settings, self.host),
            config=controller_config(settings, self.host),
            metrics=self.metrics,
            tracer=self.tracer,
            # Events get a token bucket of their own with the manager client's settings, as
            # controller-runtime's recorder does: a burst's Events never delay its writes.
            event_limiter=TokenBucket(settings.manager_client.qps, settings.manager_client.burst),
        )
        async with anyio.create_task_group() as group:
            await group.start(self.registry.run)
            self.nominator.publish_connection_states()
            group.start_soon(self.nominator.run)

    def _changed(self, cluster: str, resource: str, item: WatchItem) -> None:
        if self.nominator is not None:
            self.nominator.on_change(cluster, resource, item)
            if resource == "connection":
                # The registry reports every change of a worker's state (and its removal).
                self.nominator.publish_connection_states()


async def open_manager_api(
    settings: Settings,
    *,
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    probe: bool = True,
) -> KubeApi:
    """The manager cluster's API, found as kubectl finds it (``--kubeconfig``, ``$KUBECONFIG``,
    in-cluster, ``~/.kube/config``; :mod:`dispatcher.k8s.loading`), with ``manager_client``'s
    timeout and rate limit.

    With ``probe`` one ``GET /version`` (``manager_client.request_timeout_seconds``) checks that
    the server answers. Raises :class:`~dispatcher.k8s.errors.ManagerConfigError` when there is
    no usable kubeconfig and :class:`ManagerApiError` when the server does not answer.
    """
    client = settings.manager_client
    connection = resolve_manager_connection(kubeconfig, context)
    api = KubeApi(
        await manager_client(connection, user_agent=USER_AGENT),
        request_timeout=client.request_timeout_seconds,
        name="manager",
        limiter=TokenBucket(client.qps, client.burst),
    )
    if probe:
        try:
            await api.request("GET", "/version")
        except ApiError as error:
            await api.close()
            raise ManagerApiError(connection, error) from error
    return api


async def _watch_signals(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for received in signals:
            log.info("received %s: shutting down", signal.Signals(received).name)
            scope.cancel()
            return


async def run_manager(
    settings: Settings,
    *,
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    identity: str | None = None,
    handle_signals: bool = True,
    on_started: Callable[[Manager], None] | None = None,
) -> int:
    """Run the manager process until a signal (exit 0) or lost leadership (exit 1).

    The manager connection comes first (:func:`open_manager_api`, which raises when there is
    no kubeconfig or the server does not answer), so that its error precedes any log line.
    """
    api = await open_manager_api(settings, kubeconfig=kubeconfig, context=context)
    configure_logging(settings.log_format, settings.log_level)
    try:
        host = PluginHost.load()
        build_decide(settings, host)  # fail at start on unknown algorithms or bad options
    except (PluginError, ValueError) as error:
        log.error("plugins: %s", error)
        await api.close()
        return 2
    for plugin in host.plugins():
        log.info(
            "plugin %s loaded (%s)",
            plugin.name,
            plugin.distribution or "built-in",
            extra={"plugin": plugin.name},
        )
    metrics = Metrics(replica_role="standalone")
    for plugin in host.plugins():
        metrics.add_plugin_info(
            plugin.name,
            distribution=plugin.distribution or "builtin",
            version=plugin.version or "",
        )
    tracing = setup_tracing(settings.otlp_endpoint)
    elector = LeaderElector(api, settings.leader_election, identity)
    manager = Manager(settings, api, metrics, host, elector, tracer=tracing.tracer)
    code = 0
    try:
        async with anyio.create_task_group() as root:
            if handle_signals:
                root.start_soon(_watch_signals, root.cancel_scope)
            manager.bound = await root.start(
                partial(
                    serve_http,
                    health_address=settings.health_address,
                    metrics_address=settings.metrics_address,
                    readiness=manager.ready,
                    registry=metrics.registry,
                )
            )
            if on_started is not None:
                on_started(manager)

            async def elect() -> None:
                nonlocal code
                try:
                    await elector.run(manager.lead)
                except LeadershipLost as lost:
                    log.error("lost leadership: %s; exiting", lost)
                    code = 1
                root.cancel_scope.cancel()

            root.start_soon(elect)
            if elector.role != Role.STANDALONE:
                root.start_soon(_follow_role, elector, metrics)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_SECONDS):
            await api.close()
            await anyio.to_thread.run_sync(tracing.shutdown)
        manager.stopped.set()
    return code


async def _follow_role(elector: LeaderElector, metrics: Metrics) -> None:
    while True:
        role = elector.role
        metrics.set_replica_role(
            "leader"
            if role == Role.LEADER
            else ("standalone" if role == Role.STANDALONE else "follower")
        )

        def changed(e: LeaderElector, seen: Role = role) -> bool:
            return e.role != seen

        await elector.wait_for(changed)
