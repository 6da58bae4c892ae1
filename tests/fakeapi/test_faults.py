"""Fault injection, the request journal and the admin endpoint of the fake API server.

docs/fake-apiserver.md F52 (control surfaces: Python API and admin HTTP endpoint), F53 (error
faults), F54 (latency), F55 (dropping watches, clean and abrupt), F56 (cluster down and up), F57
(watch expiry and history truncation), F58 (request journal and fault accounting), and the client
fact of its section 9 (a dict body without ``_content_type`` is sent as JSON patch and refused).

No timing assertions: latency is shown by a client timeout against a much longer delay, and
watches are synchronised on the events they deliver.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.rest import ApiException

from dispatcher_sandbox.fake_apiserver import FakeCluster, Fault, Faults, JournalEntry
from dispatcher_sandbox.fake_apiserver.faults import VERBS
from dispatcher_sandbox.harness.kube_builders import widget

Obj = dict[str, Any]
G, V, NS, PLURAL = "example.com", "v1", "default", "widgets"
WIDGETS_PATH = f"/apis/{G}/{V}/namespaces/{NS}/{PLURAL}"
MERGE = "application/merge-patch+json"
DEADLINE = 10.0


def _objects(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


async def _create(api: client.ApiClient, name: str, **spec: Any) -> Obj:
    created: Obj = await _objects(api).create_namespaced_custom_object(
        G, V, NS, PLURAL, widget(name, **spec)
    )
    return created


async def _get(api: client.ApiClient, name: str, **kwargs: Any) -> Obj:
    obj: Obj = await _objects(api).get_namespaced_custom_object(G, V, NS, PLURAL, name, **kwargs)
    return obj


async def _wait_until(predicate: Callable[[], bool]) -> None:
    """Wait for a condition on the server side, with a deadline."""
    with anyio.fail_after(DEADLINE):
        while not predicate():  # noqa: ASYNC110 - server-side state, no event to wait on
            await anyio.sleep(0.005)


def _status(exc: ApiException) -> Obj:
    body: Obj = json.loads(exc.body)
    return body


def _journal(cluster: FakeCluster, **match: Any) -> list[JournalEntry]:
    return [
        e
        for e in cluster.journal.entries()
        if all(getattr(e, key) == value for key, value in match.items())
    ]


# --- F53: error faults -------------------------------------------------------------------------

ERROR_CASES = {
    "500-internal-error": (500, "InternalError", None),
    "503-service-unavailable": (503, "ServiceUnavailable", None),
    "429-too-many-requests-retry-after": (429, "TooManyRequests", 7),
    "409-conflict": (409, "Conflict", None),
    "403-forbidden": (403, "Forbidden", None),
}


@pytest.mark.parametrize(
    ("code", "reason", "retry_after"), list(ERROR_CASES.values()), ids=list(ERROR_CASES)
)
async def test_f53_error_fault_answers_code_with_status_body(
    cluster: FakeCluster, api: client.ApiClient, code: int, reason: str, retry_after: int | None
) -> None:
    """F53: the next matching request fails with the code and a matching ``Status`` body (429
    with ``Retry-After``); the one after it passes (count 1); F58: ``fired`` counts it."""
    await _create(api, "a")
    fault = cluster.faults.error(
        code, verbs=("get",), count=1, message="injected for the test", retry_after=retry_after
    )
    with pytest.raises(ApiException) as caught:
        await _get(api, "a")
    assert caught.value.status == code
    body = _status(caught.value)
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "injected for the test",
        "reason": reason,
        "code": code,
    }
    headers = caught.value.headers
    assert headers is not None
    if retry_after is None:
        assert "Retry-After" not in headers
    else:
        assert headers["Retry-After"] == str(retry_after)
    assert (await _get(api, "a"))["metadata"]["name"] == "a"
    assert fault.fired == 1


async def test_f53_next_n_requests_fail_then_requests_pass(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F53: a fault with ``count=N`` fails exactly the next N matching requests."""
    await _create(api, "a")
    fault = cluster.faults.error(503, verbs=("get",), count=3)
    codes = []
    for _ in range(5):
        try:
            await _get(api, "a")
        except ApiException as exc:
            codes.append(exc.status)
        else:
            codes.append(200)
    assert codes == [503, 503, 503, 200, 200]
    assert fault.fired == 3
    assert fault.message == ""
    assert cluster.faults.list() == [fault]  # exhausted, still listed with its count


async def test_f53_fault_until_cleared(cluster: FakeCluster, api: client.ApiClient) -> None:
    """F53: without a count the fault fires on every matching request until cleared; ``clear``
    returns the removed faults with their counts (F58)."""
    await _create(api, "a")
    fault = cluster.faults.error(500, verbs=("get",))
    for _ in range(4):
        with pytest.raises(ApiException) as caught:
            await _get(api, "a")
        assert caught.value.status == 500
        assert _status(caught.value)["message"] == f"injected fault {fault.id}"
    assert cluster.faults.clear() == [fault]
    assert fault.fired == 4
    assert cluster.faults.list() == []
    await _get(api, "a")


async def _do(verb: str, api: client.ApiClient, current: Obj) -> int:
    """Perform one request of a verb against the widgets; return its HTTP status. ``current``
    is the body for the PUT (read beforehand, so that the update is a single request)."""
    objects = _objects(api)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "get": lambda: _get(api, "a"),
        "list": lambda: objects.list_namespaced_custom_object(G, V, NS, PLURAL),
        "watch": lambda: _first_watch_event(api),
        "create": lambda: _create(api, "created"),
        "update": lambda: objects.replace_namespaced_custom_object(G, V, NS, PLURAL, "a", current),
        "patch": lambda: objects.patch_namespaced_custom_object(
            G, V, NS, PLURAL, "a", {"spec": {"x": 1}}, _content_type=MERGE
        ),
        "delete": lambda: objects.delete_namespaced_custom_object(G, V, NS, PLURAL, "victim"),
    }
    try:
        await calls[verb]()
    except ApiException as exc:
        return int(exc.status)
    return 200


async def _first_watch_event(api: client.ApiClient) -> Obj:
    async with watch.Watch() as w:
        async for event in w.stream(
            _objects(api).list_namespaced_custom_object, G, V, NS, PLURAL, timeout_seconds=30
        ):
            result: Obj = event
            return result
    raise AssertionError("the watch ended without an event")


@pytest.mark.parametrize("verb", VERBS)
async def test_f53_fault_matches_only_its_verb(
    cluster: FakeCluster, api: client.ApiClient, verb: str
) -> None:
    """F53: a fault for one verb (get, list, watch, create, update, patch, delete) hits that verb
    only; F58: the journal classifies every request by the same verbs."""
    current = await _create(api, "a")
    await _create(api, "victim")
    cluster.journal.clear()
    fault = cluster.faults.error(503, verbs=(verb,))
    statuses = {v: await _do(v, api, current) for v in VERBS}
    assert statuses == {v: 503 if v == verb else 200 for v in VERBS}
    assert fault.fired == 1
    journaled = {e.verb for e in cluster.journal.entries() if e.status == 503}
    assert journaled == {verb}
    assert {e.verb for e in cluster.journal.entries()} == set(VERBS)


PATH_CASES = {
    "one-object": (r"/widgets/a$", {"get-a": 503, "get-b": 200, "list": 200, "status-a": 200}),
    "status-subresource": (r"/status$", {"get-a": 200, "get-b": 200, "list": 200, "status-a": 503}),
    "whole-resource": (r"/widgets\b", {"get-a": 503, "get-b": 503, "list": 503, "status-a": 503}),
    "other-resource": (r"/configmaps", {"get-a": 200, "get-b": 200, "list": 200, "status-a": 200}),
}


@pytest.mark.parametrize(("pattern", "expected"), list(PATH_CASES.values()), ids=list(PATH_CASES))
async def test_f53_fault_matches_path_regex(
    cluster: FakeCluster, api: client.ApiClient, pattern: str, expected: dict[str, int]
) -> None:
    """F53: the path pattern is a regular expression searched in the request path."""
    await _create(api, "a")
    await _create(api, "b")
    cluster.faults.error(503, path=pattern)
    objects = _objects(api)
    requests: dict[str, Callable[[], Awaitable[Any]]] = {
        "get-a": lambda: _get(api, "a"),
        "get-b": lambda: _get(api, "b"),
        "list": lambda: objects.list_namespaced_custom_object(G, V, NS, PLURAL),
        "status-a": lambda: objects.get_namespaced_custom_object_status(G, V, NS, PLURAL, "a"),
    }
    seen = {}
    for name, call in requests.items():
        try:
            await call()
        except ApiException as exc:
            seen[name] = exc.status
        else:
            seen[name] = 200
    assert seen == expected


async def test_f53_error_fault_on_watch_reaches_the_watch_client(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F53: a fault on ``watch`` is answered before the stream starts; kubernetes_asyncio's
    ``Watch.stream`` raises ``ApiException`` with the code."""
    cluster.faults.error(429, verbs=("watch",), count=1, retry_after=1)
    with pytest.raises(ApiException) as caught:
        await _first_watch_event(api)
    assert caught.value.status == 429


BAD_FAULT_ARGS: dict[str, tuple[dict[str, Any], str]] = {
    "unknown-verb": ({"kind": "error", "verbs": ("post",)}, "unknown verbs"),
    "unknown-kind": ({"kind": "explode"}, "fault kind"),
    "bad-regex": ({"kind": "error", "path": "("}, "not a regular expression"),
    "count-string": ({"kind": "error", "count": "3"}, "'count' must be a number"),
    "code-bool": ({"kind": "error", "code": True}, "'code' must be a number"),
    "delay-none": ({"kind": "latency", "delay": None}, "'delay' must be a number"),
    "probability-above-one": ({"kind": "error", "probability": 1.5}, "within \\[0, 1\\]"),
    "probability-string": ({"kind": "error", "probability": "0.1"}, "'probability' must be"),
    "bad-user-agent-regex": ({"kind": "error", "user_agent": "["}, "'user_agent'.*not a regular"),
    "user-agent-not-a-string": ({"kind": "error", "user_agent": 7}, "'user_agent' must be a str"),
    "hold-not-a-bool": ({"kind": "latency", "hold": "yes"}, "'hold' must be true or false"),
    "hold-on-an-error": ({"kind": "error", "hold": True}, "'hold' applies to latency faults"),
}


@pytest.mark.parametrize(
    ("kwargs", "message"), list(BAD_FAULT_ARGS.values()), ids=list(BAD_FAULT_ARGS)
)
def test_f53_malformed_faults_are_rejected_when_made(kwargs: dict[str, Any], message: str) -> None:
    """F53: faults name only the Kubernetes verbs and the two kinds, with a valid path pattern
    and numeric settings; anything else is a ``ValueError`` at once."""
    with pytest.raises(ValueError, match=message):
        Fault(**kwargs)


# --- F54: latency ------------------------------------------------------------------------------


async def test_f54_long_delay_makes_the_client_time_out(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F54: a very long delay simulates a hung server: the client's ``_request_timeout`` fires.
    With ``count=1`` only that request is delayed."""
    await _create(api, "a")
    fault = cluster.faults.latency(3600.0, verbs=("get",), count=1)
    with pytest.raises(TimeoutError):
        await _get(api, "a", _request_timeout=0.5)
    assert fault.fired == 1
    assert (await _get(api, "a"))["metadata"]["name"] == "a"
    assert fault.fired == 1


async def test_f54_held_answer_the_write_lands_although_the_client_timed_out(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F54 extension ``hold``: the delay comes after the request took effect, so a client that
    times out has still written (a real server's answer lost on the way back). Another
    client sees the write; the writer's retry with the old resourceVersion gets 409."""
    created = await _create(api, "a", x=0)
    fault = cluster.faults.latency(2.0, verbs=("patch",), count=1, hold=True)
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    body = {**stale, "spec": {"x": 1}}
    with pytest.raises(TimeoutError):
        await _objects(api).patch_namespaced_custom_object(
            G, V, NS, PLURAL, "a", body, _content_type=MERGE, _request_timeout=0.3
        )
    assert fault.fired == 1
    await _wait_until(lambda: (cluster.object(G, PLURAL, "a", NS) or {}).get("spec") == {"x": 1})
    with pytest.raises(ApiException) as conflict:
        await _objects(api).patch_namespaced_custom_object(
            G, V, NS, PLURAL, "a", body, _content_type=MERGE
        )
    assert conflict.value.status == 409
    assert (await _get(api, "a"))["spec"] == {"x": 1}


def test_f54_hold_is_reported_apart_from_the_delay_and_not_with_an_error() -> None:
    """``pick`` returns the delay before the request and the hold after it separately; an
    error answer means the request never took effect, so nothing is held."""
    faults = Faults()
    faults.latency(0.25, verbs=("get",))
    faults.latency(1.0, verbs=("get", "patch"), hold=True)
    assert faults.pick("get", "/api/v1/namespaces") == (0.25, None, 1.0)
    assert faults.pick("patch", "/api/v1/namespaces/x") == (0.0, None, 1.0)
    error = faults.error(503, verbs=("patch",))
    assert faults.pick("patch", "/api/v1/namespaces/x") == (0.0, error, 0.0)


async def test_f54_latency_until_cleared_counts_every_matching_request(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F54/F58: a latency fault without a count applies to every matching request until
    cleared, and counts them; latency and an error fault can fire on the same request."""
    await _create(api, "a")
    delay = cluster.faults.latency(0.001, verbs=("get", "list"))
    error = cluster.faults.error(503, verbs=("list",), count=1)
    await _get(api, "a")
    await _get(api, "a")
    with pytest.raises(ApiException):
        await _objects(api).list_namespaced_custom_object(G, V, NS, PLURAL)
    await _objects(api).patch_namespaced_custom_object(
        G, V, NS, PLURAL, "a", {"spec": {"x": 1}}, _content_type=MERGE
    )
    assert (delay.fired, error.fired) == (3, 1)
    cluster.faults.clear()
    await _get(api, "a")
    assert delay.fired == 3


def test_f54_jitter_is_bounded_and_deterministic_per_seed() -> None:
    """F54: jitter adds a random extra delay in [0, jitter], from the cluster's seeded source."""

    def delays(seed: int) -> list[float]:
        faults = Faults(seed)
        faults.latency(1.0, jitter=0.5)
        return [faults.pick("get", "/api/v1/namespaces")[0] for _ in range(20)]

    first = delays(7)
    assert first == delays(7)
    assert first != delays(8)
    assert all(1.0 <= d <= 1.5 for d in first)
    assert len(set(first)) > 1


def test_f53_f54_probability_fails_a_seeded_fraction_and_counts_only_those() -> None:
    """F53/F54 extension: ``probability`` applies an error or a delay to that fraction of the
    matching requests, drawn from the cluster's seeded source; spared requests do not count."""

    def run(seed: int) -> tuple[list[int], int, int]:
        faults = Faults(seed)
        error = faults.error(503, verbs=("get",), probability=0.1, retry_after=1)
        delay = faults.latency(0.5, verbs=("get",), probability=0.2)
        codes = []
        for _ in range(2000):
            picked = faults.pick("get", "/api/v1/namespaces/default/secrets/a").error
            codes.append(picked.code if picked is not None else 200)
        assert faults.pick("list", "/api/v1/namespaces") == (
            0.0,
            None,
            0.0,
        )  # other verbs untouched
        return codes, error.fired, delay.fired

    codes, errors, delays = run(11)
    assert run(11) == (codes, errors, delays)
    assert run(12)[0] != codes
    assert errors == codes.count(503)
    assert 150 <= errors <= 250, errors  # 10% of 2,000, well within a seeded binomial's spread
    assert 300 <= delays <= 500, delays


async def test_f53_probability_fault_through_the_client(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F53: a probabilistic fault answers a real request with its code, or lets it through."""
    await _create(api, "a")
    fault = cluster.faults.error(429, verbs=("get",), probability=0.5, retry_after=2)
    codes = []
    retry_after = set()
    for _ in range(40):
        try:
            await _get(api, "a")
        except ApiException as exc:
            codes.append(exc.status)
            retry_after.add(exc.headers["Retry-After"])
        else:
            codes.append(200)
    assert set(codes) == {200, 429}
    assert retry_after == {"2"}
    assert codes.count(429) == fault.fired


# --- F55: dropping watches ---------------------------------------------------------------------


async def test_f55_clean_drop_ends_the_stream_normally(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F55: a clean drop ends the chunked body; ``Watch.stream`` with ``timeout_seconds`` ends
    without an error."""
    await _create(api, "a")
    events = []
    dropped = -1
    with anyio.fail_after(DEADLINE):
        async with watch.Watch() as w:
            async for event in w.stream(
                _objects(api).list_namespaced_custom_object, G, V, NS, PLURAL, timeout_seconds=600
            ):
                events.append((event["type"], event["object"]["metadata"]["name"]))
                dropped = cluster.drop_watches(r"/widgets$")
    assert events == [("ADDED", "a")]
    assert dropped == 1
    await _wait_until(lambda: not cluster.store.watchers())


async def test_f55_abrupt_drop_is_a_client_payload_error(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F55: an abrupt drop cuts the connection in the middle of the chunked body, which
    kubernetes_asyncio reports as ``aiohttp.ClientPayloadError``."""
    await _create(api, "a")

    async def watch_and_drop() -> None:
        async with watch.Watch() as w:
            async for _event in w.stream(
                _objects(api).list_namespaced_custom_object, G, V, NS, PLURAL, timeout_seconds=600
            ):
                cluster.drop_watches(abrupt=True)

    with anyio.fail_after(DEADLINE), pytest.raises(aiohttp.ClientPayloadError):
        await watch_and_drop()
    # The API still answers on new connections.
    assert (await _get(api, "a"))["metadata"]["name"] == "a"


async def test_f55_drop_selects_watches_by_path(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F55: only watches whose path matches the pattern are closed; others keep streaming."""
    core = client.CoreV1Api(api)
    widget_events: list[str] = []
    configmap_events: list[str] = []

    async def watch_widgets() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(
                _objects(api).list_namespaced_custom_object, G, V, NS, PLURAL, timeout_seconds=600
            ):
                widget_events.append(event["type"])

    async def watch_configmaps() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(core.list_namespaced_config_map, NS, timeout_seconds=600):
                configmap_events.append(event["object"].metadata.name)

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_widgets)
            tg.start_soon(watch_configmaps)
            await _wait_until(lambda: len(cluster.store.watchers()) == 2)
            assert cluster.drop_watches("widgets") == 1
            await _wait_until(lambda: len(cluster.store.watchers()) == 1)
            [remaining] = cluster.store.watchers()
            assert remaining.path.endswith("/configmaps")
            await core.create_namespaced_config_map(NS, {"metadata": {"name": "after-drop"}})
            await _wait_until(lambda: configmap_events == ["after-drop"])
            assert cluster.drop_watches("configmaps") == 1
    assert widget_events == []


async def test_f55_watch_forever_client_resumes_after_a_clean_drop(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F55 with section 9: ``Watch.stream`` without ``timeout_seconds`` reconnects after a clean
    drop from the last seen resourceVersion, so no event is lost or repeated."""
    first = await _create(api, "a")
    events: list[tuple[str, str]] = []
    with anyio.fail_after(DEADLINE):
        async with watch.Watch() as w:
            async for event in w.stream(
                _objects(api).list_namespaced_custom_object, G, V, NS, PLURAL
            ):
                events.append((event["type"], event["object"]["metadata"]["name"]))
                if len(events) == 1:
                    cluster.drop_watches()
                    await _create(api, "b")
                else:
                    w.stop()
    assert events == [("ADDED", "a"), ("ADDED", "b")]
    watches = _journal(cluster, verb="watch")
    assert len(watches) >= 2
    assert f"resourceVersion={first['metadata']['resourceVersion']}" in watches[1].query


# --- F56: cluster down and up ------------------------------------------------------------------


async def test_f56_down_refuses_connections_and_up_restores_port_and_state(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F56: down → connection refused for old and new clients; up → same port, same CA and
    token (the same kubeconfig works), same stored state and resourceVersions."""
    created = await _create(api, "a")
    port, kubeconfig = cluster.port, cluster.kubeconfig
    await cluster.down()
    assert not cluster.is_up
    with pytest.raises(aiohttp.ClientConnectorError):
        await _get(api, "a")
    fresh = await config.new_client_from_config_dict(kubeconfig)
    async with fresh:
        with pytest.raises(aiohttp.ClientConnectorError):
            await client.CoreV1Api(fresh).list_namespace()
    await cluster.up()
    assert cluster.is_up
    assert cluster.port == port
    assert cluster.kubeconfig == kubeconfig
    again = await config.new_client_from_config_dict(kubeconfig)
    async with again:
        obj: Obj = await _objects(again).get_namespaced_custom_object(G, V, NS, PLURAL, "a")
    assert obj["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert obj["metadata"]["uid"] == created["metadata"]["uid"]
    # The old client recovers too (its pooled connections were closed by the server).
    assert (await _get(api, "a"))["metadata"]["uid"] == created["metadata"]["uid"]


async def test_f56_down_cuts_open_watches(cluster: FakeCluster, api: client.ApiClient) -> None:
    """F56: going down drops open watches abruptly; after up, a watch resumed from the last
    resourceVersion sees what happened meanwhile (history is kept)."""
    created = await _create(api, "a")

    async def watch_and_go_down() -> None:
        async with watch.Watch() as w:
            async for _event in w.stream(
                _objects(api).list_namespaced_custom_object, G, V, NS, PLURAL, timeout_seconds=600
            ):
                await cluster.down()

    with anyio.fail_after(DEADLINE):
        with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ClientConnectionError)):
            await watch_and_go_down()
        await _wait_until(lambda: not cluster.store.watchers())
        await cluster.up()
        await _create(api, "b")
        async with watch.Watch() as w:
            async for event in w.stream(
                _objects(api).list_namespaced_custom_object,
                G,
                V,
                NS,
                PLURAL,
                resource_version=created["metadata"]["resourceVersion"],
                timeout_seconds=600,
            ):
                assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")
                w.stop()


# --- F57: watch expiry -------------------------------------------------------------------------


async def _watch_from(api: client.ApiClient, resource_version: str) -> list[str]:
    """Names of the events of a watch resumed at ``resource_version`` until the first one."""
    names: list[str] = []
    with anyio.fail_after(DEADLINE):
        async with watch.Watch() as w:
            async for event in w.stream(
                _objects(api).list_namespaced_custom_object,
                G,
                V,
                NS,
                PLURAL,
                resource_version=resource_version,
                timeout_seconds=600,
            ):
                names.append(event["object"]["metadata"]["name"])
                w.stop()
    return names


async def test_f57_next_resumed_watch_gets_410(cluster: FakeCluster, api: client.ApiClient) -> None:
    """F57: ``expire_next_watches`` makes the next watch that resumes from a resourceVersion get
    the 410 Expired ERROR event; ``Watch.stream`` raises ``ApiException(410)``. A watch without
    a resourceVersion does not use it up; the one after the expired one works again."""
    listed = await _objects(api).list_namespaced_custom_object(G, V, NS, PLURAL)
    rv = listed["metadata"]["resourceVersion"]
    await _create(api, "a")
    cluster.expire_next_watches(1)
    assert (await _first_watch_event(api))["type"] == "ADDED"  # no resourceVersion: not expired
    with pytest.raises(ApiException) as caught:
        await _watch_from(api, rv)
    assert caught.value.status == 410
    assert "Expired" in str(caught.value.reason)
    assert await _watch_from(api, rv) == ["a"]


async def test_f57_history_truncation_expires_older_resource_versions(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F57: after truncating the history, resuming from an older resourceVersion gets 410, so
    the client must re-list; resuming from the re-listed resourceVersion works."""
    a = await _create(api, "a")
    await _create(api, "b")
    cluster.truncate_history()
    with pytest.raises(ApiException) as caught:
        await _watch_from(api, a["metadata"]["resourceVersion"])
    assert caught.value.status == 410
    relisted = await _objects(api).list_namespaced_custom_object(G, V, NS, PLURAL)
    assert [i["metadata"]["name"] for i in relisted["items"]] == ["a", "b"]
    await _create(api, "c")
    assert await _watch_from(api, relisted["metadata"]["resourceVersion"]) == ["c"]


WATCH_FOREVER_410_CASES = {
    "expire-next-1-is-absorbed-by-the-client-retry": ("expire", 1, ["b"]),
    "expire-next-2-reaches-the-caller": ("expire", 2, None),
    "truncated-history-reaches-the-caller": ("truncate", 0, None),
}


@pytest.mark.parametrize(
    ("how", "count", "expected"),
    list(WATCH_FOREVER_410_CASES.values()),
    ids=list(WATCH_FOREVER_410_CASES),
)
async def test_f57_watch_forever_client_retries_410_once(
    cluster: FakeCluster, api: client.ApiClient, how: str, count: int, expected: list[str] | None
) -> None:
    """F57 with section 9: ``Watch.stream`` without ``timeout_seconds`` retries a 410 once with
    the same resourceVersion. So ``expire_next_watches(1)`` is absorbed by that retry; to drive a
    watch-forever client into its re-list path use ``count >= 2`` or ``truncate_history()``."""
    a = await _create(api, "a")
    await _create(api, "b")
    if how == "expire":
        cluster.expire_next_watches(count)
    else:
        cluster.truncate_history()
    names: list[str] = []

    async def watch_forever() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(
                _objects(api).list_namespaced_custom_object,
                G,
                V,
                NS,
                PLURAL,
                resource_version=a["metadata"]["resourceVersion"],
            ):
                names.append(event["object"]["metadata"]["name"])
                w.stop()

    with anyio.fail_after(DEADLINE):
        if expected is None:
            with pytest.raises(ApiException) as caught:
                await watch_forever()
            assert caught.value.status == 410
        else:
            await watch_forever()
            assert names == expected
    assert len(_journal(cluster, verb="watch")) == 2


# --- F58: journal ------------------------------------------------------------------------------


async def test_f58_journal_records_status_patch_content_type_and_field_manager(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F58: method, verb, path, query, content type, field manager and status code of a status
    merge patch sent with ``_content_type='application/merge-patch+json'``."""
    await _create(api, "a")
    cluster.journal.clear()
    await _objects(api).patch_namespaced_custom_object_status(
        G,
        V,
        NS,
        PLURAL,
        "a",
        {"status": {"phase": "Ready"}},
        field_manager="my-dispatcher",
        _content_type=MERGE,
    )
    [entry] = cluster.journal.entries()
    assert entry.method == "PATCH"
    assert entry.verb == "patch"
    assert entry.path == f"{WIDGETS_PATH}/a/status"
    assert "fieldManager=my-dispatcher" in entry.query
    assert entry.content_type == MERGE
    assert entry.field_manager == "my-dispatcher"
    assert entry.status == 200
    assert entry.user_agent.startswith("OpenAPI-Generator/")


async def test_f58_section8_dict_body_without_content_type_is_json_patch_and_400(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """Section 8 / F8 / F58: ``patch_namespaced_custom_object_status(body=dict)`` without
    ``_content_type`` sends ``application/json-patch+json``; the server answers 400 and changes
    nothing. The journal shows what the client really sent."""
    created = await _create(api, "a")
    cluster.journal.clear()
    with pytest.raises(ApiException) as caught:
        await _objects(api).patch_namespaced_custom_object_status(
            G, V, NS, PLURAL, "a", {"status": {"phase": "Ready"}}
        )
    assert caught.value.status == 400
    assert _status(caught.value)["reason"] == "BadRequest"
    [entry] = cluster.journal.entries()
    assert (entry.content_type, entry.status) == ("application/json-patch+json", 400)
    stored = cluster.object(G, PLURAL, "a", NS)
    assert stored is not None
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_f58_journal_records_refusals_faults_and_watches(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F58: 401s, injected faults and watches are journaled too, with their status codes."""
    await _create(api, "a")
    cluster.journal.clear()
    cluster.faults.error(503, verbs=("get",), count=1)
    with pytest.raises(ApiException):
        await _get(api, "a")
    await _first_watch_event(api)
    bad = json.loads(json.dumps(cluster.kubeconfig))
    bad["users"][0]["user"]["token"] = "wrong"
    other = await config.new_client_from_config_dict(bad)
    async with other:
        with pytest.raises(ApiException):
            await client.CoreV1Api(other).list_namespace()
    entries = cluster.journal.entries()
    assert [(e.verb, e.status) for e in entries[:2]] == [("get", 503), ("watch", 200)]
    assert "watch=True" in entries[1].query
    assert (entries[2].path, entries[2].status) == ("/api/v1/namespaces", 401)
    assert len(entries) == 3


NON_RESOURCE_PATHS = ["/version", "/api", "/api/v1", "/apis", "/apis/example.com", "/healthz"]


@pytest.mark.parametrize("path", NON_RESOURCE_PATHS)
async def test_f53_non_resource_requests_have_verb_get(
    cluster: FakeCluster, api: client.ApiClient, path: str
) -> None:
    """F53/F58: as in kube-apiserver's RequestInfo, a GET of a non-resource path (version,
    discovery, health) has verb ``get``: a ``list`` fault must not break discovery."""
    cluster.faults.error(503, verbs=("list",))
    cluster.journal.clear()
    await api.call_api(path, "GET", auth_settings=["BearerToken"])
    [entry] = cluster.journal.entries()
    assert (entry.path, entry.verb, entry.status) == (path, "get", 200)


async def test_f58_journal_is_bounded() -> None:
    """F58: the journal keeps only the newest ``journal_size`` entries."""
    async with FakeCluster("small", journal_size=3) as fake:
        fresh = await config.new_client_from_config_dict(fake.kubeconfig)
        async with fresh:
            core = client.CoreV1Api(fresh)
            for name in ("default", "kube-system", "kube-public", "default", "kube-system"):
                await core.read_namespace(name)
        entries = fake.journal.entries()
    assert [e.path.rsplit("/", 1)[-1] for e in entries] == ["kube-public", "default", "kube-system"]


async def test_f58_all_faults_used(cluster: FakeCluster, api: client.ApiClient) -> None:
    """F58: tests can assert that every fault they set up fired (and how often)."""
    await _create(api, "a")
    faults = [
        cluster.faults.error(500, verbs=("get",), count=1),
        cluster.faults.error(409, verbs=("patch",), count=2),
        cluster.faults.latency(0.001, verbs=("list",), count=1),
    ]
    for call in (
        lambda: _get(api, "a"),
        lambda: _objects(api).list_namespaced_custom_object(G, V, NS, PLURAL),
    ):
        with contextlib.suppress(ApiException):
            await call()
    unused = [f for f in cluster.faults.list() if f.fired == 0]
    assert unused == [faults[1]]
    assert [f.fired for f in faults] == [1, 0, 1]


# --- F52: the admin endpoint -------------------------------------------------------------------


@pytest.fixture
async def admin(cluster: FakeCluster) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session for the admin endpoint, with the cluster's bearer token."""
    headers = {"Authorization": f"Bearer {cluster.token}"}
    async with aiohttp.ClientSession(base_url=cluster.admin_url, headers=headers) as session:
        yield session


async def _admin_json(
    session: aiohttp.ClientSession, method: str, path: str, body: Any = None, status: int = 200
) -> Any:
    async with session.request(method, path, json=body) as response:
        assert response.status == status, await response.text()
        return await response.json()


async def test_f52_admin_endpoint_is_separate_loopback_http_and_needs_the_token(
    cluster: FakeCluster, api: client.ApiClient
) -> None:
    """F52: its own port on 127.0.0.1, plain HTTP, bearer token required (``/healthz`` open),
    and not part of the API's discovery."""
    assert cluster.admin_url.startswith("http://127.0.0.1:")
    assert cluster.admin_port != cluster.port
    async with aiohttp.ClientSession(base_url=cluster.admin_url) as anonymous:
        async with anonymous.get("/healthz") as response:
            assert (response.status, await response.text()) == (200, "ok")
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Bearer t\u00f6ken"},
        ):
            async with anonymous.get("/faults", headers=headers) as response:
                assert response.status == 401
    groups = await client.ApisApi(api).get_api_versions()
    assert all("admin" not in g.name for g in groups.groups)


async def test_f52_admin_lists_adds_and_clears_faults(
    cluster: FakeCluster, api: client.ApiClient, admin: aiohttp.ClientSession
) -> None:
    """F52/F53/F58: faults added over HTTP take effect, report ``fired``, and can be removed one
    by one or all at once; bad fault bodies are 400."""
    await _create(api, "a")
    assert await _admin_json(admin, "GET", "/faults") == []
    added = await _admin_json(
        admin,
        "POST",
        "/faults",
        {"kind": "error", "verbs": ["get"], "path": "/widgets/a$", "code": 503, "count": 1},
        status=201,
    )
    assert (added["code"], added["verbs"], added["fired"]) == (503, ["get"], 0)
    with pytest.raises(ApiException) as caught:
        await _get(api, "a")
    assert caught.value.status == 503
    [listed] = await _admin_json(admin, "GET", "/faults")
    assert (listed["id"], listed["fired"]) == (added["id"], 1)

    assert await _admin_json(admin, "DELETE", f"/faults/{added['id']}") == {"removed": True}
    assert await _admin_json(admin, "DELETE", f"/faults/{added['id']}", status=404) == {
        "removed": False
    }
    await _admin_json(admin, "POST", "/faults", {"kind": "latency", "delay": 0.001}, status=201)
    held = {"kind": "latency", "delay": 0.001, "hold": True}
    assert (await _admin_json(admin, "POST", "/faults", held, status=201))["hold"] is True
    await _admin_json(admin, "POST", "/faults", {"kind": "error", "code": 500}, status=201)
    cleared = await _admin_json(admin, "DELETE", "/faults")
    assert [(f["kind"], f["hold"]) for f in cleared] == [
        ("latency", False),
        ("latency", True),
        ("error", False),
    ]
    assert cluster.faults.list() == []

    for bad in BAD_FAULTS.values():
        error = await _admin_json(admin, "POST", "/faults", bad, status=400)
        assert error["error"]
    assert cluster.faults.list() == []
    assert await _get(api, "a")


BAD_FAULTS: dict[str, Any] = {
    "unknown-field": {"kind": "error", "colour": "red"},
    "unknown-kind": {"kind": "explode"},
    "unknown-verb": {"kind": "error", "verbs": ["post"]},
    "bad-regex": {"kind": "error", "path": "("},
    "count-not-a-number": {"kind": "error", "count": "x"},
    "code-not-a-number": {"kind": "error", "code": "503"},
    "delay-not-a-number": {"kind": "latency", "delay": "slow"},
    "not-an-object": [1],
}


@pytest.mark.parametrize("body", list(BAD_FAULTS.values()), ids=list(BAD_FAULTS))
async def test_f52_admin_rejects_bad_faults_without_poisoning_the_cluster(
    cluster: FakeCluster, api: client.ApiClient, admin: aiohttp.ClientSession, body: Any
) -> None:
    """F52: a malformed fault is refused with 400 and not installed, so the API keeps
    answering (a fault with ``count: "x"`` used to be accepted and then made every API request
    fail with a plain 500)."""
    error = await _admin_json(admin, "POST", "/faults", body, status=400)
    assert error["error"]
    assert cluster.faults.list() == []
    await client.CoreV1Api(api).list_namespace()


async def test_f52_admin_rejects_a_bad_watch_drop_pattern(
    admin: aiohttp.ClientSession,
) -> None:
    """F52/F55: an invalid regular expression is a 400, not an internal error."""
    error = await _admin_json(admin, "POST", "/watches/drop", {"path": "("}, status=400)
    assert error["error"]


async def test_f52_admin_reads_and_clears_the_journal(
    cluster: FakeCluster, api: client.ApiClient, admin: aiohttp.ClientSession
) -> None:
    """F52/F58: the journal over HTTP, with the same fields as the Python API."""
    await _admin_json(admin, "DELETE", "/journal")
    await _objects(api).create_namespaced_custom_object(
        G, V, NS, PLURAL, widget("a"), field_manager="tester"
    )
    [entry] = await _admin_json(admin, "GET", "/journal")
    assert entry["method"] == "POST"
    assert entry["verb"] == "create"
    assert entry["path"] == WIDGETS_PATH
    assert entry["field_manager"] == "tester"
    assert entry["content_type"] == "application/json"
    assert entry["status"] == 201
    await _admin_json(admin, "DELETE", "/journal")
    assert await _admin_json(admin, "GET", "/journal") == []


async def test_f52_admin_brings_the_cluster_down_and_up(
    cluster: FakeCluster, api: client.ApiClient, admin: aiohttp.ClientSession
) -> None:
    """F52/F56: ``POST /down`` and ``POST /up`` over the admin port; ``GET /state`` reports it."""
    await _create(api, "a")
    state = await _admin_json(admin, "GET", "/state")
    assert (state["name"], state["up"], state["port"]) == ("test", True, cluster.port)
    assert await _admin_json(admin, "POST", "/down") == {"up": False}
    assert (await _admin_json(admin, "GET", "/state"))["up"] is False
    with pytest.raises(aiohttp.ClientConnectorError):
        await _get(api, "a")
    assert await _admin_json(admin, "POST", "/up") == {"up": True, "port": state["port"]}
    assert (await _get(api, "a"))["metadata"]["name"] == "a"


async def test_f52_admin_drops_and_expires_watches_and_truncates_history(
    cluster: FakeCluster, api: client.ApiClient, admin: aiohttp.ClientSession
) -> None:
    """F52/F55/F57: watch controls over HTTP."""
    a = await _create(api, "a")
    rv = a["metadata"]["resourceVersion"]
    with anyio.fail_after(DEADLINE):
        async with watch.Watch() as w:
            async for _event in w.stream(
                _objects(api).list_namespaced_custom_object, G, V, NS, PLURAL, timeout_seconds=600
            ):
                state = await _admin_json(admin, "GET", "/state")
                assert state["watches"] == [WIDGETS_PATH]
                dropped = await _admin_json(
                    admin, "POST", "/watches/drop", {"path": "widgets", "abrupt": False}
                )
                assert dropped == {"dropped": 1}

    assert await _admin_json(admin, "POST", "/watches/expire", {"count": 1}) == {"pending": 1}
    with pytest.raises(ApiException) as caught:
        await _watch_from(api, rv)
    assert caught.value.status == 410

    await _create(api, "b")
    truncated = await _admin_json(admin, "POST", "/history/truncate")
    assert truncated == {"resourceVersion": str(cluster.store.resource_version)}
    with pytest.raises(ApiException) as caught:
        await _watch_from(api, rv)
    assert caught.value.status == 410


# --- F53/F54 extension: faults for one client (User-Agent) ----------------------------------------

DISPATCHER_AGENT = "multikueue-dispatcher/0.1.0"
EMULATOR_AGENT = "kueue-emulator"
AGENT_CASES = {
    "empty-matches-every-client": ("", {"dispatcher": 503, "emulator": 503}),
    "anchored-prefix-of-one-client": (
        r"^multikueue-dispatcher/",
        {"dispatcher": 503, "emulator": 200},
    ),
    "searched-anywhere-in-the-header": (r"dispatcher", {"dispatcher": 503, "emulator": 200}),
    "the-other-client": (r"^kueue-emulator$", {"dispatcher": 200, "emulator": 503}),
    "no-client": (r"^kubectl/", {"dispatcher": 200, "emulator": 200}),
}


@pytest.mark.parametrize(("pattern", "expected"), list(AGENT_CASES.values()), ids=list(AGENT_CASES))
async def test_f53_f54_fault_matches_user_agent_regex(
    cluster: FakeCluster,
    api: client.ApiClient,
    admin: aiohttp.ClientSession,
    pattern: str,
    expected: dict[str, int],
) -> None:
    """F53/F54 extension: ``user_agent`` is a regular expression searched in the request's
    ``User-Agent`` header (empty: every client), so a fault suite can fail one client's requests
    and spare another's on the same cluster. Installed over the admin endpoint (the body becomes
    ``Fault(**body)``), checked with real requests of two clients, counted only when it fires, and
    the spared client's requests reach the server untouched (journal)."""
    await _create(api, "a")
    added = await _admin_json(
        admin,
        "POST",
        "/faults",
        {"kind": "error", "code": 503, "verbs": ["get"], "user_agent": pattern},
        status=201,
    )
    assert added["user_agent"] == pattern
    delay = cluster.faults.latency(0.001, verbs=("get",), user_agent=pattern)
    cluster.journal.clear()
    seen: dict[str, int] = {}
    for client_name, agent in (("dispatcher", DISPATCHER_AGENT), ("emulator", EMULATOR_AGENT)):
        api.user_agent = agent
        try:
            await _get(api, "a")
        except ApiException as exc:
            seen[client_name] = exc.status
        else:
            seen[client_name] = 200
    assert seen == expected
    [fault] = [f for f in await _admin_json(admin, "GET", "/faults") if f["id"] == added["id"]]
    failed = list(expected.values()).count(503)
    assert (fault["fired"], delay.fired) == (failed, failed)
    journal = {e.user_agent: e.status for e in _journal(cluster, verb="get")}
    assert journal == {
        DISPATCHER_AGENT: expected["dispatcher"],
        EMULATOR_AGENT: expected["emulator"],
    }


def test_f53_user_agent_fault_skips_other_clients_without_drawing() -> None:
    """F53 extension: a probabilistic fault for one client neither fires on nor draws for the
    other clients' requests, so the fraction applies to that client's requests exactly: the same
    seed gives the same draws for the dispatcher whether or not other clients' requests
    interleave."""

    def dispatcher_codes(interleave: bool) -> list[int]:
        faults = Faults(5)
        faults.error(500, probability=0.1, user_agent=r"^multikueue-dispatcher/")
        codes = []
        for _ in range(500):
            if interleave:
                assert faults.pick("get", "/api/v1/secrets", EMULATOR_AGENT) == (0.0, None, 0.0)
            picked = faults.pick("get", "/api/v1/secrets", DISPATCHER_AGENT).error
            codes.append(picked.code if picked is not None else 200)
        return codes

    alone = dispatcher_codes(interleave=False)
    assert dispatcher_codes(interleave=True) == alone
    assert 25 <= alone.count(500) <= 75, alone.count(500)  # 10% of 500, seeded
