"""What every part of :class:`~dispatcher_sandbox.kueue_emulator.core.CoreKueue` reads: the cached
objects of one cluster, seen as one pass's :class:`PassState`.

Mirrors Kueue v0.19.2's ``pkg/cache/`` (the informer caches, with the workloads the scheduler has
just "assumed" laid over them until the informer catches up, and the usage of the workloads that
hold quota) and ``pkg/queue/`` (``manager.go``: which pending workloads are queued, which are
inadmissible and why, which are held back by ``Requeued=False``).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from dispatcher.kueue.admission import (
    EPOCH,
    PendingWorkload,
    QueuePolicy,
    ReservingWorkload,
    admission_usage,
    parse_cohort_quotas,
    parse_queue_policy,
)
from dispatcher.kueue.objects import (
    ClusterQueueView,
    FlavorResource,
    ResourceFlavorView,
    parse_cluster_queue,
    parse_pod_set,
    parse_resource_flavor,
)
from dispatcher_sandbox.kube_client import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    COHORTS,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    KubeError,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.core.constants import EVICTED_CHECK
from dispatcher_sandbox.kueue_emulator.runtime import (
    KUEUE_MANAGER,
    Clock,
    ClusterConnection,
    Controller,
    Counters,
    KueueConfig,
    Obj,
    condition,
    is_true,
    parse_time,
)

log = logging.getLogger(__name__)

Role = Literal["worker", "manager"]
Key = tuple[str, str]


def rv_of(obj: Mapping[str, Any]) -> int | None:
    text = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    return int(text) if text.isdigit() else None


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def is_active(wl: Mapping[str, Any]) -> bool:
    return (wl.get("spec") or {}).get("active", True) is not False


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def time_of(cond: Mapping[str, Any] | None) -> datetime.datetime | None:
    return parse_time((cond or {}).get("lastTransitionTime"))


def stop_policy(obj: Mapping[str, Any] | None) -> str:
    """``spec.stopPolicy`` of a queue (``None`` when unset)."""
    return str(((obj or {}).get("spec") or {}).get("stopPolicy") or "None")


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; ``None`` matches nothing (Kueue's ``namespaceSelector``)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


@dataclass
class PassState:
    """The cached objects of one pass (workloads with the assumed overlay applied)."""

    workloads: dict[Key, Obj]
    local_queues: dict[Key, Obj]
    cluster_queues: dict[str, Obj]
    flavors: dict[str, ResourceFlavorView]
    cohorts: dict[str, Obj]
    checks: dict[str, Obj]
    namespaces: dict[str, Obj]
    views: dict[str, ClusterQueueView] = field(default_factory=dict)

    def local_queue(self, wl: Mapping[str, Any]) -> Obj | None:
        namespace, _ = key_of(wl)
        return self.local_queues.get((namespace, str((wl.get("spec") or {}).get("queueName", ""))))


class CoreCache(Controller):
    """The cache every part of :class:`~dispatcher_sandbox.kueue_emulator.core.CoreKueue` shares:
    the connection, the assumed workloads, the pass's :class:`PassState` and the queue views built
    from it. Not used alone."""

    RESOURCES: ClassVar[tuple[Resource, ...]] = (
        WORKLOADS,
        LOCAL_QUEUES,
        CLUSTER_QUEUES,
        RESOURCE_FLAVORS,
        COHORTS,
        ADMISSION_CHECKS,
        NAMESPACES,
    )
    """What must be cached on the connection (the constructor adds them when missing)."""

    def __init__(
        self, conn: ClusterConnection, config: KueueConfig, clock: Clock, *, role: str
    ) -> None:
        if role not in ("worker", "manager"):
            raise ValueError(f"role must be 'worker' or 'manager', not {role!r}")
        super().__init__(config, clock)
        self.conn = conn
        self.role = role
        self.name = f"kueue-core[{conn.name}]"
        self.counters = Counters()
        self.conflicts = 0
        self.rejected_writes = 0
        """Writes the API server refused with 422 (must stay 0: the CRDs accept all we write)."""
        self._assumed: dict[Key, Obj] = {}
        self._reserved_at: dict[str, datetime.datetime] = {}
        self._admitted_at: dict[str, datetime.datetime] = {}
        self._timer_at: datetime.datetime | None = None
        self._reserving_memo: dict[Key, tuple[Obj, int | None, ReservingWorkload | None]] = {}
        for resource in self.RESOURCES:
            conn.add_resource(resource)
        conn.subscribe(self._on_change)

    def _on_change(self, resource: Resource, kind: str, obj: Obj) -> None:
        if resource in self.RESOURCES:
            self.mark_dirty()

    def _objects(self, resource: Resource) -> dict[Key, Obj]:
        return dict(self.conn.cache(resource).objects)

    def _read(self) -> PassState:
        workloads = self._objects(WORKLOADS)
        for key, assumed in list(self._assumed.items()):
            current = workloads.get(key)
            rv_now, rv_assumed = (
                (rv_of(current), rv_of(assumed)) if current is not None else (None, None)
            )
            if (
                current is None
                or uid_of(current) != uid_of(assumed)
                or rv_now is None
                or rv_assumed is None
                or rv_now >= rv_assumed
            ):
                del self._assumed[key]
            else:
                workloads[key] = assumed
        state = PassState(
            workloads=workloads,
            local_queues=self._objects(LOCAL_QUEUES),
            cluster_queues={k[1]: v for k, v in self._objects(CLUSTER_QUEUES).items()},
            flavors={
                k[1]: parse_resource_flavor(v) for k, v in self._objects(RESOURCE_FLAVORS).items()
            },
            cohorts={k[1]: v for k, v in self._objects(COHORTS).items()},
            checks={k[1]: v for k, v in self._objects(ADMISSION_CHECKS).items()},
            namespaces={k[1]: v for k, v in self._objects(NAMESPACES).items()},
        )
        state.views = {name: parse_cluster_queue(cq) for name, cq in state.cluster_queues.items()}
        return state

    def _cq_problem(self, state: PassState, cq: Mapping[str, Any]) -> tuple[str, str] | None:
        """Why a ClusterQueue is inactive (reason, message), or None when it is active."""
        if stop_policy(cq) != "None":
            return "Stopped", "Can't admit new workloads: is stopped"
        spec = cq.get("spec") or {}
        missing = sorted(
            {
                str(f.get("name"))
                for g in spec.get("resourceGroups") or []
                for f in g.get("flavors") or []
                if str(f.get("name")) not in state.flavors
            }
        )
        if missing:
            return (
                "FlavorNotFound",
                "Can't admit new workloads: references missing ResourceFlavor(s): "
                f"{', '.join(missing)}",
            )
        names = self._check_names(cq)
        absent = [n for n in names if n not in state.checks]
        if absent:
            return (
                "AdmissionCheckNotFound",
                "Can't admit new workloads: references missing AdmissionCheck(s): "
                f"{', '.join(absent)}",
            )
        inactive = [n for n in names if not is_true(state.checks[n], "Active")]
        if inactive:
            return (
                "AdmissionCheckInactive",
                "Can't admit new workloads: references inactive AdmissionCheck(s): "
                f"{', '.join(inactive)}",
            )
        return None

    @staticmethod
    def _check_names(cq: Mapping[str, Any], flavors: set[str] | None = None) -> list[str]:
        """The admission checks of a ClusterQueue (for the assigned ``flavors``, if given)."""
        strategy = (cq.get("spec") or {}).get("admissionChecksStrategy") or {}
        names = []
        for item in strategy.get("admissionChecks") or []:
            on = set(item.get("onFlavors") or [])
            if flavors is None or not on or on & flavors:
                names.append(str(item["name"]))
        return names

    def _namespace_matches(self, state: PassState, cq: Mapping[str, Any], namespace: str) -> bool:
        ns = state.namespaces.get(namespace) or {}
        labels = dict((ns.get("metadata") or {}).get("labels") or {})
        labels.setdefault("kubernetes.io/metadata.name", namespace)
        return selector_matches((cq.get("spec") or {}).get("namespaceSelector"), labels)

    @staticmethod
    def _queued_at(wl: Mapping[str, Any]) -> datetime.datetime:
        """Kueue's queue-order timestamp: eviction time after an admission-check eviction."""
        evicted = condition(wl.get("status"), "Evicted")
        if evicted and evicted.get("status") == "True" and evicted.get("reason") == EVICTED_CHECK:
            when = time_of(evicted)
            if when is not None:
                return when
        created = parse_time((wl.get("metadata") or {}).get("creationTimestamp"))
        return created or EPOCH

    @staticmethod
    def _holds_quota(wl: Mapping[str, Any]) -> bool:
        return (
            is_true(wl, "QuotaReserved")
            and not is_true(wl, "Finished")
            and not is_deleting(wl)
            and bool(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue"))
        )

    def _inadmissible(self, state: PassState, wl: Obj) -> str | None:
        """Kueue's message for a workload that cannot be queued to a ClusterQueue at all."""
        namespace, _ = key_of(wl)
        queue = str((wl.get("spec") or {}).get("queueName", ""))
        lq = state.local_queue(wl)
        if lq is None:
            return f"LocalQueue {queue} doesn't exist"
        if stop_policy(lq) != "None":
            return f"LocalQueue {queue} is inactive"
        cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
        cq = state.cluster_queues.get(cq_name)
        if cq is None:
            return f"ClusterQueue {cq_name} doesn't exist"
        if not self._namespace_matches(state, cq, namespace):
            return "Workload namespace doesn't match ClusterQueue selector"
        if self._cq_problem(state, cq) is not None:
            return f"ClusterQueue {cq_name} is inactive"
        return None

    def _reserving(self, state: PassState) -> list[ReservingWorkload]:
        """The workloads holding quota, in key order. Each one's view is computed once per
        version of its object (the same dict at the same resourceVersion) and kept until the
        object changes or leaves the cache: a pass no longer re-parses every admission."""
        out = []
        memo: dict[Key, tuple[Obj, int | None, ReservingWorkload | None]] = {}
        previous = self._reserving_memo
        for key, wl in sorted(state.workloads.items()):
            seen = previous.get(key)
            rv = rv_of(wl)
            if seen is not None and seen[0] is wl and seen[1] == rv:
                view = seen[2]
            else:
                view = self._reserving_view(key, wl)
            memo[key] = (wl, rv, view)
            if view is not None:
                out.append(view)
        self._reserving_memo = memo
        return out

    def _reserving_view(self, key: Key, wl: Obj) -> ReservingWorkload | None:
        if not self._holds_quota(wl):
            return None
        status = wl.get("status") or {}
        return ReservingWorkload(
            key=f"{key[0]}/{key[1]}",
            cluster_queue=str(status["admission"]["clusterQueue"]),
            usage=admission_usage(status.get("admission")),
            priority=int((wl.get("spec") or {}).get("priority") or 0),
            reserved_at=time_of(condition(status, "QuotaReserved")) or EPOCH,
            queued_at=self._queued_at(wl),
            admitted=is_true(wl, "Admitted"),
            evicting=is_true(wl, "Evicted"),
        )

    def _pending(
        self, state: PassState
    ) -> tuple[list[tuple[Obj, PendingWorkload]], list[tuple[Obj, str]], list[Obj]]:
        """Queued workloads (with their model view), the inadmissible ones with a message, and
        those held back until their ``Requeued`` condition is True again (C13: Kueue's queue
        keeps a workload with ``Requeued=False`` among the inadmissible ones, unscheduled and
        untouched, but counts it as pending)."""
        queued: list[tuple[Obj, PendingWorkload]] = []
        inadmissible: list[tuple[Obj, str]] = []
        held: list[Obj] = []
        for key, wl in sorted(state.workloads.items()):
            if (
                is_true(wl, "QuotaReserved")
                or is_true(wl, "Finished")
                or not is_active(wl)
                or is_deleting(wl)
            ):
                continue
            problem = self._inadmissible(state, wl)
            if problem is not None:
                inadmissible.append((wl, problem))
                continue
            requeued = condition(wl.get("status"), "Requeued")
            if requeued is not None and requeued.get("status") == "False":
                held.append(wl)
                continue
            lq = state.local_queue(wl) or {}
            spec = wl.get("spec") or {}
            view = PendingWorkload(
                key=f"{key[0]}/{key[1]}",
                cluster_queue=str((lq.get("spec") or {}).get("clusterQueue", "")),
                pod_sets=tuple(parse_pod_set(ps) for ps in spec.get("podSets") or []),
                priority=int(spec.get("priority") or 0),
                queued_at=self._queued_at(wl),
                uid=str((wl.get("metadata") or {}).get("uid", "")),
            )
            queued.append((wl, view))
        return queued, inadmissible, held

    def _snapshot_inputs(
        self, state: PassState
    ) -> tuple[
        list[ClusterQueueView], dict[str, QueuePolicy], dict[str, Mapping[FlavorResource, int]]
    ]:
        queues = [state.views[name] for name, cq in sorted(state.cluster_queues.items())]
        policies = {name: parse_queue_policy(cq) for name, cq in state.cluster_queues.items()}
        cohorts = {name: parse_cohort_quotas(obj) for name, obj in state.cohorts.items()}
        return queues, policies, cohorts

    def _elapsed(self, since: datetime.datetime) -> float:
        return (self.clock.now() - since).total_seconds()

    @property
    def _observability(self) -> bool:
        return self.config.unadmitted_workloads_observability

    def _reason(self, legacy: str, granular: str) -> str:
        """``UnadmittedWorkloadReasonWithFallback``: the v0.20 reason when the gate is on."""
        return granular if self._observability else legacy

    # --- writes every part makes ------------------------------------------------------------

    def _write_failed(self, error: KubeError, obj: Mapping[str, Any]) -> None:
        if error.status == 404:
            return
        if error.status == 409:
            self.conflicts += 1
            self.mark_dirty()
            return
        if error.status == 422:
            self.rejected_writes += 1
            log.error("%s: write of %s rejected: %s", self.name, key_of(obj), error.message)
            return
        raise error

    async def _patch_status(self, resource: Resource, obj: Obj, status: Obj) -> None:
        meta = obj["metadata"]
        try:
            await self.conn.client.merge_patch(
                resource,
                meta["name"],
                {"status": status},
                namespace=meta.get("namespace"),
                subresource="status",
                field_manager=KUEUE_MANAGER,
            )
        except KubeError as error:
            self._write_failed(error, obj)
