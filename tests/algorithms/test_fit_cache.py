"""Issue 15: a snapshot computes the fit of one pod-set shape once and serves it to every request
of that shape; the queue ahead is still counted per request (its priority, itself aside).

Compared with the fit computed afresh for each request, over seeded random requests and
snapshots (pending workloads of mixed priorities, in-flight ones, the request itself pending or
in flight); the flavor assignments are counted.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from dispatcher.algorithms import QueuedWorkload, stages
from dispatcher.algorithms.stages import StageContext
from dispatcher.testing import make_cluster, make_pod_set, make_request


def pending(rng: random.Random, n: int) -> tuple[QueuedWorkload, ...]:
    return tuple(
        QueuedWorkload(f"default/p{i}", rng.choice((0, 0, 5, 10)), (make_pod_set(gpus=1),))
        for i in range(n)
    )


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_cached_fits_equal_fresh_fits(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(30):
        cluster = make_cluster(
            "w1",
            cpu=64,
            gpus=rng.choice((2, 4, 8)),
            used_gpus=rng.choice((0, 1, 2)),
            pending=pending(rng, rng.randrange(0, 6)),
            in_flight=[
                QueuedWorkload(f"default/f{i}", 0, (make_pod_set(gpus=1),))
                for i in range(rng.randrange(0, 3))
            ],
        )
        for _ in range(8):
            name = rng.choice(("new", "p0", "p1", "f0"))
            request = make_request(
                name, gpus=rng.choice((1, 2, 4, 16)), priority=rng.choice((0, 5, 10))
            )
            cached = StageContext(request, [cluster]).fit(cluster)
            fresh = stages._fit_uncached(request, replace(cluster))
            assert cached == fresh, (seed, request.key, request.priority)


def test_one_shape_is_assigned_once_per_snapshot(assignments: list[int]) -> None:
    cluster = make_cluster("w1", cpu=64, gpus=8)
    for i in range(10):
        StageContext(make_request(f"r{i}", gpus=2, priority=i % 3), [cluster]).fit(cluster)
    assert assignments[0] == 2  # ever and now, for the first request only
