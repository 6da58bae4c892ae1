"""What the emulated Kueue controllers share: configuration, clock, connections, status writes.

Every controller of the emulation talks to its cluster only over HTTPS through a
:class:`ClusterConnection` (a :class:`~dispatcher.sandbox.kubeclient.KubeClient` plus shared
informers), and is level-triggered: any change marks it dirty, and its ``reconcile`` recomputes
everything from the cached objects, so a missed event can delay but never lose work.

Contract points (C…) refer to ``docs/kueue-multikueue-contract.md``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import functools
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from dispatcher.sandbox.kubeclient import (
    WORKLOADS,
    Informer,
    KubeClient,
    KubeError,
    Resource,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# C42: Kueue writes the admission part of Workload status with server-side apply, force, as this
# field manager. Other writes (ClusterQueue status, remote copies, events) use "kueue".
KUEUE_ADMISSION = "kueue-admission"
KUEUE_MANAGER = "kueue"
USER_AGENT = "kueue-emulator/v0.19.2"

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"  # C8
ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"  # C2, Kueue's default
INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"  # C2
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"  # C32, C41
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
# C30: the preemption gate MultiKueue puts on remote copies (constants.MultiKueuePreemptionGate).
MULTIKUEUE_PREEMPTION_GATE = "kueue.x-k8s.io/multikueue"

KueueVersion = Literal["v0.19", "v0.20"]
"""The Kueue minor version the emulation behaves as (``docs/kueue-versions.md``)."""
KUEUE_VERSIONS: tuple[KueueVersion, ...] = ("v0.19", "v0.20")

# The conditions that Kueue's admission-status body always carries (C42).
ADMISSION_CONDITIONS = (
    "QuotaReserved",
    "BlockedOnPreemptionGates",
    "Evicted",
    "Admitted",
    "Preempted",
    "Requeued",
    "DeactivationTarget",
    "Finished",
    "PodsReady",
)
# The status fields of that body (C42).
ADMISSION_STATUS_FIELDS = (
    "admission",
    "admissionChecks",
    "clusterName",
    "nominatedClusterNames",
    "requeueState",
    "schedulingStats",
    "unhealthyNodes",
    "preemptionGates",
)


@dataclass
class KueueConfig:
    """The parts of Kueue's ``Configuration`` the emulation honours (C1–C5, C45, C58–C61).

    Durations are in seconds so that tests can shorten them. ``version`` selects the Kueue minor
    version emulated; the feature-gate defaults that differ between versions are derived from it
    (the properties below), everything else is shared.
    """

    version: KueueVersion = "v0.19"
    dispatcher_name: str = ALL_AT_ONCE
    incremental_step_size: int = 3
    incremental_round_seconds: float = 300.0
    origin: str = "multikueue"
    worker_lost_timeout_seconds: float = 900.0
    gc_interval_seconds: float = 60.0
    namespace: str = "kueue-system"
    # Feature gate WorkloadRequestUseMergePatch (C45, remedy 2): status writes as merge patches.
    merge_patch_gate: bool = False
    # Upstream batches events for 1 s (C20); the emulation reacts faster by default.
    batch_period_seconds: float = 0.02
    # Seconds a worker waits between reserving quota and setting Admitted (both as separate
    # writes, as Kueue's scheduler and workload controller do, C72).
    admit_delay_seconds: float = 0.0
    # v0.20: MultiKueueOrchestratedPreemption opens one remote's preemption gate per this period
    # (``singleClusterPreemptionTimeout``, hard-coded to 5 min upstream).
    single_cluster_preemption_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.version not in KUEUE_VERSIONS:
            known = ", ".join(KUEUE_VERSIONS)
            raise ValueError(f"version must be one of {known}, not {self.version!r}")

    @property
    def serves_v1beta1(self) -> bool:
        """Whether ``kueue.x-k8s.io/v1beta1`` is served (v0.19: yes; v0.20: unserved)."""
        return self.version == "v0.19"

    @property
    def unadmitted_workloads_observability(self) -> bool:
        """Feature gate UnadmittedWorkloadsObservability (Beta; default off in v0.19, on in
        v0.20): granular ``QuotaReserved=False`` reasons and ``Admitted=False`` conditions."""
        return self.version == "v0.20"

    @property
    def orchestrated_preemption(self) -> bool:
        """Feature gate MultiKueueOrchestratedPreemption (Alpha off in v0.19, Beta on in v0.20):
        gated remote copies, one worker at a time allowed to preempt."""
        return self.version == "v0.20"


class Clock(Protocol):
    """Time for the emulation; tests inject a controllable one."""

    def now(self) -> datetime.datetime:
        """The current UTC time."""

    async def sleep(self, seconds: float) -> None:
        """Wait (in this clock's time)."""


class SystemClock:
    """Wall-clock time."""

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to (for round timers and run durations in tests)."""

    def __init__(self, start: datetime.datetime | None = None) -> None:
        self._now = start or datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self._changed = asyncio.Event()

    def now(self) -> datetime.datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline passed."""
        self._now += datetime.timedelta(seconds=seconds)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def sleep(self, seconds: float) -> None:
        deadline = self._now + datetime.timedelta(seconds=seconds)
        while self._now < deadline:
            await self._changed.wait()


def timestamp(clock: Clock) -> str:
    """RFC 3339 time with seconds, as Kubernetes stores ``metav1.Time``."""
    return clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime.datetime | None:
    """Parse an RFC 3339 time written by Kubernetes."""
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- conditions -------------------------------------------------------------------------------


def condition(status: Mapping[str, Any] | None, kind: str) -> Obj | None:
    """The condition of that type, if present."""
    for item in (status or {}).get("conditions") or []:
        if item.get("type") == kind:
            found: Obj = item
            return found
    return None


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether ``obj.status`` has condition ``kind`` with status True."""
    found = condition(obj.get("status"), kind)
    return found is not None and found.get("status") == "True"


def set_condition(
    status: Obj, kind: str, value: bool, reason: str, message: str, clock: Clock
) -> None:
    """Set a condition; ``lastTransitionTime`` changes only when the status flips."""
    conditions: list[Obj] = status.setdefault("conditions", [])
    text = "True" if value else "False"
    for item in conditions:
        if item.get("type") == kind:
            if item.get("status") != text:
                item["lastTransitionTime"] = timestamp(clock)
            item.update({"status": text, "reason": reason, "message": message})
            return
    conditions.append(
        {
            "type": kind,
            "status": text,
            "reason": reason,
            "message": message,
            "lastTransitionTime": timestamp(clock),
        }
    )


# --- status writes (C42–C46) -----------------------------------------------------------------


def admission_status_body(status: Mapping[str, Any]) -> Obj:
    """The "admission status" Kueue applies: the fields of C42 and the managed conditions.

    Fields that are unset or empty are left out, as Go's ``omitempty`` does, so that an apply that
    "clears" a field releases it instead of writing an empty value (the root of C43).
    """
    body: Obj = {}
    for name in ADMISSION_STATUS_FIELDS:
        value = status.get(name)
        if value not in (None, [], {}, ""):
            body[name] = copy.deepcopy(value)
    conditions = [
        copy.deepcopy(c)
        for c in status.get("conditions") or []
        if c.get("type") in ADMISSION_CONDITIONS
    ]
    if conditions:
        body["conditions"] = conditions
    return body


async def write_admission_status(
    client: KubeClient,
    workload: Mapping[str, Any],
    status: Mapping[str, Any],
    config: KueueConfig,
    *,
    strict: bool = False,
) -> Obj | None:
    """Write a Workload's admission status as Kueue's ``PatchAdmissionStatus`` does.

    Default: server-side apply to ``/status`` as ``kueue-admission`` with force and the whole
    admission-status body (C42). With the ``WorkloadRequestUseMergePatch`` gate (C45): a JSON
    merge patch that explicitly nulls cleared fields, so it removes them whoever owns them.
    ``strict`` (Kueue's ``WithStrict``) sends the workload's ``resourceVersion`` as a
    precondition: a write based on a stale copy fails with 409 instead of undoing newer changes.
    """
    meta = workload["metadata"]
    body = admission_status_body(status)
    metadata: Obj = {"name": meta["name"], "namespace": meta["namespace"]}
    if strict and meta.get("resourceVersion"):
        metadata["resourceVersion"] = meta["resourceVersion"]
    if config.merge_patch_gate:
        patch_status: Obj = {name: body.get(name) for name in ADMISSION_STATUS_FIELDS}
        patch_status["conditions"] = status.get("conditions") or []
        patch: Obj = {"status": patch_status}
        if "resourceVersion" in metadata:
            patch["metadata"] = {"resourceVersion": metadata["resourceVersion"]}
        return await client.merge_patch(
            WORKLOADS,
            meta["name"],
            patch,
            namespace=meta["namespace"],
            subresource="status",
            field_manager=KUEUE_ADMISSION,
        )
    return await client.apply(
        WORKLOADS,
        {
            "apiVersion": WORKLOADS.api_version,
            "kind": "Workload",
            "metadata": metadata,
            "status": body,
        },
        subresource="status",
        field_manager=KUEUE_ADMISSION,
        force=True,
    )


# --- connections and controllers -------------------------------------------------------------


class ClusterConnection:
    """A client and shared informers for one cluster."""

    def __init__(self, name: str, kubeconfig: Mapping[str, Any], resources: Iterable[Resource]):
        self.name = name
        self.client = KubeClient(kubeconfig, user_agent=USER_AGENT)
        self.informers: dict[Resource, Informer] = {}
        self._listeners: list[Callable[[Resource, str, Obj], None]] = []
        for resource in resources:
            self.add_resource(resource)

    def add_resource(self, resource: Resource) -> Informer:
        """Cache a resource (call before :meth:`run`)."""
        if resource not in self.informers:
            self.informers[resource] = Informer(
                self.client, resource, functools.partial(self._fan_out, resource)
            )
        return self.informers[resource]

    def _fan_out(self, resource: Resource, kind: str, obj: Obj) -> None:
        for listener in self._listeners:
            listener(resource, kind, obj)

    def subscribe(self, listener: Callable[[Resource, str, Obj], None]) -> None:
        """Call ``listener(resource, event type, object)`` on every change."""
        self._listeners.append(listener)

    def cache(self, resource: Resource) -> Informer:
        """The informer of a resource."""
        return self.informers[resource]

    @property
    def synced(self) -> bool:
        """Whether every informer has listed at least once and is connected now."""
        return all(i.synced.is_set() and i.connected for i in self.informers.values())

    async def wait_synced(self) -> None:
        """Wait for the first list of every informer."""
        for informer in self.informers.values():
            await informer.synced.wait()

    async def run(self) -> None:
        """Run every informer until cancelled."""
        async with asyncio.TaskGroup() as group:
            for informer in self.informers.values():
                group.create_task(informer.run())

    async def close(self) -> None:
        """Close the client."""
        await self.client.close()


@dataclass
class Counters:
    """Monotonic counters, as Prometheus counters with labels."""

    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add to a counter."""
        key = (name, tuple(sorted(labels.items())))
        self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, name: str, **labels: str) -> float:
        """Sum over every series of ``name`` that has (at least) these labels."""
        wanted = set(labels.items())
        return sum(v for (n, lab), v in self.values.items() if n == name and wanted <= set(lab))


class Controller:
    """A level-triggered reconcile loop.

    :meth:`mark_dirty` (also called from informer listeners) wakes the loop; :meth:`reconcile`
    runs after ``batch_period`` and again whenever it asks for a retry, or after ``requeue_after``.
    Errors are logged and retried with backoff; they never stop the loop.
    """

    name = "controller"

    def __init__(self, config: KueueConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self._dirty = asyncio.Event()
        self.errors = 0
        self.reconciles = 0
        self.idle = asyncio.Event()
        self._timers: set[asyncio.Task[None]] = set()

    def mark_dirty(self, *_: object) -> None:
        """Ask for a reconcile."""
        self._dirty.set()
        self.idle.clear()

    async def reconcile(self) -> float | None:
        """One pass; return seconds until the next pass is needed anyway, or None."""
        raise NotImplementedError

    async def run(self) -> None:
        """Reconcile whenever dirty (or when a requested delay passes), until cancelled."""
        backoff = 0.05
        self.mark_dirty()
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.config.batch_period_seconds)
            self._dirty.clear()
            try:
                requeue = await self.reconcile()
                backoff = 0.05
            except (KubeError, OSError, TimeoutError, aiohttp.ClientError) as error:
                self.errors += 1
                log.warning("%s: reconcile failed: %s", self.name, error)
                requeue = backoff
                backoff = min(backoff * 2, 2.0)
            self.reconciles += 1
            if requeue is not None:
                self._schedule(requeue)
            elif not self._dirty.is_set():
                self.idle.set()

    def _schedule(self, seconds: float) -> None:
        async def later() -> None:
            await self.clock.sleep(seconds)
            self.mark_dirty()

        task = asyncio.get_running_loop().create_task(later())
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    def cancel_timers(self) -> None:
        """Cancel pending delayed reconciles (on shutdown)."""
        for task in list(self._timers):
            task.cancel()


async def run_all(*runners: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run coroutines concurrently until cancelled (one failing stops the others)."""
    async with asyncio.TaskGroup() as group:
        for runner in runners:
            group.create_task(runner())
