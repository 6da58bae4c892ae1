"""capacity-first: fit now after in-flight deduction, policy, queue ahead, patience, reasons.

Aspects: the KEP-9988 fragmentation example; a burst against an idle and a busy GPU cluster;
never-fits and missing-queue filtering; most-free vs best-fit; tie-breaking; move and widen after
patience; re-nomination when the nominated cluster disappears; cohort borrowing.
"""

from __future__ import annotations

from collections import Counter

import pytest

from dispatcher.algorithms import ClusterSnapshot, Decision, QueuedWorkload
from dispatcher.testing import (
    assert_decision,
    decide,
    dispatch_burst,
    make_cluster,
    make_request,
    with_in_flight,
)

CF = ["capacity-first"]


def _fit_now(decision: Decision) -> bool | None:
    return decision.verdict(decision.nominate[0]).fits_now


@pytest.mark.parametrize("policy", ["most-free", "best-fit"])
def test_kep_9988_fragmentation_places_all_four(policy: str) -> None:
    """Two workers × 10 CPU, workloads 7, 7, 6, 3 in that order (KEP-9988 discussion).

    A capacity-blind dispatcher leaves the 3 behind the 6; here the 7s and the 3 are nominated
    where they fit now, the 6 waits where it will fit, and no worker is over-committed.
    """
    workers = [make_cluster("w1", cpu=10, order=0), make_cluster("w2", cpu=10, order=1)]
    sizes = [7, 7, 6, 3]
    requests = [make_request(f"wl{i}-{c}cpu", cpu=c) for i, c in enumerate(sizes)]
    decisions = dispatch_burst(
        requests, workers, names=CF, options={"capacity-first": {"policy": policy}}
    )

    assert all(len(d.nominate) == 1 for d in decisions), [d.nominate for d in decisions]
    placed_now = {size: _fit_now(d) for size, d in zip(sizes, decisions, strict=True) if size != 6}
    assert placed_now == {7: True, 3: True}
    committed = Counter[str]()
    for size, d in zip(sizes, decisions, strict=True):
        if _fit_now(d):
            committed[d.nominate[0]] += size
    assert all(total <= 10 for total in committed.values()), committed
    assert sum(committed.values()) == 17
    six = decisions[2]
    assert not _fit_now(six)
    assert "fits nowhere now" in six.reason


def test_fragmentation_with_every_decision_explained() -> None:
    workers = [make_cluster("w1", cpu=10, order=0), make_cluster("w2", cpu=10, order=1)]
    requests = [make_request(f"wl{i}", cpu=c) for i, c in enumerate([7, 7, 6, 3])]
    decisions = dispatch_burst(requests, workers, names=CF)
    assert [d.nominate for d in decisions] == [("w1",), ("w2",), ("w1",), ("w2",)]
    # The 3 goes to w2: both fit it now, both would be full, but the 6 is queued on w1.
    assert decisions[3].verdict("w1").scores[-1].detail == "1 ahead"


def test_burst_spreads_over_idle_and_busy_gpu_clusters() -> None:
    """Ten 1-GPU workloads; idle cluster 4/4 GPUs free, busy cluster 2/8 free.

    In-flight deduction: exactly 4 fit-now nominations land on the idle cluster and 2 on the busy
    one; the other 4 are still nominated (they queue), alternating by queue length.
    """
    idle = make_cluster("idle-4gpu", gpus=4, cpu=64, order=0)
    busy = make_cluster("busy-8gpu", gpus=8, used_gpus=6, cpu=64, order=1)
    requests = [make_request(f"burst-{i}", gpus=1, cpu=1) for i in range(10)]
    decisions = dispatch_burst(requests, [idle, busy])

    fit_now = Counter(d.nominate[0] for d in decisions if _fit_now(d))
    queued = Counter(d.nominate[0] for d in decisions if not _fit_now(d))
    assert fit_now == {"idle-4gpu": 4, "busy-8gpu": 2}
    assert queued == {"idle-4gpu": 2, "busy-8gpu": 2}
    assert [_fit_now(d) for d in decisions[:6]] == [True] * 6


def test_burst_without_in_flight_bookkeeping_overfills_the_idle_cluster() -> None:
    """The control experiment: forget in-flight nominations and all ten pile onto one cluster."""
    idle = make_cluster("idle-4gpu", gpus=4, cpu=64, order=0)
    busy = make_cluster("busy-8gpu", gpus=8, used_gpus=6, cpu=64, order=1)
    requests = [make_request(f"burst-{i}", gpus=1, cpu=1) for i in range(10)]
    decisions = dispatch_burst(requests, [idle, busy], track_in_flight=False)
    assert Counter(d.nominate[0] for d in decisions) == {"idle-4gpu": 10}


def test_own_in_flight_record_is_not_deducted_from_itself() -> None:
    request = make_request("again", cpu=8, nominated=["w1"], nominated_at=0.0)
    workers = with_in_flight([make_cluster("w1", cpu=8)], request, ["w1"])
    decision = decide(request, workers, names=CF)
    assert decision.verdict("w1").fits_now is True


@pytest.mark.parametrize(
    ("clusters", "request_cpu", "expected", "dropped"),
    [
        pytest.param(
            [make_cluster("a", cpu=10), make_cluster("b", cpu=16, order=1)],
            32,
            [],
            {"a": "never fits", "b": "never fits"},
            id="too-big-for-every-cluster",
        ),
        pytest.param(
            [make_cluster("a", cpu=10), make_cluster("b", cpu=40, used_cpu=39, order=1)],
            32,
            ["b"],
            {"a": "can-ever-fit"},
            id="fits-only-later-on-the-big-one",
        ),
        pytest.param(
            [make_cluster("a", cpu=64, has_queue=False), make_cluster("b", cpu=8, order=1)],
            4,
            ["b"],
            {"a": "no LocalQueue default/queue"},
            id="no-local-queue",
        ),
        pytest.param(
            [make_cluster("a", cpu=64, active=False), make_cluster("b", cpu=8, order=1)],
            4,
            ["b"],
            {"a": "active"},
            id="inactive-cluster",
        ),
        pytest.param(
            [make_cluster("a", gpus=8), make_cluster("b", cpu=8, order=1)],
            4,
            ["b"],
            {"a": "cpu is not covered"},
            id="resource-not-covered",
        ),
    ],
)
def test_filtering(
    clusters: list[ClusterSnapshot], request_cpu: int, expected: list[str], dropped: dict[str, str]
) -> None:
    decision = decide(make_request(cpu=request_cpu), clusters, names=CF)
    assert_decision(decision, nominate=expected, dropped=dropped)


def test_too_big_everywhere_gives_no_nomination_and_a_reason() -> None:
    decision = decide(make_request(cpu=32), [make_cluster("a", cpu=10), make_cluster("b", cpu=16)])
    assert decision.nominate == ()
    assert "no candidate cluster left" in decision.reason
    assert "a: never fits" in decision.reason
    assert "cpu (requested 32, available 10)" in decision.reason


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("most-free", "roomy", id="most-free-spreads"),
        pytest.param("best-fit", "snug", id="best-fit-packs"),
    ],
)
def test_policy(policy: str, expected: str) -> None:
    snug = make_cluster("snug", cpu=10, used_cpu=6, order=0)
    roomy = make_cluster("roomy", cpu=10, order=1)
    decision = decide(
        make_request(cpu=4), [snug, roomy], names=CF, options={"capacity-first": {"policy": policy}}
    )
    assert_decision(decision, nominate=[expected])


def test_fits_now_beats_policy() -> None:
    full = make_cluster("full-but-huge", cpu=1000, used_cpu=999, order=0)
    small = make_cluster("small", cpu=8, order=1)
    assert_decision(decide(make_request(cpu=4), [full, small], names=CF), nominate=["small"])


def test_shorter_queue_breaks_policy_ties() -> None:
    waiting = QueuedWorkload("other/pending", priority=5)
    a = make_cluster("a", cpu=10, order=0, pending=[waiting, waiting])
    b = make_cluster("b", cpu=10, order=1)
    assert_decision(decide(make_request(cpu=4), [a, b], names=CF), nominate=["b"])
    # Lower-priority pending workloads are not ahead of us.
    low = QueuedWorkload("other/low", priority=-1)
    a_low = make_cluster("a", cpu=10, order=0, pending=[low, low])
    assert_decision(decide(make_request(cpu=4), [a_low, b], names=CF), nominate=["a"])


@pytest.mark.parametrize(
    ("orders", "expected"),
    [
        pytest.param({"x": 0, "y": 1, "z": 2}, "x", id="config-order-first"),
        pytest.param({"x": 2, "y": 1, "z": 0}, "z", id="config-order-reversed"),
        pytest.param({"x": 0, "y": 0, "z": 0}, "x", id="same-order-then-name"),
    ],
)
def test_ties_are_deterministic(orders: dict[str, int], expected: str) -> None:
    clusters = [make_cluster(n, cpu=10, order=o) for n, o in orders.items()]
    request = make_request(cpu=2)
    first = decide(request, clusters, names=CF)
    assert_decision(first, nominate=[expected])
    for permutation in (clusters[::-1], clusters[1:] + clusters[:1]):
        assert decide(request, permutation, names=CF).nominate == first.nominate


@pytest.mark.parametrize(
    ("age", "mode", "expected", "requeue"),
    [
        pytest.param(100.0, "widen", ["a"], 200.0, id="within-patience-keeps"),
        pytest.param(300.0, "widen", ["a", "b"], 300.0, id="patience-over-widens"),
        pytest.param(300.0, "move", ["b"], 300.0, id="patience-over-moves"),
    ],
)
def test_patience(age: float, mode: str, expected: list[str], requeue: float) -> None:
    a = make_cluster("a", cpu=10, used_cpu=8, order=0)
    b = make_cluster("b", cpu=10, used_cpu=9, order=1)
    request = make_request(cpu=4, nominated=["a"], nominated_at=1_000_000.0 - age)
    decision = decide(
        request,
        [a, b],
        names=CF,
        options={"capacity-first": {"patience_seconds": 300, "on_patience": mode}},
    )
    assert_decision(decision, nominate=expected)
    assert decision.requeue_after == pytest.approx(requeue)


def test_widening_stops_at_max_clusters() -> None:
    request = make_request(cpu=4, nominated=["a", "b"], nominated_at=0.0)
    clusters = [make_cluster(n, cpu=8, used_cpu=8, order=i) for i, n in enumerate("abc")]
    decision = decide(request, clusters, names=CF, options={"capacity-first": {"max_clusters": 2}})
    assert_decision(decision, nominate=["a", "b"], reason_contains="max_clusters=2")


def test_lost_nominated_cluster_is_replaced_at_once() -> None:
    a = make_cluster("a", cpu=10, active=False, order=0)
    b = make_cluster("b", cpu=10, order=1)
    request = make_request(cpu=4, nominated=["a"])
    decision = decide(request, [a, b], names=CF)
    assert_decision(decision, nominate=["b"], reason_contains="nominated a")


def test_cohort_borrowing_counts_toward_fit() -> None:
    key = ("default", "cpu")
    lender = make_cluster(
        "borrower", cpu=4, cohort="pool", cohort_room={key: 8}, cohort_limit={key: 8}
    )
    alone = make_cluster("alone", cpu=4, order=1)
    decision = decide(make_request(cpu=10), [lender, alone], names=CF)
    assert_decision(decision, nominate=["borrower"], dropped={"alone": "never fits"})
