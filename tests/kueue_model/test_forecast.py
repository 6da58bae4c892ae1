"""The predicted start of a workload that must wait (``dispatcher.kueue.forecast``): holders end
at drawn run times longer than they have run, capped by ``maximumExecutionTimeSeconds`` (C90);
the queue ahead goes first; the answer is the median of deterministic futures."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dispatcher.kueue.forecast import (
    DRAWS,
    MAX_AHEAD,
    MAX_SAMPLES,
    Ahead,
    Running,
    RunTimes,
    end_at,
    predicted_start,
)
from dispatcher.kueue.objects import (
    ClusterQueueView,
    FlavorQuotas,
    PodSetView,
    ResourceFlavorView,
    ResourceGroup,
    ResourceQuota,
    frozen_map,
    parse_pod_set,
)
from dispatcher.kueue.quantities import MILLI

GPU = "nvidia.com/gpu"
FR = ("f", GPU)
QUEUE = ClusterQueueView(
    name="cq",
    resource_groups=(
        ResourceGroup((GPU,), (FlavorQuotas("f", frozen_map({GPU: ResourceQuota(4 * MILLI)})),)),
    ),
)
NOW = 10_000.0


FLAVORS = {"f": ResourceFlavorView("f")}


def pod_sets(gpus: int) -> tuple[PodSetView, ...]:
    container = {"name": "c", "resources": {"requests": {GPU: gpus}}}
    return (
        parse_pod_set(
            {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
        ),
    )


def held(gpus: int, started: float, limit: float | None = None) -> Running:
    return Running(frozen_map({FR: gpus * MILLI}), started, limit)


@dataclass(frozen=True)
class Case:
    id: str
    gpus: int
    free: int
    running: tuple[Running, ...]
    samples: tuple[float, ...] = ()
    ahead: tuple[Ahead, ...] = ()
    expected: float | None = None
    waits: tuple[float, ...] = field(default=())


CASES = [
    Case(
        "one-holder-ends-at-the-only-run-time-seen",
        gpus=2,
        free=0,
        running=(held(4, NOW),),
        samples=(600.0,),
        expected=NOW + 600,
    ),
    Case(
        "a-holder-that-ran-long-ends-at-a-longer-run-time",
        # 700 s run already: of 300/600/900/1200 only 900 and 1200 are longer.
        gpus=2,
        free=0,
        running=(held(4, NOW - 700),),
        samples=(300.0, 600.0, 900.0, 1200.0),
        waits=(200.0, 500.0),
    ),
    Case(
        "the-limit-caps-the-run",
        gpus=2,
        free=0,
        running=(held(4, NOW - 100, limit=400),),
        samples=(3600.0,),
        expected=NOW + 300,
    ),
    Case(
        "no-sample-longer-the-limit-alone",
        gpus=2,
        free=0,
        running=(held(4, NOW - 100, limit=1000),),
        samples=(50.0,),
        expected=NOW + 900,
    ),
    Case(
        "neither-sample-nor-limit-is-unknown",
        gpus=2,
        free=0,
        running=(held(4, NOW - 100),),
        expected=None,
    ),
    Case(
        "fits-now",
        gpus=2,
        free=2,
        running=(held(2, NOW),),
        samples=(600.0,),
        expected=NOW,
    ),
    Case(
        "the-queue-ahead-goes-first",
        # The 4 GPUs come back at +600; the workload ahead takes them for 600 s more.
        gpus=4,
        free=0,
        running=(held(4, NOW),),
        samples=(600.0,),
        ahead=(Ahead(pod_sets(4)),),
        expected=NOW + 1200,
    ),
    Case(
        "a-smaller-one-ahead-does-not-block",
        gpus=2,
        free=2,
        running=(held(2, NOW),),
        samples=(600.0,),
        ahead=(Ahead(pod_sets(4)),),
        expected=NOW,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_predicted_start(case: Case) -> None:
    found = predicted_start(
        pod_sets(case.gpus),
        QUEUE,
        FLAVORS,
        {FR: case.free * MILLI},
        NOW,
        case.running,
        case.ahead,
        case.samples,
    )
    if case.waits:
        assert found is not None
        assert found - NOW in case.waits
    else:
        assert found == case.expected


def test_the_median_future_is_earlier_than_the_earliest_median_end() -> None:
    """Four holders of one GPU each and a workload that needs one: it starts when the first of
    them ends. Each one's median end is +900 s; the first of four ends well before that."""
    samples = tuple(float(s) for s in range(100, 1801, 100))
    running = tuple(held(1, NOW) for _ in range(4))
    medians = [end_at(h, NOW, samples, 0.5) for h in running]
    found = predicted_start(pod_sets(1), QUEUE, FLAVORS, {FR: 0}, NOW, running, (), samples)
    assert found is not None
    assert min(m for m in medians if m is not None) == NOW + 1000
    assert found < NOW + 900


def test_a_long_queue_ahead_is_unknown() -> None:
    ahead = tuple(Ahead(pod_sets(1)) for _ in range(MAX_AHEAD + 1))
    assert (
        predicted_start(pod_sets(1), QUEUE, FLAVORS, {FR: 4 * MILLI}, NOW, (), ahead, (60.0,))
        is None
    )


def test_the_same_input_gives_the_same_forecast() -> None:
    samples = (120.0, 300.0, 450.0, 900.0, 2400.0)
    running = (held(1, NOW - 50), held(2, NOW - 400), held(1, NOW - 10))
    runs = {
        predicted_start(pod_sets(2), QUEUE, FLAVORS, {FR: 0}, NOW, running, (), samples)
        for _ in range(3)
    }
    assert len(runs) == 1
    assert DRAWS % 2 == 1  # a median of an odd number of futures is one of them


def test_run_times_keep_the_most_recent_per_queue_sorted() -> None:
    runs = RunTimes()
    assert runs.sorted("cq") == ()
    for seconds in range(MAX_SAMPLES + 10, 0, -1):  # the oldest 10 (the longest) drop out
        runs.add("cq", float(seconds))
    runs.add("other", 5.0)
    assert runs.sorted("cq") == tuple(float(s) for s in range(1, MAX_SAMPLES + 1))
    assert runs.sorted("other") == (5.0,)
    runs.add("cq", 0.5)  # a change is seen by the next read (the sorted tuple is made again)
    assert runs.sorted("cq")[0] == 0.5
    assert len(runs.sorted("cq")) == MAX_SAMPLES
