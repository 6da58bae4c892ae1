"""Kueue's ClusterQueue and LocalQueue controllers (``pkg/controller/core/
clusterqueue_controller.go``, ``localqueue_controller.go``): the queues' status (C69) --
``flavorsReservation``, ``flavorsUsage``, the pending/reserving/admitted counters and condition
``Active`` -- written as merge patches by field manager ``kueue``, only on change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.kueue.admission import (
    PendingWorkload,
    QuotaSnapshot,
    ReservingWorkload,
    format_resource_quantity,
)
from dispatcher_sandbox.kube_client import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.core.cache import (
    CoreCache,
    Key,
    PassState,
    key_of,
    stop_policy,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    Obj,
    condition,
    timestamp,
)


class QueueStatusReconciler(CoreCache):
    """Phase 3 of a pass: the queues' status. Not used alone (a part of
    :class:`~dispatcher_sandbox.kueue_emulator.core.CoreKueue`)."""

    async def _queue_statuses(self, state: PassState) -> None:
        """ClusterQueue and LocalQueue status (C69), written only when it changed."""
        holders = {self._workload_key(r): r for r in self._reserving(state)}
        queues, _, cohorts = self._snapshot_inputs(state)
        queued, inadmissible, held = self._pending(state)
        waiting = [wl for wl, _ in queued] + [wl for wl, _ in inadmissible] + held
        pending_lq: dict[Key, int] = {}
        for wl in waiting:
            pending_lq[self._queue_of(wl)] = pending_lq.get(self._queue_of(wl), 0) + 1
        pending_cq: dict[str, int] = {}
        for key, lq in state.local_queues.items():
            cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
            pending_cq[cq_name] = pending_cq.get(cq_name, 0) + pending_lq.get(key, 0)
        reserving = list(holders.values())
        # Each holder grouped once by its ClusterQueue and its LocalQueue (in holder order), not
        # looked for again per queue: O(holders) a pass rather than O(holders x queues).
        by_cq: dict[str, list[ReservingWorkload]] = {}
        by_lq: dict[Key, list[ReservingWorkload]] = {}
        for k, r in holders.items():
            by_cq.setdefault(r.cluster_queue, []).append(r)
            by_lq.setdefault(self._queue_of(state.workloads[k]), []).append(r)
        reserved = QuotaSnapshot.build(queues, reserving, cohorts)
        admitted = QuotaSnapshot.build(queues, [r for r in reserving if r.admitted], cohorts)
        for name, cq in sorted(state.cluster_queues.items()):
            problem = self._cq_problem(state, cq)
            reason, message = problem or ("Ready", "Can admit new workloads")
            mine = by_cq.get(name, [])
            wanted: Obj = {
                "flavorsReservation": self._flavor_list(reserved, name, borrowed=True),
                "flavorsUsage": self._flavor_list(admitted, name, borrowed=True),
                "pendingWorkloads": pending_cq.get(name, 0),
                "reservingWorkloads": len(mine),
                "admittedWorkloads": sum(1 for r in mine if r.admitted),
            }
            active = self._desired_condition(cq, problem is None, reason, message)
            await self._update_queue_status(CLUSTER_QUEUES, cq, wanted, active)
        for key, lq in sorted(state.local_queues.items()):
            cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
            mine = by_lq.get(key, [])
            wanted = {
                "pendingWorkloads": pending_lq.get(key, 0),
                "reservingWorkloads": len(mine),
                "admittedWorkloads": sum(1 for r in mine if r.admitted),
            }
            if cq_name in reserved.queues:
                lq_reserved = QuotaSnapshot.build(queues, mine, cohorts)
                lq_admitted = QuotaSnapshot.build(queues, [r for r in mine if r.admitted], cohorts)
                wanted["flavorsReservation"] = self._flavor_list(
                    lq_reserved, cq_name, borrowed=False
                )
                wanted["flavorsUsage"] = self._flavor_list(lq_admitted, cq_name, borrowed=False)
            active = self._desired_condition(lq, *self._lq_status(state, lq))
            await self._update_queue_status(LOCAL_QUEUES, lq, wanted, active)

    def _lq_status(self, state: PassState, lq: Mapping[str, Any]) -> tuple[bool, str, str]:
        cq = state.cluster_queues.get(str((lq.get("spec") or {}).get("clusterQueue", "")))
        if stop_policy(lq) != "None":
            return False, "Stopped", "LocalQueue is stopped"
        if cq is None:
            return False, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue"
        if self._cq_problem(state, cq) is not None:
            return False, "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue"
        return True, "Ready", "Can submit new workloads to localQueue"

    @staticmethod
    def _queue_of(wl: Mapping[str, Any]) -> Key:
        """``(namespace, spec.queueName)``: the LocalQueue a workload was submitted to."""
        return (key_of(wl)[0], str((wl.get("spec") or {}).get("queueName", "")))

    @staticmethod
    def _workload_key(workload: ReservingWorkload | PendingWorkload) -> Key:
        namespace, _, name = workload.key.partition("/")
        return (namespace, name)

    def _flavor_list(
        self,
        snapshot: QuotaSnapshot,
        cq_name: str,
        *,
        borrowed: bool,
    ) -> list[Obj]:
        out: list[Obj] = []
        for group in snapshot.queues[cq_name].resource_groups:
            for fq in group.flavors:
                resources = []
                for resource in group.covered:
                    fr = (fq.name, resource)
                    item: Obj = {
                        "name": resource,
                        "total": format_resource_quantity(resource, snapshot.used(cq_name, fr)),
                    }
                    if borrowed:
                        item["borrowed"] = format_resource_quantity(
                            resource, snapshot.borrowed(cq_name, fr)
                        )
                    resources.append(item)
                out.append({"name": fq.name, "resources": resources})
        return out

    @staticmethod
    def _condition_changed(current: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
        if current is None:
            return True
        return any(current.get(k) != wanted.get(k) for k in ("status", "reason", "message"))

    def _desired_condition(
        self, obj: Mapping[str, Any], active: bool, reason: str, message: str
    ) -> Obj:
        wanted: Obj = {
            "type": "Active",
            "status": "True" if active else "False",
            "reason": reason,
            "message": message,
        }
        current = condition(obj.get("status"), "Active")
        if current is not None and current.get("status") == wanted["status"]:
            wanted["lastTransitionTime"] = current.get("lastTransitionTime")
        else:
            wanted["lastTransitionTime"] = timestamp(self.clock)
        return wanted

    async def _update_queue_status(
        self, resource: Resource, obj: Obj, wanted: Obj, active: Obj
    ) -> None:
        current = obj.get("status") or {}
        conditions = [c for c in current.get("conditions") or [] if c.get("type") != "Active"]
        conditions.append(active)
        changed = any(current.get(k) != v for k, v in wanted.items())
        changed = changed or self._condition_changed(condition(current, "Active"), active)
        if not changed:
            return
        await self._patch_status(resource, obj, {**wanted, "conditions": conditions})
