"""``check-config`` and ``explain``: looking at a configuration and a decision without running.

``check-config`` validates the settings, then (unless ``--offline``) reads the MultiKueue objects
and kubeconfig Secrets of the manager, validates every worker kubeconfig as Kueue does (C62) and
tries each worker once. ``explain NS/NAME`` prints the dispatcher's last Event on the Workload
(the explanation of its last decision) and a fresh evaluation from freshly synced mirrors.
Neither writes anything.

Both find the manager cluster as ``run`` does (:func:`~dispatcher.app.manager.open_manager_api`)
and raise their expected failures (bad settings, no kubeconfig, an unreachable manager) for the
command line to print as one line.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

import anyio

from dispatcher.algorithms.explain import describe_decision
from dispatcher.app.errors import CommandError
from dispatcher.app.manager import build_decide, check_pipeline, controller_config, open_manager_api
from dispatcher.app.settings import Settings
from dispatcher.clusters.registry import ClusterRegistry, WorkerState, resolve_kubeconfig
from dispatcher.controller.events import EVENT_COMPONENT
from dispatcher.controller.nominator import Nominator
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.kubeconfig import KubeconfigError
from dispatcher.k8s.resources import ADMISSION_CHECKS, EVENTS, MULTIKUEUE_CLUSTERS, SECRETS
from dispatcher.k8s.watching import BackoffPolicy, WatchSettings
from dispatcher.kueue.eligibility import MULTIKUEUE_CONTROLLER
from dispatcher.kueue.objects import InvalidField
from dispatcher.plugins import PluginHost

__all__ = ["check_config_command", "describe_state", "explain_command"]

LoadSettings = Callable[[argparse.Namespace], Settings]


async def _manager_api(args: argparse.Namespace, settings: Settings) -> KubeApi:
    return await open_manager_api(settings, kubeconfig=args.kubeconfig, context=args.context)


def describe_state(state: WorkerState) -> str:
    """A worker's state in one line: ``Connected``, or ``Unusable: REASON: MESSAGE``."""
    parts = [state.phase]
    if state.reason and state.reason != state.phase:
        parts.append(state.reason)
    if state.message:
        parts.append(state.message)
    return ": ".join(parts)


async def _check_workers(args: argparse.Namespace, settings: Settings) -> int:
    problems = 0
    async with await _manager_api(args, settings) as api:
        checks = await api.list(ADMISSION_CHECKS)
        mk = [
            c["metadata"]["name"]
            for c in checks.items
            if (c.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER
        ]
        print(f"MultiKueue admission checks: {', '.join(mk) or '(none)'}")
        if not mk:
            problems += 1
        secrets = {
            s["metadata"]["name"]: s
            for s in (await api.list(SECRETS, settings.kueue_namespace)).items
        }
        clusters = (await api.list(MULTIKUEUE_CLUSTERS)).items
        if not clusters:
            print("no MultiKueueCluster objects")
            problems += 1
        for mkc in clusters:
            name = mkc["metadata"]["name"]
            _, resolved = resolve_kubeconfig(mkc, secrets.get, settings.kueue_namespace)
            if isinstance(resolved, KubeconfigError):
                print(f"  {name}: unusable: {resolved.reason}: {resolved.message}")
                problems += 1
                continue
            try:
                async with await KubeApi.from_kubeconfig(
                    resolved.config, request_timeout=5.0, name=name
                ) as worker:
                    version = await worker.request("GET", "/version")
                print(f"  {name}: ok ({resolved.server}, Kubernetes {version.get('gitVersion')})")
            except (ApiError, KubeconfigError, OSError, ValueError) as error:
                print(f"  {name}: cannot connect to {resolved.server}: {type(error).__name__}")
                problems += 1
    return problems


def check_config_command(args: argparse.Namespace, load: LoadSettings) -> int:
    """Exit 0 when everything checked is usable, 1 on a problem found.

    Bad settings or pipeline raise (exit 2), and so do a missing kubeconfig (2) and an
    unreachable manager (1).
    """
    settings = load(args)
    check_pipeline(settings)
    print(f"settings: ok (dispatcher {settings.dispatcher_name}, pipeline {settings.algorithms})")
    if args.offline:
        return 0
    problems: int = anyio.run(_check_workers, args, settings)
    return 1 if problems else 0


def _workload_key(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise CommandError(f"explain: expected NAMESPACE/NAME, not {text!r}")
    return namespace, name


async def _explain(args: argparse.Namespace, settings: Settings) -> int:
    namespace, name = _workload_key(str(args.workload))
    async with await _manager_api(args, settings) as api:
        events = await api.list(
            EVENTS,
            namespace,
            field_selector=f"involvedObject.name={name},involvedObject.kind=Workload",
        )
        ours = [
            e for e in events.items if (e.get("source") or {}).get("component") == EVENT_COMPONENT
        ]
        ours.sort(key=lambda e: str(e.get("lastTimestamp") or ""))
        print(f"workload {namespace}/{name}")
        if ours:
            last = ours[-1]
            print(f"last decision ({last.get('lastTimestamp')}, {last.get('reason')}):")
            print(f"  {last.get('message')}")
        else:
            print("last decision: none recorded (no Event from the dispatcher)")
        changed = anyio.Event()

        def on_change(*_: object) -> None:
            nonlocal changed
            changed.set()
            changed = anyio.Event()

        registry = ClusterRegistry(
            api,
            kueue_namespace=settings.kueue_namespace,
            on_change=on_change,
            stale_grace=settings.worker_stale_grace_seconds,
            watch_settings=explain_watch_settings(args.sync_timeout),
            manager_watch_settings=WatchSettings(inactivity_timeout=None),
            reconnect=NO_RETRY,
        )
        nominator = Nominator(
            registry, build_decide(settings, PluginHost.load()), config=controller_config(settings)
        )

        def settled() -> bool:
            # Every worker's first connection attempt has an outcome (connected, refused,
            # timed out, unusable): one attempt each, never a retry.
            workers = registry.workers.values()
            return registry.synced and all(w.settled for w in workers)

        async with anyio.create_task_group() as group:
            await group.start(registry.run)
            with anyio.move_on_after(MANAGER_SYNC_SECONDS):
                while not registry.synced:
                    await changed.wait()
            with anyio.move_on_after(args.sync_timeout):
                while not settled():
                    await changed.wait()
            for worker_name, state in registry.states().items():
                worker = registry.workers[worker_name]
                if worker.connected or state.phase == "Unusable":
                    print(f"  worker {worker_name}: {describe_state(state)}")
                else:
                    detail = state.message or "no answer"
                    print(
                        f"  worker {worker_name}: unreachable: {detail} (one attempt within "
                        f"{args.sync_timeout:g}s, not retried)"
                    )
                verdict = registry.activeness(worker_name)
                if verdict is not None:
                    print(f"    {verdict.describe()}")
            key = f"{namespace}/{name}"
            try:
                eligibility_reason, decision = await nominator.evaluate(key)
                outage = await nominator.explain_outage(key)
            except InvalidField as error:
                eligibility_reason, decision, outage = f"cannot dispatch: {error}", None, []
            workload = registry.manager.cache("workloads").get(name, namespace)
            gpu = nominator.gpu_type_check(workload) if workload is not None else None
            group.cancel_scope.cancel()
        print(f"fresh evaluation: {eligibility_reason}")
        if decision is not None:
            print(describe_decision(decision))
        for line in outage:
            print(line)
        if gpu is not None:
            print(gpu.message)
    return 0


MANAGER_SYNC_SECONDS = 10.0
"""How long ``explain`` waits for its mirror of the manager (a manager that does not answer is
an error of its own before that)."""

NO_RETRY = BackoffPolicy(initial=3600.0, maximum=3600.0)
"""``explain`` tries every worker once: a failed attempt is retried only after an hour, long
after the command has ended."""


def explain_watch_settings(deadline: float) -> WatchSettings:
    """The worker mirrors of ``explain``: connecting and the first list bounded by ``deadline``
    seconds, and a failed list or watch not retried (see :data:`NO_RETRY`)."""
    bound = max(0.1, deadline)
    return WatchSettings(
        connect_timeout=bound, list_timeout=bound, inactivity_timeout=None, backoff=NO_RETRY
    )


def explain_command(args: argparse.Namespace, load: LoadSettings) -> int:
    """Print the last decision and a fresh evaluation of one workload.

    Bad settings, a bad NAMESPACE/NAME or pipeline raise (exit 2), and so do a missing
    kubeconfig (2) and an unreachable manager (1).
    """
    settings = load(args)
    _workload_key(str(args.workload))
    check_pipeline(settings)
    logging.basicConfig(level=logging.WARNING)
    code: int = anyio.run(_explain, args, settings)
    return code
