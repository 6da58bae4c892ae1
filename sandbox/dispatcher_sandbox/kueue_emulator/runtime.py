"""What the emulated Kueue controllers share: configuration, clock, connections, status writes.

Every controller of the emulation talks to its cluster only over HTTPS through a
:class:`ClusterConnection` (a :class:`~dispatcher_sandbox.kube_client.KubeClient` plus shared
informers), and is level-triggered: any change marks it dirty, and its ``reconcile`` recomputes
from the cached objects, so a missed event can delay but never lose work. Most recompute
everything; the Job reconciler (:mod:`.jobs.job_controller`) recomputes the Jobs the events
named, as Kueue's is keyed by Job, and everything after a re-list.

Contract points (C…) refer to ``docs/kueue-contract.md``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import functools
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from dispatcher_sandbox.kube_client import (
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

# C10/C20: client-side rate limits of the manager's clients to a worker (see KueueConfig).
CLIENT_GO_QPS = 5.0  # client-go rest.DefaultQPS: per REST client, i.e. per kind (v0.19)
CLIENT_GO_BURST = 10  # client-go rest.DefaultBurst
V020_CLIENT_QPS = 1000.0  # Kueue v0.20 clientConnection.qps default (kueue#15206)
V020_CLIENT_BURST = 1000  # Kueue v0.20 clientConnection.burst default
METADATA_KIND = "metadata"
"""The limiter of controller-runtime's metadata client (``PartialObjectMetadata`` reads, as in
Kueue's remote-ownership check), one per worker next to the per-kind ones in v0.19."""

# C20/C32: the rate limiter of Kueue's controllers' work queues (controller-runtime's
# DefaultTypedControllerRateLimiter): a key whose reconcile returned an error is retried after
# 5 ms doubling per consecutive failure up to 1000 s, and no sooner than a 10 QPS / 100 burst
# bucket shared by the controller allows; a successful reconcile forgets the failures.
RETRY_BASE_SECONDS = 0.005
RETRY_MAX_SECONDS = 1000.0
RETRY_BUCKET_QPS = 10.0
RETRY_BUCKET_BURST = 100

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


@dataclass(frozen=True)
class WorkerClientLimit:
    """A client-side rate limit to one worker: ``qps`` sustained, ``burst`` at once, one
    budget per kind (``per_kind``, v0.19) or one for the whole worker (v0.20)."""

    qps: float
    burst: int
    per_kind: bool

    @property
    def unlimited(self) -> bool:
        """Whether the limit is off (``qps`` is infinite)."""
        return math.isinf(self.qps)


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
    # Feature gate WorkloadRequestUseMergePatch (C45, remedy 2; Alpha, off by default): Workload
    # status writes become JSON merge patches of what the write changes, as field manager
    # "kueue" (the name the API server derives from Kueue's user agent).
    merge_patch_gate: bool = False
    # C20: the MultiKueue workload reconciler queues a Workload this long after an event of a
    # remote cluster (its copy or its remote Job changed, a watch (re)started) or of a
    # MultiKueueConfig (Kueue's ``eventsBatchPeriod`` = ``constants.UpdatesBatchPeriod``, 1 s);
    # events of the manager Workload itself are queued at once.
    batch_period_seconds: float = 1.0
    # Not a Kueue setting: how long every emulated level-triggered loop waits after being woken
    # before it runs, so that a burst of events costs one pass.
    coalesce_seconds: float = 0.02
    # C10/C20: the client-side rate limit of the manager's clients to each worker (every request
    # waits for a token). None means Kueue's own default for ``version``:
    #   v0.19: client-go's defaults, 5 QPS and a burst of 10, for each kind on each worker (Kueue
    #     v0.19 sets no limit on its worker REST config, and controller-runtime builds one REST
    #     client, hence one limiter, per kind; ownership checks use the metadata client, one more).
    #     Kueue v0.19 has no setting for it: a value here is an emulation knob (an accepted
    #     difference, docs/kueue-versions.md), for tests that dispatch hundreds of Jobs.
    #   v0.20: gate MultiKueueReuseClientConnectionConfigForWorkers (Beta, on) applies Kueue's
    #     ``clientConnection.qps``/``burst`` (defaults 1000/1000) to worker clients, one limiter
    #     shared by all kinds of a worker (kueue#15280, #15206, #15310); a value here is that
    #     setting.
    # ``math.inf`` turns the limit off.
    worker_client_qps: float | None = None
    worker_client_burst: int | None = None
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
        if self.worker_client_qps is not None and not self.worker_client_qps > 0:
            raise ValueError(
                "KueueConfig.worker_client_qps must be a positive number of requests per second "
                f"(math.inf for no limit), not {self.worker_client_qps!r}"
            )
        if self.worker_client_burst is not None and self.worker_client_burst < 1:
            raise ValueError(
                "KueueConfig.worker_client_burst must be at least 1, not "
                f"{self.worker_client_burst!r}"
            )
        for name in ("batch_period_seconds", "coalesce_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"KueueConfig.{name} must not be negative")

    @property
    def worker_client_limit(self) -> WorkerClientLimit:
        """The rate limit of the manager's clients to one worker (see ``worker_client_qps``)."""
        if self.version == "v0.19":
            default_qps, default_burst, per_kind = CLIENT_GO_QPS, CLIENT_GO_BURST, True
        else:
            default_qps, default_burst, per_kind = V020_CLIENT_QPS, V020_CLIENT_BURST, False
        qps = self.worker_client_qps if self.worker_client_qps is not None else default_qps
        burst = self.worker_client_burst if self.worker_client_burst is not None else default_burst
        return WorkerClientLimit(qps=qps, burst=burst, per_kind=per_kind)

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


def merge_patch_diff(original: Any, modified: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``original`` into ``modified``.

    As controller-runtime's ``client.MergeFrom`` computes it: mappings are compared key by key
    (a removed key becomes ``null``), anything else, lists included, is sent whole when it
    changed. Returns ``{}`` for two equal mappings.
    """
    if not isinstance(original, Mapping) or not isinstance(modified, Mapping):
        return copy.deepcopy(modified)
    patch: Obj = {}
    for name in original:
        if name not in modified:
            patch[name] = None
    for name, value in modified.items():
        if name not in original:
            patch[name] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(original[name], Mapping):
            inner = merge_patch_diff(original[name], value)
            if inner:
                patch[name] = inner
        elif value != original[name]:
            patch[name] = copy.deepcopy(value)
    return patch


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
    admission-status body (C42). With the ``WorkloadRequestUseMergePatch`` gate (C45, Kueue's
    ``patchStatus`` via ``clientutil.PatchStatus``): a JSON merge patch of what the write changes
    in ``status`` relative to ``workload`` (so a field the write clears is sent as ``null`` and
    removed whoever owns it), without a field manager of its own, hence as ``kueue``; nothing is
    sent when nothing changed. ``strict`` (Kueue's default) sends the workload's
    ``resourceVersion`` as a precondition: a write based on a stale copy fails with 409 instead of
    undoing newer changes.
    """
    meta = workload["metadata"]
    metadata: Obj = {"name": meta["name"], "namespace": meta["namespace"]}
    if strict and meta.get("resourceVersion"):
        metadata["resourceVersion"] = meta["resourceVersion"]
    if config.merge_patch_gate:
        changes = merge_patch_diff(workload.get("status") or {}, dict(status))
        if not changes:
            return None
        patch: Obj = {"status": changes}
        if "resourceVersion" in metadata:
            patch["metadata"] = {"resourceVersion": metadata["resourceVersion"]}
        return await client.merge_patch(
            WORKLOADS,
            meta["name"],
            patch,
            namespace=meta["namespace"],
            subresource="status",
            field_manager=KUEUE_MANAGER,
        )
    return await client.apply(
        WORKLOADS,
        {
            "apiVersion": WORKLOADS.api_version,
            "kind": "Workload",
            "metadata": metadata,
            "status": admission_status_body(status),
        },
        subresource="status",
        field_manager=KUEUE_ADMISSION,
        force=True,
    )


# --- client-side rate limits (C10, C20) ------------------------------------------------------


class TokenBucket:
    """A token bucket as ``golang.org/x/time/rate`` reserves from it (wall-clock time).

    Each request takes one token; when none is left it reserves the next one and waits for it,
    so waiters are served in order. Starts full (``burst`` tokens).
    """

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = time.monotonic()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before it is available (0 when there is one)."""
        if math.isinf(self.qps):
            return 0.0
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> float:
        """Wait for a token; the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        return delay


def kind_of_path(path: str) -> str:
    """``group/plural`` of an API path (``/apis/batch/v1/namespaces/a/jobs/x/status`` ->
    ``batch/jobs``; core kinds have an empty group)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    else:
        group, rest = (parts[1] if len(parts) > 1 else ""), parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    return f"{group}/{rest[0]}" if rest else group


class RateLimitedKubeClient(KubeClient):
    """A :class:`KubeClient` whose every request (watches included) first waits for a token of
    the limiter of its kind, as the manager's clients to a worker do (C10, C20): one limiter per
    kind (v0.19) or one per client (v0.20). ``throttled_seconds`` sums the waits."""

    def __init__(
        self,
        kubeconfig: Mapping[str, Any],
        limit: WorkerClientLimit,
        *,
        user_agent: str = USER_AGENT,
    ) -> None:
        super().__init__(kubeconfig, user_agent=user_agent)
        self.limit = limit
        self._buckets: dict[str, TokenBucket] = {}
        self.throttled_seconds = 0.0
        self.requests = 0

    async def throttle(self, kind: str) -> None:
        """Take a token of ``kind``'s limiter (a request's kind, or :data:`METADATA_KIND`)."""
        self.requests += 1
        if self.limit.unlimited:
            return
        key = kind if self.limit.per_kind else ""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.limit.qps, self.limit.burst)
        self.throttled_seconds += await bucket.acquire()

    async def get_metadata(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> Obj | None:
        """A GET of the object as controller-runtime's metadata client sends it (a
        ``PartialObjectMetadata`` read), charged to that client's limiter; None on 404."""
        await self.throttle(METADATA_KIND)
        try:
            found: Obj = await super().request("GET", resource.path(namespace, name))
        except KubeError as error:
            if error.status == 404:
                return None
            raise
        return found

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        await self.throttle(kind_of_path(path))
        return await super().request(
            method, path, query=query, body=body, content_type=content_type
        )

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        timeout_seconds: int = 60,
        label_selector: str | None = None,
    ) -> AsyncIterator[Obj]:
        await self.throttle(kind_of_path(resource.path()))
        async for event in super().watch(
            resource,
            resource_version,
            timeout_seconds=timeout_seconds,
            label_selector=label_selector,
        ):
            yield event


async def throttle(client: KubeClient, kind: str) -> None:
    """Charge a request of ``kind`` to ``client``'s limiter without sending one (a read the
    emulation serves from its cache where Kueue sends a GET); nothing for unlimited clients."""
    if isinstance(client, RateLimitedKubeClient):
        await client.throttle(kind)


async def get_metadata(
    client: KubeClient, resource: Resource, name: str, namespace: str | None = None
) -> Obj | None:
    """A metadata-client GET through ``client`` (see :meth:`RateLimitedKubeClient.get_metadata`);
    a plain GET for a client without limits. None when the object does not exist."""
    if isinstance(client, RateLimitedKubeClient):
        return await client.get_metadata(resource, name, namespace)
    return await client.get(resource, name, namespace)


class RetryLimiter:
    """controller-runtime's default work-queue rate limiter (see ``RETRY_BASE_SECONDS``)."""

    def __init__(
        self,
        base: float = RETRY_BASE_SECONDS,
        maximum: float = RETRY_MAX_SECONDS,
        qps: float = RETRY_BUCKET_QPS,
        burst: int = RETRY_BUCKET_BURST,
    ) -> None:
        self.base = base
        self.maximum = maximum
        self._failures: dict[Any, int] = {}
        self._bucket = TokenBucket(qps, burst)

    def when(self, key: Any) -> float:
        """Seconds until ``key`` may be retried after one more failure."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        exponential = min(self.base * 2.0**failures, self.maximum)
        return max(exponential, self._bucket.reserve())

    def forget(self, key: Any) -> None:
        """A success: the next failure starts from ``base`` again."""
        self._failures.pop(key, None)

    def failures(self, key: Any) -> int:
        """Consecutive failures of ``key``."""
        return self._failures.get(key, 0)


class RemoteObjectNotOwned(Exception):
    """C33: the worker already has the job object a Workload's copy needs, without this
    manager's origin label: Kueue refuses to sync into it (``ValidateRemoteObjectOwnership``,
    ``ErrRemoteObjectNotOwnedByMultiKueue``), so the reconcile fails and is retried."""

    def __init__(self, kind: str, namespace: str, name: str, origin: str) -> None:
        self.kind, self.namespace, self.name, self.origin = kind, namespace, name, origin
        super().__init__(
            f'remote object is not owned by MultiKueue: expected "{ORIGIN_LABEL}"="{origin}" on '
            f'*v1.PartialObjectMetadata "{namespace}/{name}"'
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
    runs after ``coalesce_seconds`` and again whenever it asks for a retry, or after
    ``requeue_after``.
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
            await asyncio.sleep(self.config.coalesce_seconds)
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

    def _schedule(self, seconds: float, then: Callable[[], object] | None = None) -> None:
        """Reconcile again after ``seconds``; ``then`` (if given) runs first, at that time."""

        async def later() -> None:
            await self.clock.sleep(seconds)
            if then is not None:
                then()
            self.mark_dirty()

        task = asyncio.get_running_loop().create_task(later())
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    def cancel_timers(self) -> None:
        """Cancel pending delayed reconciles (on shutdown)."""
        for task in list(self._timers):
            task.cancel()


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until they have ended; an error one of them ended with (other
    than its cancellation) is raised.

    Unlike ``contextlib.suppress(CancelledError)`` around ``await task``, a cancellation of the
    caller itself still reaches the caller: suppressing it would leave a controller that is
    being stopped (say, one tearing a remote down in its reconcile) running, and its stop
    waiting for it forever."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*pending, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result


async def run_all(*runners: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run coroutines concurrently until cancelled (one failing stops the others)."""
    async with asyncio.TaskGroup() as group:
        for runner in runners:
            group.create_task(runner())
