"""What the mirrors keep of each object: ingest transforms, as client-go's informer transforms.

A worker mirror at scale is its Workloads: a decoded Workload with Kueue's ``managedFields``, its
pod template and condition messages takes ~14 KB of Python objects, of which the dispatcher
reads a few fields. Each function here is applied to every object before it enters an
:class:`~dispatcher.k8s.watching.ObjectCache` (``LISTED``, ``ADDED``, ``MODIFIED`` and
``DELETED`` alike) and keeps exactly what the cache's readers use:

- worker Workloads: :class:`~dispatcher.controller.snapshots.WorkerIndex` (queue, priority,
  ``active``, creation time, the pod sets' counts, requests and placement constraints, the
  conditions' type, status and transition time, ``status.admission``'s flavors and usage), the
  origin label of copies (``is_copy``), and the controller's ``_copies`` / ``_holding_copy`` /
  ``_leftover`` (the origin label, the ``Admitted`` and ``QuotaReserved`` conditions);
- worker ClusterQueues, LocalQueues and ResourceFlavors: what ``dispatcher.kueue.objects``
  parses of them;
- manager Workloads: kept whole but for ``managedFields``, of which only the entries
  :func:`~dispatcher.controller.nominator.nomination_time` can read stay (``Apply`` on the status
  subresource), reduced to whether they own ``status.nominatedClusterNames``;
- every other manager object: whole but for ``managedFields``, which nothing reads.

Every object keeps ``metadata.name``, ``namespace``, ``uid`` and ``resourceVersion`` (the cache
keys it and tracks its resourceVersion). A field of an unexpected shape is kept as it came, so
parsing the slim object fails (or not) exactly as parsing the full one does. The functions are
pure: they never change their argument, and share the kept values with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "manager_workload",
    "without_managed_fields",
    "worker_cluster_queue",
    "worker_local_queue",
    "worker_resource_flavor",
    "worker_workload",
]

Obj = dict[str, Any]

_IDENTITY = ("name", "namespace", "uid", "resourceVersion")


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
    return _pick(value, "resources", "restartPolicy")


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


def _workload_spec(value: Any) -> Any:
    out = _pick(value, "queueName", "priority", "active")
    if isinstance(value, Mapping) and "podSets" in value:
        pod_sets = value["podSets"]
        out["podSets"] = [_pod_set(p) for p in pod_sets] if isinstance(pod_sets, list) else pod_sets
    return out


def _admission(value: Any) -> Any:
    out = _pick(value, "clusterQueue")
    if isinstance(value, Mapping) and "podSetAssignments" in value:
        out["podSetAssignments"] = _each(value["podSetAssignments"], "flavors", "resourceUsage")
    return out


def _workload_status(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    out: Obj = {}
    if "conditions" in value:
        out["conditions"] = _each(value["conditions"], "type", "status", "lastTransitionTime")
    if "admission" in value:
        out["admission"] = _admission(value["admission"])
    return out


def worker_workload(obj: Obj) -> Obj:
    """A worker Workload as the index and the controller read it."""
    return _slim(
        obj,
        ("labels", "creationTimestamp"),
        spec=_workload_spec,
        status=_workload_status,
    )


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
        spec=lambda spec: _pick(spec, "resourceGroups", "cohortName", "stopPolicy"),
        status=_cluster_queue_status,
    )


def worker_local_queue(obj: Obj) -> Obj:
    """A worker LocalQueue as ``parse_local_queue`` reads it."""
    return _slim(obj, (), spec=lambda spec: _pick(spec, "clusterQueue", "stopPolicy"))


def worker_resource_flavor(obj: Obj) -> Obj:
    """A worker ResourceFlavor as ``parse_resource_flavor`` reads it."""
    return _slim(obj, (), spec=lambda spec: _pick(spec, "nodeLabels", "nodeTaints", "tolerations"))
