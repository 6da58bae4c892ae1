"""Issue 15: the in-flight replay of a burst continues where the last snapshot ended.

In a burst each nomination appends one workload to the nominated cluster's in-flight ledger. A
snapshot built for the next decision then replays only the appended workloads (one flavor
assignment each) instead of the whole ledger, and ends with the same quota as a full replay.
The same holds when the worker's index changed because the copy at the head of the ledger
reserved what its nomination counted on (Kueue's event stream under a burst). Counted: the
flavor assignments the replay made; compared: the seeded replay with the full one, over a
seeded random walk of ledgers and reservations.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace

import pytest

from dispatcher.algorithms import ClusterSnapshot, QueuedWorkload, stages
from dispatcher.algorithms.stages import StageContext, continue_replay
from dispatcher.kueue.admission import ReservingWorkload
from dispatcher.kueue.flavorfit import assign_flavors, available_now
from dispatcher.kueue.objects import FlavorResource, frozen_map
from dispatcher.testing import FlavorSpec, make_cluster, make_pod_set, make_request


def flying(n: int, start: int = 0) -> tuple[QueuedWorkload, ...]:
    return tuple(
        QueuedWorkload(f"default/f{i}", 0, (make_pod_set(cpu=1),)) for i in range(start, start + n)
    )


def fit(snapshot: ClusterSnapshot) -> object:
    return StageContext(make_request("probe", cpu=1), [snapshot]).fit(snapshot)


def head_usage(snapshot: ClusterSnapshot) -> Mapping[FlavorResource, int]:
    """What the head of the ledger takes when it is placed first (where the worker's Kueue
    would put it, given the same free quota)."""
    cq = snapshot.cluster_queue
    assert cq is not None
    head = snapshot.in_flight[0]
    placed = assign_flavors(head.pod_sets, cq, snapshot.flavors, available_now(cq))
    assert placed.fits
    return placed.usage


def reserved(
    snapshot: ClusterSnapshot, usage: Mapping[FlavorResource, int] | None = None
) -> ClusterSnapshot:
    """The worker after the copy at the head of the ledger reserved ``usage`` (by default, what
    its nomination counted on): the copy leaves the ledger and holds that quota."""
    cq = snapshot.cluster_queue
    assert cq is not None
    head = snapshot.in_flight[0]
    took = head_usage(snapshot) if usage is None else usage
    total = dict(cq.reserved)
    for key, amount in took.items():
        total[key] = total.get(key, 0) + amount
    holder = ReservingWorkload(head.key, cq.name, frozen_map(took), head.priority)
    return replace(
        snapshot,
        cluster_queue=replace(cq, reserved=frozen_map(total)),
        holders=(*snapshot.holders, holder),
        in_flight=snapshot.in_flight[1:],
    )


@pytest.mark.parametrize(
    ("change", "seeded", "replayed"),
    [
        pytest.param("append-one", True, 1, id="appended-one-replays-one"),
        pytest.param("append-three", True, 3, id="appended-three-replays-three"),
        pytest.param("unchanged", True, 0, id="same-ledger-replays-none"),
        pytest.param("one-settled", False, 39, id="first-gone-unreserved-replays-all"),
        pytest.param("head-reserved", True, 0, id="head-reserved-replays-none"),
        pytest.param("two-reserved-one-appended", True, 1, id="two-reserved-one-appended"),
        pytest.param("head-reserved-elsewhere", False, 39, id="head-reserved-more-replays-all"),
        pytest.param("second-reserved", False, 39, id="second-reserved-first-replays-all"),
        pytest.param("other-queue", False, 40, id="another-cluster-queue-replays-all"),
    ],
)
def test_a_burst_replays_only_the_appended_in_flight_workloads(
    change: str, seeded: bool, replayed: int, assignments: list[int]
) -> None:
    previous = make_cluster("w1", cpu=64, in_flight=flying(40))
    fit(previous)  # the decision that used it computed its replay
    if change == "append-one":
        snapshot = replace(previous, in_flight=(*previous.in_flight, *flying(1, 40)))
    elif change == "append-three":
        snapshot = replace(previous, in_flight=(*previous.in_flight, *flying(3, 40)))
    elif change == "unchanged":
        snapshot = replace(previous)
    elif change == "one-settled":
        snapshot = replace(previous, in_flight=previous.in_flight[1:])
    elif change == "head-reserved":
        snapshot = reserved(previous)
    elif change == "two-reserved-one-appended":
        after = reserved(reserved(previous))
        snapshot = replace(after, in_flight=(*after.in_flight, *flying(1, 40)))
    elif change == "head-reserved-elsewhere":
        # The worker's Kueue gave it more than its nomination counted on (another pod set
        # shape, say): the free quota is not what the replay had left.
        snapshot = reserved(previous, {("default", "cpu"): 2000})
    elif change == "second-reserved":
        swapped = replace(previous, in_flight=(previous.in_flight[1], *previous.in_flight[2:]))
        snapshot = replace(
            reserved(swapped), in_flight=(previous.in_flight[0], *previous.in_flight[2:])
        )
    else:
        other = make_cluster("w1", cpu=32)
        snapshot = replace(previous, cluster_queue=other.cluster_queue)
    assert continue_replay(snapshot, previous) is seeded

    before = assignments[0]
    seeded_fit = fit(snapshot)
    # The fit itself assigns the probe twice (ever, now); the rest is the replay.
    assert assignments[0] - before - 2 == replayed
    fresh = replace(snapshot)  # no seed: the full replay
    assert fit(fresh) == seeded_fit


def test_an_unreplayed_previous_snapshot_seeds_nothing() -> None:
    previous = make_cluster("w1", cpu=64, in_flight=flying(5))
    snapshot = replace(previous, in_flight=(*previous.in_flight, *flying(1, 5)))
    assert continue_replay(snapshot, previous) is False


def test_a_queued_workload_kept_in_the_ledger_seeds_nothing(assignments: list[int]) -> None:
    """Four fit, the fifth and sixth queue: once the head reserved, the queued ones' places
    depend on more than the free quota, and the replay starts over."""
    previous = make_cluster("w1", cpu=4, in_flight=flying(6))
    fit(previous)
    snapshot = reserved(previous)
    assert continue_replay(snapshot, previous) is False
    assert fit(snapshot) == fit(replace(snapshot))


def _base(snapshot: ClusterSnapshot) -> tuple[object, ...]:
    """What a snapshot's replay ended with (quota left, queued, the holders then)."""
    assert snapshot.cluster_queue is not None
    base = stages._base_quota(snapshot, snapshot.cluster_queue)
    return (
        dict(base.after_in_flight),
        base.queued_in_flight,
        base.holders.listed(),
        base.holders.floor,
        [(w.key, None if usage is None else dict(usage)) for w, usage in base.steps],
    )


def test_the_seeded_replay_ends_as_the_full_one_over_a_random_walk() -> None:
    """A random walk (fixed seed) of ledger changes on a worker with two flavors, where later
    workloads spill into the second flavor or queue and a head may reserve elsewhere: every
    snapshot, seeded or not, ends its replay exactly as a full replay of it does."""
    rng = random.Random(15)
    snapshot = make_cluster(
        "w1",
        flavors=[
            FlavorSpec("small", {"cpu": 6, "memory": "24Gi"}),
            FlavorSpec("large", {"cpu": 10, "memory": "40Gi"}),
        ],
        preemption="LowerPriority",
    )
    made = 0
    seeded = 0
    for _ in range(400):
        fit(snapshot)
        move = rng.random()
        if move < 0.45 or not snapshot.in_flight:
            new = tuple(
                QueuedWorkload(
                    f"default/w{made + i}",
                    rng.choice((0, 0, 5)),
                    (make_pod_set(cpu=rng.choice((1, 2, 3)), memory="2Gi"),),
                )
                for i in range(rng.choice((1, 1, 2)))
            )
            made += len(new)
            following = replace(snapshot, in_flight=(*snapshot.in_flight, *new))
        elif move < 0.75:
            head = snapshot.in_flight[0]
            cq = snapshot.cluster_queue
            assert cq is not None
            placed = assign_flavors(head.pod_sets, cq, snapshot.flavors, available_now(cq))
            if placed.fits and rng.random() < 0.8:
                following = reserved(snapshot, placed.usage)
            else:
                following = replace(snapshot, in_flight=snapshot.in_flight[1:])
        elif move < 0.9:
            following = replace(snapshot, in_flight=snapshot.in_flight[1:])
        else:
            # A holder finishes: its quota is free again.
            if not snapshot.holders:
                continue
            gone = snapshot.holders[0]
            cq = snapshot.cluster_queue
            assert cq is not None
            total = {k: v - gone.usage.get(k, 0) for k, v in cq.reserved.items()}
            following = replace(
                snapshot,
                cluster_queue=replace(cq, reserved=frozen_map(total)),
                holders=snapshot.holders[1:],
            )
        seeded += continue_replay(following, snapshot)
        assert _base(following) == _base(replace(following)), f"after {made} workloads"
        snapshot = following
    assert seeded > 100  # the walk exercised the continuation, not only full replays
