"""Events and Leases as built-in kinds of the fake API server.

docs/fake-apiserver.md F59 (core/v1 Events: PUT without resourceVersion, strategic merge
approximated by a merge patch, field selectors on involvedObject.*, reason and type), F60
(events.k8s.io/v1 Events, stored separately, selectors on regarding.*), F61 (coordination.k8s.io/v1
Leases: fields stored as given, optimistic concurrency for leader election). Driven through
``CoreV1Api``, ``EventsV1Api`` and ``CoordinationV1Api``.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from dispatcher_sandbox.fake_apiserver import FakeCluster

Obj = dict[str, Any]
NS = "default"
STRATEGIC = "application/strategic-merge-patch+json"
WORKLOAD_API = "kueue.x-k8s.io/v1beta2"


def _status(exc: ApiException) -> Obj:
    body: Obj = json.loads(exc.body)
    return body


async def _create_namespace(api: client.ApiClient, name: str) -> None:
    await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


# --- F59: core/v1 Events -----------------------------------------------------------------------


def core_event(
    name: str,
    *,
    kind: str = "Workload",
    obj_name: str = "wl-a",
    obj_namespace: str = NS,
    uid: str = "uid-a",
    reason: str = "MultiKueue",
    type_: str = "Normal",
    namespace: str = NS,
) -> Obj:
    """A core/v1 Event about an object, as client-go's recorder writes it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": WORKLOAD_API if kind == "Workload" else "v1",
            "kind": kind,
            "name": obj_name,
            "namespace": obj_namespace,
            "uid": uid,
        },
        "reason": reason,
        "message": f"{reason} for {obj_name}",
        "type": type_,
        "count": 1,
        "firstTimestamp": "2026-11-30T10:00:00Z",
        "lastTimestamp": "2026-11-30T10:00:00Z",
        "source": {"component": "kueue-manager"},
        "reportingComponent": "kueue-manager",
        "reportingInstance": "kueue-manager-0",
    }


async def test_f59_events_are_listed_in_discovery_without_status(api: client.ApiClient) -> None:
    """F59/F60/F61: ``v1 events``, ``events.k8s.io/v1 events`` and ``coordination.k8s.io/v1
    leases`` are served, namespaced, kind Event/Lease, without a status subresource."""
    core = await client.CoreV1Api(api).get_api_resources()
    events_api = await client.EventsV1Api(api).get_api_resources()
    leases_api = await client.CoordinationV1Api(api).get_api_resources()
    for resources, plural, kind in (
        (core, "events", "Event"),
        (events_api, "events", "Event"),
        (leases_api, "leases", "Lease"),
    ):
        by_name = {r.name: r for r in resources.resources}
        assert by_name[plural].kind == kind
        assert by_name[plural].namespaced is True
        assert f"{plural}/status" not in by_name
        assert {"create", "get", "list", "watch", "update", "patch", "delete"} <= set(
            by_name[plural].verbs
        )
    assert events_api.group_version == "events.k8s.io/v1"
    assert leases_api.group_version == "coordination.k8s.io/v1"


async def test_f59_core_event_round_trip(api: client.ApiClient) -> None:
    """F59: create (201) and read back a core event with all the fields the recorder sets."""
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_event(NS, core_event("wl-a.1"))
    assert created.metadata.resource_version
    assert created.metadata.uid
    read = await core.read_namespaced_event("wl-a.1", NS)
    assert read.involved_object.kind == "Workload"
    assert read.involved_object.uid == "uid-a"
    assert (read.reason, read.type, read.count) == ("MultiKueue", "Normal", 1)
    assert read.source.component == "kueue-manager"
    assert read.last_timestamp == datetime.datetime(2026, 11, 30, 10, tzinfo=datetime.UTC)


async def test_f59_put_without_resource_version_is_allowed(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F59: as a built-in kind, an Event may be replaced without ``metadata.resourceVersion``;
    a stale one still conflicts (F9)."""
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_event(NS, core_event("wl-a.1"))
    body = core_event("wl-a.1")
    body["count"] = 5
    replaced = await core.replace_namespaced_event("wl-a.1", NS, body)
    assert replaced.count == 5
    assert replaced.metadata.uid == created.metadata.uid
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)

    stale = core_event("wl-a.1")
    stale["metadata"]["resourceVersion"] = created.metadata.resource_version
    with pytest.raises(ApiException) as caught:
        await core.replace_namespaced_event("wl-a.1", NS, stale)
    assert caught.value.status == 409
    assert _status(caught.value)["reason"] == "Conflict"


async def test_f59_strategic_merge_patch_of_count_and_last_timestamp(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F59: the recorder's series update (strategic merge patch of ``count`` and
    ``lastTimestamp``, the type kubernetes_asyncio picks for a dict body) works and keeps the
    other fields."""
    core = client.CoreV1Api(api)
    await core.create_namespaced_event(NS, core_event("wl-a.1"))
    cluster.journal.clear()
    patched = await core.patch_namespaced_event(
        "wl-a.1", NS, {"count": 2, "lastTimestamp": "2026-11-30T10:05:00Z"}
    )
    assert patched.count == 2
    assert patched.last_timestamp == datetime.datetime(2026, 11, 30, 10, 5, tzinfo=datetime.UTC)
    assert patched.first_timestamp == datetime.datetime(2026, 11, 30, 10, tzinfo=datetime.UTC)
    assert (patched.reason, patched.involved_object.name) == ("MultiKueue", "wl-a")
    [entry] = cluster.journal.entries()
    assert (entry.content_type, entry.status) == (STRATEGIC, 200)


@pytest.fixture
async def core_events(api: client.ApiClient) -> None:
    """Four core events: two Workloads in ``default``, a Pod, and a Workload in ``team-b``."""
    core = client.CoreV1Api(api)
    await _create_namespace(api, "team-b")
    for body in (
        core_event("wl-a.1"),
        core_event("wl-b.1", obj_name="wl-b", uid="uid-b", type_="Warning"),
        core_event("p.1", kind="Pod", obj_name="p", uid="uid-p", reason="Scheduled"),
        core_event("wl-a.2", obj_namespace="team-b", namespace="team-b", uid="uid-a2"),
    ):
        await core.create_namespaced_event(body["metadata"]["namespace"], body)


CORE_SELECTORS = {
    "kind": ("involvedObject.kind=Workload", ["wl-a.1", "wl-a.2", "wl-b.1"]),
    "kind-not": ("involvedObject.kind!=Workload", ["p.1"]),
    "name": ("involvedObject.name=wl-a", ["wl-a.1", "wl-a.2"]),
    "namespace": ("involvedObject.namespace=team-b", ["wl-a.2"]),
    "uid": ("involvedObject.uid=uid-b", ["wl-b.1"]),
    "reason": ("reason=MultiKueue", ["wl-a.1", "wl-a.2", "wl-b.1"]),
    "type": ("type=Warning", ["wl-b.1"]),
    "type-double-equals": ("type==Normal", ["p.1", "wl-a.1", "wl-a.2"]),
    "workload-events-of-one-object": (
        "involvedObject.kind=Workload,involvedObject.name=wl-a,"
        "involvedObject.namespace=default,reason=MultiKueue",
        ["wl-a.1"],
    ),
    "metadata-name": ("metadata.name=p.1", ["p.1"]),
    "no-match": ("involvedObject.name=nothing", []),
}


@pytest.mark.parametrize(
    ("selector", "expected"), list(CORE_SELECTORS.values()), ids=list(CORE_SELECTORS)
)
@pytest.mark.usefixtures("core_events")
async def test_f59_core_event_field_selectors(
    api: client.ApiClient, selector: str, expected: list[str]
) -> None:
    """F59: field selectors ``involvedObject.kind/name/namespace/uid``, ``reason`` and ``type``
    (with ``=``, ``==``, ``!=`` and combinations), across namespaces and in one namespace."""
    core = client.CoreV1Api(api)
    listed = await core.list_event_for_all_namespaces(field_selector=selector)
    assert sorted(e.metadata.name for e in listed.items) == expected
    in_default = await core.list_namespaced_event(NS, field_selector=selector)
    assert sorted(e.metadata.name for e in in_default.items) == [
        n for n in expected if n != "wl-a.2"
    ]


@pytest.mark.parametrize(
    "selector",
    ["message=x", "regarding.name=wl-a", "involvedObject.bogus=x", "spec.x=y"],
    ids=["message", "regarding-is-events-k8s-io-only", "unknown-sub-field", "spec"],
)
async def test_f59_unsupported_field_selector_is_400(api: client.ApiClient, selector: str) -> None:
    """F59/F13: a field the Event API does not index → 400 BadRequest."""
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(api).list_namespaced_event(NS, field_selector=selector)
    assert caught.value.status == 400
    assert _status(caught.value)["reason"] == "BadRequest"


# --- F60: events.k8s.io/v1 Events --------------------------------------------------------------


def new_event(
    name: str,
    *,
    kind: str = "Workload",
    obj_name: str = "wl-a",
    uid: str = "uid-a",
    reason: str = "MultiKueue",
    type_: str = "Normal",
    namespace: str = NS,
) -> Obj:
    """An events.k8s.io/v1 Event, as client-go's new recorder writes it."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": "2026-11-30T10:00:00.123456Z",
        "reportingController": "kueue.x-k8s.io/multikueue",
        "reportingInstance": "kueue-manager-0",
        "action": "Dispatch",
        "reason": reason,
        "type": type_,
        "note": f"{reason} for {obj_name}",
        "regarding": {
            "apiVersion": WORKLOAD_API if kind == "Workload" else "v1",
            "kind": kind,
            "name": obj_name,
            "namespace": namespace,
            "uid": uid,
        },
    }


async def test_f60_events_k8s_io_round_trip_and_separate_storage(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F60: events.k8s.io/v1 Events are stored separately from core events: the same name may
    exist in both, and neither list shows the other's objects (no conversion)."""
    events = client.EventsV1Api(api)
    core = client.CoreV1Api(api)
    created = await events.create_namespaced_event(NS, new_event("shared-name"))
    await core.create_namespaced_event(NS, core_event("shared-name"))
    await core.create_namespaced_event(NS, core_event("core-only"))

    read = await events.read_namespaced_event("shared-name", NS)
    assert read.metadata.uid == created.metadata.uid
    assert read.regarding.kind == "Workload"
    assert read.note == "MultiKueue for wl-a"
    assert read.event_time.microsecond == 123456
    stored = cluster.object("events.k8s.io", "events", "shared-name", NS)
    assert stored is not None
    assert stored["eventTime"] == "2026-11-30T10:00:00.123456Z"

    new_list = await events.list_namespaced_event(NS)
    core_list = await core.list_namespaced_event(NS)
    assert [e.metadata.name for e in new_list.items] == ["shared-name"]
    assert sorted(e.metadata.name for e in core_list.items) == ["core-only", "shared-name"]
    core_shared = await core.read_namespaced_event("shared-name", NS)
    assert core_shared.metadata.uid != created.metadata.uid
    assert core_shared.involved_object.name == "wl-a"

    await events.delete_namespaced_event("shared-name", NS)
    assert (await core.read_namespaced_event("shared-name", NS)).metadata.name == "shared-name"


async def test_f60_events_k8s_io_update_without_resource_version(api: client.ApiClient) -> None:
    """F60: a built-in kind too: PUT without resourceVersion and a series patch work."""
    events = client.EventsV1Api(api)
    await events.create_namespaced_event(NS, new_event("e1"))
    body = new_event("e1")
    body["series"] = {"count": 2, "lastObservedTime": "2026-11-30T10:01:00.000001Z"}
    replaced = await events.replace_namespaced_event("e1", NS, body)
    assert replaced.series.count == 2
    patched = await events.patch_namespaced_event(
        "e1", NS, {"series": {"count": 3, "lastObservedTime": "2026-11-30T10:02:00.000002Z"}}
    )
    assert patched.series.count == 3
    assert patched.series.last_observed_time.microsecond == 2
    assert patched.regarding.name == "wl-a"


@pytest.fixture
async def new_events(api: client.ApiClient) -> None:
    """Four events.k8s.io events, mirroring ``core_events``."""
    events = client.EventsV1Api(api)
    await _create_namespace(api, "team-b")
    for body in (
        new_event("wl-a.1"),
        new_event("wl-b.1", obj_name="wl-b", uid="uid-b", type_="Warning"),
        new_event("p.1", kind="Pod", obj_name="p", uid="uid-p", reason="Scheduled"),
        new_event("wl-a.2", namespace="team-b", uid="uid-a2"),
    ):
        await events.create_namespaced_event(body["metadata"]["namespace"], body)


NEW_SELECTORS = {
    "regarding-kind": ("regarding.kind=Workload", ["wl-a.1", "wl-a.2", "wl-b.1"]),
    "regarding-kind-not": ("regarding.kind!=Workload", ["p.1"]),
    "regarding-name": ("regarding.name=wl-a", ["wl-a.1", "wl-a.2"]),
    "regarding-namespace": ("regarding.namespace=team-b", ["wl-a.2"]),
    "regarding-uid": ("regarding.uid=uid-b", ["wl-b.1"]),
    "reason": ("reason=Scheduled", ["p.1"]),
    "type": ("type=Warning", ["wl-b.1"]),
    "combined": ("regarding.kind=Workload,regarding.name=wl-a,type=Normal", ["wl-a.1", "wl-a.2"]),
}


@pytest.mark.parametrize(
    ("selector", "expected"), list(NEW_SELECTORS.values()), ids=list(NEW_SELECTORS)
)
@pytest.mark.usefixtures("new_events")
async def test_f60_regarding_field_selectors(
    api: client.ApiClient, selector: str, expected: list[str]
) -> None:
    """F60: field selectors ``regarding.kind/name/namespace/uid``, ``reason`` and ``type``."""
    listed = await client.EventsV1Api(api).list_event_for_all_namespaces(field_selector=selector)
    assert sorted(e.metadata.name for e in listed.items) == expected


@pytest.mark.parametrize(
    "selector",
    ["involvedObject.name=wl-a", "note=x", "regarding.bogus=x"],
    ids=["involvedObject-is-core-only", "note", "unknown-sub-field"],
)
async def test_f60_unsupported_field_selector_is_400(api: client.ApiClient, selector: str) -> None:
    """F60: fields outside the events.k8s.io index → 400."""
    with pytest.raises(ApiException) as caught:
        await client.EventsV1Api(api).list_namespaced_event(NS, field_selector=selector)
    assert caught.value.status == 400


# --- F61: Leases -------------------------------------------------------------------------------

ACQUIRE = "2026-11-30T10:00:00.123456Z"
RENEW = "2026-11-30T10:00:10.654321Z"


def lease(name: str = "dispatcher-leader", holder: str = "pod-a", **spec: Any) -> Obj:
    """A Lease body with microsecond RFC 3339 times."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": ACQUIRE,
            "renewTime": RENEW,
            "leaseTransitions": 0,
            **spec,
        },
    }


async def test_f61_lease_fields_are_stored_as_given(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F61: holderIdentity, leaseDurationSeconds, acquireTime/renewTime (microsecond RFC 3339,
    stored verbatim) and leaseTransitions round-trip."""
    leases = client.CoordinationV1Api(api)
    created = await leases.create_namespaced_lease(NS, lease())
    assert created.metadata.resource_version
    read = await leases.read_namespaced_lease("dispatcher-leader", NS)
    spec = read.spec
    assert (spec.holder_identity, spec.lease_duration_seconds, spec.lease_transitions) == (
        "pod-a",
        15,
        0,
    )
    assert spec.acquire_time == datetime.datetime(2026, 11, 30, 10, 0, 0, 123456, datetime.UTC)
    assert spec.renew_time == datetime.datetime(2026, 11, 30, 10, 0, 10, 654321, datetime.UTC)
    stored = cluster.object("coordination.k8s.io", "leases", "dispatcher-leader", NS)
    assert stored is not None
    assert stored["spec"] == lease()["spec"]


async def test_f61_stale_resource_version_put_gets_409(api: client.ApiClient) -> None:
    """F61/F9: leader election relies on a 409 for a stale resourceVersion: two candidates read
    the same Lease; the first takeover wins, the second gets ``ApiException.status == 409``."""
    leases = client.CoordinationV1Api(api)
    await leases.create_namespaced_lease(NS, lease())
    seen_by_b = await leases.read_namespaced_lease("dispatcher-leader", NS)
    seen_by_c = await leases.read_namespaced_lease("dispatcher-leader", NS)

    seen_by_b.spec.holder_identity = "pod-b"
    seen_by_b.spec.lease_transitions = 1
    won = await leases.replace_namespaced_lease("dispatcher-leader", NS, seen_by_b)
    assert won.spec.holder_identity == "pod-b"
    assert won.metadata.resource_version != seen_by_c.metadata.resource_version

    seen_by_c.spec.holder_identity = "pod-c"
    with pytest.raises(ApiException) as caught:
        await leases.replace_namespaced_lease("dispatcher-leader", NS, seen_by_c)
    assert caught.value.status == 409
    assert _status(caught.value)["reason"] == "Conflict"
    current = await leases.read_namespaced_lease("dispatcher-leader", NS)
    assert (current.spec.holder_identity, current.spec.lease_transitions) == ("pod-b", 1)


async def test_f61_put_without_resource_version_is_allowed(api: client.ApiClient) -> None:
    """F61: as for other built-in kinds, a PUT without resourceVersion is an unconditional
    update."""
    leases = client.CoordinationV1Api(api)
    created = await leases.create_namespaced_lease(NS, lease())
    renewed = await leases.replace_namespaced_lease(
        "dispatcher-leader", NS, lease(renewTime="2026-11-30T10:00:20.000001Z")
    )
    assert renewed.spec.renew_time.microsecond == 1
    assert int(renewed.metadata.resource_version) > int(created.metadata.resource_version)


async def test_f61_model_round_trip_with_datetimes(api: client.ApiClient) -> None:
    """F61: what a Python leader elector sends (``V1Lease`` with timezone-aware datetimes,
    serialised by the client) reads back as the same instants."""
    leases = client.CoordinationV1Api(api)
    acquired = datetime.datetime(2026, 11, 30, 9, 59, 59, 999999, datetime.UTC)
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name="elector", namespace=NS),
        spec=client.V1LeaseSpec(
            holder_identity="pod-a",
            lease_duration_seconds=10,
            acquire_time=acquired,
            renew_time=acquired,
            lease_transitions=3,
        ),
    )
    await leases.create_namespaced_lease(NS, body)
    read = await leases.read_namespaced_lease("elector", NS)
    assert read.spec.acquire_time == acquired
    assert read.spec.renew_time == acquired
    assert read.spec.lease_transitions == 3


async def test_f61_lease_merge_patch_and_delete(api: client.ApiClient) -> None:
    """F61: renewing by patch keeps the other fields; a Lease can be released by deleting it."""
    leases = client.CoordinationV1Api(api)
    await leases.create_namespaced_lease(NS, lease())
    patched = await leases.patch_namespaced_lease(
        "dispatcher-leader", NS, {"spec": {"renewTime": "2026-11-30T10:00:30.500000Z"}}
    )
    assert patched.spec.renew_time.microsecond == 500000
    assert patched.spec.holder_identity == "pod-a"
    await leases.delete_namespaced_lease("dispatcher-leader", NS)
    with pytest.raises(ApiException) as caught:
        await leases.read_namespaced_lease("dispatcher-leader", NS)
    assert caught.value.status == 404


async def test_f61_kubernetes_asyncio_lease_lock_contention(
    cluster: FakeCluster, api: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    """F61: kubernetes_asyncio's own ``LeaseLock`` (the leader-election resource lock) against
    the fake: the second create fails, both candidates read the lease, the first update wins
    and the second, now stale, is refused (409), so exactly one candidate becomes leader."""
    a = LeaseLock("dispatcher-leader", NS, "pod-a", api)
    b = LeaseLock("dispatcher-leader", NS, "pod-b", api)
    first = LeaderElectionRecord(
        "pod-a", "15", "2026-11-30 10:00:00.000001", "2026-11-30 10:00:00.000001"
    )
    assert await a.create("dispatcher-leader", NS, first) is True
    with caplog.at_level(logging.ERROR):
        assert await b.create("dispatcher-leader", NS, first) is False

    found_a, record_a = await a.get("dispatcher-leader", NS)
    found_b, _ = await b.get("dispatcher-leader", NS)
    assert found_a
    assert found_b
    assert isinstance(record_a, LeaderElectionRecord)
    assert (record_a.holder_identity, record_a.lease_duration) == ("pod-a", "15")
    assert record_a.renew_time == "2026-11-30 10:00:00.000001"

    renewal = LeaderElectionRecord("pod-a", "15", record_a.acquire_time, "2026-11-30 10:00:05.5")
    takeover = LeaderElectionRecord("pod-b", "15", "2026-11-30 10:00:05.6", "2026-11-30 10:00:05.6")
    assert await a.update("dispatcher-leader", NS, renewal) is True
    with caplog.at_level(logging.ERROR):
        assert await b.update("dispatcher-leader", NS, takeover) is False
    assert any("Failed to update lock" in r.getMessage() for r in caplog.records)
    conflicts = [e for e in cluster.journal.entries() if e.method == "PUT" and e.status == 409]
    assert len(conflicts) == 1

    stored = cluster.object("coordination.k8s.io", "leases", "dispatcher-leader", NS)
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == "pod-a"
    assert stored["spec"]["renewTime"] == "2026-11-30T10:00:05.500000Z"
    assert stored["spec"]["acquireTime"] == "2026-11-30T10:00:00.000001Z"


async def test_f59_watch_events_of_one_workload_with_a_field_selector(
    api: client.ApiClient,
) -> None:
    """F59 with F19: a watch filtered by ``involvedObject`` fields delivers only that object's
    events (how a test waits for the ``MultiKueue`` events of one Workload)."""
    core = client.CoreV1Api(api)
    listed = await core.list_namespaced_event(NS)
    selector = "involvedObject.kind=Workload,involvedObject.name=wl-a,reason=MultiKueue"
    await core.create_namespaced_event(NS, core_event("p.1", kind="Pod", obj_name="p"))
    await core.create_namespaced_event(NS, core_event("wl-b.1", obj_name="wl-b"))
    await core.create_namespaced_event(NS, core_event("wl-a.1"))
    seen: list[tuple[str, str]] = []
    with anyio.fail_after(10):
        async with watch.Watch() as w:
            async for event in w.stream(
                core.list_namespaced_event,
                NS,
                field_selector=selector,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=600,
            ):
                seen.append((event["type"], event["object"].metadata.name))
                w.stop()
    assert seen == [("ADDED", "wl-a.1")]
