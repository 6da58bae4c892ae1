"""Status writes: the one place that patches ``/status`` of a custom object.

kubernetes_asyncio sends a dict body as ``application/json-patch+json`` unless ``_content_type``
is given, which the API server rejects (``docs/fake-apiserver.md#9-client-facts``). Both writers
here pass it explicitly:

- :func:`apply_status`: server-side apply (``application/apply-patch+yaml``) with a field manager
  and ``force`` (contract C48);
- :func:`merge_patch_status`: JSON merge patch (``application/merge-patch+json``), never with
  ``force`` (422 for a non-apply patch, C47).

Both return :class:`Patched` or, when Kueue won the race (409, or 422 from the mutual-exclusion or
immutability rules on ``clusterName``/``nominatedClusterNames``: Kueue admitted the workload
meanwhile, C48), :class:`AdmittedMeanwhile`. Other failures raise
:class:`~dispatcher.k8s.errors.ApiError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.resources import ResourceRef

Obj = dict[str, Any]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"

# 422 messages of the Workload status rules that mean "Kueue set clusterName meanwhile" (C17).
RACE_MARKERS = ("mutually exclusive", "immutable")


@dataclass(frozen=True)
class Patched:
    """The write was accepted; ``object`` is the object the server returned."""

    object: Obj


@dataclass(frozen=True)
class AdmittedMeanwhile:
    """The write lost a harmless race: re-read the object and decide again.

    ``status`` is 409 (conflict) or 422 (a rule that says Kueue already set ``clusterName``).
    """

    status: int
    reason: str
    message: str


PatchResult = Patched | AdmittedMeanwhile


def classify(error: ApiError) -> AdmittedMeanwhile | None:
    """The race result for a patch error, or None when the error must be raised."""
    if error.status == 409:
        return AdmittedMeanwhile(error.status, error.reason or "Conflict", error.message)
    if error.status == 422 and any(m in error.message.lower() for m in RACE_MARKERS):
        return AdmittedMeanwhile(error.status, error.reason or "Invalid", error.message)
    return None


async def _patch_status(
    api: KubeApi,
    group: str,
    version: str,
    namespace: str,
    plural: str,
    name: str,
    body: Obj,
    *,
    content_type: str,
    query: list[tuple[str, str]],
    request_timeout: float | None,
) -> PatchResult:
    # Through KubeApi.request (kubernetes_asyncio's call_api: its auth and token refresh, the
    # session's transport), not the generated CustomObjectsApi method: the answer is read once as
    # JSON, without the generated wrapper's parameter checks and its decode-then-deserialize.
    path = ResourceRef(group, version, plural).path(namespace, name, "status")
    try:
        answer = await api.request(
            "PATCH",
            path,
            query=query,
            body=body,
            content_type=content_type,
            request_timeout=request_timeout,
        )
    except ApiError as error:  # an unreachable server (status 0) is never a race: raised
        race = classify(error)
        if race is None:
            raise
        return race
    return Patched(answer)


async def apply_status(
    api: KubeApi,
    group: str,
    version: str,
    namespace: str,
    plural: str,
    name: str,
    body: Obj,
    field_manager: str,
    force: bool = True,
    *,
    request_timeout: float | None = None,
) -> PatchResult:
    """Server-side apply ``body`` to the status of a namespaced custom object.

    ``body`` is a full apply configuration: ``apiVersion``, ``kind``, ``metadata.name`` and
    ``metadata.namespace``, and the ``status`` fields this field manager owns (C48).
    """
    if not field_manager:
        raise ValueError("server-side apply needs a field manager (C47)")
    return await _patch_status(
        api,
        group,
        version,
        namespace,
        plural,
        name,
        body,
        content_type=APPLY_PATCH,
        query=[("fieldManager", field_manager), ("force", "true" if force else "false")],
        request_timeout=request_timeout,
    )


async def merge_patch_status(
    api: KubeApi,
    group: str,
    version: str,
    namespace: str,
    plural: str,
    name: str,
    body: Obj,
    field_manager: str | None = None,
    *,
    request_timeout: float | None = None,
) -> PatchResult:
    """JSON merge patch ``body`` (for example ``{"status": {"nominatedClusterNames": [...]}}``)
    onto the status of a namespaced custom object. Never sends ``force`` (C47)."""
    query = [("fieldManager", field_manager)] if field_manager else []
    return await _patch_status(
        api,
        group,
        version,
        namespace,
        plural,
        name,
        body,
        content_type=MERGE_PATCH,
        query=query,
        request_timeout=request_timeout,
    )
