"""The copy-lost guard in every pipeline (contract C91): a cluster where the workload's
admitted copy just vanished is dropped by the pipeline itself (stage ``copy-lost``, code
``copy_lost``) after the same-name guard and before the placement hints and any algorithm's
filters, so no algorithm, built-in or plugin, nominates it while the controller lists it in
:attr:`DispatchRequest.copy_lost`."""

from __future__ import annotations

import dataclasses

import pytest

from dispatcher.algorithms import ClusterSnapshot, RejectionReason
from dispatcher.algorithms.explain import describe_decision
from dispatcher.plugins import hookimpl
from dispatcher.testing import decide, make_cluster, make_request

LOST = "its admitted copy there vanished; left out for 60 s from then (C91)"


class PreferW1:
    """A plugin scorer that wants w1 (the least free) above everything."""

    @hookimpl
    def mkd_score_cluster(self, cluster: ClusterSnapshot) -> float:
        return 100.0 if cluster.name == "w1" else 0.0


FLEET = [
    make_cluster("w1", cpu=4, order=0),
    make_cluster("w2", cpu=16, order=1),  # most free: capacity-first's choice
    make_cluster("w3", cpu=8, order=2),
]


@pytest.mark.parametrize(
    ("names", "plugins", "lost", "nominated"),
    [
        pytest.param(
            ("gpu-type-affinity", "capacity-first"), (), {"w2": LOST}, ("w3",), id="default"
        ),
        pytest.param(("all-at-once",), (), {"w2": LOST}, ("w1", "w3"), id="all-at-once"),
        pytest.param(("incremental",), (), {"w1": LOST}, ("w2", "w3"), id="incremental"),
        pytest.param(
            ("capacity-first",), (("prefer", PreferW1()),), {"w1": LOST}, ("w2",), id="plugin"
        ),
        pytest.param(
            ("capacity-first",), (), {"w1": LOST, "w2": LOST, "w3": LOST}, (), id="everywhere"
        ),
    ],
)
def test_a_lost_copy_drops_the_cluster_in_every_pipeline(
    names: tuple[str, ...],
    plugins: tuple[tuple[str, object], ...],
    lost: dict[str, str],
    nominated: tuple[str, ...],
) -> None:
    request = dataclasses.replace(make_request(cpu=1), copy_lost=lost)
    decision = decide(request, FLEET, names=names, plugins=plugins)
    assert decision.nominate == nominated
    for verdict in decision.verdicts:
        if verdict.cluster in lost:
            assert not verdict.kept
            assert verdict.dropped_by == "copy-lost"
            assert verdict.reason_code is RejectionReason.COPY_LOST
            assert verdict.reason == LOST
        else:
            assert verdict.kept
    assert f"dropped by copy-lost: {LOST}" in describe_decision(decision)


@pytest.mark.parametrize(
    ("cluster", "name_taken", "dropped_by"),
    [
        pytest.param(make_cluster("w1", cpu=4, active=False), {}, "active", id="inactive-first"),
        pytest.param(make_cluster("w1", cpu=4), {"w1": "Job there"}, "same-name", id="name-first"),
        pytest.param(make_cluster("w1", cpu=4), {}, "copy-lost", id="copy-lost"),
    ],
)
def test_the_guard_comes_after_active_and_same_name(
    cluster: ClusterSnapshot, name_taken: dict[str, str], dropped_by: str
) -> None:
    """An unreachable cluster says so, and so does a taken name: those hold longer."""
    request = dataclasses.replace(
        make_request(cpu=1), copy_lost={"w1": LOST}, name_taken=name_taken
    )
    decision = decide(request, [cluster, FLEET[2]])
    assert decision.verdict("w1").dropped_by == dropped_by
    assert decision.nominate == ("w3",)
