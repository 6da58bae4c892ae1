"""Issue 15: a snapshot computes the fit of one pod-set shape once and serves it to every request
of that shape; the queue ahead is still counted per request (its priority, itself aside).

Compared with the fit computed afresh for each request, over seeded random requests and
snapshots (pending workloads of mixed priorities, in-flight ones, the request itself pending or
in flight); the flavor assignments are counted.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from dispatcher.algorithms import QueuedWorkload, gpu_affinity, stages
from dispatcher.algorithms.stages import StageContext
from dispatcher.testing import make_cluster, make_host, make_pod_set, make_request


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


def test_a_decision_keys_its_request_once_however_many_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What depends on the request alone is computed once per decision, not once per cluster:
    # the pod-set shape the fit cache is keyed by, and gpu-type-affinity's "asks for GPUs".
    shapes, asks = [0], [0]
    original_shape, original_asks = stages._shape, gpu_affinity.asks_for_gpus

    def shape(*args: Any) -> Any:
        shapes[0] += 1
        return original_shape(*args)

    def asks_for_gpus(*args: Any) -> Any:
        asks[0] += 1
        return original_asks(*args)

    monkeypatch.setattr(stages, "_shape", shape)
    monkeypatch.setattr(gpu_affinity, "asks_for_gpus", asks_for_gpus)
    host = make_host()
    pipeline = host.pipeline(("gpu-type-affinity", "capacity-first"))
    clusters = [make_cluster(f"w{i}", cpu=64, gpus=8, order=i) for i in range(50)]
    for i in range(3):
        decision = host.decide(pipeline, make_request(f"r{i}", cpu=1), clusters)
        assert decision.nominate
    assert (shapes[0], asks[0]) == (3, 3)


def test_the_counted_fit_is_shared_by_requests_of_one_shape_and_queue(
    assignments: list[int],
) -> None:
    cluster = make_cluster("w1", cpu=64, gpus=8, pending=pending(random.Random(5), 4))
    fits = [
        StageContext(make_request(f"r{i}", gpus=2, priority=10), [cluster]).fit(cluster)
        for i in range(5)
    ]
    assert all(f is fits[0] for f in fits)  # one object, not a copy per request
    assert fits[0].queued_ahead == len([p for p in cluster.pending if p.priority >= 10])
    low = StageContext(make_request("low", gpus=2, priority=-1), [cluster]).fit(cluster)
    assert low.queued_ahead == 4  # every pending workload is ahead of it
    assert assignments[0] == 2  # the shape's assignments, once for all six


def test_a_known_shape_and_priority_is_one_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 (decision cost at 100 clusters): a request of a shape and priority the snapshot
    has served, neither pending nor in flight there, does not count the queue ahead again; one
    that is pending there (its own place in the queue) does."""
    counted: list[str] = []
    ahead = stages._pending_ahead

    def spy(cluster: Any, request: Any) -> int:
        counted.append(request.key)
        return ahead(cluster, request)

    monkeypatch.setattr(stages, "_pending_ahead", spy)
    cluster = make_cluster("w1", cpu=64, gpus=8, pending=pending(random.Random(7), 4))
    for name in ("a", "b", "c", "p0"):
        StageContext(make_request(name, gpus=1, priority=5), [cluster]).fit(cluster)
    assert counted == ["default/a", "default/p0"]
