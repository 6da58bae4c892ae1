"""Admission hooks (F48–F51 of docs/fake-apiserver.md) and Kueue's ready-made policy (F50, C46).

A write is computed (patch, apply merge), then passed through the mutating hooks in order, then
validated against the schema and CEL rules, then through the validating hooks, and only then
stored (F49): :func:`admit` runs these steps for the handlers. A hook denies by raising
:class:`Denied`; any other exception fails the request closed with 500 (F51).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dispatcher_sandbox.fake_apiserver import managed
from dispatcher_sandbox.fake_apiserver.errors import ApiError, invalid
from dispatcher_sandbox.fake_apiserver.objects import Target

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class AdmissionRequest:
    """What a hook sees of one write."""

    operation: str  # CREATE, UPDATE, DELETE
    group: str
    version: str
    resource: str  # plural
    subresource: str | None
    namespace: str | None
    name: str
    object: Obj | None  # the new object (None on DELETE)
    old_object: Obj | None  # the stored object (None on CREATE)
    user: str
    field_manager: str


class Denied(Exception):
    """Raised by a hook to refuse a write (default 422 Invalid, as a ValidatingAdmissionPolicy)."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


MutateFn = Callable[[AdmissionRequest], Obj | None]
ValidateFn = Callable[[AdmissionRequest], None]


@dataclass(frozen=True)
class Match:
    """What a hook applies to. Empty tuples match everything."""

    groups: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()
    # "workloads", "workloads/status", or "*"; the subresource is part of the name.
    resources: tuple[str, ...] = ()
    operations: tuple[str, ...] = ("CREATE", "UPDATE", "DELETE")

    def matches(self, request: AdmissionRequest) -> bool:
        """Whether the request is in scope."""
        resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
        return (
            (not self.groups or request.group in self.groups)
            and (not self.versions or request.version in self.versions)
            and (not self.resources or resource in self.resources or "*" in self.resources)
            and request.operation in self.operations
        )


@dataclass
class MutatingHook:
    """A named mutating hook: returns the changed object, or None for no change."""

    name: str
    match: Match
    fn: MutateFn


@dataclass
class ValidatingHook:
    """A named validating hook: raises :class:`Denied` to refuse."""

    name: str
    match: Match
    fn: ValidateFn


@dataclass
class AdmissionChain:
    """The ordered hooks of one fake cluster; tests switch them on and off at run time."""

    mutating: list[MutatingHook] = field(default_factory=list)
    validating: list[ValidatingHook] = field(default_factory=list)

    def add_mutating(self, hook: MutatingHook) -> None:
        """Append (or replace by name) a mutating hook."""
        self.mutating = [h for h in self.mutating if h.name != hook.name] + [hook]

    def add_validating(self, hook: ValidatingHook) -> None:
        """Append (or replace by name) a validating hook."""
        self.validating = [h for h in self.validating if h.name != hook.name] + [hook]

    def remove(self, name: str) -> None:
        """Remove hooks of that name from both lists."""
        self.mutating = [h for h in self.mutating if h.name != name]
        self.validating = [h for h in self.validating if h.name != name]

    def mutate(self, request: AdmissionRequest) -> Obj | None:
        """Run the mutating hooks in order; return the final object."""
        obj = request.object
        for hook in self.mutating:
            current = _with_object(request, obj)
            if not hook.match.matches(current):
                continue
            changed = hook.fn(current)
            if changed is not None:
                obj = changed
        return obj

    def validate(self, request: AdmissionRequest) -> None:
        """Run every matching validating hook (each may raise :class:`Denied`)."""
        for hook in self.validating:
            if hook.match.matches(request):
                hook.fn(request)


def _with_object(request: AdmissionRequest, obj: Obj | None) -> AdmissionRequest:
    return AdmissionRequest(
        operation=request.operation,
        group=request.group,
        version=request.version,
        resource=request.resource,
        subresource=request.subresource,
        namespace=request.namespace,
        name=request.name,
        object=obj,
        old_object=request.old_object,
        user=request.user,
        field_manager=request.field_manager,
    )


# --- the admission step of a write (F49, F51) -----------------------------------------------------


def run_hook(fn: Callable[[], Any]) -> Any:
    """Run hooks: a denial passes through, any other failure is a 500 (F51: fail closed)."""
    try:
        return fn()
    except Denied:
        raise
    except Exception as exc:  # F51: fail closed
        log.exception("admission hook failed")
        raise ApiError(500, f"Internal error occurred: admission hook failed: {exc}") from exc


def admit(
    chain: AdmissionChain,
    target: Target,
    operation: str,
    old: Obj | None,
    new: Obj,
    *,
    manager: str,
    apply_entry: bool,
    clock: Callable[[], str],
) -> Obj:
    """Mutating hooks, ownership, schema and CEL, validating hooks (F49); returns the final
    object (not yet stored). ``apply_entry``: the write was an apply, so hook changes are
    attributed to the applier's Apply entry. ``clock`` stamps the managedFields entries."""
    resource = target.resource
    name = new["metadata"].get("name", "")
    review = AdmissionRequest(
        operation=operation,
        group=resource.group,
        version=target.version,
        resource=resource.plural,
        subresource=target.subresource,
        namespace=new["metadata"].get("namespace"),
        name=name,
        object=copy.deepcopy(new),
        old_object=copy.deepcopy(old) if old is not None else None,
        user="sandbox-admin",
        field_manager=manager,
    )
    mutated = run_hook(lambda: chain.mutate(review)) or new
    schema = resource.schema(target.version)
    structure = schema.root if schema is not None else None
    now = clock()
    if apply_entry:
        if mutated != new:
            mutated = managed.record_update(
                new,
                mutated,
                manager=manager,
                operation="Apply",
                api_version=target.api_version,
                subresource=target.subresource,
                schema=structure,
                now=now,
            )
    else:
        mutated = managed.record_update(
            old,
            mutated,
            manager=manager,
            operation="Update",
            api_version=target.api_version,
            subresource=target.subresource,
            schema=structure,
            now=now,
        )
    if schema is not None:
        final, errors = schema.admit(mutated, old)
        if errors:
            from dispatcher_sandbox.fake_apiserver.schema import invalid_message

            message = invalid_message(resource.kind, resource.group, name, errors)
            causes = [{"reason": e.reason, "message": e.message, "field": e.field} for e in errors]
            raise invalid(resource.kind, resource.group, name, message, causes)
    else:
        final = mutated
    validated = AdmissionRequest(
        **{**review.__dict__, "object": copy.deepcopy(final)},
    )
    run_hook(lambda: chain.validate(validated))
    return final


# --- Kueue's clear-nominated-cluster-names MutatingAdmissionPolicy (contract C46) ----------------

KUEUE_POLICY_NAME = "clear-nominated-cluster-names"


def _evicted_true(obj: Obj | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Evicted" and c.get("status") == "True" for c in conditions)


def kueue_policy_applies(new: Obj, old: Obj | None) -> bool:
    """The policy's two match conditions, in plain Python.

    ``has-nominated-clusters``: the new object has a non-empty ``status.nominatedClusterNames``.
    ``trigger``: ``status.clusterName`` is set and the old object had no status, no clusterName or
    an empty one; or the new object has ``Evicted=True`` and the old object had no such condition.
    A test evaluates the real policy's CEL expressions against the same cases.
    """
    status = new.get("status") or {}
    if not status.get("nominatedClusterNames"):
        return False
    old_status = (old or {}).get("status")
    cluster_newly_set = "clusterName" in status and (
        not old_status or not old_status.get("clusterName")
    )
    evicted_newly = _evicted_true(new) and not _evicted_true(old)
    return cluster_newly_set or evicted_newly


def _clear_nomination(request: AdmissionRequest) -> Obj | None:
    new = request.object
    if new is None or not kueue_policy_applies(new, request.old_object):
        return None
    changed = copy.deepcopy(new)
    changed["status"]["nominatedClusterNames"] = []
    return changed


def kueue_clear_nominated_cluster_names_hook() -> MutatingHook:
    """Kueue's ``clear-nominated-cluster-names`` policy as a mutating hook (F50).

    Matches UPDATE of ``workloads`` and ``workloads/status`` in ``kueue.x-k8s.io`` v1beta2 only
    and replaces a non-empty nomination with ``[]`` when the workload is admitted somewhere
    (``clusterName`` newly set) or newly evicted.
    """
    return MutatingHook(
        name=KUEUE_POLICY_NAME,
        match=Match(
            groups=("kueue.x-k8s.io",),
            versions=("v1beta2",),
            resources=("workloads", "workloads/status"),
            operations=("UPDATE",),
        ),
        fn=_clear_nomination,
    )


# --- Kueue's validating webhook rule on clusterName (contract C18) ------------------------------

KUEUE_CLUSTER_NAME_WEBHOOK = "kueue-workload-cluster-name"


def _validate_cluster_name(request: AdmissionRequest) -> None:
    new_status = (request.object or {}).get("status") or {}
    old_status = (request.old_object or {}).get("status") or {}
    new_cluster = new_status.get("clusterName")
    if not new_cluster or old_status.get("clusterName"):
        return  # unset → unset, or a change (the CRD's CEL rule owns immutability, C17)
    nominated = old_status.get("nominatedClusterNames") or []
    if new_cluster not in nominated:
        # controller-runtime turns the webhook's field error into a denial: 403 Forbidden, the
        # field error's text after the webhook's name (measured on Kueue v0.19.2).
        raise Denied(
            f'admission webhook "vworkload.kb.io" denied the request: status.clusterName: '
            f'Invalid value: "{new_cluster}": when setting clusterName it must be one of the '
            "nominatedClusterNames",
            code=403,
        )


def kueue_cluster_name_webhook() -> ValidatingHook:
    """Kueue's workload webhook rule C18 as a validating hook (``validateClusterNameUpdate`` in
    ``pkg/webhooks/workload_webhook.go``).

    When ``status.clusterName`` goes from unset to a value, that value must be one of the
    **old** object's ``nominatedClusterNames`` (elastic-slice replacements, not emulated here,
    are the upstream exception). The rule runs after the mutating hooks (a policy that clears the
    nomination in the same write does not help) and refuses with 403, as Kueue's webhook does.
    """
    return ValidatingHook(
        name=KUEUE_CLUSTER_NAME_WEBHOOK,
        match=Match(
            groups=("kueue.x-k8s.io",),
            resources=("workloads", "workloads/status"),
            operations=("UPDATE",),
        ),
        fn=_validate_cluster_name,
    )
