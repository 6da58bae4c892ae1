"""Issue 15: the decision step the controller and the simulator share (controller.step).

A table of decisions, standing nominations and candidate activeness, with the outcome each must
give, and the in-flight accounting of each outcome (tests/sim/test_sim_step.py: the simulator
takes the same step).
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.algorithms.model import Decision
from dispatcher.controller import step as step_module
from dispatcher.controller.inflight import InFlight
from dispatcher.controller.step import Action, account, outcome
from dispatcher.testing import make_cluster, make_request


def decision(*nominate: str, withheld: str = "", requeue_after: float | None = None) -> Decision:
    return Decision("test", tuple(nominate), "why", requeue_after=requeue_after, withheld=withheld)


UP = (make_cluster("w1", cpu=4), make_cluster("w2", cpu=4))
DOWN = (make_cluster("w1", cpu=4, active=False), make_cluster("w2", cpu=4, active=False))


@pytest.mark.parametrize(
    ("made", "current", "snapshots", "action", "target"),
    [
        pytest.param(decision("w1"), (), UP, Action.WRITE, ("w1",), id="first-nomination"),
        pytest.param(decision("w2"), ("w1",), UP, Action.WRITE, ("w2",), id="moved"),
        pytest.param(decision("w1"), ("w1",), UP, Action.UNCHANGED, ("w1",), id="kept-by-decision"),
        pytest.param(decision(), ("w1",), UP, Action.WRITE, (), id="cleared-while-clusters-up"),
        pytest.param(decision(), ("w1",), DOWN, Action.KEEP, ("w1",), id="kept-while-all-down"),
        pytest.param(decision(), (), DOWN, Action.UNCHANGED, (), id="nothing-and-all-down"),
        pytest.param(
            decision(withheld="filter failed"), ("w1",), UP, Action.WITHHELD, ("w1",), id="withheld"
        ),
        pytest.param(
            decision(withheld="filter failed"), (), UP, Action.WITHHELD, (), id="withheld-first"
        ),
    ],
)
def test_the_outcome_of_a_decision(
    made: Decision,
    current: tuple[str, ...],
    snapshots: tuple[Any, ...],
    action: Action,
    target: tuple[str, ...],
) -> None:
    found = outcome(made, current, snapshots)
    assert (found.action, found.target) == (action, target)


@pytest.mark.parametrize(
    ("made", "current", "ledger"),
    [
        pytest.param(decision("w1"), (), {"w1": 1, "w2": 0}, id="written-counts-in-flight"),
        pytest.param(decision("w2"), ("w1",), {"w1": 0, "w2": 1}, id="moved-moves-it"),
        pytest.param(decision(), ("w1",), {"w1": 0, "w2": 0}, id="cleared-forgets-it"),
        pytest.param(decision("w1"), ("w1",), {"w1": 1, "w2": 0}, id="unchanged-leaves-it"),
        pytest.param(decision(withheld="x"), ("w1",), {"w1": 1, "w2": 0}, id="withheld-leaves-it"),
    ],
)
def test_the_in_flight_accounting_of_each_outcome(
    made: Decision, current: tuple[str, ...], ledger: dict[str, int]
) -> None:
    request = make_request("job", cpu=1)
    in_flight = InFlight()
    if current:
        in_flight.record(current, step_module.queued_workload(request), request.now)
    account(outcome(made, current, UP), in_flight, request, request.now)
    assert {c: in_flight.count(c, request.now) for c in ledger} == ledger


def test_the_follow_up_is_the_pipelines() -> None:
    assert outcome(decision("w1", requeue_after=7.5), (), UP).follow_up == 7.5
    assert outcome(decision("w1"), (), UP).follow_up is None
