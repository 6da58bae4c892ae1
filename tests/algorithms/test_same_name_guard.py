"""The same-name guard in every pipeline (issue 18 item 5; contract C28, C33): a cluster that
holds a Workload or Job of the workload's name that is not a copy of ours is dropped by the
pipeline itself (stage ``same-name``, code ``name_taken``) before any algorithm's filters, so
no algorithm, built-in or plugin, can nominate it; the verdict carries what holds the name."""

from __future__ import annotations

import dataclasses

import pytest

from dispatcher.algorithms import ClusterSnapshot, RejectionReason
from dispatcher.algorithms.explain import describe_decision
from dispatcher.plugins import hookimpl
from dispatcher.testing import decide, make_cluster, make_request

TAKEN = "Job default/wl exists there and is not a copy of ours"


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
    ("names", "plugins", "taken", "nominated"),
    [
        pytest.param(("gpu-type-affinity", "capacity-first"), (), {}, ("w2",), id="default-free"),
        pytest.param(
            ("gpu-type-affinity", "capacity-first"), (), {"w2": TAKEN}, ("w3",), id="default"
        ),
        pytest.param(("all-at-once",), (), {"w2": TAKEN}, ("w1", "w3"), id="all-at-once"),
        pytest.param(("incremental",), (), {"w1": TAKEN}, ("w2", "w3"), id="incremental"),
        pytest.param(("capacity-first",), (("prefer", PreferW1()),), {}, ("w1",), id="plugin-free"),
        pytest.param(
            ("capacity-first",), (("prefer", PreferW1()),), {"w1": TAKEN}, ("w2",), id="plugin"
        ),
        pytest.param(
            ("capacity-first",),
            (),
            {"w1": TAKEN, "w2": TAKEN, "w3": TAKEN},
            (),
            id="everywhere",
        ),
    ],
)
def test_a_taken_name_drops_the_cluster_in_every_pipeline(
    names: tuple[str, ...],
    plugins: tuple[tuple[str, object], ...],
    taken: dict[str, str],
    nominated: tuple[str, ...],
) -> None:
    request = dataclasses.replace(make_request(cpu=1), name_taken=taken)
    decision = decide(request, FLEET, names=names, plugins=plugins)
    assert decision.nominate == nominated
    for verdict in decision.verdicts:
        if verdict.cluster in taken:
            assert not verdict.kept
            assert verdict.dropped_by == "same-name"
            assert verdict.reason_code is RejectionReason.NAME_TAKEN
            assert verdict.reason == TAKEN
        else:
            assert verdict.dropped_by != "same-name"
    if taken:
        assert f"dropped by same-name: {TAKEN}" in describe_decision(decision)


def test_an_inactive_cluster_is_reported_inactive_not_taken() -> None:
    """The guard comes after the ``active`` check: an unreachable cluster says so."""
    request = dataclasses.replace(make_request(cpu=1), name_taken={"w1": TAKEN})
    decision = decide(request, [make_cluster("w1", cpu=4, active=False), FLEET[2]])
    assert decision.verdict("w1").dropped_by == "active"
    assert decision.nominate == ("w3",)
