"""The nomination loop and a worker that just lost the workload's admitted copy (contract C29,
C91), on the loop harness of the bad-input catalogue: the real registry and Nominator on fake API
servers without Kueue's schema, a plain pipeline (no algorithm: the MultiKueueConfig order
decides), no Kueue; the test writes Kueue's status changes itself.

When the admitted copy is gone from a reachable worker, Kueue sets the check ``Retry``
("Admitting remote no longer exists") while ``clusterName`` still names the worker, then evicts
the Workload (C37), and the workload is dispatched again. A worker back from an outage can
delete each new copy the same way until its Kueue has seen the old Job deleted (C91): the loop
leaves that worker out of the workload's decisions for ``lost_copy_cooldown_seconds``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dispatcher.algorithms.stages import Pipeline
from dispatcher.kueue.eligibility import ADMITTING_REMOTE_GONE
from dispatcher_sandbox.harness.badinput import (
    SchemaLess,
    multikueue_check,
    pod_set,
    schema_less_dispatcher,
    workload,
)

KEY = "default/job"
PLAIN = Pipeline("plain")


ADMITTED_ON_W1 = {
    "clusterName": "w1",
    "nominatedClusterNames": None,
    "admissionChecks": [multikueue_check("Ready", 'The workload was admitted on "w1"')],
}
COPY_GONE = {
    "admissionChecks": [multikueue_check("Retry", f'{ADMITTING_REMOTE_GONE}, Previously: "Ready"')]
}
RESET = {
    "clusterName": None,
    "admissionChecks": [
        multikueue_check("Pending", "Reset to Pending after eviction. Previously: Retry")
    ],
}


async def lose_the_copy_on_w1(env: SchemaLess) -> None:
    """Nominated [w1] and admitted there; then Kueue reports the copy gone and resets it."""
    await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
    await env.wait(lambda: env.nominated("job") == ("w1",))
    await env.workload_status("job", ADMITTED_ON_W1)
    await env.workload_status("job", COPY_GONE)
    await env.wait(lambda: "w1" in env.nominator.records[KEY].copies_lost)
    await env.workload_status("job", RESET)


async def test_the_worker_that_lost_the_copy_is_left_out_and_named() -> None:
    """Two workers, the plain order prefers w1: after the loss the workload goes to w2, and the
    Event names w1's verdict (stage ``copy-lost``, code ``copy_lost``)."""
    async with schema_less_dispatcher(PLAIN.decide, workers=("w1", "w2")) as env:
        await lose_the_copy_on_w1(env)
        await env.wait(lambda: env.nominated("job") == ("w2",))
        assert env.nominations() == {("w1", "plain"): 1.0, ("w2", "plain"): 1.0}
        [message] = [
            m for r, m in env.recorded if r == "Nominated" and m.startswith("nominated [w2]")
        ]
        assert (
            f'w1: copy-lost: its admitted copy there vanished (Kueue: "{ADMITTING_REMOTE_GONE}"); '
            "left out for 60 s from then (C91)"
        ) in message


async def test_the_only_worker_comes_back_once_the_cooldown_is_over() -> None:
    """One worker: no nomination while it is left out (a NotNominated Event says why); once
    ``lost_copy_cooldown_seconds`` have passed, the loop decides again on its own and
    nominates it."""
    async with schema_less_dispatcher(PLAIN.decide, workers=("w1",)) as env:
        env.nominator.config = dataclasses.replace(
            env.nominator.config, lost_copy_cooldown_seconds=1
        )
        await lose_the_copy_on_w1(env)
        await env.wait(lambda: any(r == "NotNominated" for r, _ in env.recorded))
        assert env.nominated("job") == ()
        [message] = [m for r, m in env.recorded if r == "NotNominated"]
        assert message == (
            "nominated [none] by plain: no candidate cluster left (w1: its admitted copy there "
            f'vanished (Kueue: "{ADMITTING_REMOTE_GONE}"); left out for 1 s from then (C91))'
        )
        await env.wait(lambda: env.nominated("job") == ("w1",))
        assert env.nominator.records[KEY].copies_lost == {}


@pytest.mark.parametrize(
    ("change", "noted"),
    [
        pytest.param(COPY_GONE, True, id="retry-copy-gone"),
        pytest.param(
            {
                "admissionChecks": [
                    multikueue_check("Retry", 'Admitting remote lost, Previously: "Ready"')
                ]
            },
            False,
            id="retry-worker-lost",
        ),
        pytest.param(
            {"clusterName": None, **COPY_GONE},
            False,
            id="no-cluster-name",
        ),
    ],
)
async def test_only_kueues_copy_gone_retry_counts_as_a_loss(
    change: dict[str, Any], noted: bool
) -> None:
    """Only the ``Retry`` that says the admitted copy is gone, with ``clusterName`` naming the
    worker, is a loss; a worker lost past ``workerLostTimeout`` (C29's other ``Retry``) is
    left out anyway while Kueue reports it inactive."""
    async with schema_less_dispatcher(PLAIN.decide, workers=("w1", "w2")) as env:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: env.nominated("job") == ("w1",))
        await env.workload_status("job", ADMITTED_ON_W1)
        await env.workload_status("job", change)

        def written() -> bool:
            cached = env.registry.manager.cache("workloads").get("job", "default") or {}
            return bool(cached["status"]["admissionChecks"] == change["admissionChecks"])

        await env.wait(written)  # the watch event that put it in the cache was handled
        record = env.nominator.records[KEY]
        assert ("w1" in record.copies_lost) is noted
