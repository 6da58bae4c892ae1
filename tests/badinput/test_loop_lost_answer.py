"""The nomination loop when the answer to a nomination write is lost: the API server stored the
write, but the dispatcher's request timed out (a ``hold`` latency fault, F54 extension).

The dispatcher retries on fresh data and finds nothing left to write; what the write would have
recorded must not be lost with its answer: the ``Nominated`` Event and the counted nomination
(contract C16 for the field, C18/C28 for admission: ``clusterName`` may only be set from the
nomination, and Kueue clears the nomination when it sets it). Runs on the loop harness of the
bad-input catalogue (the real registry and Nominator on fake API servers, no Kueue).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from dispatcher.k8s.client import USER_AGENT, KubeApi, client_from_kubeconfig
from dispatcher.k8s.resources import WORKLOADS
from dispatcher_sandbox.harness.badinput import (
    MERGE,
    SchemaLess,
    first_active,
    pod_set,
    schema_less_dispatcher,
    workload,
)

REQUEST_TIMEOUT = 1.0  # the dispatcher's manager requests, in these tests
HOLD = 5.0  # the lost answer is held this long: well past the timeout
COUNTED = {("w1", "first-active"): 1.0}  # multikueue_dispatcher_nominations_total
MESSAGE = "nominated [w1] by first-active: the first active cluster. "


@pytest.fixture
async def env() -> AsyncIterator[SchemaLess]:
    async with schema_less_dispatcher(first_active, workers=("w1",)) as env:
        env.api.request_timeout = REQUEST_TIMEOUT
        yield env


async def kueue_stand_in(env: SchemaLess) -> KubeApi:
    """A client with its own User-Agent, for what Kueue would write (the fault spares it)."""
    client = await client_from_kubeconfig(env.manager.kubeconfig, user_agent="kueue-stand-in")
    return KubeApi(client, name="kueue-stand-in")


def lose_the_first_answer(env: SchemaLess, name: str) -> None:
    """The dispatcher's first status write of ``name`` is stored, its answer held back."""
    env.manager.faults.latency(
        HOLD,
        verbs=("patch",),
        path=f"/workloads/{re.escape(name)}/status$",
        user_agent=f"^{re.escape(USER_AGENT)}$",
        count=1,
        hold=True,
    )


def stored_nomination(env: SchemaLess, name: str) -> list[str] | None:
    stored = env.manager.object("kueue.x-k8s.io", "workloads", name, "default") or {}
    nominated: list[str] | None = (stored.get("status") or {}).get("nominatedClusterNames")
    return nominated


async def test_lost_answer_the_landed_nomination_gets_its_event_and_count(
    env: SchemaLess,
) -> None:
    """The write landed; the retry sees ``[w1]`` in its cache and has nothing to write: the
    Event and the counter of that write are recorded then, once."""
    lose_the_first_answer(env, "job")
    async with await kueue_stand_in(env) as kueue:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]), api=kueue)
    await env.wait(lambda: ("Nominated", MESSAGE) in env.recorded)
    assert env.nominations() == COUNTED
    settled = env.reconciles["default/job"] + 3  # later reconciles add nothing
    await env.wait(lambda: env.reconciles["default/job"] >= settled)
    assert env.nominations() == COUNTED
    nominated = [e["message"] for e in await env.events("job") if e["reason"] == "Nominated"]
    assert nominated == [MESSAGE]
    assert stored_nomination(env, "job") == ["w1"]


async def test_lost_answer_then_admitted_before_the_retry(env: SchemaLess) -> None:
    """Kueue admitted the copy on ``w1`` (``clusterName`` set, nomination cleared, C28) while
    the answer was still held: only the lost write can have nominated ``w1`` (C18), so its
    Event and count are recorded although the Workload is no longer eligible."""
    lose_the_first_answer(env, "job")
    async with await kueue_stand_in(env) as kueue:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]), api=kueue)
        await env.wait(lambda: env.nominated("job") == ("w1",))
        await kueue.request(
            "PATCH",
            WORKLOADS.path("default", "job") + "/status",
            body={"status": {"clusterName": "w1", "nominatedClusterNames": None}},
            content_type=MERGE,
        )
    await env.wait(lambda: ("Nominated", MESSAGE) in env.recorded)
    assert env.nominations() == COUNTED
    nominated = [e["message"] for e in await env.events("job") if e["reason"] == "Nominated"]
    assert nominated == [MESSAGE]
    assert stored_nomination(env, "job") is None
