"""Server-side apply glue (F30–F39): from an apply request to :func:`.managed.apply`.

The merge and the field ownership are :mod:`.managed`'s; this module checks an apply body against
the URL it was sent to, builds what is applied on a live object or on a new one, and turns an
ownership conflict into the API server's 409. The handlers (:mod:`.handlers`) store the result.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from dispatcher_sandbox.fake_apiserver import managed
from dispatcher_sandbox.fake_apiserver.errors import ApiError, conflict
from dispatcher_sandbox.fake_apiserver.objects import (
    NAMESPACE_MISMATCH,
    SERVER_METADATA,
    Obj,
    Target,
    structure_of,
)

APPLY_YAML = "application/apply-patch+yaml"
APPLY_CBOR = "application/apply-patch+cbor"


def checked_apply_body(target: Target, body: Any) -> Obj:
    """The apply body as an object whose apiVersion, kind, name and namespace match the URL
    (400 otherwise); returns its metadata."""
    resource = target.resource
    if not isinstance(body, dict):
        raise ApiError(400, "an apply body must be an object")
    if body.get("apiVersion") != target.api_version or body.get("kind") != resource.kind:
        raise ApiError(
            400,
            f"apiVersion and kind of the apply body ({body.get('apiVersion')}, "
            f"{body.get('kind')}) must match the URL ({target.api_version}, {resource.kind})",
        )
    meta = body.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != target.name:
        raise ApiError(
            400,
            f"metadata.name of the apply body must match the name on the URL ({target.name})",
        )
    if resource.namespaced and meta.get("namespace") not in (None, "", target.namespace):
        raise ApiError(400, NAMESPACE_MISMATCH)
    return meta


def apply_to_new(
    obj: Obj,
    apply_body: Obj,
    *,
    target: Target,
    manager: str,
    force: bool,
    clock: Callable[[], str],
) -> Obj:
    """An apply that creates: the applied object, with the server's metadata of ``obj`` (the
    object as a create would store it: uid, creationTimestamp, generation, namespace)."""
    resource = target.resource
    meta = obj["metadata"]
    try:
        applied = managed.apply(
            None,
            apply_body,
            manager=manager,
            api_version=target.api_version,
            subresource=None,
            status_subresource=resource.status_subresource,
            force=force,
            schema=structure_of(resource, target.version),
            now=clock(),
        )
    except managed.ApplyConflict as exc:  # pragma: no cover - nothing to conflict with
        raise ApiError(409, exc.message, details={"causes": exc.causes}) from exc
    applied["metadata"].update(
        {k: meta[k] for k in ("uid", "creationTimestamp", "generation", "namespace") if k in meta}
    )
    applied["apiVersion"], applied["kind"] = target.api_version, resource.kind
    return applied


def apply_to_live(
    live: Obj,
    body: Obj,
    meta: Obj,
    *,
    target: Target,
    manager: str,
    force: bool,
    clock: Callable[[], str],
) -> Obj:
    """An apply onto the stored object ``live``: the new object (not yet admitted nor stored).

    A ``resourceVersion`` in the body must be the live one; fields other managers own are a
    409 Conflict unless ``force``."""
    resource = target.resource
    assert target.name is not None
    body_rv = meta.get("resourceVersion")
    if body_rv and body_rv != live["metadata"]["resourceVersion"]:
        raise conflict(resource.group, resource.plural, target.name)
    applied = copy.deepcopy(body)
    applied["metadata"] = {
        k: v for k, v in meta.items() if k not in (*SERVER_METADATA, "namespace", "name")
    }
    applied["metadata"].update({"name": target.name})
    try:
        return managed.apply(
            live,
            applied,
            manager=manager,
            api_version=target.api_version,
            subresource=target.subresource,
            status_subresource=resource.status_subresource,
            force=force,
            schema=structure_of(resource, target.version),
            now=clock(),
        )
    except managed.ApplyConflict as exc:
        raise ApiError(
            409,
            exc.message,
            reason="Conflict",
            details={
                "name": target.name,
                "group": resource.group,
                "kind": resource.plural,
                "causes": exc.causes,
            },
        ) from exc
