"""The nomination loop and a withheld decision (a fail-closed plugin's filter failed, settings
``fail_closed_plugins``): nothing is written, the standing nomination stays (an empty one
would have Kueue delete copies, C32), and the reason is told once as a Warning Event
``DecisionWithheld``. Runs on the loop harness of the bad-input catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher_sandbox.harness.badinput import (
    first_active,
    pod_set,
    schema_less_dispatcher,
    workload,
)

WHY = "filter tenancy:filter of fail-closed plugin tenancy failed (KeyError: 'x')"


async def test_a_withheld_decision_writes_nothing_and_keeps_the_nomination() -> None:
    withholding = False

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        if withholding:
            return Decision("tenancy", (), WHY, withheld=WHY)
        return first_active(request, snapshots)

    async with schema_less_dispatcher(decide, workers=("w1",)) as env:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: env.nominated("job") == ("w1",))
        writes = env.nominator.writes
        withholding = True
        env.nominator.queue.add("default/job")
        await env.wait(lambda: ("DecisionWithheld", f"decision withheld: {WHY}") in env.recorded)
        settled = env.reconciles["default/job"] + 3  # withheld again at every retry (backoff)
        await env.wait(lambda: env.reconciles["default/job"] >= settled)
        assert env.nominator.writes == writes
        assert env.nominated("job") == ("w1",)
        withheld = [e for e in await env.events("job") if e["reason"] == "DecisionWithheld"]
        assert [(e["type"], e["message"]) for e in withheld] == [
            ("Warning", f"decision withheld: {WHY}")
        ]


async def test_a_withheld_first_decision_nominates_nothing() -> None:
    """Nothing nominated yet and the decision is withheld: no write at all (not even an
    empty nomination), the Event says why."""

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        return Decision("tenancy", (), WHY, withheld=WHY)

    async with schema_less_dispatcher(decide, workers=("w1",)) as env:
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: ("DecisionWithheld", f"decision withheld: {WHY}") in env.recorded)
        settled = env.reconciles["default/job"] + 2
        await env.wait(lambda: env.reconciles["default/job"] >= settled)
        assert env.nominator.writes == 0
        assert env.nominated("job") == ()
        assert not [e for e in await env.events("job") if e["reason"] == "NotNominated"]
