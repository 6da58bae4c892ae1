"""Namespaces: the defaults, the namespace of a new object, and deletion's cascade (F12).

A namespaced object is created only in an existing namespace that is not terminating. Deleting
a namespace deletes its objects without finalizers at once and marks the others; the namespace
stays ``Terminating`` until the last of them is gone (:func:`finish_namespace`).
"""

from __future__ import annotations

import copy

from dispatcher_sandbox.fake_apiserver.errors import ApiError, not_found
from dispatcher_sandbox.fake_apiserver.objects import NAMESPACE_MISMATCH, Obj, Target
from dispatcher_sandbox.fake_apiserver.state import ClusterState

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")

NAMESPACES = ("", "namespaces")


def namespace_for_create(cluster: ClusterState, target: Target, meta: Obj) -> str:
    """The namespace a new object goes to ("" if cluster-scoped), set in its ``meta``: the one
    on the URL, which must exist and not be terminating."""
    if not target.resource.namespaced:
        meta.pop("namespace", None)
        return ""
    assert target.namespace is not None
    if meta.get("namespace") not in (None, "", target.namespace):
        raise ApiError(400, NAMESPACE_MISMATCH)
    meta["namespace"] = target.namespace
    ns = cluster.store.get(NAMESPACES, ("", target.namespace))
    if ns is None:
        raise not_found("", "namespaces", target.namespace)
    if ns["metadata"].get("deletionTimestamp"):
        raise ApiError(
            403,
            f'{target.resource.plural} "{meta.get("name", "")}" is forbidden: unable to create '
            f"new content in namespace {target.namespace} because it is being terminated",
            reason="Forbidden",
        )
    return target.namespace


def delete_namespace(cluster: ClusterState, ns_obj: Obj) -> Obj:
    """Simplified cascade (F12): objects without finalizers go at once, objects with
    finalizers are marked; the namespace stays ``Terminating`` until it is empty."""
    store = cluster.store
    name = ns_obj["metadata"]["name"]
    marked = copy.deepcopy(ns_obj)
    if not marked["metadata"].get("deletionTimestamp"):
        marked["metadata"]["deletionTimestamp"] = cluster.now()
        marked.setdefault("status", {})["phase"] = "Terminating"
        marked = store.write(NAMESPACES, ("", name), marked, "MODIFIED")
    for resource in cluster.registry.all():
        if not resource.namespaced:
            continue
        for obj in list(store.items(resource.key, name)):
            key = (name, obj["metadata"]["name"])
            if obj["metadata"].get("finalizers"):
                if not obj["metadata"].get("deletionTimestamp"):
                    updated = copy.deepcopy(obj)
                    updated["metadata"]["deletionTimestamp"] = cluster.now()
                    store.write(resource.key, key, updated, "MODIFIED")
            else:
                store.delete(resource.key, key)
    remaining = finish_namespace(cluster, name)
    return remaining or marked


def finish_namespace(cluster: ClusterState, name: str) -> Obj | None:
    """Delete a terminating namespace once it holds no object; returns it if it went."""
    store = cluster.store
    ns = store.get(NAMESPACES, ("", name))
    if ns is None or not ns["metadata"].get("deletionTimestamp"):
        return None
    for resource in cluster.registry.all():
        if resource.namespaced and any(True for _ in store.items(resource.key, name)):
            return None
    return store.delete(NAMESPACES, ("", name))
