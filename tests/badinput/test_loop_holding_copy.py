"""The nomination loop and copies that already hold quota on a worker (contract C18, C28, C32),
on the loop harness of the bad-input catalogue: the real registry and Nominator on fake API
servers without Kueue's schema, a stand-in decision function, no Kueue.

Kueue admits the first copy that reaches ``Admitted`` on a worker and sets ``clusterName`` to
that worker (C28), which its webhook allows only when the worker is in the nomination (C18). A
dispatcher that moved its nomination away from such a worker would leave the workload
unadmittable: the loop keeps, or writes back, a nomination that includes it. Found by the watch
fault test of issue 8 (a livelock); these tests pin the rule without timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.resources import WORKLOADS
from dispatcher_sandbox.harness.badinput import (
    MERGE,
    first_active,
    multikueue_check,
    pod_set,
    schema_less_dispatcher,
    set_active,
    workload,
)


def always_w2(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
    """A pipeline stand-in that always prefers ``w2``."""
    return Decision("always-w2", ("w2",), "w2 is preferred")


def condition(kind: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": kind,
        "message": "on the worker",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"


def kueue_copy(name: str, origin: str | None = "multikueue") -> dict[str, Any]:
    """A worker Workload as Kueue's copy of the manager Workload ``name`` (origin label, C32),
    or, with ``origin=None``, a same-named Workload that is not a copy."""
    body = workload(name, [pod_set({"cpu": "1"})])
    if origin is not None:
        body["metadata"]["labels"] = {ORIGIN_LABEL: origin}
    return body


async def put_copy(
    worker: KubeApi, conditions: Sequence[str], origin: str | None = "multikueue"
) -> None:
    """Create the copy of ``job`` on ``worker`` (see :func:`kueue_copy`) and write its status
    with ``conditions`` True, as that worker's Kueue would."""
    await worker.create(WORKLOADS, kueue_copy("job", origin), "default")
    await worker.request(
        "PATCH",
        WORKLOADS.path("default", "job") + "/status",
        body={"status": {"conditions": [condition(kind) for kind in conditions]}},
        content_type=MERGE,
    )


@pytest.mark.parametrize("held", ["Admitted", "QuotaReserved"])
async def test_copy_holding_quota_gets_the_nomination_back(held: str) -> None:
    """C28/C18: the dispatcher nominated ``w2``; a copy on ``w1`` holds quota (reserved or
    admitted) there: the nomination is written back to ``[w1]`` with an Event saying why, and
    it stays there although the decision function still prefers ``w2``."""
    async with schema_less_dispatcher(always_w2, workers=("w1", "w2")) as env:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: env.nominated("job") == ("w2",))
        async with await KubeApi.from_kubeconfig(env.workers["w1"].kubeconfig, name="w1") as w1:
            await put_copy(w1, [held])
        await env.wait(lambda: env.nominated("job") == ("w1",))
        settled = env.reconciles["default/job"] + 3
        await env.wait(lambda: env.reconciles["default/job"] >= settled)
        assert env.nominated("job") == ("w1",)
        messages = [e["message"] for e in await env.events("job") if e["reason"] == "Nominated"]
        assert any(m.startswith("nominated [w1]: its copy already holds quota") for m in messages)
        # The write-back counts as a nomination, under its own algorithm label.
        assert env.nominations() == {("w2", "always-w2"): 1.0, ("w1", "copy-holds-quota"): 1.0}


async def test_no_active_candidate_keeps_the_standing_nomination() -> None:
    """Every candidate inactive at once (Kueue reports the MultiKueueCluster inactive): the
    decision finds nothing, but the standing nomination is kept rather than cleared (an empty
    one would have Kueue delete copies that may be about to be admitted, C32)."""
    async with schema_less_dispatcher(first_active, workers=("w1",)) as env:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: env.nominated("job") == ("w1",))
        await set_active(env.api, "w1", False)
        await env.wait(lambda: not any(c.active for c in env.registry.candidates("multikueue")[0]))
        settled = env.reconciles["default/job"] + 3
        await env.wait(lambda: env.reconciles["default/job"] >= settled)
        assert env.nominated("job") == ("w1",)
        assert not [e for e in await env.events("job") if e["reason"] == "NotNominated"]


@pytest.mark.parametrize(
    "origin",
    [
        pytest.param(None, id="issue14-11-no-origin-label"),
        pytest.param("another-manager", id="issue14-11-another-managers-origin"),
    ],
)
async def test_same_named_workload_without_our_origin_is_not_a_copy(origin: str | None) -> None:
    """C32, issue 14 item 11: Kueue keys its copies by the ``kueue.x-k8s.io/multikueue-origin``
    label, so does the dispatcher (setting ``multikueue_origin``, default ``multikueue``): an
    admitted Workload of the same name on ``w1`` that does not carry our origin is someone
    else's and does not pull the nomination back to ``w1``."""
    async with schema_less_dispatcher(always_w2, workers=("w1", "w2")) as env:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: env.nominated("job") == ("w2",))
        async with await KubeApi.from_kubeconfig(env.workers["w1"].kubeconfig, name="w1") as w1:
            await put_copy(w1, ["Admitted"], origin)
        index_seen = env.reconciles["default/job"] + 3
        await env.wait(lambda: env.reconciles["default/job"] >= index_seen)
        assert env.nominated("job") == ("w2",)
        messages = [e["message"] for e in await env.events("job") if e["reason"] == "Nominated"]
        assert not any("its copy already holds quota" in m for m in messages)


async def test_copy_being_evicted_holds_nothing_and_is_waited_for_as_a_leftover() -> None:
    """C92: a copy its worker preempted shows ``Evicted`` True while ``QuotaReserved`` and
    ``Admitted`` are still True (the worker releases the quota once the Job's pods stopped), and
    the manager may hold quota again by then. That copy does not pull the nomination to its
    worker (C28's holder rule): the loop writes no nomination and says it waits for the copy's
    removal (C32); once Kueue removed it, the decision nominates as usual."""
    async with schema_less_dispatcher(first_active, workers=("w1", "w2")) as env:
        async with await KubeApi.from_kubeconfig(env.workers["w1"].kubeconfig, name="w1") as w1:
            await put_copy(w1, ["QuotaReserved", "Admitted", "Evicted"])
            mirror = env.registry.workers["w1"].mirror
            assert mirror is not None
            await env.wait(lambda: mirror.cache("workloads").get("job", "default") is not None)
            await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
            await env.wait(lambda: any(r == "WaitingForCopyRemoval" for r, _ in env.recorded))
            assert env.nominated("job") == ()
            [(_, message)] = [(r, m) for r, m in env.recorded if r == "WaitingForCopyRemoval"]
            assert "still on w1" in message
            await w1.request("DELETE", WORKLOADS.path("default", "job"))
        await env.wait(lambda: env.nominated("job") == ("w1",))
        assert env.nominations() == {("w1", "first-active"): 1.0}


EVICTED_ON_W1 = 'Workload evicted on worker cluster: "w1", resetting for re-admission.'
REMOTE_LOST = 'Admitting remote lost, Previously: "Ready"'


@pytest.mark.parametrize(
    ("retry", "renominated"),
    [
        pytest.param(EVICTED_ON_W1, (), id="c26-evicted-on-worker-before-the-mirror-shows-it"),
        pytest.param(REMOTE_LOST, ("w1",), id="c29-remote-lost-copy-still-holds"),
    ],
)
async def test_a_copy_kueue_reported_evicted_holds_nothing_while_the_mirror_lags(
    retry: str, renominated: tuple[str, ...]
) -> None:
    """C26, C92: Kueue reads the worker through its own clients. It can report the admitted
    copy evicted there (check ``Retry``, "Workload evicted on worker cluster") and reset the
    Workload before this dispatcher's mirror shows the copy ``Evicted``: the mirror still shows
    it admitted. That copy is the leftover of the closed attempt, not a holder: no nomination is
    written back to its worker (CI at 154127d, real Kueue: the write-back kept the old copy),
    the loop waits for its removal, and nominates once it is gone. Another ``Retry`` (the worker
    lost, C29) says nothing of the copy: one the mirror shows admitted still holds quota there
    and gets its worker back (C28)."""
    async with schema_less_dispatcher(first_active, workers=("w1", "w2")) as env:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: env.nominated("job") == ("w1",))
        async with await KubeApi.from_kubeconfig(env.workers["w1"].kubeconfig, name="w1") as w1:
            await put_copy(w1, ["QuotaReserved", "Admitted"])
            mirror = env.registry.workers["w1"].mirror
            assert mirror is not None
            await env.wait(lambda: mirror.cache("workloads").get("job", "default") is not None)

            ready = multikueue_check("Ready", 'The workload was admitted on "w1"')
            await env.workload_status(
                "job",
                {"clusterName": "w1", "nominatedClusterNames": None, "admissionChecks": [ready]},
            )
            await env.workload_status(
                "job", {"admissionChecks": [multikueue_check("Retry", retry)]}
            )

            def retry_handled() -> bool:
                cached = env.registry.manager.cache("workloads").get("job", "default") or {}
                return bool(cached["status"]["admissionChecks"][0]["state"] == "Retry")

            await env.wait(retry_handled)
            record = env.nominator.records["default/job"]
            assert ("w1" in record.copies_evicted) is (renominated == ())
            reset = multikueue_check(
                "Pending", "Reset to Pending after eviction. Previously: Retry"
            )
            await env.workload_status("job", {"clusterName": None, "admissionChecks": [reset]})
            if renominated:
                await env.wait(lambda: env.nominated("job") == renominated)
                assert env.nominations() == {
                    ("w1", "first-active"): 1.0,
                    ("w1", "copy-holds-quota"): 1.0,
                }
                return
            await env.wait(lambda: any(r == "WaitingForCopyRemoval" for r, _ in env.recorded))
            assert env.nominated("job") == ()
            # The worker's update arrives: the copy is Evicted, the note is dropped.
            await w1.request(
                "PATCH",
                WORKLOADS.path("default", "job") + "/status",
                body={"status": {"conditions": [condition("Evicted")]}},
                content_type=MERGE,
            )
            await env.wait(lambda: "w1" not in record.copies_evicted)
            assert env.nominated("job") == ()
            await w1.request("DELETE", WORKLOADS.path("default", "job"))
        await env.wait(lambda: env.nominated("job") == ("w1",))
        assert env.nominations() == {("w1", "first-active"): 2.0}
        assert not [m for r, m in env.recorded if "its copy already holds quota" in m]
