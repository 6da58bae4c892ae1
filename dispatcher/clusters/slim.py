"""What the mirrors keep of each object: ingest transforms, as client-go's informer transforms.

A worker mirror at scale is its Workloads: a decoded Workload with Kueue's ``managedFields``, its
pod template and condition messages takes ~14 KB of Python objects, of which the dispatcher
reads a few fields. Each function here is applied to every object before it enters an
:class:`~dispatcher.k8s.watching.ObjectCache` (``LISTED``, ``ADDED``, ``MODIFIED`` and
``DELETED`` alike) and keeps exactly what the cache's readers use:

- worker Workloads: what :class:`~dispatcher.controller.snapshots.WorkerIndex` reads of a
  Workload in its state (a finished one: its origin label, conditions and ClusterQueue, its run
  time counting for the queue's statistics; one holding quota: also its queue, priority,
  ``maximumExecutionTimeSeconds``, creation time and ``status.admission``'s flavors and usage,
  which least-disruption placement weighs as a possible preemption victim and a predicted start
  as quota to be released; a pending one: also ``active`` and the pod sets' counts, requests
  and placement constraints), which covers the controller's ``_copies`` / ``_holding_copy`` /
  ``_leftover`` (the origin label, the ``Admitted`` and ``QuotaReserved`` conditions' status
  and transition time); the few strings every record repeats (namespaces, queue, flavor and
  resource names, condition types) are interned;
- worker ClusterQueues, LocalQueues and ResourceFlavors: what ``dispatcher.kueue.objects``
  parses of them;
- worker Jobs: their identity, origin label and prebuilt-Workload label alone (the same-name
  guard asks only whether a Job of a name exists there, whether it is a copy of ours and which
  copy it runs);
- manager Workloads: kept whole but for ``managedFields``, of which only the entries
  :func:`~dispatcher.controller.nominator.nomination_time` can read stay (``Apply`` on the status
  subresource), reduced to whether they own ``status.nominatedClusterNames``;
- every other manager object: whole but for ``managedFields``, which nothing reads.

Every object keeps ``metadata.name``, ``namespace`` and ``resourceVersion`` (the cache keys it
and tracks its resourceVersion), and but for worker Workloads its ``uid``, ``apiVersion`` and
``kind``. A field of an unexpected shape is kept as it came, so
parsing the slim object fails (or not) exactly as parsing the full one does. The functions are
pure: they never change their argument, and share the kept values with it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ORIGIN_LABEL",
    "manager_workload",
    "without_managed_fields",
    "worker_cluster_queue",
    "worker_job",
    "worker_local_queue",
    "worker_resource_flavor",
    "worker_workload",
]

Obj = dict[str, Any]

_IDENTITY = ("name", "namespace", "uid", "resourceVersion")

ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
"""The label Kueue puts on the copies it creates on workers, with its ``multiKueue.origin``."""
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
"""The label MultiKueue puts on the Job it creates on a worker: the copy that Job runs."""


def _pick(value: Any, *fields: str) -> Any:
    """The mapping ``value`` with only ``fields`` (those present); any other value as it is."""
    if not isinstance(value, Mapping):
        return value
    return {name: value[name] for name in fields if name in value}


def _each(value: Any, *fields: str) -> Any:
    """Every mapping item of the list ``value`` with only ``fields``; anything else as it is."""
    if not isinstance(value, list):
        return value
    return [_pick(item, *fields) for item in value]


def _slim(obj: Mapping[str, Any], metadata: tuple[str, ...], **parts: Any) -> Obj:
    out: Obj = {name: obj[name] for name in ("apiVersion", "kind") if name in obj}
    if "metadata" in obj:
        out["metadata"] = _pick(obj["metadata"], *_IDENTITY, *metadata)
    for name, slim in parts.items():
        if name in obj:
            out[name] = slim(obj[name])
    return out


def without_managed_fields(obj: Obj) -> Obj:
    """``obj`` without ``metadata.managedFields`` (the object itself when it has none)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _status_apply_entry(entry: Any) -> Any:
    """One managedFields entry as ``nomination_time`` reads it: ``None`` to drop (not an
    ``Apply`` on the status subresource), else the entry reduced to whether it owns
    ``status.nominatedClusterNames`` (one of an unexpected shape is kept whole)."""
    if not isinstance(entry, Mapping):
        return None
    if entry.get("operation") != "Apply" or entry.get("subresource") != "status":
        return None
    fields = entry.get("fieldsV1") or {}
    if not isinstance(fields, Mapping):
        return entry
    status = fields.get("f:status") or {}
    if not isinstance(status, Mapping):
        return entry
    out = _pick(entry, "manager", "operation", "subresource", "time")
    owned = status.get("f:nominatedClusterNames")
    out["fieldsV1"] = {} if owned is None else {"f:status": {"f:nominatedClusterNames": owned}}
    return out


def manager_workload(obj: Obj) -> Obj:
    """A manager Workload: whole, but of ``managedFields`` only the status-apply entries, each
    reduced to whether it owns ``status.nominatedClusterNames`` (the nomination's time)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    entries = meta["managedFields"]
    slim_meta = {k: v for k, v in meta.items() if k != "managedFields"}
    if not isinstance(entries, list):
        slim_meta["managedFields"] = entries
    else:
        kept = [e for e in (_status_apply_entry(entry) for entry in entries) if e is not None]
        if kept:
            slim_meta["managedFields"] = kept
    return {**obj, "metadata": slim_meta}


def _container(value: Any) -> Any:
    out = _pick(value, "resources", "restartPolicy")
    if isinstance(out, dict) and isinstance(out.get("resources"), Mapping):
        out["resources"] = {k: _interned(v) for k, v in out["resources"].items()}
    return out


def _containers(value: Any) -> Any:
    return [_container(c) for c in value] if isinstance(value, list) else value


def _affinity(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    out = {}
    if "nodeAffinity" in value:
        out["nodeAffinity"] = _pick(
            value["nodeAffinity"], "requiredDuringSchedulingIgnoredDuringExecution"
        )
    return out


def _pod_spec(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    out = _pick(value, "nodeSelector", "tolerations", "overhead")
    if "nodeSelector" in out:
        out["nodeSelector"] = _interned(out["nodeSelector"])
    for name in ("containers", "initContainers"):
        if name in value:
            out[name] = _containers(value[name])
    if "affinity" in value:
        out["affinity"] = _affinity(value["affinity"])
    return out


def _template(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    return {"spec": _pod_spec(value["spec"])} if "spec" in value else {}


def _pod_set(value: Any) -> Any:
    out = _pick(value, "name", "count", "minCount")
    if isinstance(value, Mapping) and "template" in value:
        out["template"] = _template(value["template"])
    return out


def _workload_spec(value: Any, pending: bool) -> Any:
    if not pending:
        return _interned(_pick(value, "queueName", "priority", "maximumExecutionTimeSeconds"))
    out = _interned(_pick(value, "queueName", "priority", "active", "maximumExecutionTimeSeconds"))
    if isinstance(value, Mapping) and "podSets" in value:
        pod_sets = value["podSets"]
        out["podSets"] = [_pod_set(p) for p in pod_sets] if isinstance(pod_sets, list) else pod_sets
    return out


def _admission(value: Any) -> Any:
    out = _interned(_pick(value, "clusterQueue"))
    if isinstance(value, Mapping) and "podSetAssignments" in value:
        out["podSetAssignments"] = (
            [
                {name: _interned(v) for name, v in item.items()}
                if isinstance(item, Mapping)
                else item
                for item in _each(value["podSetAssignments"], "flavors", "resourceUsage")
            ]
            if isinstance(value["podSetAssignments"], list)
            else value["podSetAssignments"]
        )
    return out


def _interned(value: Any) -> Any:
    """A mapping of a few strings (resource names, flavors, queue names) with its string keys
    and values shared with every other record's (a decoded object has its own copy of each);
    anything else as it is."""
    if not isinstance(value, Mapping):
        return value
    return {
        sys.intern(k) if isinstance(k, str) else k: sys.intern(v) if isinstance(v, str) else v
        for k, v in value.items()
    }


WORKLOAD_CONDITIONS = frozenset({"QuotaReserved", "Admitted", "Finished", "Evicted"})
"""The only conditions read of a worker Workload."""


def _conditions(value: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(c, Mapping) for c in value):
        return value
    return [
        _interned(_pick(c, "type", "status", "lastTransitionTime"))
        for c in value
        if c.get("type") in WORKLOAD_CONDITIONS
    ]


def _state(obj: Mapping[str, Any]) -> str:
    """What the index reads of a Workload in its state (as ``WorkerIndex`` derives it):
    ``finished`` (its conditions only), ``reserved`` (also its queue and admission), else
    ``pending`` (everything); ``pending`` too for conditions of an unexpected shape."""
    status = obj.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list) or not all(isinstance(c, Mapping) for c in conditions):
        return "pending"
    found: dict[Any, str] = {}
    for item in conditions:
        found.setdefault(item.get("type"), str(item.get("status")))
    if found.get("Finished") == "True":
        return "finished"
    return "reserved" if found.get("QuotaReserved") == "True" else "pending"


def _workload_status(value: Any, state: str) -> Any:
    if not isinstance(value, Mapping):
        return value
    out: Obj = {}
    if "conditions" in value:
        out["conditions"] = _conditions(value["conditions"])
    if "admission" in value:
        # A finished one keeps only its ClusterQueue (its run time counts for that queue).
        kept = _admission(value["admission"])
        out["admission"] = _pick(kept, "clusterQueue") if state == "finished" else kept
    return out


def worker_workload(obj: Obj) -> Obj:
    """A worker Workload as the index and the controller read it, in its state: a finished one
    keeps its origin label, the conditions read (``QuotaReserved``, ``Admitted``, ``Finished``,
    ``Evicted``) and ``status.admission.clusterQueue``, one holding quota its queue, priority,
    ``maximumExecutionTimeSeconds``, creation time and ``status.admission`` too, a pending one
    ``active`` and its pod sets (requests and placement constraints) too. Neither
    ``apiVersion``, ``kind``, ``uid`` nor any other label is kept."""
    state = _state(obj)
    out: Obj = {}
    meta = obj.get("metadata")
    if meta is not None:
        kept = _pick(meta, "name", "namespace", "resourceVersion")
        if isinstance(meta, Mapping):
            if "namespace" in kept and isinstance(kept["namespace"], str):
                kept["namespace"] = sys.intern(kept["namespace"])
            labels = meta.get("labels")
            if isinstance(labels, Mapping):
                if ORIGIN_LABEL in labels:
                    kept["labels"] = _interned(_pick(labels, ORIGIN_LABEL))
            elif "labels" in meta:
                kept["labels"] = labels
            if state != "finished" and "creationTimestamp" in meta:
                kept["creationTimestamp"] = meta["creationTimestamp"]
        out["metadata"] = kept
    if state != "finished" and "spec" in obj:
        out["spec"] = _workload_spec(obj["spec"], state == "pending")
    if "status" in obj:
        out["status"] = _workload_status(obj["status"], state)
    return out


def _cluster_queue_status(value: Any) -> Any:
    out = _pick(value, "flavorsReservation", "flavorsUsage", "pendingWorkloads")
    if isinstance(value, Mapping) and "conditions" in value:
        out["conditions"] = _each(
            value["conditions"], "type", "status", "reason", "lastTransitionTime"
        )
    return out


def worker_cluster_queue(obj: Obj) -> Obj:
    """A worker ClusterQueue as ``parse_cluster_queue`` reads it."""
    return _slim(
        obj,
        (),
        spec=lambda spec: _pick(
            spec, "resourceGroups", "cohortName", "stopPolicy", "queueingStrategy", "preemption"
        ),
        status=_cluster_queue_status,
    )


def worker_local_queue(obj: Obj) -> Obj:
    """A worker LocalQueue as ``parse_local_queue`` reads it."""
    return _slim(obj, (), spec=lambda spec: _pick(spec, "clusterQueue", "stopPolicy"))


def worker_resource_flavor(obj: Obj) -> Obj:
    """A worker ResourceFlavor as ``parse_resource_flavor`` reads it."""
    return _slim(obj, (), spec=lambda spec: _pick(spec, "nodeLabels", "nodeTaints", "tolerations"))


def worker_job(obj: Obj) -> Obj:
    """A worker Job as the same-name guard reads it: identity, the origin label and the
    prebuilt-Workload label alone (its other labels, spec and status, which change with every
    pod, are dropped)."""
    out = _slim(obj, ())
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if isinstance(labels, Mapping) and ORIGIN_LABEL in labels:
        out["metadata"]["labels"] = _pick(labels, ORIGIN_LABEL, PREBUILT_LABEL)
    return out
