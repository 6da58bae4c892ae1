"""Issue 15: the in-flight replay of a burst continues where the last snapshot ended.

In a burst each nomination appends one workload to the nominated cluster's in-flight ledger. A
snapshot built for the next decision then replays only the appended workloads (one flavor
assignment each) instead of the whole ledger, and ends with the same quota as a full replay.
Counted: the flavor assignments the replay made.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.algorithms import ClusterSnapshot, QueuedWorkload
from dispatcher.algorithms.stages import StageContext, continue_replay
from dispatcher.testing import make_cluster, make_pod_set, make_request


def flying(n: int, start: int = 0) -> tuple[QueuedWorkload, ...]:
    return tuple(
        QueuedWorkload(f"default/f{i}", 0, (make_pod_set(cpu=1),)) for i in range(start, start + n)
    )


def fit(snapshot: ClusterSnapshot) -> object:
    return StageContext(make_request("probe", cpu=1), [snapshot]).fit(snapshot)


@pytest.mark.parametrize(
    ("change", "seeded", "replayed"),
    [
        pytest.param("append-one", True, 1, id="appended-one-replays-one"),
        pytest.param("append-three", True, 3, id="appended-three-replays-three"),
        pytest.param("unchanged", True, 0, id="same-ledger-replays-none"),
        pytest.param("one-settled", False, 39, id="first-settled-replays-all"),
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
