"""The resource verbs (F2–F13): get, list, create, update, patch and delete of stored objects.

Each write is checked (metadata, types, preconditions), computed (a patch, an apply through
:mod:`.apply`), admitted (:func:`.admission.admit`: hooks, managedFields, schema and CEL) and
only then stored; the store sends its watch events. Namespaces and their cascade are in
:mod:`.namespaces`, watches in :mod:`.watch`.
"""

from __future__ import annotations

import copy
import json
import random
import re
import uuid
from collections.abc import Mapping
from typing import Any

import yaml
from aiohttp import web

from dispatcher_sandbox.fake_apiserver.admission import AdmissionRequest, admit, run_hook
from dispatcher_sandbox.fake_apiserver.apply import (
    APPLY_CBOR,
    APPLY_YAML,
    apply_to_live,
    apply_to_new,
    checked_apply_body,
)
from dispatcher_sandbox.fake_apiserver.crds import CRDS, crd_status
from dispatcher_sandbox.fake_apiserver.errors import (
    ApiError,
    already_exists,
    conflict,
    invalid_field,
    not_found,
)
from dispatcher_sandbox.fake_apiserver.namespaces import (
    NAMESPACES,
    delete_namespace,
    finish_namespace,
    namespace_for_create,
)
from dispatcher_sandbox.fake_apiserver.objects import (
    NAMESPACE_MISMATCH,
    SERVER_METADATA,
    Obj,
    Target,
    prepare_builtin,
    render,
    selection,
    truthy,
)
from dispatcher_sandbox.fake_apiserver.patch import json_patch, merge_patch
from dispatcher_sandbox.fake_apiserver.registry import Resource, resource_from_crd
from dispatcher_sandbox.fake_apiserver.state import ClusterState

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PROTOBUF = "application/vnd.kubernetes.protobuf"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_apply_body(raw: bytes) -> Any:
    """An apply body (F30): YAML, of which JSON is a subset. JSON is read as JSON first, as
    kube-apiserver's YAML-to-JSON reading gives JSON's own meaning to a JSON document (``1e3``
    is a number, where YAML 1.1 reads a string), and it costs a tenth of YAML parsing; anything
    else (block or flow YAML) goes to the YAML parser (libyaml's when PyYAML has it)."""
    if raw.lstrip()[:1] in (b"{", b"["):
        try:
            return json.loads(raw)
        except ValueError:
            pass  # flow-style YAML such as {a: b}
    return yaml.load(raw, Loader=_YAML_LOADER)


async def read_body(request: web.Request) -> Obj:
    """The object in a create's or update's body, JSON or YAML (415 for protobuf)."""
    content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
    raw = await request.read()
    if content_type == PROTOBUF:
        raise ApiError(415, f'the body of the request was in an unknown format: "{content_type}"')
    try:
        if content_type in ("application/yaml", "application/x-yaml"):
            body = yaml.load(raw, Loader=_YAML_LOADER)
        else:
            body = json.loads(raw or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise ApiError(400, f"the request body is not valid JSON or YAML: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _check_dry_run(query: Mapping[str, str]) -> None:
    if query.get("dryRun"):
        raise ApiError(400, "dryRun is not supported by the sandbox API server")


def _strip_without_time(managed_fields: Any) -> Any:
    if not isinstance(managed_fields, list):
        return managed_fields
    return [{k: v for k, v in e.items() if k != "time"} for e in managed_fields]


def same_object(old: Obj, new: Obj) -> bool:
    """Whether a write changes nothing (F5, F38): equal apart from managedFields times."""

    def norm(obj: Obj) -> Obj:
        out = copy.copy(obj)
        meta = dict(out.get("metadata") or {})
        meta.pop("resourceVersion", None)
        if "managedFields" in meta:
            meta["managedFields"] = _strip_without_time(meta["managedFields"])
        out["metadata"] = meta
        return out

    return norm(old) == norm(new)


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def check_type(target: Target, body: Obj) -> None:
    """A body's apiVersion and kind, when given, must be the URL's (400)."""
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    resource = target.resource
    if api_version is not None and api_version != target.api_version:
        raise ApiError(
            400,
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({target.api_version})",
        )
    if kind is not None and kind != resource.kind:
        raise ApiError(
            400,
            f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})",
        )


def validate_metadata(resource: Resource, obj: Obj) -> None:
    """Name, labels and annotations as the API server validates them (422)."""
    meta = obj["metadata"]
    name = meta.get("name", "")
    kind, group = resource.kind, resource.group
    pattern = _DNS_LABEL if resource.plural == "namespaces" else _DNS_SUBDOMAIN
    limit = 63 if resource.plural == "namespaces" else 253
    if not pattern.match(name) or len(name) > limit:
        raise invalid_field(
            kind,
            group,
            name,
            "metadata.name",
            f'Invalid value: "{name}": a lowercase RFC 1123 '
            f"{'label' if limit == 63 else 'subdomain'} must consist of lower case "
            "alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character",
            "FieldValueInvalid",
        )
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise invalid_field(
            kind,
            group,
            name,
            "metadata.labels",
            "Invalid value: must be a map",
            "FieldValueInvalid",
        )
    for key, value in labels.items():
        key_name = key.rsplit("/", 1)[-1]
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise invalid_field(
                kind,
                group,
                name,
                "metadata.labels",
                f'Invalid value: "{value}": a valid label must be an empty string or consist '
                "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (at most 63 characters)",
                "FieldValueInvalid",
            )
        if len(key_name) > 63 or not _QUALIFIED_NAME.match(key_name):
            raise invalid_field(
                kind,
                group,
                name,
                "metadata.labels",
                f'Invalid value: "{key}": name part must consist of alphanumeric characters, '
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                "FieldValueInvalid",
            )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        raise invalid_field(
            kind,
            group,
            name,
            "metadata.annotations",
            "Invalid value: annotation values must be strings",
            "FieldValueInvalid",
        )


class ResourceHandlers:
    """The verbs on one cluster's stored objects. ``seed`` makes ``generateName`` suffixes
    reproducible."""

    def __init__(self, cluster: ClusterState, seed: int = 0) -> None:
        self.cluster = cluster
        self._random = random.Random(seed)

    # --- reading -----------------------------------------------------------------------------

    def _stored(self, target: Target) -> Obj:
        assert target.name is not None
        stored = self.cluster.store.get(target.resource.key, (target.namespace or "", target.name))
        if stored is None:
            raise not_found(target.resource.group, target.resource.plural, target.name)
        return stored

    def get(self, target: Target) -> Obj:
        """The object a URL names, as its version shows it (404 if absent)."""
        return render(self._stored(target), target)

    def collection(self, request: web.Request, target: Target) -> Obj:
        """The List of a collection, filtered by the query's selectors."""
        store = self.cluster.store
        matches = selection(request.query, target)
        items = [
            render(obj, target) if not target.resource.builtin else copy.deepcopy(obj)
            for obj in store.items(target.resource.key, target.namespace)
            if matches(obj)
        ]
        if target.resource.builtin:
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return {
            "kind": target.resource.list_kind,
            "apiVersion": target.api_version,
            "metadata": {"resourceVersion": str(store.resource_version)},
            "items": items,
        }

    # --- writing -----------------------------------------------------------------------------

    def _field_manager(self, request: web.Request, *, required: bool = False) -> str:
        manager = request.query.get("fieldManager")
        if manager is not None and len(manager) > 128:
            raise invalid_field(
                "PatchOptions",
                "meta.k8s.io",
                "",
                "fieldManager",
                "Too long: may not be more than 128 bytes",
                "FieldValueTooLong",
            )
        if manager:
            return manager
        if required:
            raise invalid_field(
                "PatchOptions",
                "meta.k8s.io",
                "",
                "fieldManager",
                "Required value: is required for apply patch",
                "FieldValueRequired",
            )
        agent = request.headers.get("User-Agent", "")
        return agent.split("/")[0] if agent else self.cluster.default_field_manager

    def _admit(
        self,
        target: Target,
        operation: str,
        old: Obj | None,
        new: Obj,
        manager: str,
        apply_entry: bool,
    ) -> Obj:
        return admit(
            self.cluster.admission,
            target,
            operation,
            old,
            new,
            manager=manager,
            apply_entry=apply_entry,
            clock=self.cluster.now,
        )

    def create(self, request: web.Request, target: Target, body: Obj) -> tuple[Obj, int]:
        """POST to a collection (201)."""
        _check_dry_run(request.query)
        manager = self._field_manager(request)
        return self.create_object(target, body, manager, apply_body=None)

    def create_object(
        self,
        target: Target,
        body: Obj,
        manager: str,
        apply_body: Obj | None,
        force: bool = False,
    ) -> tuple[Obj, int]:
        """Store a new object: by a create, or by an apply (``apply_body``) of an absent one."""
        cluster = self.cluster
        resource = target.resource
        check_type(target, body)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("resourceVersion"):
            raise invalid_field(
                resource.kind,
                resource.group,
                meta.get("name", ""),
                "metadata.resourceVersion",
                "Invalid value: resourceVersion should not be set on objects to be created",
                "FieldValueInvalid",
            )
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid_field(
                    resource.kind,
                    resource.group,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                    "FieldValueRequired",
                )
            meta["name"] = prefix + "".join(self._random.choice(_GENERATE_CHARS) for _ in range(5))
        namespace = namespace_for_create(cluster, target, meta)
        name = meta["name"]
        if cluster.store.get(resource.key, (namespace, name)) is not None:
            raise already_exists(resource.group, resource.plural, name)
        for field in SERVER_METADATA:
            meta.pop(field, None)
        meta.pop("deletionTimestamp", None)
        obj["apiVersion"] = target.api_version
        obj["kind"] = resource.kind
        if resource.status_subresource and not resource.builtin:
            obj.pop("status", None)  # F11
        if resource.builtin:
            prepare_builtin(resource, obj)
        validate_metadata(resource, obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = cluster.now()
        meta["generation"] = 1
        if apply_body is not None:
            obj = apply_to_new(
                obj, apply_body, target=target, manager=manager, force=force, clock=cluster.now
            )
        final = self._admit(target, "CREATE", None, obj, manager, apply_body is not None)
        if resource.key == CRDS:
            try:
                registered = resource_from_crd(final)
            except ValueError as exc:
                raise invalid_field(
                    resource.kind,
                    resource.group,
                    name,
                    "spec",
                    f"Invalid value: {exc}",
                    "FieldValueInvalid",
                ) from exc
            cluster.registry.add(registered)
            final["status"] = crd_status(final, cluster.now())
        stored = cluster.store.write(resource.key, (namespace, name), final, "ADDED")
        return render(stored, target), 201

    def update(self, request: web.Request, target: Target, body: Obj) -> Obj:
        """PUT of an object or its status (a resourceVersion is required for custom kinds)."""
        _check_dry_run(request.query)
        manager = self._field_manager(request)
        resource = target.resource
        assert target.name is not None
        check_type(target, body)
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("name") != target.name:
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({target.name})",
            )
        if resource.namespaced and meta.get("namespace") not in (None, "", target.namespace):
            raise ApiError(400, NAMESPACE_MISMATCH)
        old = self._stored(target)
        body_rv = meta.get("resourceVersion")
        if not body_rv and not resource.builtin:
            raise invalid_field(
                resource.kind,
                resource.group,
                target.name,
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
                "FieldValueInvalid",
            )
        if body_rv and body_rv != old["metadata"]["resourceVersion"]:
            raise conflict(resource.group, resource.plural, target.name)
        if target.subresource == "status":
            new = copy.deepcopy(old)
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(body)
            if resource.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            if resource.builtin:
                prepare_builtin(resource, new)
        return self.finish_update(target, old, new, manager, apply_entry=False)

    def finish_update(
        self,
        target: Target,
        old: Obj,
        new: Obj,
        manager: str,
        *,
        apply_entry: bool,
    ) -> Obj:
        """Admit and store ``new`` in place of ``old`` (update, patch, apply): the server's
        metadata kept, the generation bumped on a spec change, nothing written if nothing
        changed, the object removed if it was deleting and lost its last finalizer."""
        cluster = self.cluster
        resource = target.resource
        assert target.name is not None
        new["apiVersion"] = target.api_version
        new["kind"] = resource.kind
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta["generation"] = old_meta.get("generation", 1)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if not apply_entry:
            meta["managedFields"] = copy.deepcopy(old_meta.get("managedFields", []))
        if target.subresource is None:
            validate_metadata(resource, new)
        final = self._admit(target, "UPDATE", old, new, manager, apply_entry)
        final["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if not final["metadata"].get("managedFields"):
            final["metadata"].pop("managedFields", None)
        if _spec_part(final) != _spec_part(old) or (
            not resource.status_subresource and final.get("status") != old.get("status")
        ):
            final["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        if same_object(old, final):
            return render(old, target)
        key = (target.namespace or "", target.name)
        if meta.get("deletionTimestamp") and not final["metadata"].get("finalizers"):
            deleted = self.remove(resource, key, final)
            return render(deleted, target)
        if resource.key == CRDS:
            cluster.registry.add(resource_from_crd(final))
        stored = cluster.store.write(resource.key, key, final, "MODIFIED")
        return render(stored, target)

    def patch(self, request: web.Request, target: Target, raw: bytes) -> tuple[Obj, int]:
        """PATCH: a JSON merge patch, a JSON patch, a strategic merge patch (built-in kinds
        only) or a server-side apply."""
        _check_dry_run(request.query)
        resource = target.resource
        assert target.name is not None
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        is_apply = content_type == APPLY_YAML
        force_text = request.query.get("force")
        if force_text is not None and not is_apply:
            raise invalid_field(
                "PatchOptions",
                "meta.k8s.io",
                "",
                "force",
                "Forbidden: may not be specified for non-apply patch",
                "FieldValueForbidden",
            )
        if content_type not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH, APPLY_YAML):
            raise ApiError(
                415, f'the body of the request was in an unknown format: "{content_type}"'
            )
        if content_type == STRATEGIC_MERGE_PATCH and not resource.builtin:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_YAML}, {APPLY_CBOR}",
            )
        manager = self._field_manager(request, required=is_apply)
        try:
            patch = load_apply_body(raw) if is_apply else json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, f"the patch body is not valid: {exc}") from exc
        if is_apply:
            return self.apply(target, patch, manager, truthy(force_text))
        old = self._stored(target)
        if content_type == JSON_PATCH:
            patched = json_patch(old, patch)
        else:
            if not isinstance(patch, dict):
                raise ApiError(400, "a merge patch body must be a JSON object")
            body_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if body_rv and body_rv != old["metadata"]["resourceVersion"]:
                raise conflict(resource.group, resource.plural, target.name)
            patched = merge_patch(old, patch)
        patched_meta = patched.get("metadata")
        if not isinstance(patched_meta, dict):
            raise ApiError(422, "metadata must be an object")
        if patched_meta.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
            raise conflict(resource.group, resource.plural, target.name)
        if patched_meta.get("name") != target.name:
            raise ApiError(400, "the name of the object may not be changed by a patch")
        if target.subresource == "status":
            new = copy.deepcopy(old)
            if "status" in patched:
                new["status"] = patched["status"]
            else:
                new.pop("status", None)
        else:
            new = patched
            if resource.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            if resource.builtin:
                prepare_builtin(resource, new)
        return self.finish_update(target, old, new, manager, apply_entry=False), 200

    def apply(self, target: Target, body: Any, manager: str, force: bool) -> tuple[Obj, int]:
        """Server-side apply (F30–F39): creates the object if absent, else merges into it."""
        resource = target.resource
        assert target.name is not None
        meta = checked_apply_body(target, body)
        live = self.cluster.store.get(resource.key, (target.namespace or "", target.name))
        if live is None:
            if target.subresource is not None:
                raise not_found(resource.group, resource.plural, target.name)
            return self.create_object(target, body, manager, apply_body=body, force=force)
        new = apply_to_live(
            live, body, meta, target=target, manager=manager, force=force, clock=self.cluster.now
        )
        return self.finish_update(target, live, new, manager, apply_entry=True), 200

    def delete(self, request: web.Request, target: Target, raw: bytes) -> Obj:
        """DELETE: preconditions, validating hooks, then removal, or a mark while finalizers
        remain; a namespace cascades (:func:`.namespaces.delete_namespace`)."""
        _check_dry_run(request.query)
        cluster = self.cluster
        resource = target.resource
        assert target.name is not None
        old = self._stored(target)
        options: Obj = {}
        if raw.strip():
            try:
                options = json.loads(raw)
            except ValueError as exc:
                raise ApiError(400, f"invalid DeleteOptions: {exc}") from exc
        preconditions = (options or {}).get("preconditions") or {}
        if preconditions.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
            raise conflict(resource.group, resource.plural, target.name)
        if preconditions.get("uid") not in (None, old["metadata"]["uid"]):
            raise conflict(resource.group, resource.plural, target.name)
        key = (target.namespace or "", target.name)
        review = AdmissionRequest(
            operation="DELETE",
            group=resource.group,
            version=target.version,
            resource=resource.plural,
            subresource=None,
            namespace=target.namespace,
            name=target.name,
            object=None,
            old_object=copy.deepcopy(old),
            user="sandbox-admin",
            field_manager="",
        )
        run_hook(lambda: cluster.admission.validate(review))
        if resource.key == NAMESPACES:
            return render(delete_namespace(cluster, old), target)
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return render(old, target)
            marked = copy.deepcopy(old)
            marked["metadata"]["deletionTimestamp"] = cluster.now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            return render(cluster.store.write(resource.key, key, marked, "MODIFIED"), target)
        return render(self.remove(resource, key, old), target)

    def remove(self, resource: Resource, key: tuple[str, str], final: Obj) -> Obj:
        """Delete an object; ``final`` is its last state (after its last finalizer went)."""
        cluster = self.cluster
        deleted = cluster.store.delete(resource.key, key, final=final)
        assert deleted is not None
        if resource.key == CRDS:
            group = deleted["spec"]["group"]
            plural = deleted["spec"]["names"]["plural"]
            cluster.registry.remove(group, plural)
            cluster.store.drop_resource((group, plural))
        if resource.namespaced:
            finish_namespace(cluster, key[0])
        return deleted
