"""Burst-aware spreading (issue 18 item 6): capacity-first's ``backlog`` scorer.

Each worker's MultiKueue connection is a resource of its own (Kueue v0.19 creates every copy
through a rate-limited client per worker): once ``spread_backlog`` of our nominations to a worker
are in flight there, the next workload that fits elsewhere goes elsewhere, above the GPU
preferences and the capacity policy; among workers over the limit the shortest backlog wins.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from dispatcher.algorithms import QueuedWorkload
from dispatcher.testing import decide, dispatch_burst, make_cluster, make_pod_set, make_request

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def backlog(count: int, *, start: int = 0) -> tuple[QueuedWorkload, ...]:
    """``count`` small CPU workloads in flight (nominated, Kueue's copy not reserved yet)."""
    return tuple(
        QueuedWorkload(f"default/queued-{i}", 0, (make_pod_set(cpu="100m"),))
        for i in range(start, start + count)
    )


def topology(cpu: int = 0, a100: int = 0, h100: int = 0, *, cpu_quota: int = 64) -> list[Any]:
    """The default topology's three workers with ``cpu``/``a100``/``h100`` nominations in
    flight on each."""
    return [
        make_cluster(
            "worker-a100", cpu=64, gpus=8, gpu_type=A100, order=0, in_flight=backlog(a100)
        ),
        make_cluster(
            "worker-h100", cpu=64, gpus=4, gpu_type=H100, order=1, in_flight=backlog(h100)
        ),
        make_cluster("worker-cpu", cpu=cpu_quota, order=2, in_flight=backlog(cpu)),
    ]


@pytest.mark.parametrize(
    ("clusters", "options", "expected"),
    [
        pytest.param(topology(), None, "worker-cpu", id="no-backlog-gpu-clusters-spared"),
        pytest.param(topology(cpu=9), None, "worker-cpu", id="under-the-limit-nothing-changes"),
        pytest.param(topology(cpu=10), None, "worker-a100", id="at-the-limit-spreads"),
        pytest.param(
            topology(cpu=10, a100=3),
            None,
            "worker-h100",
            id="under-the-limit-the-capacity-policy-decides",
        ),
        pytest.param(
            topology(cpu=30, a100=12, h100=20), None, "worker-a100", id="all-over-shortest-wins"
        ),
        pytest.param(
            topology(cpu=50),
            {"capacity-first": {"spread_backlog": 0}},
            "worker-cpu",
            id="switched-off",
        ),
        pytest.param(
            topology(cpu=10),
            {"capacity-first": {"spread_backlog": 20}},
            "worker-cpu",
            id="a-larger-limit",
        ),
    ],
)
def test_backlog_ranks_below_fits_now_and_above_preferences(
    clusters: list[Any], options: dict[str, dict[str, object]] | None, expected: str
) -> None:
    decision = decide(make_request(cpu="100m"), clusters, options=options)
    assert decision.nominate == (expected,)


def test_the_workload_itself_in_flight_is_not_its_own_backlog() -> None:
    """Deciding again for a workload already nominated (in flight) on a worker counts the
    others only: 9 others plus itself is under a limit of 10."""
    request = make_request("me", cpu="100m", nominated=("worker-cpu",))
    me = QueuedWorkload("default/me", 0, (make_pod_set(cpu="100m"),))
    clusters = topology(cpu=9)
    clusters[2] = make_cluster("worker-cpu", cpu=64, order=2, in_flight=(*backlog(9), me))
    decision = decide(request, clusters)
    verdict = decision.verdict("worker-cpu")
    assert {s.scorer: s.value for s in verdict.scores}["backlog"] == 1.0


def test_a_cluster_without_backlog_where_it_does_not_fit_now_does_not_win() -> None:
    """Fits-now (tier 0) still comes first: an idle but full worker loses to a backlogged one
    where the workload fits."""
    clusters = [
        make_cluster("worker-full", cpu=4, used_cpu=4, order=0),
        make_cluster("worker-busy", cpu=64, order=1, in_flight=backlog(40)),
    ]
    assert decide(make_request(cpu=1), clusters).nominate == ("worker-busy",)


def test_the_verdict_says_why_a_backlogged_worker_was_passed_over() -> None:
    decision = decide(make_request(cpu="100m"), topology(cpu=12))
    component = {s.scorer: s for s in decision.verdict("worker-cpu").scores}["backlog"]
    assert component.detail == "12 nominations not yet copied there"
    assert component.value == pytest.approx(10 / 13)


@pytest.mark.parametrize(
    ("spread", "expected"),
    [
        pytest.param(10, {"worker-cpu": 20, "worker-a100": 20, "worker-h100": 20}, id="spread"),
        pytest.param(0, {"worker-cpu": 60}, id="one-worker"),
    ],
)
def test_a_burst_drains_through_every_worker(spread: int, expected: dict[str, int]) -> None:
    """60 small CPU Jobs decided one after another, each nomination in flight before the next
    (as in the controller during a burst, Kueue copying none yet): with spreading every worker
    takes a third; without, the CPU worker takes all 60."""
    requests = [make_request(f"job-{i}", cpu="100m") for i in range(60)]
    decisions = dispatch_burst(
        requests, topology(), options={"capacity-first": {"spread_backlog": spread}}
    )
    placed = collections.Counter(d.nominate[0] for d in decisions)
    assert dict(placed) == expected
