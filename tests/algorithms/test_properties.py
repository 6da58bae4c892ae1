"""Properties that hold for every built-in algorithm and composition, on generated fleets.

For any fleet (0–30 clusters, some inactive, some without the workload's queue, random quotas,
reservations, GPU types, in-flight nominations) and any request (random size, GPU wishes and
current nomination, possibly naming clusters that no longer exist):

* nothing outside the candidates, nothing inactive and nothing a filter dropped is nominated;
* at most 20 names, no duplicates;
* equal inputs give equal decisions (also with a freshly built host, pipeline and snapshots);
* built-in stages never report errors.

Hypothesis runs derandomized (fixed examples), without a database, so runs are reproducible.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.algorithms import MAX_NOMINATED_CLUSTERS, ClusterSnapshot, DispatchRequest
from dispatcher.testing import make_cluster, make_host, make_request, queued_workload

GPU_TYPES = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"]
PIPELINES: list[tuple[str, ...]] = [
    ("capacity-first",),
    ("gpu-type-affinity",),
    ("gpu-type-affinity", "capacity-first"),
    ("all-at-once",),
    ("incremental",),
    ("gpu-type-affinity", "incremental"),
]
NOW = 1_000_000.0

PROPERTY_SETTINGS = settings(
    derandomize=True,
    database=None,
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def requests(draw: st.DrawFn, names: list[str]) -> DispatchRequest:
    """A request; its nomination may include clusters that are not candidates."""
    pool = [*names, "ghost-1", "ghost-2"]
    nominated = draw(st.lists(st.sampled_from(pool), unique=True, max_size=6))
    age = draw(st.one_of(st.none(), st.floats(0, 2000)))
    gpus = draw(st.sampled_from([0, 0, 0, 1, 2, 4]))
    return make_request(
        draw(st.sampled_from(["a", "b", "c"])),
        now=NOW,
        cpu=draw(st.integers(0, 40)),
        gpus=gpus,
        gpu_type=draw(st.none() if not gpus else st.one_of(st.none(), st.sampled_from(GPU_TYPES))),
        preferred=draw(st.lists(st.sampled_from(GPU_TYPES), unique=True, max_size=3)),
        priority=draw(st.integers(-1, 1)),
        nominated=nominated,
        nominated_at=None if age is None else NOW - age,
    )


@st.composite
def fleets(draw: st.DrawFn) -> list[ClusterSnapshot]:
    """0–30 clusters with random state."""
    count = draw(st.integers(0, 30))
    names = [f"c{i:02d}" for i in range(count)]
    others = [make_request(f"other-{i}", cpu=i % 5 + 1, gpus=i % 2) for i in range(4)]
    clusters = []
    for name in names:
        cpu = draw(st.integers(0, 64))
        gpus = draw(st.sampled_from([0, 4, 8]))
        clusters.append(
            make_cluster(
                name,
                cpu=cpu,
                used_cpu=draw(st.integers(0, cpu)),
                gpus=gpus,
                used_gpus=draw(st.integers(0, gpus)),
                gpu_type=draw(st.one_of(st.none(), st.sampled_from(GPU_TYPES))),
                active=draw(st.booleans()),
                has_queue=draw(st.integers(0, 9)) > 0,
                order=draw(st.integers(0, 5)),
                in_flight=[
                    queued_workload(r) for r in draw(st.lists(st.sampled_from(others), max_size=3))
                ],
                pending=[
                    queued_workload(r) for r in draw(st.lists(st.sampled_from(others), max_size=2))
                ],
            )
        )
    return clusters


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[list[ClusterSnapshot], DispatchRequest, tuple[str, ...], int]:
    fleet = draw(fleets())
    request = draw(requests([c.name for c in fleet]))
    return fleet, request, draw(st.sampled_from(PIPELINES)), draw(st.integers(1, 25))


HOST = make_host()


@PROPERTY_SETTINGS
@given(scenarios())
def test_only_kept_active_known_clusters_at_most_twenty_deterministic(
    scenario: tuple[list[ClusterSnapshot], DispatchRequest, tuple[str, ...], int],
) -> None:
    fleet, request, names, step = scenario
    options = {"incremental": {"step_size": min(step, 20)}} if "incremental" in names else None
    decision = HOST.decide(HOST.pipeline(names, options), request, fleet)

    by_name = {c.name: c for c in fleet}
    kept = {v.cluster for v in decision.verdicts if v.kept}
    assert len(decision.nominate) <= MAX_NOMINATED_CLUSTERS
    assert len(set(decision.nominate)) == len(decision.nominate)
    for name in decision.nominate:
        assert name in by_name, f"unknown cluster {name} nominated"
        assert by_name[name].active, f"inactive cluster {name} nominated"
        assert name in kept, f"filtered-out cluster {name} nominated"
    assert decision.errors == ()
    assert {v.cluster for v in decision.verdicts} == set(by_name)

    again = HOST.decide(HOST.pipeline(names, options), request, fleet)
    assert again == decision
    fresh = make_host()
    # New snapshot objects too: nothing cached on the old ones may change the outcome.
    copies = [dataclasses.replace(c) for c in fleet]
    assert (
        fresh.decide(fresh.pipeline(names, options), dataclasses.replace(request), copies)
        == decision
    )
