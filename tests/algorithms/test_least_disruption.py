"""Least-disruption placement (issue 18 item 1): where a workload fits nowhere now, capacity-first
ranks the clusters by what admitting it would preempt under each worker ClusterQueue's own policy,
claims in-flight preemptions first, and never widens to a second cluster that would preempt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from dispatcher.algorithms import ClusterSnapshot
from dispatcher.controller.nominator import summarize
from dispatcher.kueue.admission import ReservingWorkload
from dispatcher.testing import (
    decide,
    dispatch_burst,
    make_cluster,
    make_holder,
    make_request,
    with_in_flight,
)

NOW = 1_000_000.0
HIGH = 300
LOW = 100


def full(
    name: str,
    *victims: ReservingWorkload,
    gpus: int = 2,
    order: int = 0,
    preemption: str = "LowerPriority",
) -> ClusterSnapshot:
    """A worker whose ClusterQueue of ``gpus`` GPUs is held entirely by ``victims``."""
    return make_cluster(name, gpus=gpus, order=order, holders=victims, preemption=preemption)


def job(key: str, *, gpus: int = 1, priority: int = LOW, age: float = 600.0) -> ReservingWorkload:
    """A workload holding ``gpus`` GPUs, admitted ``age`` seconds before NOW."""
    return make_holder(f"team-a/{key}", gpus=gpus, priority=priority, reserved_at=NOW - age)


def capacity_first(preemption: str = "cheapest", **more: object) -> dict[str, dict[str, object]]:
    return {"capacity-first": {"preemption": preemption, **more}}


@dataclass(frozen=True)
class Case:
    id: str
    clusters: tuple[ClusterSnapshot, ...]
    nominate: str
    preemption: str = "cheapest"


CASES = [
    Case(
        "lower-victim-priority-wins-over-order",
        (
            full("w1", job("mid", gpus=2, priority=200), order=0),
            full("w2", job("low", gpus=2, priority=LOW), order=1),
        ),
        "w2",
    ),
    Case(
        "fewer-victims-win-at-equal-priority",
        (
            full("w1", job("a"), job("b"), order=0),
            full("w2", job("big", gpus=2), order=1),
        ),
        "w2",
    ),
    Case(
        "least-running-time-lost-wins",
        (
            full("w1", job("old", gpus=2, age=7200), order=0),
            full("w2", job("new", gpus=2, age=60), order=1),
        ),
        "w2",
    ),
    Case(
        "fits-now-beats-the-cheapest-preemption",
        (
            full("w1", job("cheap", gpus=2, priority=0), order=0),
            make_cluster("w2", gpus=2, order=1, preemption="LowerPriority"),
        ),
        "w2",
    ),
    Case(
        "cheapest-prefers-preempting-to-waiting",
        (
            full("w1", job("peer", gpus=2, priority=HIGH), order=0),
            full("w2", job("low", gpus=2), order=1),
        ),
        "w2",
    ),
    Case(
        "avoid-prefers-waiting-to-preempting",
        (
            full("w1", job("low", gpus=2), order=0),
            full("w2", job("peer", gpus=2, priority=HIGH), order=1),
        ),
        "w2",
        preemption="avoid",
    ),
    Case(
        "a-queue-that-never-preempts-is-a-wait",
        (
            full("w1", job("low", gpus=2), order=0, preemption="Never"),
            full("w2", job("low2", gpus=2, age=9000), order=1),
        ),
        "w2",
    ),
    Case(
        "ignore-ranks-by-order-as-before",
        (
            full("w1", job("mid", gpus=2, priority=200), order=0),
            full("w2", job("low", gpus=2, priority=LOW), order=1),
        ),
        "w1",
        preemption="ignore",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_ranks_by_what_admission_would_preempt(case: Case) -> None:
    request = make_request("hi", gpus=2, priority=HIGH, now=NOW)
    decision = decide(request, case.clusters, options=capacity_first(case.preemption))
    assert decision.nominate == (case.nominate,), summarize(decision)


def test_the_decision_and_its_event_name_the_victims_expected() -> None:
    clusters = (
        full("w1", job("mid", gpus=2, priority=200), order=0),
        full("w2", job("low", gpus=2, priority=LOW, age=340), order=1),
    )
    decision = decide(make_request("hi", gpus=2, priority=HIGH, now=NOW), clusters)
    assert decision.nominate == ("w2",)
    expected = "would preempt 1: team-a/low (priority 100, running 340s)"
    assert decision.reason == f"w2: fits nowhere now; least disruption here: {expected}"
    assert expected in summarize(decision)
    mid = next(s for s in decision.verdict("w1").scores if s.scorer == "least-disruption")
    low = next(s for s in decision.verdict("w2").scores if s.scorer == "least-disruption")
    assert (low.value, mid.value) == (pytest.approx(0.7), pytest.approx(0.4))
    assert mid.detail == "would preempt 1: team-a/mid (priority 200, running 600s)"


def test_in_flight_preemptors_claim_their_victims_first() -> None:
    # w1 has two cheap victims, w2 one dearer victim. The first workload takes a victim on w1;
    # the second sees that claim and takes the other one, not the same one twice.
    clusters = (
        full("w1", job("cheap-a", priority=10), job("cheap-b", priority=10, age=30), order=1),
        full("w2", job("dear", gpus=2, priority=50), order=0),
    )
    requests = [make_request(f"hi-{i}", gpus=1, priority=HIGH, now=NOW) for i in range(3)]
    decisions = dispatch_burst(requests, clusters)
    assert [d.nominate for d in decisions] == [("w1",), ("w1",), ("w2",)]
    assert "team-a/cheap-b" in decisions[0].reason  # the most recently started goes first
    assert "team-a/cheap-a" in decisions[1].reason
    assert "team-a/dear" in decisions[2].reason


def test_victims_being_evicted_are_taken_first() -> None:
    clusters = (
        full("w1", job("running", gpus=2, priority=10), order=0),
        full("w2", replace(job("leaving", gpus=2, priority=90), evicting=True), order=1),
    )
    decision = decide(make_request("hi", gpus=2, priority=HIGH, now=NOW), clusters)
    # Cost ranks by priority first: w1's victim is cheaper even though w2's is leaving anyway.
    assert decision.nominate == ("w1",)


@pytest.mark.parametrize(
    ("third", "widened"),
    [
        pytest.param(full("w3", job("x", gpus=2), order=2), None, id="every-other-preempts"),
        pytest.param(
            full("w3", job("peer", gpus=2, priority=HIGH), order=2), "w3", id="a-wait-cluster"
        ),
        pytest.param(make_cluster("w3", gpus=2, order=2), "w3", id="a-free-cluster"),
    ],
)
def test_widening_never_adds_a_second_preempting_cluster(
    third: ClusterSnapshot, widened: str | None
) -> None:
    clusters = (
        full("w1", job("a", gpus=2), order=0),
        full("w2", job("b", gpus=2, age=10), order=1),
        third,
    )
    request = make_request(
        "hi", gpus=2, priority=HIGH, now=NOW, nominated=["w1"], nominated_at=NOW - 400
    )
    decision = decide(request, clusters, options=capacity_first(on_patience="widen"))
    if widened is None:
        assert decision.nominate == ("w1",)
        assert "not widening: admitting it on w1 already preempts" in decision.reason
    else:
        assert decision.nominate == ("w1", widened), summarize(decision)


def test_ignore_widens_to_a_second_preempting_cluster() -> None:
    clusters = (
        full("w1", job("a", gpus=2), order=0),
        full("w2", job("b", gpus=2), order=1),
    )
    request = make_request(
        "hi", gpus=2, priority=HIGH, now=NOW, nominated=["w1"], nominated_at=NOW - 400
    )
    decision = decide(request, clusters, options=capacity_first("ignore", on_patience="widen"))
    assert decision.nominate == ("w1", "w2")


def test_a_preemptor_that_must_borrow_preempts_only_with_borrow_within_cohort() -> None:
    # Contract C72: a request above the nominal quota that only fits by borrowing does not
    # preempt unless borrowWithinCohort is set; it waits.
    holder = job("low", gpus=1)
    cluster = make_cluster(
        "w1",
        gpus=1,
        holders=(holder,),
        preemption="LowerPriority",
        cohort="pool",
        cohort_room={("default", "nvidia.com/gpu"): 0},
        cohort_limit={("default", "nvidia.com/gpu"): 1},
    )
    decision = decide(make_request("hi", gpus=2, priority=HIGH, now=NOW), (cluster,))
    score = next(s for s in decision.verdict("w1").scores if s.scorer == "least-disruption")
    assert (score.value, score.detail) == (0.0, "nothing there may be preempted")


def test_an_in_flight_preemptor_counts_as_ahead() -> None:
    # The e2e contention of tests/e2e/test_e2e_disruption.py under `ignore`: w1 (first in order)
    # has two low Jobs, w2 one. The first high Job goes to w1 (tie, order) and will get in by
    # preempting there; while it is in flight a later decision sees it ahead on w1, as it does
    # once w1 shows the first's copy pending (the controller then counts that copy once, as in
    # flight: tests/controller/test_worker_index.py).
    clusters = (
        full("w1", job("a100-a"), job("a100-b", age=30), order=0),
        full("w2", job("h100", gpus=4), gpus=4, order=1),
    )
    first, second = (make_request(f"high-{i}", gpus=2, priority=HIGH, now=NOW) for i in (1, 2))
    options = capacity_first("ignore")
    assert decide(first, clusters, options=options).nominate == ("w1",)
    decision = decide(second, with_in_flight(clusters, first, ["w1"]), options=options)
    assert decision.nominate == ("w2",), summarize(decision)
    (w1,) = [v for v in decision.verdicts if v.cluster == "w1"]
    assert [s.detail for s in w1.scores if s.scorer == "queue-ahead"] == ["1 ahead"]
