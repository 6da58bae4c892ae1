"""Admission hooks of the fake API server, and Kueue's field-manager pitfall end to end.

docs/fake-apiserver.md F48 (hook list, matching, denial), F49 (order: mutate → schema/CEL → validate
→ store; attribution to the request's field manager), F50 (Kueue's ``clear-nominated-cluster-names``
policy hook), F51 (fail closed), the pitfall acceptance test F39 (a)–(c), and contract C42–C46, C54
(the MutatingAdmissionPolicy test matrix). The hand-written policy hook is checked against the real
policy's CEL ``matchConditions`` from ``workload-map.yaml``.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from dispatcher_sandbox.fake_apiserver import (
    AdmissionRequest,
    Denied,
    FakeCluster,
    Match,
    MutatingHook,
    ValidatingHook,
    kueue_clear_nominated_cluster_names_hook,
)
from dispatcher_sandbox.fake_apiserver.admission import (
    KUEUE_POLICY_NAME,
    AdmissionChain,
    kueue_policy_applies,
)
from dispatcher_sandbox.fake_apiserver.cel import CELEvalError, compile_expression
from dispatcher_sandbox.harness.kube_builders import (
    KUEUE,
    V1BETA2,
    apply_status,
    condition,
    widget,
    workload,
)

Obj = dict[str, Any]

EXAMPLE = "example.com"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
MUTUALLY_EXCLUSIVE = "clusterName and nominatedClusterNames are mutually exclusive"


# --- helpers -----------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Hooks that record what they were called with, in call order."""

    calls: list[tuple[str, AdmissionRequest]] = field(default_factory=list)

    def mutating(
        self, name: str, match: Match, change: Callable[[Obj], None] | None = None
    ) -> MutatingHook:
        def fn(request: AdmissionRequest) -> Obj | None:
            self.calls.append((name, request))
            if change is None or request.object is None:
                return None
            obj = copy.deepcopy(request.object)
            change(obj)
            return obj

        return MutatingHook(name, match, fn)

    def validating(self, name: str, match: Match) -> ValidatingHook:
        def fn(request: AdmissionRequest) -> None:
            self.calls.append((name, request))

        return ValidatingHook(name, match, fn)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def seen(self, name: str) -> list[tuple[str, str | None]]:
        return [(r.operation, r.subresource) for n, r in self.calls if n == name]


def _objects(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _status_of(exc: ApiException) -> Obj:
    body: Obj = json.loads(exc.body)
    return body


async def _create_widget(api: client.ApiClient, name: str = "w", **spec: Any) -> Obj:
    obj: Obj = await _objects(api).create_namespaced_custom_object(
        EXAMPLE, "v1", "default", "widgets", widget(name, **spec)
    )
    return obj


def _manager_entry(obj: Obj, manager: str) -> Obj:
    entries = [e for e in obj["metadata"]["managedFields"] if e["manager"] == manager]
    assert len(entries) == 1, obj["metadata"]["managedFields"]
    return entries[0]


# --- F48: matching -----------------------------------------------------------------------------


def _request(
    operation: str = "UPDATE",
    group: str = KUEUE,
    version: str = V1BETA2,
    resource: str = "workloads",
    subresource: str | None = None,
) -> AdmissionRequest:
    return AdmissionRequest(
        operation=operation,
        group=group,
        version=version,
        resource=resource,
        subresource=subresource,
        namespace="default",
        name="wl",
        object={},
        old_object={},
        user="u",
        field_manager="m",
    )


_KUEUE_WORKLOADS = Match(
    groups=(KUEUE,),
    versions=(V1BETA2,),
    resources=("workloads", "workloads/status"),
    operations=("UPDATE",),
)

MATCH_CASES = {
    "everything-matches-empty-match": (Match(), _request(operation="DELETE"), True),
    "main-resource": (_KUEUE_WORKLOADS, _request(), True),
    "status-subresource": (_KUEUE_WORKLOADS, _request(subresource="status"), True),
    "other-version": (_KUEUE_WORKLOADS, _request(version="v1beta1"), False),
    "other-group": (_KUEUE_WORKLOADS, _request(group=EXAMPLE), False),
    "other-resource": (_KUEUE_WORKLOADS, _request(resource="localqueues"), False),
    "other-operation": (_KUEUE_WORKLOADS, _request(operation="CREATE"), False),
    "main-only-hook-skips-status": (
        Match(resources=("workloads",)),
        _request(subresource="status"),
        False,
    ),
    "status-only-hook-skips-main": (Match(resources=("workloads/status",)), _request(), False),
    "wildcard-resource": (Match(resources=("*",)), _request(subresource="status"), True),
    "delete-only": (Match(operations=("DELETE",)), _request(operation="UPDATE"), False),
}


@pytest.mark.parametrize(
    ("match", "request_", "expected"), list(MATCH_CASES.values()), ids=list(MATCH_CASES)
)
def test_f48_match_by_group_version_resource_subresource_operation(
    match: Match, request_: AdmissionRequest, expected: bool
) -> None:
    """F48: a hook declares group, versions, resource (``plural/sub`` for a subresource) and
    operations; empty declarations match everything."""
    assert match.matches(request_) is expected


async def _widget_traffic(api: client.ApiClient) -> None:
    """One of each: CREATE, UPDATE (PUT), UPDATE (merge patch), UPDATE /status, DELETE, plus a
    write to another group (a ConfigMap)."""
    objects = _objects(api)
    created = await _create_widget(api, "w", size=1)
    created["spec"]["size"] = 2
    await objects.replace_namespaced_custom_object(
        EXAMPLE, "v1", "default", "widgets", "w", created
    )
    await objects.patch_namespaced_custom_object(
        EXAMPLE, "v1", "default", "widgets", "w", {"spec": {"size": 3}}, _content_type=MERGE
    )
    await objects.patch_namespaced_custom_object_status(
        EXAMPLE, "v1", "default", "widgets", "w", {"status": {"ok": True}}, _content_type=MERGE
    )
    await objects.delete_namespaced_custom_object(EXAMPLE, "v1", "default", "widgets", "w")
    await client.CoreV1Api(api).create_namespaced_config_map(
        "default", {"metadata": {"name": "cm"}, "data": {"a": "b"}}
    )


ALL = [
    ("CREATE", None),
    ("UPDATE", None),
    ("UPDATE", None),
    ("UPDATE", "status"),
    ("DELETE", None),
]

HTTP_MATCH_CASES = {
    "all-widget-writes": (Match(groups=(EXAMPLE,)), ALL),
    "create-only": (Match(groups=(EXAMPLE,), operations=("CREATE",)), [("CREATE", None)]),
    "update-main-only": (
        Match(groups=(EXAMPLE,), resources=("widgets",), operations=("UPDATE",)),
        [("UPDATE", None), ("UPDATE", None)],
    ),
    "status-only": (Match(resources=("widgets/status",)), [("UPDATE", "status")]),
    "delete-only": (Match(groups=(EXAMPLE,), operations=("DELETE",)), [("DELETE", None)]),
    "other-version": (Match(groups=(EXAMPLE,), versions=("v2",)), []),
    "core-configmaps": (Match(groups=("",), resources=("configmaps",)), [("CREATE", None)]),
}


@pytest.mark.parametrize(
    ("match", "expected"), list(HTTP_MATCH_CASES.values()), ids=list(HTTP_MATCH_CASES)
)
async def test_f48_hooks_are_called_only_for_matching_requests(
    cluster: FakeCluster, api: client.ApiClient, match: Match, expected: list[Any]
) -> None:
    """F48: over HTTP, a validating hook sees exactly the writes its match selects (DELETE goes
    to validating hooks only; mutating hooks have nothing to mutate)."""
    recorder = Recorder()
    cluster.admission.add_validating(recorder.validating("v", match))
    await _widget_traffic(api)
    assert recorder.seen("v") == expected


async def test_f48_hooks_get_operation_objects_and_request_details(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F48: the hook gets the operation, the new and old object, and the request details (user,
    field manager, subresource, namespace, name)."""
    recorder = Recorder()
    cluster.admission.add_mutating(recorder.mutating("m", Match(groups=(EXAMPLE,))))
    objects = _objects(api)
    await objects.create_namespaced_custom_object(
        EXAMPLE, "v1", "default", "widgets", widget("w", size=1), field_manager="creator"
    )
    await objects.patch_namespaced_custom_object_status(
        EXAMPLE,
        "v1",
        "default",
        "widgets",
        "w",
        {"status": {"ok": True}},
        field_manager="status-writer",
        _content_type=MERGE,
    )
    (_, create), (_, update) = recorder.calls
    assert (create.operation, create.subresource, create.old_object) == ("CREATE", None, None)
    assert create.object is not None
    assert create.object["spec"] == {"size": 1}
    assert (create.group, create.version, create.resource) == (EXAMPLE, "v1", "widgets")
    assert (create.namespace, create.name, create.field_manager) == ("default", "w", "creator")
    assert isinstance(create.user, str)
    assert create.user

    assert (update.operation, update.subresource) == ("UPDATE", "status")
    assert update.field_manager == "status-writer"
    assert update.old_object is not None
    assert update.object is not None
    assert "status" not in update.old_object
    assert update.object["status"] == {"ok": True}


async def test_f48_apply_to_a_missing_object_is_a_create_for_hooks(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F48 with F32: server-side apply that creates the object is admitted as CREATE (no old
    object), a second apply as UPDATE; both carry the applier's field manager."""
    recorder = Recorder()
    cluster.admission.add_validating(recorder.validating("v", Match(groups=(EXAMPLE,))))
    for size in (1, 2):
        await _objects(api).patch_namespaced_custom_object(
            EXAMPLE,
            "v1",
            "default",
            "widgets",
            "w",
            widget("w", size=size),
            field_manager="applier",
            _content_type=APPLY,
        )
    (_, create), (_, update) = recorder.calls
    assert (create.operation, create.old_object, create.field_manager) == (
        "CREATE",
        None,
        "applier",
    )
    assert (update.operation, update.field_manager) == ("UPDATE", "applier")
    assert update.old_object is not None
    assert update.old_object["spec"] == {"size": 1}
    assert update.object is not None
    assert update.object["spec"] == {"size": 2}


async def test_f48_delete_hook_gets_the_old_object_only(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F48: on DELETE the new object is None and the old object is the stored one."""
    recorder = Recorder()
    cluster.admission.add_validating(recorder.validating("v", Match(operations=("DELETE",))))
    created = await _create_widget(api, "w", size=1)
    await _objects(api).delete_namespaced_custom_object(EXAMPLE, "v1", "default", "widgets", "w")
    [(_, delete)] = recorder.calls
    assert (delete.operation, delete.object, delete.name) == ("DELETE", None, "w")
    assert delete.old_object is not None
    assert delete.old_object["metadata"]["uid"] == created["metadata"]["uid"]


# --- F48: denial -------------------------------------------------------------------------------

DENIAL_CASES = {
    "validating-default-422": ("validating", Denied("widgets must be blue"), 422, "Invalid"),
    "validating-403": ("validating", Denied("not you", code=403), 403, "Forbidden"),
    "validating-409": ("validating", Denied("busy", code=409), 409, "Conflict"),
    "mutating-default-422": ("mutating", Denied("cannot mutate"), 422, "Invalid"),
    "mutating-429": ("mutating", Denied("slow down", code=429), 429, "TooManyRequests"),
}


def _raising_hook(kind: str, error: Exception, match: Match) -> MutatingHook | ValidatingHook:
    def fn(request: AdmissionRequest) -> None:
        raise error

    if kind == "mutating":
        return MutatingHook("raiser", match, fn)
    return ValidatingHook("raiser", match, fn)


def _add(cluster: FakeCluster, hook: MutatingHook | ValidatingHook) -> None:
    if isinstance(hook, MutatingHook):
        cluster.admission.add_mutating(hook)
    else:
        cluster.admission.add_validating(hook)


@pytest.mark.parametrize(
    ("kind", "error", "code", "reason"), list(DENIAL_CASES.values()), ids=list(DENIAL_CASES)
)
async def test_f48_denial_gives_status_with_default_422_or_custom_code(
    cluster: FakeCluster,
    api: client.ApiClient,
    kind: str,
    error: Denied,
    code: int,
    reason: str,
) -> None:
    """F48: a hook denies with a status code and message (default 422 Invalid, as a
    ValidatingAdmissionPolicy); the write changes nothing."""
    await _create_widget(api, "w", size=1)
    _add(cluster, _raising_hook(kind, error, Match(groups=(EXAMPLE,), operations=("UPDATE",))))
    before = cluster.store.resource_version
    with pytest.raises(ApiException) as caught:
        await _objects(api).patch_namespaced_custom_object(
            EXAMPLE, "v1", "default", "widgets", "w", {"spec": {"size": 2}}, _content_type=MERGE
        )
    assert caught.value.status == code
    status = _status_of(caught.value)
    assert (status["kind"], status["code"], status["reason"]) == ("Status", code, reason)
    assert status["message"] == error.message
    assert cluster.store.resource_version == before
    stored = cluster.object(EXAMPLE, "widgets", "w", "default")
    assert stored is not None
    assert stored["spec"] == {"size": 1}


async def test_f48_validating_hook_can_refuse_delete(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F48: DELETE goes through validating hooks; a denial keeps the object."""
    await _create_widget(api, "w")
    _add(cluster, _raising_hook("validating", Denied("protected"), Match(operations=("DELETE",))))
    with pytest.raises(ApiException) as caught:
        await _objects(api).delete_namespaced_custom_object(
            EXAMPLE, "v1", "default", "widgets", "w"
        )
    assert caught.value.status == 422
    assert cluster.object(EXAMPLE, "widgets", "w", "default") is not None


# --- F51: failure policy -----------------------------------------------------------------------

FAIL_CLOSED_CASES = {
    "mutating-on-create": ("mutating", "CREATE"),
    "validating-on-create": ("validating", "CREATE"),
    "mutating-on-update": ("mutating", "UPDATE"),
    "validating-on-update": ("validating", "UPDATE"),
    "validating-on-delete": ("validating", "DELETE"),
}


@pytest.mark.parametrize(
    ("kind", "operation"), list(FAIL_CLOSED_CASES.values()), ids=list(FAIL_CLOSED_CASES)
)
async def test_f51_hook_exception_fails_closed_with_500(
    cluster: FakeCluster,
    api: client.ApiClient,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    operation: str,
) -> None:
    """F51: an exception inside a hook → 500 InternalError (``failurePolicy: Fail``), nothing is
    written, and the error is logged."""
    objects = _objects(api)
    if operation != "CREATE":
        await _create_widget(api, "w", size=1)
    hook = _raising_hook(kind, KeyError("boom"), Match(operations=(operation,)))
    _add(cluster, hook)
    before = cluster.store.resource_version
    args = (EXAMPLE, "v1", "default", "widgets")
    if operation == "CREATE":
        call = objects.create_namespaced_custom_object(*args, widget("w", size=1))
    elif operation == "UPDATE":
        call = objects.patch_namespaced_custom_object(
            *args, "w", {"spec": {"size": 2}}, _content_type=MERGE
        )
    else:
        call = objects.delete_namespaced_custom_object(*args, "w")
    with caplog.at_level(logging.ERROR), pytest.raises(ApiException) as caught:
        await call
    assert caught.value.status == 500
    status = _status_of(caught.value)
    assert (status["reason"], status["code"]) == ("InternalError", 500)
    assert "boom" in status["message"]
    assert cluster.store.resource_version == before
    stored = cluster.object(EXAMPLE, "widgets", "w", "default")
    if operation == "CREATE":
        assert stored is None
    else:
        assert stored is not None
        assert stored["spec"] == {"size": 1}
    assert any("admission hook failed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "error", [Denied("no"), RuntimeError("hook bug")], ids=["denied-422", "exception-500"]
)
async def test_f48_f51_refused_write_emits_no_watch_event(
    cluster: FakeCluster, api: client.ApiClient, error: Exception
) -> None:
    """F48/F51 with F46: a refused write leaves no trace in the watch history — a watch resumed
    from before it sees only the next successful write."""
    created = await _create_widget(api, "w", size=1)
    hook = _raising_hook("validating", error, Match(operations=("UPDATE",)))
    _add(cluster, hook)
    objects = _objects(api)
    args = (EXAMPLE, "v1", "default", "widgets", "w")
    with pytest.raises(ApiException):
        await objects.patch_namespaced_custom_object(
            *args, {"spec": {"size": 2}}, _content_type=MERGE
        )
    cluster.admission.remove(hook.name)
    await objects.patch_namespaced_custom_object(*args, {"spec": {"size": 3}}, _content_type=MERGE)
    events = []
    with anyio.fail_after(10):
        async with watch.Watch() as w:
            async for event in w.stream(
                objects.list_namespaced_custom_object,
                EXAMPLE,
                "v1",
                "default",
                "widgets",
                resource_version=created["metadata"]["resourceVersion"],
                timeout_seconds=600,
            ):
                events.append((event["type"], event["object"]["spec"]["size"]))
                w.stop()
    assert events == [("MODIFIED", 3)]


# --- F49: order and attribution ----------------------------------------------------------------


async def test_f49_mutating_hooks_in_order_then_validating_hooks(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F49: mutating hooks run in registration order, each seeing the previous one's result;
    validating hooks run after them and see the final object, which is what is stored."""
    recorder = Recorder()
    match = Match(groups=(EXAMPLE,))

    def first(obj: Obj) -> None:
        obj["metadata"].setdefault("labels", {})["first"] = "yes"

    def second(obj: Obj) -> None:
        assert obj["metadata"]["labels"]["first"] == "yes"
        obj["metadata"]["labels"]["second"] = "yes"

    cluster.admission.add_validating(recorder.validating("validate", match))
    cluster.admission.add_mutating(recorder.mutating("mutate-1", match, first))
    cluster.admission.add_mutating(recorder.mutating("mutate-2", match, second))
    created = await _create_widget(api, "w")

    assert recorder.names() == ["mutate-1", "mutate-2", "validate"]
    validated = recorder.calls[2][1].object
    assert validated is not None
    assert validated["metadata"]["labels"] == {"first": "yes", "second": "yes"}
    assert created["metadata"]["labels"] == {"first": "yes", "second": "yes"}


async def test_f49_mutation_runs_before_cel_validation(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient
) -> None:
    """F49: CEL validation judges the mutated object. A hook that re-adds a nomination next to a
    new ``clusterName`` makes an otherwise valid write fail with the mutual-exclusion rule."""
    objects = _objects(kueue_api)
    await objects.create_namespaced_custom_object(
        KUEUE, V1BETA2, "default", "workloads", workload()
    )

    def renominate(obj: Obj) -> None:
        if obj.get("status", {}).get("clusterName"):
            obj["status"]["nominatedClusterNames"] = ["w9"]

    recorder = Recorder()
    kueue_cluster.admission.add_mutating(
        recorder.mutating("renominate", Match(groups=(KUEUE,)), renominate)
    )
    before = kueue_cluster.store.resource_version
    with pytest.raises(ApiException) as caught:
        await objects.patch_namespaced_custom_object_status(
            KUEUE,
            V1BETA2,
            "default",
            "workloads",
            "wl",
            {"status": {"clusterName": "w1"}},
            _content_type=MERGE,
        )
    assert caught.value.status == 422
    assert MUTUALLY_EXCLUSIVE in _status_of(caught.value)["message"]
    assert recorder.names() == ["renominate"]
    assert kueue_cluster.store.resource_version == before


async def test_f49_validating_hooks_see_the_pruned_defaulted_object_and_not_invalid_ones(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient
) -> None:
    """F49: validating hooks run after pruning, defaults and schema validation: they see unknown
    fields dropped and defaults filled, and are not called for a write the schema rejects."""
    recorder = Recorder()
    kueue_cluster.admission.add_validating(recorder.validating("v", Match(groups=(KUEUE,))))
    objects = _objects(kueue_api)
    body = workload("ok")
    body["spec"]["bogusField"] = "dropped"
    await objects.create_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", body)
    [(_, seen)] = recorder.calls
    assert seen.object is not None
    assert "bogusField" not in seen.object["spec"]
    assert seen.object["spec"]["active"] is True  # schema default

    bad = workload("bad")
    bad["spec"]["podSets"] = []  # minItems: 1
    with pytest.raises(ApiException) as caught:
        await objects.create_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", bad)
    assert caught.value.status == 422
    assert len(recorder.calls) == 1


def _write_cases() -> dict[str, tuple[str, str]]:
    return {
        "create-update-entry": ("create", "Update"),
        "merge-patch-update-entry": ("merge", "Update"),
        "put-update-entry": ("put", "Update"),
        "apply-apply-entry": ("apply", "Apply"),
    }


@pytest.mark.parametrize(
    ("write", "operation"), list(_write_cases().values()), ids=list(_write_cases())
)
async def test_f49_hook_changes_are_attributed_to_the_request_field_manager(
    cluster: FakeCluster, api: client.ApiClient, write: str, operation: str
) -> None:
    """F49: a field a mutating hook sets is owned, in managedFields, by the request's field
    manager (its Update entry, or its Apply entry for server-side apply)."""
    objects = _objects(api)
    if write != "create":
        await objects.create_namespaced_custom_object(
            EXAMPLE, "v1", "default", "widgets", widget("w", size=1), field_manager="setup"
        )

    def stamp(obj: Obj) -> None:
        obj["spec"]["stampedBy"] = "hook"

    cluster.admission.add_mutating(Recorder().mutating("stamp", Match(groups=(EXAMPLE,)), stamp))
    args = (EXAMPLE, "v1", "default", "widgets")
    if write == "create":
        result = await objects.create_namespaced_custom_object(
            *args, widget("w", size=1), field_manager="alice"
        )
    elif write == "merge":
        result = await objects.patch_namespaced_custom_object(
            *args, "w", {"spec": {"size": 2}}, field_manager="alice", _content_type=MERGE
        )
    elif write == "put":
        current = await objects.get_namespaced_custom_object(*args, "w")
        current["spec"]["size"] = 2
        result = await objects.replace_namespaced_custom_object(
            *args, "w", current, field_manager="alice"
        )
    else:
        result = await objects.patch_namespaced_custom_object(
            *args,
            "w",
            widget("w", size=2),
            field_manager="alice",
            force=True,
            _content_type=APPLY,
        )
    assert result["spec"]["stampedBy"] == "hook"
    entry = _manager_entry(result, "alice")
    assert entry["operation"] == operation
    assert "f:stampedBy" in entry["fieldsV1"]["f:spec"]
    for other in result["metadata"]["managedFields"]:
        if other["manager"] != "alice":
            assert "f:stampedBy" not in other["fieldsV1"].get("f:spec", {})


# --- F39: the pitfall acceptance test (C42–C45, F50) ---------------------------------------------

DISPATCHER = "my-dispatcher"
KUEUE_ADMISSION = "kueue-admission"


def _admission_body(name: str = "wl", **extra: Any) -> Obj:
    """The emulated Kueue's admission-status apply body (C42), without nominatedClusterNames."""
    status: Obj = {
        "clusterName": "w1",
        "conditions": [condition("QuotaReserved"), condition("Admitted")],
        **extra,
    }
    return apply_status(name, "default", status)


async def _nominate(api: client.ApiClient, manager: str, clusters: list[str]) -> Obj:
    """The dispatcher's forced apply of ``status.nominatedClusterNames`` to ``/status`` (C48)."""
    result: Obj = await _objects(api).patch_namespaced_custom_object_status(
        KUEUE,
        V1BETA2,
        "default",
        "workloads",
        "wl",
        apply_status("wl", "default", {"nominatedClusterNames": clusters}),
        field_manager=manager,
        force=True,
        _content_type=APPLY,
    )
    return result


async def _kueue_apply(api: client.ApiClient, body: Obj, version: str = V1BETA2) -> Obj:
    body = copy.deepcopy(body)
    body["apiVersion"] = f"{KUEUE}/{version}"
    result: Obj = await _objects(api).patch_namespaced_custom_object_status(
        KUEUE,
        version,
        "default",
        "workloads",
        "wl",
        body,
        field_manager=KUEUE_ADMISSION,
        force=True,
        _content_type=APPLY,
    )
    return result


@pytest.fixture
async def nominated(kueue_cluster: FakeCluster, kueue_api: client.ApiClient) -> Obj:
    """A Workload nominated to ``[w1]`` by ``my-dispatcher`` through a forced status apply."""
    await _objects(kueue_api).create_namespaced_custom_object(
        KUEUE, V1BETA2, "default", "workloads", workload()
    )
    result = await _nominate(kueue_api, DISPATCHER, ["w1"])
    assert result["status"]["nominatedClusterNames"] == ["w1"]
    entry = _manager_entry(result, DISPATCHER)
    assert (entry["operation"], entry["subresource"]) == ("Apply", "status")
    assert entry["fieldsV1"] == {"f:status": {"f:nominatedClusterNames": {}}}
    return result


def _stored_status(cluster: FakeCluster) -> Obj:
    stored = cluster.object(KUEUE, "workloads", "wl", "default")
    assert stored is not None
    status: Obj = stored.get("status", {})
    return status


async def test_f39a_without_the_policy_kueue_apply_fails_mutually_exclusive(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient, nominated: Obj
) -> None:
    """F39 (a), C43: Kueue's forced apply as ``kueue-admission`` leaves nominatedClusterNames out,
    but ``my-dispatcher`` still owns it, so it survives next to clusterName → 422."""
    before = kueue_cluster.store.resource_version
    with pytest.raises(ApiException) as caught:
        await _kueue_apply(kueue_api, _admission_body())
    assert caught.value.status == 422
    status = _status_of(caught.value)
    assert status["reason"] == "Invalid"
    assert MUTUALLY_EXCLUSIVE in status["message"]
    assert kueue_cluster.store.resource_version == before
    assert _stored_status(kueue_cluster) == {"nominatedClusterNames": ["w1"]}


async def test_f39b_with_the_policy_hook_kueue_apply_succeeds_and_nomination_is_empty(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient, nominated: Obj
) -> None:
    """F39 (b), F50, C46: with ``kueue_clear_nominated_cluster_names_hook()`` the nomination is
    replaced by ``[]`` before CEL validation, so the apply succeeds. Switching the hook off again
    is tested below (F50)."""
    kueue_cluster.admission.add_mutating(kueue_clear_nominated_cluster_names_hook())
    result = await _kueue_apply(kueue_api, _admission_body())
    assert result["status"]["clusterName"] == "w1"
    assert result["status"]["nominatedClusterNames"] == []
    assert _stored_status(kueue_cluster)["nominatedClusterNames"] == []
    # The hook's change is attributed to the request's manager (F49).
    entry = _manager_entry(result, KUEUE_ADMISSION)
    assert "f:nominatedClusterNames" in entry["fieldsV1"]["f:status"]


async def test_f39b_switching_the_policy_off_restores_the_pitfall(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient, nominated: Obj
) -> None:
    """F50: the hook is switched on and off per cluster at run time; off again → F39 (a)."""
    kueue_cluster.admission.add_mutating(kueue_clear_nominated_cluster_names_hook())
    kueue_cluster.admission.remove(KUEUE_POLICY_NAME)
    assert kueue_cluster.admission.mutating == []
    with pytest.raises(ApiException) as caught:
        await _kueue_apply(kueue_api, _admission_body())
    assert caught.value.status == 422


async def test_f39c_kueue_merge_patch_nulling_the_nomination_succeeds(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient, nominated: Obj
) -> None:
    """F39 (c), C45 (remedy 2, ``WorkloadRequestUseMergePatch``): a merge patch that sets
    ``nominatedClusterNames: null`` with clusterName removes the field whoever owns it."""
    result = await _objects(kueue_api).patch_namespaced_custom_object_status(
        KUEUE,
        V1BETA2,
        "default",
        "workloads",
        "wl",
        {
            "status": {
                "clusterName": "w1",
                "nominatedClusterNames": None,
                "conditions": [condition("QuotaReserved"), condition("Admitted")],
            }
        },
        field_manager=KUEUE_ADMISSION,
        _content_type=MERGE,
    )
    assert result["status"]["clusterName"] == "w1"
    assert "nominatedClusterNames" not in result["status"]
    assert "nominatedClusterNames" not in _stored_status(kueue_cluster)
    # Nobody owns the removed field any more.
    for entry in result["metadata"]["managedFields"]:
        assert "f:nominatedClusterNames" not in entry["fieldsV1"].get("f:status", {})


async def test_c48_late_nomination_after_admission_is_a_harmless_422(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient, nominated: Obj
) -> None:
    """C48: once Kueue has admitted the workload (clusterName set, nomination cleared by the
    policy), a late forced nomination by the dispatcher is refused with 422 "mutually
    exclusive" — the policy does not fire because clusterName is not newly set — and the
    admitted state is untouched."""
    kueue_cluster.admission.add_mutating(kueue_clear_nominated_cluster_names_hook())
    admitted = await _kueue_apply(kueue_api, _admission_body())
    with pytest.raises(ApiException) as caught:
        await _nominate(kueue_api, DISPATCHER, ["w2"])
    assert caught.value.status == 422
    assert MUTUALLY_EXCLUSIVE in _status_of(caught.value)["message"]
    stored = kueue_cluster.object(KUEUE, "workloads", "wl", "default")
    assert stored is not None
    assert stored["metadata"]["resourceVersion"] == admitted["metadata"]["resourceVersion"]
    assert stored["status"]["clusterName"] == "w1"
    assert stored["status"]["nominatedClusterNames"] == []


# --- C54: the MutatingAdmissionPolicy test matrix ----------------------------------------------

EXTERNAL_DISPATCHER = "external-dispatcher-app"
EVICTED = condition("Evicted", reason="Preempted")


@dataclass(frozen=True)
class MatrixCase:
    status: Obj  # what the (emulated Kueue) write sets
    cleared: bool


C54_CASES = {
    "a-set-clusterName": MatrixCase({"clusterName": "w1"}, cleared=True),
    "b-set-evicted": MatrixCase({"conditions": [EVICTED]}, cleared=True),
    "c-clusterName-and-evicted": MatrixCase(
        {"clusterName": "w1", "conditions": [EVICTED]}, cleared=True
    ),
    "d-unrelated-status-update": MatrixCase(
        {"conditions": [condition("QuotaReserved")]}, cleared=False
    ),
}
WRITE_PATHS = ["apply-as-kueue-admission", "merge-patch", "put-status"]


async def _write_status(api: client.ApiClient, path: str, status: Obj) -> Obj:
    objects = _objects(api)
    args = (KUEUE, V1BETA2, "default", "workloads", "wl")
    if path == "apply-as-kueue-admission":
        return await _kueue_apply(api, apply_status("wl", "default", status))
    if path == "merge-patch":
        result: Obj = await objects.patch_namespaced_custom_object_status(
            *args, {"status": status}, field_manager="kueue", _content_type=MERGE
        )
        return result
    current = await objects.get_namespaced_custom_object(*args)
    current["status"].update(copy.deepcopy(status))
    replaced: Obj = await objects.replace_namespaced_custom_object_status(
        *args, current, field_manager="kueue"
    )
    return replaced


@pytest.mark.parametrize("path", WRITE_PATHS)
@pytest.mark.parametrize("case", list(C54_CASES.values()), ids=list(C54_CASES))
async def test_c54_policy_matrix(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient, case: MatrixCase, path: str
) -> None:
    """C54 (upstream "MutatingAdmissionPolicy clear nominatedClusterNames test matrix"): nominate
    with a forced apply as ``external-dispatcher-app``; then (a) clusterName, (b) Evicted=True,
    (c) both clear the nomination; (d) an unrelated status update keeps it. Every write path
    (apply, merge patch, PUT of /status) goes through the hook."""
    kueue_cluster.admission.add_mutating(kueue_clear_nominated_cluster_names_hook())
    await _objects(kueue_api).create_namespaced_custom_object(
        KUEUE, V1BETA2, "default", "workloads", workload()
    )
    await _nominate(kueue_api, EXTERNAL_DISPATCHER, ["w1", "w2"])
    result = await _write_status(kueue_api, path, case.status)
    expected = [] if case.cleared else ["w1", "w2"]
    assert result["status"]["nominatedClusterNames"] == expected
    assert _stored_status(kueue_cluster)["nominatedClusterNames"] == expected
    for key, value in case.status.items():
        assert result["status"][key] == value


async def test_c54_policy_ignores_v1beta1_requests(
    kueue_cluster: FakeCluster, kueue_api: client.ApiClient, nominated: Obj
) -> None:
    """C46/C54: the policy matches apiVersion v1beta2 only; the same Kueue write through v1beta1
    is not mutated, so the mutual-exclusion rule still rejects it."""
    kueue_cluster.admission.add_mutating(kueue_clear_nominated_cluster_names_hook())
    with pytest.raises(ApiException) as caught:
        await _kueue_apply(kueue_api, _admission_body(), version="v1beta1")
    assert caught.value.status == 422
    assert MUTUALLY_EXCLUSIVE in _status_of(caught.value)["message"]
    with pytest.raises(ApiException) as merge_caught:
        await _objects(kueue_api).patch_namespaced_custom_object_status(
            KUEUE,
            "v1beta1",
            "default",
            "workloads",
            "wl",
            {"status": {"clusterName": "w1"}},
            _content_type=MERGE,
        )
    assert merge_caught.value.status == 422
    assert _stored_status(kueue_cluster) == {"nominatedClusterNames": ["w1"]}
    # The v1beta2 write is mutated.
    result = await _kueue_apply(kueue_api, _admission_body())
    assert result["status"]["nominatedClusterNames"] == []


def test_c54_policy_does_not_mutate_create() -> None:
    """C46/C54: the policy matches UPDATE only. (A CREATE cannot carry status through the API —
    status is dropped on create, F11 — so this is checked on the admission chain directly.)"""
    chain = AdmissionChain()
    chain.add_mutating(kueue_clear_nominated_cluster_names_hook())
    obj = workload(status={"clusterName": "w1", "nominatedClusterNames": ["w1"]})
    create = AdmissionRequest(
        operation="CREATE",
        group=KUEUE,
        version=V1BETA2,
        resource="workloads",
        subresource=None,
        namespace="default",
        name="wl",
        object=obj,
        old_object=None,
        user="u",
        field_manager="m",
    )
    assert chain.mutate(create) == obj
    update = AdmissionRequest(**{**create.__dict__, "operation": "UPDATE", "old_object": {}})
    mutated = chain.mutate(update)
    assert mutated is not None
    assert mutated["status"]["nominatedClusterNames"] == []
    assert obj["status"]["nominatedClusterNames"] == ["w1"]  # the input is not changed


# --- C46: the hand-written hook against the real policy ----------------------------------------


def _policy(crds_dir: Path) -> Obj:
    path = crds_dir.parent / "workload-map.yaml"
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "MutatingAdmissionPolicy":
            policy: Obj = doc
            return policy
    raise AssertionError(f"no MutatingAdmissionPolicy in {path}")


def test_c46_hook_match_equals_the_real_policy_match_constraints(crds_dir: Path) -> None:
    """C46: groups, versions, operations and resources of the hook equal the policy's rule, and
    the policy's mutation is the one the hook performs (replace with [])."""
    spec = _policy(crds_dir)["spec"]
    [rule] = spec["matchConstraints"]["resourceRules"]
    match = kueue_clear_nominated_cluster_names_hook().match
    assert set(match.groups) == set(rule["apiGroups"])
    assert set(match.versions) == set(rule["apiVersions"])
    assert set(match.operations) == set(rule["operations"])
    assert set(match.resources) == set(rule["resources"])
    assert spec["failurePolicy"] == "Fail"
    [mutation] = spec["mutations"]
    expression = mutation["jsonPatch"]["expression"]
    assert '"replace"' in expression
    assert '"/status/nominatedClusterNames"' in expression
    assert "value: []" in expression


def _wl(status: Obj | None) -> Obj:
    obj: Obj = {"apiVersion": f"{KUEUE}/{V1BETA2}", "kind": "Workload", "metadata": {"name": "wl"}}
    if status is not None:
        obj["status"] = status
    return obj


EV_TRUE = condition("Evicted")
EV_FALSE = condition("Evicted", status="False")
QR = condition("QuotaReserved")
N = ["w1"]

# (old status, new status) pairs; None means "no status at all".
POLICY_ROWS: dict[str, tuple[Obj | None, Obj | None]] = {
    "new-without-status": ({"nominatedClusterNames": N}, None),
    "new-status-empty": (None, {}),
    "no-nomination-cluster-set": (None, {"clusterName": "w1"}),
    "empty-nomination-cluster-set": (None, {"nominatedClusterNames": [], "clusterName": "w1"}),
    "nominated-only": ({}, {"nominatedClusterNames": N}),
    "cluster-set-old-no-status": (None, {"nominatedClusterNames": N, "clusterName": "w1"}),
    "cluster-set-old-empty-status": ({}, {"nominatedClusterNames": N, "clusterName": "w1"}),
    "cluster-set-old-no-cluster": (
        {"nominatedClusterNames": N},
        {"nominatedClusterNames": N, "clusterName": "w1"},
    ),
    "cluster-set-old-empty-cluster": (
        {"clusterName": ""},
        {"nominatedClusterNames": N, "clusterName": "w1"},
    ),
    "cluster-empty-string-new": (
        {"nominatedClusterNames": N},
        {"nominatedClusterNames": N, "clusterName": ""},
    ),
    "cluster-already-set": (
        {"clusterName": "w1"},
        {"nominatedClusterNames": N, "clusterName": "w1"},
    ),
    "cluster-changed": (
        {"clusterName": "w1"},
        {"nominatedClusterNames": N, "clusterName": "w2"},
    ),
    "evicted-new-old-no-status": (None, {"nominatedClusterNames": N, "conditions": [EV_TRUE]}),
    "evicted-new-old-no-conditions": (
        {"nominatedClusterNames": N},
        {"nominatedClusterNames": N, "conditions": [QR, EV_TRUE]},
    ),
    "evicted-new-old-evicted-false": (
        {"conditions": [EV_FALSE]},
        {"nominatedClusterNames": N, "conditions": [EV_TRUE]},
    ),
    "evicted-new-old-other-conditions": (
        {"conditions": [QR]},
        {"nominatedClusterNames": N, "conditions": [QR, EV_TRUE]},
    ),
    "evicted-already-true": (
        {"conditions": [EV_TRUE]},
        {"nominatedClusterNames": N, "conditions": [EV_TRUE]},
    ),
    "evicted-false-new": ({}, {"nominatedClusterNames": N, "conditions": [EV_FALSE]}),
    "unrelated-condition": ({}, {"nominatedClusterNames": N, "conditions": [QR]}),
    "both-triggers": (
        None,
        {"nominatedClusterNames": N, "clusterName": "w1", "conditions": [EV_TRUE]},
    ),
    "cluster-kept-evicted-new": (
        {"clusterName": "w1", "conditions": [QR]},
        {"nominatedClusterNames": N, "clusterName": "w1", "conditions": [EV_TRUE]},
    ),
    "empty-nomination-evicted-new": (None, {"nominatedClusterNames": [], "conditions": [EV_TRUE]}),
}


def _real_policy_applies(conditions: list[Obj], new: Obj, old: Obj) -> bool:
    """Kubernetes' matchConditions semantics: skip if any condition is false; apply if all are
    true; an error without a false condition would hit ``failurePolicy: Fail``."""
    results: list[bool | str] = []
    for item in conditions:
        try:
            value = compile_expression(item["expression"])({"object": new, "oldObject": old})
        except CELEvalError as exc:
            results.append(f"error: {exc}")
        else:
            assert isinstance(value, bool), item["name"]
            results.append(value)
    if False in results:
        return False
    errors = [r for r in results if isinstance(r, str)]
    assert not errors, f"the policy would fail closed: {errors}"
    return True


@pytest.mark.parametrize(("old", "new"), list(POLICY_ROWS.values()), ids=list(POLICY_ROWS))
def test_c46_python_policy_agrees_with_the_real_cel_match_conditions(
    crds_dir: Path, old: Obj | None, new: Obj | None
) -> None:
    """C46: ``kueue_policy_applies(new, old)`` equals ``has-nominated-clusters && trigger`` of
    the real ``workload-map.yaml`` evaluated with CEL, on every row."""
    conditions = _policy(crds_dir)["spec"]["matchConditions"]
    assert [c["name"] for c in conditions] == ["has-nominated-clusters", "trigger"]
    new_obj, old_obj = _wl(new), _wl(old)
    assert kueue_policy_applies(new_obj, old_obj) is _real_policy_applies(
        conditions, new_obj, old_obj
    )


def test_c46_policy_rows_cover_both_outcomes() -> None:
    """C46: the table above exercises both results of the policy (guards against a vacuous
    table)."""
    outcomes = {kueue_policy_applies(_wl(new), _wl(old)) for old, new in POLICY_ROWS.values()}
    assert outcomes == {True, False}
