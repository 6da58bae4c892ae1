"""Conformance of the fake API server through kubernetes_asyncio (docs/fake-apiserver.md).

Each test names the requirement it checks (F…). The clients are built from the cluster's own
kubeconfig, so every request goes over HTTPS with the bearer token.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient, ApiException

from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.fake_apiserver.handlers import load_apply_body
from dispatcher_sandbox.harness.kube_builders import KUEUE, V1BETA2, widget, workload

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

pytestmark = pytest.mark.anyio


def body_of(exc: ApiException) -> dict[str, Any]:
    """The Status body of an error."""
    parsed: dict[str, Any] = json.loads(exc.body)
    return parsed


async def create_widget(api: ApiClient, name: str, ns: str = "default", **spec: Any) -> Any:
    return await client.CustomObjectsApi(api).create_namespaced_custom_object(
        "example.com", "v1", ns, "widgets", widget(name, ns, **spec)
    )


# --- F1 discovery ---------------------------------------------------------------------------


async def test_f1_version_and_core_discovery(api: ApiClient) -> None:
    version = await client.VersionApi(api).get_code()
    assert (version.major, version.minor) == ("1", "34")
    core = await client.CoreApi(api).get_api_versions()
    assert core.versions == ["v1"]
    resources = await client.CoreV1Api(api).get_api_resources()
    assert resources.group_version == "v1"
    by_name = {r.name: r for r in resources.resources}
    assert by_name["namespaces"].namespaced is False
    assert by_name["secrets"].namespaced is True
    assert "namespaces/status" in by_name
    assert by_name["nodes"].kind == "Node"


async def test_f1_group_discovery_lists_kueue_with_status_subresources(api: ApiClient) -> None:
    groups = await client.ApisApi(api).get_api_versions()
    names = {g.name: g for g in groups.groups}
    assert names[KUEUE].preferred_version.group_version == f"{KUEUE}/{V1BETA2}"
    assert {"coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"} <= set(names)
    listing = await client.CustomObjectsApi(api).get_api_resources(KUEUE, V1BETA2)
    by_name = {r.name: r for r in listing.resources}
    assert by_name["workloads"].namespaced is True
    assert by_name["clusterqueues"].namespaced is False
    assert "workloads/status" in by_name
    assert "resourceflavors/status" not in by_name


async def test_f1_unknown_paths_are_404_status(api: ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(api).list_namespaced_custom_object(
            "nope.example.com", "v1", "default", "things"
        )
    assert err.value.status == 404
    assert body_of(err.value)["kind"] == "Status"


# --- F3, F4, F7 create and read ------------------------------------------------------------


async def test_f4_f7_create_sets_metadata_and_answers_201(api: ApiClient) -> None:
    created = await create_widget(api, "w1", size=3)
    meta = created["metadata"]
    assert created["apiVersion"] == "example.com/v1"
    assert created["kind"] == "Widget"
    assert meta["uid"]
    assert meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    got = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w1"
    )
    assert got == created


async def test_f4_generate_name(api: ApiClient) -> None:
    body = widget("", "default")
    body["metadata"] = {"generateName": "gen-", "namespace": "default"}
    created = await client.CustomObjectsApi(api).create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", body
    )
    assert created["metadata"]["name"].startswith("gen-")
    assert len(created["metadata"]["name"]) == len("gen-") + 5


@pytest.mark.parametrize(
    ("namespace", "body_namespace", "status"),
    [
        pytest.param("missing", "missing", 404, id="namespace-missing-404"),
        pytest.param("default", "other", 400, id="namespace-mismatch-400"),
    ],
)
async def test_f4_namespace_checks(
    api: ApiClient, namespace: str, body_namespace: str, status: int
) -> None:
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            "example.com", "v1", namespace, "widgets", widget("x", body_namespace)
        )
    assert err.value.status == status


async def test_f3_namespace_status_is_the_namespace_subresource(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "team-a"}})
    ns = await core.read_namespace_status("team-a")
    assert ns.status.phase == "Active"
    patched = await core.patch_namespace_status(
        "team-a", {"metadata": {"labels": {"ignored": "yes"}}, "status": {"phase": "Active"}}
    )
    assert not (patched.metadata.labels or {}).get("ignored")


async def test_f3_cluster_wide_list_of_namespaced_kind(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "team-b"}})
    await create_widget(api, "a", "default")
    await create_widget(api, "b", "team-b")
    listed = await client.CustomObjectsApi(api).list_cluster_custom_object(
        "example.com", "v1", "widgets"
    )
    assert listed["kind"] == "WidgetList"
    assert listed["apiVersion"] == "example.com/v1"
    assert {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]} == {
        ("default", "a"),
        ("team-b", "b"),
    }


# --- F8 errors --------------------------------------------------------------------------------


async def test_f8_already_exists_and_not_found_bodies(api: ApiClient) -> None:
    await create_widget(api, "dup")
    with pytest.raises(ApiException) as err:
        await create_widget(api, "dup")
    body = body_of(err.value)
    assert (err.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["details"] == {"name": "dup", "group": "example.com", "kind": "widgets"}
    with pytest.raises(ApiException) as missing:
        await client.CustomObjectsApi(api).get_namespaced_custom_object(
            KUEUE, V1BETA2, "default", "workloads", "ghost"
        )
    body = body_of(missing.value)
    assert body["reason"] == "NotFound"
    assert body["message"] == 'workloads.kueue.x-k8s.io "ghost" not found'


async def test_f8_create_without_name_is_422(api: ApiClient) -> None:
    body = widget("", "default")
    del body["metadata"]["name"]
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", body
        )
    assert err.value.status == 422
    assert body_of(err.value)["details"]["causes"][0]["field"] == "metadata.name"


@pytest.mark.parametrize(
    ("selector", "kind"),
    [
        pytest.param({"label_selector": "a in (b"}, "label", id="bad-label-selector"),
        pytest.param({"field_selector": "spec.size=3"}, "field", id="unsupported-field-selector"),
    ],
)
async def test_f8_f13_bad_selectors_are_400(
    api: ApiClient, selector: dict[str, str], kind: str
) -> None:
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(api).list_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", **selector
        )
    assert err.value.status == 400, kind


# --- F5, F6, F9 resourceVersion, generation, optimistic concurrency ---------------------------


async def test_f5_noop_write_does_not_bump_resource_version(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    created = await create_widget(api, "w", size=1)
    same = await co.patch_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w", {"spec": {"size": 1}}, _content_type=MERGE
    )
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    listed = await co.list_namespaced_custom_object("example.com", "v1", "default", "widgets")
    assert listed["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_f5_counter_is_shared_by_all_kinds_and_monotonic(api: ApiClient) -> None:
    first = await create_widget(api, "one")
    secret = await client.CoreV1Api(api).create_namespaced_secret(
        "default", {"metadata": {"name": "s"}}
    )
    second = await create_widget(api, "two")
    versions = [
        int(first["metadata"]["resourceVersion"]),
        int(secret.metadata.resource_version),
        int(second["metadata"]["resourceVersion"]),
    ]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


@pytest.mark.parametrize(
    ("patch", "status_endpoint", "generation"),
    [
        pytest.param({"spec": {"size": 2}}, False, 2, id="spec-change-bumps"),
        pytest.param({"metadata": {"labels": {"x": "y"}}}, False, 1, id="label-change-keeps"),
        pytest.param({"status": {"ready": True}}, True, 1, id="status-change-keeps"),
    ],
)
async def test_f6_generation_rules(
    api: ApiClient, patch: dict[str, Any], status_endpoint: bool, generation: int
) -> None:
    co = client.CustomObjectsApi(api)
    await create_widget(api, "g", size=1)
    call = (
        co.patch_namespaced_custom_object_status
        if status_endpoint
        else co.patch_namespaced_custom_object
    )
    result = await call("example.com", "v1", "default", "widgets", "g", patch, _content_type=MERGE)
    assert result["metadata"]["generation"] == generation


async def test_f9_stale_resource_version_is_409_on_put_and_patch(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    created = await create_widget(api, "occ", size=1)
    stale = created["metadata"]["resourceVersion"]
    created["spec"]["size"] = 2
    await co.replace_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "occ", created
    )
    created["spec"]["size"] = 3
    with pytest.raises(ApiException) as put_err:
        await co.replace_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", "occ", created
        )
    assert put_err.value.status == 409
    assert "the object has been modified" in body_of(put_err.value)["message"]
    with pytest.raises(ApiException) as patch_err:
        await co.patch_namespaced_custom_object(
            "example.com",
            "v1",
            "default",
            "widgets",
            "occ",
            {"metadata": {"resourceVersion": stale}, "spec": {"size": 4}},
            _content_type=MERGE,
        )
    assert patch_err.value.status == 409


async def test_f8_put_of_custom_resource_without_resource_version_is_422(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    created = await create_widget(api, "norv")
    del created["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as err:
        await co.replace_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", "norv", created
        )
    assert err.value.status == 422


async def test_f9_put_of_builtin_kind_without_resource_version_is_allowed(
    api: ApiClient,
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    replaced = await core.replace_namespaced_config_map(
        "cm", "default", {"metadata": {"name": "cm"}, "data": {"k": "v"}}
    )
    assert replaced.data == {"k": "v"}


# --- F10 patch types ----------------------------------------------------------------------


async def test_f10_merge_patch_removes_with_null(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    await create_widget(api, "m", size=1, color="red")
    result = await co.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "m",
        {"spec": {"color": None, "shape": "round"}},
        _content_type=MERGE,
    )
    assert result["spec"] == {"size": 1, "shape": "round"}


async def test_f10_json_patch(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    await create_widget(api, "j", items=["a"])
    result = await co.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "j",
        [{"op": "add", "path": "/spec/items/-", "value": "b"}],
        _content_type=JSON_PATCH,
    )
    assert result["spec"]["items"] == ["a", "b"]


async def test_f10_dict_body_without_content_type_is_sent_as_json_patch_and_rejected(
    api: ApiClient,
) -> None:
    """Section 9: the client's default for a dict body is JSON patch; the server answers 400."""
    await create_widget(api, "d")
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", "d", {"spec": {"size": 9}}
        )
    assert err.value.status == 400


async def test_f10_strategic_merge_on_custom_resource_is_415(api: ApiClient) -> None:
    await create_widget(api, "s")
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", "s", {"spec": {}}, _content_type=STRATEGIC
        )
    assert err.value.status == 415


async def test_f10_strategic_merge_on_builtin_kind_works_as_merge(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_node({"metadata": {"name": "n1"}})
    node = await core.patch_node("n1", {"metadata": {"labels": {"zone": "a"}}})
    assert node.metadata.labels == {"zone": "a"}


# --- F11 status subresource ---------------------------------------------------------------


async def test_f11_status_dropped_on_create_and_isolated(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    body = widget("st", size=1)
    body["status"] = {"ready": True}
    created = await co.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", body
    )
    assert "status" not in created
    after_status = await co.patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "st",
        {"spec": {"size": 99}, "status": {"ready": True}},
        _content_type=MERGE,
    )
    assert after_status["spec"] == {"size": 1}
    assert after_status["status"] == {"ready": True}
    after_main = await co.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "st",
        {"spec": {"size": 2}, "status": {"ready": False}},
        _content_type=MERGE,
    )
    assert after_main["spec"] == {"size": 2}
    assert after_main["status"] == {"ready": True}


# --- F12 finalizers, deletion, namespaces -------------------------------------------------


async def test_f12_finalizers_delay_deletion(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    body = widget("fin")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    await co.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    marked = await co.delete_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "fin"
    )
    assert marked["metadata"]["deletionTimestamp"]
    still = await co.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "fin")
    assert still["metadata"]["finalizers"] == ["example.com/keep"]
    await co.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "fin",
        {"metadata": {"finalizers": None}},
        _content_type=MERGE,
    )
    with pytest.raises(ApiException) as err:
        await co.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "fin")
    assert err.value.status == 404


async def test_f12_delete_returns_the_object_and_404_afterwards(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    await create_widget(api, "gone")
    deleted = await co.delete_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "gone"
    )
    assert deleted["metadata"]["name"] == "gone"
    with pytest.raises(ApiException) as err:
        await co.delete_namespaced_custom_object("example.com", "v1", "default", "widgets", "gone")
    assert err.value.status == 404


async def test_f12_deleting_a_namespace_removes_its_objects(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    co = client.CustomObjectsApi(api)
    await core.create_namespace({"metadata": {"name": "doomed"}})
    await create_widget(api, "w", "doomed")
    await core.create_namespaced_secret("doomed", {"metadata": {"name": "s"}})
    await create_widget(api, "survivor", "default")
    await core.delete_namespace("doomed")
    with pytest.raises(ApiException) as err:
        await core.read_namespace("doomed")
    assert err.value.status == 404
    everywhere = await co.list_cluster_custom_object("example.com", "v1", "widgets")
    assert [i["metadata"]["name"] for i in everywhere["items"]] == ["survivor"]


async def test_f12_default_namespaces_exist(api: ApiClient) -> None:
    names = {ns.metadata.name for ns in (await client.CoreV1Api(api).list_namespace()).items}
    assert {"default", "kube-system", "kube-public"} <= names


# --- F13 selectors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("team=a", ["a1", "a2"], id="equals"),
        pytest.param("team==a", ["a1", "a2"], id="double-equals"),
        pytest.param("team!=a", ["b1", "none"], id="not-equals-includes-unlabelled"),
        pytest.param("team in (a,b)", ["a1", "a2", "b1"], id="in"),
        pytest.param("team notin (a)", ["b1", "none"], id="notin"),
        pytest.param("team", ["a1", "a2", "b1"], id="exists"),
        pytest.param("!team", ["none"], id="not-exists"),
        pytest.param("team=a,tier=gpu", ["a2"], id="and"),
    ],
)
async def test_f13_label_selectors(api: ApiClient, selector: str, expected: list[str]) -> None:
    co = client.CustomObjectsApi(api)
    for name, labels in [
        ("a1", {"team": "a"}),
        ("a2", {"team": "a", "tier": "gpu"}),
        ("b1", {"team": "b"}),
        ("none", {}),
    ]:
        body = widget(name)
        if labels:
            body["metadata"]["labels"] = labels
        await co.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    listed = await co.list_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", label_selector=selector
    )
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == expected


async def test_f13_field_selector_on_name_and_namespace(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    for name in ("x", "y"):
        await create_widget(api, name)
    by_name = await co.list_cluster_custom_object(
        "example.com", "v1", "widgets", field_selector="metadata.name=x"
    )
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["x"]
    not_default = await co.list_cluster_custom_object(
        "example.com", "v1", "widgets", field_selector="metadata.namespace!=default"
    )
    assert not_default["items"] == []


# --- F14–F19 watch --------------------------------------------------------------------------


async def collect_watch(
    api: ApiClient, stop_after: int, **kwargs: Any
) -> list[tuple[str, dict[str, Any]]]:
    """Events of one watch on widgets in ``default`` until ``stop_after`` arrived."""
    events: list[tuple[str, dict[str, Any]]] = []
    co = client.CustomObjectsApi(api)
    with anyio.fail_after(10):
        async with watch.Watch() as w:
            async for event in w.stream(
                co.list_namespaced_custom_object,
                "example.com",
                "v1",
                "default",
                "widgets",
                **kwargs,
            ):
                events.append((event["type"], event["object"]))
                if len(events) >= stop_after:
                    break
    return events


async def test_f15_watch_without_resource_version_starts_with_added(api: ApiClient) -> None:
    await create_widget(api, "a")
    await create_widget(api, "b")
    events = await collect_watch(api, 2, timeout_seconds=5)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "a"), ("ADDED", "b")]


async def test_f15_watch_replays_events_after_resource_version(api: ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    first = await create_widget(api, "r", size=1)
    rv = first["metadata"]["resourceVersion"]
    await co.patch_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "r", {"spec": {"size": 2}}, _content_type=MERGE
    )
    await co.delete_namespaced_custom_object("example.com", "v1", "default", "widgets", "r")
    events = await collect_watch(api, 2, resource_version=rv, timeout_seconds=5)
    assert [t for t, _ in events] == ["MODIFIED", "DELETED"]
    assert events[0][1]["spec"] == {"size": 2}


async def test_f14_f16_live_events_and_timeout_ends_the_stream(
    api: ApiClient, cluster: FakeCluster
) -> None:
    listed = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        "example.com", "v1", "default", "widgets"
    )
    seen: list[str] = []

    async def watcher() -> None:
        seen.extend(
            t
            for t, _ in await collect_watch(
                api, 99, resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=1
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher)
        with anyio.fail_after(5):
            await cluster.wait_for_watches(1)
        await create_widget(api, "live")
    # The stream ended by itself after timeoutSeconds (F16), with the live event in it (F14).
    assert seen == ["ADDED"]


async def test_f17_bookmarks_carry_resource_version(api: ApiClient) -> None:
    created = await create_widget(api, "bm")
    rv = created["metadata"]["resourceVersion"]
    co = client.CustomObjectsApi(api)
    # A raw watch request, so the BOOKMARK event is visible (Watch.stream consumes it).
    response = await co.list_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        watch=True,
        allow_watch_bookmarks=True,
        resource_version=rv,
        timeout_seconds=2,
        _preload_content=False,
    )
    async with response:
        line = await response.content.readline()
    event = json.loads(line)
    assert event["type"] == "BOOKMARK"
    assert event["object"]["metadata"]["resourceVersion"] == rv


async def test_f18_send_initial_events_ends_with_annotated_bookmark(api: ApiClient) -> None:
    # CustomObjectsApi has no send_initial_events parameter; CoreV1Api lists do.
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map("default", {"metadata": {"name": "i1"}})
    response = await core.list_namespaced_config_map(
        "default",
        watch=True,
        allow_watch_bookmarks=True,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        timeout_seconds=2,
        _preload_content=False,
    )
    async with response:
        first = json.loads(await response.content.readline())
        second = json.loads(await response.content.readline())
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "i1")
    assert second["type"] == "BOOKMARK"
    assert second["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_f15_watch_from_expired_resource_version_raises_410(
    api: ApiClient, cluster: FakeCluster
) -> None:
    created = await create_widget(api, "old")
    await create_widget(api, "forgotten")  # an event after "old" that the history then loses
    cluster.truncate_history()
    await create_widget(api, "new")
    with pytest.raises(ApiException) as err:
        await collect_watch(
            api, 1, resource_version=created["metadata"]["resourceVersion"], timeout_seconds=2
        )
    assert err.value.status == 410


async def test_f19_watch_filters_by_selectors_and_reports_leaving_objects(
    api: ApiClient,
) -> None:
    co = client.CustomObjectsApi(api)
    start = await co.list_namespaced_custom_object("example.com", "v1", "default", "widgets")
    rv = start["metadata"]["resourceVersion"]
    body = widget("sel")
    body["metadata"]["labels"] = {"team": "a"}
    await co.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    await create_widget(api, "other")
    await co.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "sel",
        {"metadata": {"labels": {"team": "b"}}},
        _content_type=MERGE,
    )
    events = await collect_watch(
        api, 2, resource_version=rv, label_selector="team=a", timeout_seconds=2
    )
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "sel"), ("DELETED", "sel")]
    named = await collect_watch(
        api, 1, resource_version=rv, field_selector="metadata.name=other", timeout_seconds=2
    )
    assert [(t, o["metadata"]["name"]) for t, o in named] == [("ADDED", "other")]


# --- F20 isolation, F21 secrets, F2/F40 CRDs by POST ----------------------------------------


async def test_f20_clusters_are_isolated(api: ApiClient) -> None:
    async with FakeCluster("other", resources=["example.com/v1/widgets=Widget"]) as other:
        from kubernetes_asyncio import config

        other_api = await config.new_client_from_config_dict(other.kubeconfig)
        async with other_api:
            await create_widget(api, "mine")
            with pytest.raises(ApiException) as err:
                await client.CustomObjectsApi(other_api).get_namespaced_custom_object(
                    "example.com", "v1", "default", "widgets", "mine"
                )
            assert err.value.status == 404


async def test_f21_secret_string_data_is_folded_into_data(api: ApiClient) -> None:
    secret = await client.CoreV1Api(api).create_namespaced_secret(
        "default",
        {"metadata": {"name": "kc"}, "stringData": {"kubeconfig": "apiVersion: v1"}},
    )
    assert secret.type == "Opaque"
    assert secret.data == {"kubeconfig": "YXBpVmVyc2lvbjogdjE="}
    assert secret.string_data is None


async def test_f2_f40_crd_registered_by_post(api: ApiClient) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "maximum": 5}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    ext = client.ApiextensionsV1Api(api)
    created = await ext.create_custom_resource_definition(crd)
    assert {c.type for c in created.status.conditions} == {"Established", "NamesAccepted"}
    co = client.CustomObjectsApi(api)
    gadget = await co.create_cluster_custom_object(
        "example.org",
        "v1",
        "gadgets",
        {"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g"}},
    )
    assert gadget["metadata"]["name"] == "g"
    with pytest.raises(ApiException) as err:
        await co.create_cluster_custom_object(
            "example.org",
            "v1",
            "gadgets",
            {
                "apiVersion": "example.org/v1",
                "kind": "Gadget",
                "metadata": {"name": "big"},
                "spec": {"size": 6},
            },
        )
    assert err.value.status == 422
    await ext.delete_custom_resource_definition("gadgets.example.org")
    with pytest.raises(ApiException) as gone:
        await co.list_cluster_custom_object("example.org", "v1", "gadgets")
    assert gone.value.status == 404


# --- F30–F38 server-side apply through the server --------------------------------------------


def apply_widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


async def apply(
    api: ApiClient, body: dict[str, Any], manager: str | None, force: bool | None = None
) -> Any:
    kwargs: dict[str, Any] = {"_content_type": "application/apply-patch+yaml"}
    if manager is not None:
        kwargs["field_manager"] = manager
    if force is not None:
        kwargs["force"] = force
    return await client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", body["metadata"]["name"], body, **kwargs
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b'{"a": {"b": [1, "x"]}}', {"a": {"b": [1, "x"]}}, id="json-object"),
        pytest.param(b'  \n{"n": 1e3}', {"n": 1000.0}, id="json-exponent-is-a-number"),
        pytest.param(b"{a: b, c: [1, 2]}", {"a": "b", "c": [1, 2]}, id="flow-yaml"),
        pytest.param(b"a:\n  b: yes\nc: 1e3\n", {"a": {"b": True}, "c": "1e3"}, id="block-yaml"),
        pytest.param(b"", None, id="empty"),
    ],
)
def test_f30_apply_body_is_json_when_it_is_json_else_yaml(raw: bytes, expected: Any) -> None:
    assert load_apply_body(raw) == expected


def test_f30_apply_body_that_is_neither_raises() -> None:
    with pytest.raises(yaml.YAMLError):
        load_apply_body(b"{a: [")


async def test_f32_apply_creates_a_missing_object(api: ApiClient, cluster: FakeCluster) -> None:
    # The server answers 201; kubernetes_asyncio deserialises only 200 for PATCH, so it returns
    # None here, which is the real client's behaviour against a real server too.
    assert await apply(api, apply_widget("new", size=1), "alice") is None
    assert cluster.journal.entries()[-1].status == 201
    created = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "new"
    )
    assert created["spec"] == {"size": 1}
    entries = created["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"]) for e in entries] == [("alice", "Apply")]
    assert entries[0]["fieldsType"] == "FieldsV1"
    assert entries[0]["fieldsV1"] == {"f:spec": {"f:size": {}}}


async def test_f31_patch_option_rules(api: ApiClient) -> None:
    await create_widget(api, "opt")
    with pytest.raises(ApiException) as no_manager:
        await apply(api, apply_widget("opt", size=1), None)
    assert no_manager.value.status == 422
    assert (
        "fieldManager: Required value: is required for apply patch"
        in body_of(no_manager.value)["message"]
    )
    with pytest.raises(ApiException) as forced_merge:
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "example.com",
            "v1",
            "default",
            "widgets",
            "opt",
            {"spec": {"size": 2}},
            force=True,
            _content_type=MERGE,
        )
    assert forced_merge.value.status == 422
    assert (
        "force: Forbidden: may not be specified for non-apply patch"
        in body_of(forced_merge.value)["message"]
    )
    with pytest.raises(ApiException) as long_name:
        await apply(api, apply_widget("opt", size=1), "m" * 129)
    assert long_name.value.status == 422


async def test_f35_two_managers_share_same_value_and_conflict_on_different(
    api: ApiClient,
) -> None:
    await create_widget(api, "two")
    await apply(api, apply_widget("two", size=1, color="red"), "alice")
    shared = await apply(api, apply_widget("two", size=1), "bob")
    assert {"alice", "bob"} <= {e["manager"] for e in shared["metadata"]["managedFields"]}
    with pytest.raises(ApiException) as err:
        await apply(api, apply_widget("two", size=2), "bob")
    body = body_of(err.value)
    assert (err.value.status, body["reason"]) == (409, "Conflict")
    assert body["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "alice"',  # Apply owners are named without a version
            "field": ".spec.size",
        }
    ]
    forced = await apply(api, apply_widget("two", size=2), "bob", force=True)
    assert forced["spec"]["size"] == 2
    alice = next(e for e in forced["metadata"]["managedFields"] if e["manager"] == "alice")
    assert alice["fieldsV1"] == {"f:spec": {"f:color": {}}}


async def test_f37_dropped_field_removed_only_when_nobody_else_owns_it(api: ApiClient) -> None:
    await create_widget(api, "drop")
    await apply(api, apply_widget("drop", size=1, color="red", shape="box"), "alice")
    await apply(api, apply_widget("drop", shape="box"), "bob")
    after = await apply(api, apply_widget("drop", size=1), "alice")
    # color: only alice owned it → removed; shape: bob still owns it → kept.
    assert after["spec"] == {"size": 1, "shape": "box"}


async def test_f38_identical_apply_does_not_bump_resource_version(api: ApiClient) -> None:
    await create_widget(api, "same")
    first = await apply(api, apply_widget("same", size=1), "alice")
    second = await apply(api, apply_widget("same", size=1), "alice")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


async def test_f36_status_conditions_merge_by_type_with_real_schema(
    kueue_api: ApiClient,
) -> None:
    co = client.CustomObjectsApi(kueue_api)
    await co.create_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", workload("m"))

    def cond(kind: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": "True",
            "reason": "Test",
            "message": kind,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }

    async def apply_conditions(manager: str, kinds: list[str]) -> Any:
        body = {
            "apiVersion": f"{KUEUE}/{V1BETA2}",
            "kind": "Workload",
            "metadata": {"name": "m", "namespace": "default"},
            "status": {"conditions": [cond(k) for k in kinds]},
        }
        return await co.patch_namespaced_custom_object_status(
            KUEUE,
            V1BETA2,
            "default",
            "workloads",
            "m",
            body,
            field_manager=manager,
            _content_type="application/apply-patch+yaml",
        )

    await apply_conditions("quota", ["QuotaReserved"])
    both = await apply_conditions("checks", ["Admitted"])
    assert sorted(c["type"] for c in both["status"]["conditions"]) == ["Admitted", "QuotaReserved"]
    entry = next(e for e in both["metadata"]["managedFields"] if e["manager"] == "checks")
    assert entry["subresource"] == "status"
    assert list(entry["fieldsV1"]["f:status"]["f:conditions"]) == ['k:{"type":"Admitted"}']
    released = await apply_conditions("checks", [])
    assert [c["type"] for c in released["status"]["conditions"]] == ["QuotaReserved"]


# --- F42, F44, F45 through the server with the real Kueue CRDs (C17) -----------------------


async def nominate(api: ApiClient, name: str, clusters: list[str]) -> Any:
    return await client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        KUEUE,
        V1BETA2,
        "default",
        "workloads",
        name,
        {"status": {"nominatedClusterNames": clusters}},
        _content_type=MERGE,
    )


async def test_c17_cluster_name_and_nomination_mutually_exclusive(kueue_api: ApiClient) -> None:
    co = client.CustomObjectsApi(kueue_api)
    await co.create_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", workload("x"))
    await nominate(kueue_api, "x", ["w1"])
    with pytest.raises(ApiException) as err:
        await co.patch_namespaced_custom_object_status(
            KUEUE,
            V1BETA2,
            "default",
            "workloads",
            "x",
            {"status": {"clusterName": "w1"}},
            _content_type=MERGE,
        )
    body = body_of(err.value)
    assert err.value.status == 422
    assert "clusterName and nominatedClusterNames are mutually exclusive" in body["message"]
    assert body["details"]["causes"][0]["field"] == "status"
    stored = await co.get_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", "x")
    assert "clusterName" not in stored["status"]  # F46: a failed write changes nothing


async def test_c17_set_cluster_name_is_immutable(kueue_api: ApiClient) -> None:
    co = client.CustomObjectsApi(kueue_api)
    await co.create_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", workload("y"))
    await co.patch_namespaced_custom_object_status(
        KUEUE,
        V1BETA2,
        "default",
        "workloads",
        "y",
        {"status": {"clusterName": "w1"}},
        _content_type=MERGE,
    )
    with pytest.raises(ApiException) as err:
        await co.patch_namespaced_custom_object_status(
            KUEUE,
            V1BETA2,
            "default",
            "workloads",
            "y",
            {"status": {"clusterName": "w2"}},
            _content_type=MERGE,
        )
    assert err.value.status == 422
    assert "clusterName is immutable once set" in body_of(err.value)["message"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(
            lambda w: w["spec"]["podSets"][0].__setitem__("count", "two"),
            "spec.podSets[0].count",
            id="count-not-integer",
        ),
        pytest.param(
            lambda w: w["spec"].__setitem__("podSets", []),
            "spec.podSets",
            id="no-pod-sets",
        ),
    ],
)
async def test_f42_wrong_field_type_rejected(kueue_api: ApiClient, mutate: Any, field: str) -> None:
    body = workload("bad")
    mutate(body)
    with pytest.raises(ApiException) as err:
        await client.CustomObjectsApi(kueue_api).create_namespaced_custom_object(
            KUEUE, V1BETA2, "default", "workloads", body
        )
    assert err.value.status == 422
    fields = [c["field"] for c in body_of(err.value)["details"]["causes"]]
    assert field in fields
    assert body_of(err.value)["message"].startswith('Workload.kueue.x-k8s.io "bad" is invalid')


async def test_f42_too_many_nominated_clusters(kueue_api: ApiClient) -> None:
    co = client.CustomObjectsApi(kueue_api)
    await co.create_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", workload("z"))
    with pytest.raises(ApiException) as err:
        await nominate(kueue_api, "z", [f"w{i}" for i in range(21)])
    assert err.value.status == 422
    assert body_of(err.value)["details"]["causes"][0]["reason"] == "FieldValueTooMany"


async def test_f43_unknown_fields_pruned(kueue_api: ApiClient) -> None:
    body = workload("pr")
    body["spec"]["unknownField"] = "dropped"
    created = await client.CustomObjectsApi(kueue_api).create_namespaced_custom_object(
        KUEUE, V1BETA2, "default", "workloads", body
    )
    assert "unknownField" not in created["spec"]


async def test_f41_versions_served_without_conversion(kueue_api: ApiClient) -> None:
    co = client.CustomObjectsApi(kueue_api)
    await co.create_namespaced_custom_object(KUEUE, V1BETA2, "default", "workloads", workload("v"))
    as_beta1 = await co.get_namespaced_custom_object(KUEUE, "v1beta1", "default", "workloads", "v")
    assert as_beta1["apiVersion"] == f"{KUEUE}/v1beta1"
    with pytest.raises(ApiException) as err:
        await co.get_namespaced_custom_object(KUEUE, "v9", "default", "workloads", "v")
    assert err.value.status == 404
