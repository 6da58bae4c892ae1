"""all-at-once and incremental: re-creations of Kueue's built-in dispatchers (C56–C61)."""

from __future__ import annotations

import dataclasses

import pytest

from dispatcher.algorithms import ClusterSnapshot
from dispatcher.testing import assert_decision, decide, make_cluster, make_request

NOW = 1_000_000.0


@pytest.mark.parametrize(
    ("clusters", "expected"),
    [
        pytest.param(
            [make_cluster(n, cpu=1, order=i) for i, n in enumerate(["gcp", "aws", "onprem"])],
            ["aws", "gcp", "onprem"],
            id="all-active-sorted-alphabetically",
        ),
        pytest.param(
            [
                make_cluster("aws", cpu=1),
                make_cluster("gcp", cpu=1, active=False),
                make_cluster("onprem", cpu=1),
            ],
            ["aws", "onprem"],
            id="inactive-skipped",
        ),
        pytest.param(
            [make_cluster("tiny", cpu=1), make_cluster("noqueue", cpu=1, has_queue=False)],
            ["noqueue", "tiny"],
            id="capacity-and-queues-ignored",
        ),
        pytest.param(
            [make_cluster(f"w{i:02d}", cpu=1, order=i) for i in range(25)],
            [f"w{i:02d}" for i in range(20)],
            id="capped-at-20",
        ),
        pytest.param([make_cluster("a", cpu=1, active=False)], [], id="none-active"),
    ],
)
def test_all_at_once(clusters: list[ClusterSnapshot], expected: list[str]) -> None:
    decision = decide(make_request(cpu=64), clusters, names=["all-at-once"])
    assert_decision(decision, nominate=expected)
    assert decision.requeue_after is None


CONFIG = ["onprem", "aws", "gcp"]


def _clusters(inactive: tuple[str, ...] = ()) -> list[ClusterSnapshot]:
    return [make_cluster(n, cpu=1, order=i, active=n not in inactive) for i, n in enumerate(CONFIG)]


@pytest.mark.parametrize(
    ("nominated", "age", "options", "expected", "requeue"),
    [
        pytest.param((), None, {"step_size": 1}, ["onprem"], 300.0, id="docs-example-round-1"),
        pytest.param(
            ("onprem",),
            300.0,
            {"step_size": 1},
            ["onprem", "aws"],
            300.0,
            id="docs-example-round-2",
        ),
        pytest.param(
            ("onprem", "aws"),
            300.0,
            {"step_size": 1},
            ["onprem", "aws", "gcp"],
            300.0,
            id="docs-example-round-3",
        ),
        pytest.param(
            ("onprem",), 120.0, {"step_size": 1}, ["onprem"], 180.0, id="round-running-keeps"
        ),
        pytest.param((), None, {}, ["onprem", "aws", "gcp"], 300.0, id="default-step-3"),
        pytest.param(
            (),
            None,
            {"order": "alphabetical", "step_size": 2},
            ["aws", "gcp"],
            300.0,
            id="alphabetical",
        ),
        pytest.param(
            ("onprem", "aws", "gcp"),
            900.0,
            {},
            ["onprem", "aws", "gcp"],
            300.0,
            id="no-more-workers",
        ),
        pytest.param(
            ("onprem",),
            None,
            {"step_size": 1},
            ["onprem", "aws"],
            300.0,
            id="unknown-round-start-fires-at-once",
        ),
        pytest.param(
            ("onprem",),
            30.0,
            {"step_size": 1, "round_timeout_seconds": 30},
            ["onprem", "aws"],
            30.0,
            id="custom-round-timeout",
        ),
    ],
)
def test_incremental(
    nominated: tuple[str, ...],
    age: float | None,
    options: dict[str, object],
    expected: list[str],
    requeue: float,
) -> None:
    request = make_request(
        cpu=64,
        now=NOW,
        nominated=nominated,
        nominated_at=None if age is None else NOW - age,
    )
    if nominated and age is None:
        request = dataclasses.replace(request, nominated_at=None)
    decision = decide(
        request,
        _clusters(),
        names=["incremental"],
        options={"incremental": options},
    )
    assert_decision(decision, nominate=expected)
    assert decision.requeue_after == pytest.approx(requeue)


def test_incremental_skips_inactive_clusters() -> None:
    decision = decide(
        make_request(cpu=1),
        _clusters(inactive=("onprem",)),
        names=["incremental"],
        options={"incremental": {"step_size": 1}},
    )
    assert_decision(decision, nominate=["aws"], dropped={"onprem": "active"})


def test_incremental_never_withdraws_and_caps_at_20() -> None:
    clusters = [make_cluster(f"w{i:02d}", cpu=1, order=i) for i in range(25)]
    nominated = tuple(f"w{i:02d}" for i in range(18))
    request = make_request(cpu=1, nominated=nominated, nominated_at=0.0)
    decision = decide(request, clusters, names=["incremental"])
    assert decision.nominate[:18] == nominated
    assert len(decision.nominate) == 20
