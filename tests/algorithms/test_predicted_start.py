"""Predicted start (issue 18 item 2) in capacity-first: where the workload must wait, the cluster
where it is predicted to start first ranks first; the decision carries the predictions, and the
reason and the Event text give the wait."""

from __future__ import annotations

import pytest

from dispatcher.algorithms import ClusterSnapshot
from dispatcher.controller.nominator import summarize
from dispatcher.testing import decide, make_cluster, make_holder, make_request

NOW = 1_000_000.0


def full(name: str, order: int, runs: tuple[float, ...], ran: float = 0.0) -> ClusterSnapshot:
    """A worker of 2 GPUs held by one workload (same priority: nothing to preempt) that has run
    ``ran`` seconds, its queue's finished workloads having run ``runs``."""
    holder = make_holder(f"team-a/{name}-job", gpus=2, reserved_at=NOW - ran)
    return make_cluster(name, gpus=2, order=order, holders=(holder,), run_seconds=runs)


def test_the_earliest_predicted_start_ranks_first() -> None:
    clusters = (full("slow", 0, (3600.0,)), full("quick", 1, (600.0,)))
    decision = decide(make_request("w", gpus=2, now=NOW), clusters)
    assert decision.nominate == ("quick",)
    assert dict(decision.predictions) == {"slow": NOW + 3600, "quick": NOW + 600}
    assert decision.reason == "quick: fits nowhere now, 0 ahead here, predicted start in 600s"
    assert "quick: rank 0 (queues; predicted start in 600s)" in summarize(decision)


def test_a_holder_that_ran_long_is_expected_to_end_later() -> None:
    # Both queues saw runs of 300, 400 and 3000 s. On "early" the holder has run 100 s (all three
    # are longer; the median future has it end at 400 s); on "late" 1000 s (only the 3000 s run
    # is longer: 2000 s to go).
    runs = (300.0, 400.0, 3000.0)
    clusters = (full("late", 0, runs, ran=1000.0), full("early", 1, runs, ran=100.0))
    decision = decide(make_request("w", gpus=2, now=NOW), clusters)
    assert decision.nominate == ("early",)
    assert (decision.predictions["early"], decision.predictions["late"]) == (NOW + 300, NOW + 2000)


@pytest.mark.parametrize(
    ("options", "nominated"),
    [
        pytest.param({}, "quick", id="on-by-default"),
        pytest.param({"capacity-first": {"predicted_start": False}}, "slow", id="off-by-order"),
    ],
)
def test_the_option_turns_it_off(options: dict[str, dict[str, object]], nominated: str) -> None:
    clusters = (full("slow", 0, (3600.0,)), full("quick", 1, (600.0,)))
    decision = decide(make_request("w", gpus=2, now=NOW), clusters, options=options)
    assert decision.nominate == (nominated,)


def test_unknown_where_nothing_says_when_quota_comes_back() -> None:
    clusters = (full("unknown", 0, ()), full("known", 1, (7200.0,)))
    decision = decide(make_request("w", gpus=2, now=NOW), clusters)
    assert decision.nominate == ("known",)
    assert "unknown" not in decision.predictions
    score = next(s for s in decision.verdict("unknown").scores if s.scorer == "predicted-start")
    assert score.value == 0.0
    assert score.detail.startswith("no predicted start")
