"""The pipeline's own guards, in every pipeline, before any algorithm's filters, so that no
algorithm, built-in or plugin, can nominate a cluster they drop; the verdict carries the
controller's text:

- the same-name guard (issue 18 item 5; contract C28, C33): a cluster that holds a Workload or
  Job of the workload's name that is not a copy of ours (stage ``same-name``, code
  ``name_taken``, from :attr:`DispatchRequest.name_taken`);
- the copy-lost guard (contract C91): a cluster where the workload's admitted copy just vanished
  (stage ``copy-lost``, code ``copy_lost``, from :attr:`DispatchRequest.copy_lost`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import NamedTuple

import pytest

from dispatcher.algorithms import ClusterSnapshot, DispatchRequest, RejectionReason
from dispatcher.algorithms.explain import describe_decision
from dispatcher.plugins import hookimpl
from dispatcher.testing import decide, make_cluster, make_request


class Guard(NamedTuple):
    field: str
    """The :class:`DispatchRequest` field the controller fills."""
    stage: str
    code: RejectionReason
    text: str

    def fill(self, request: DispatchRequest, clusters: Iterable[str]) -> DispatchRequest:
        """``request`` with this guard's field naming ``clusters``, each with :attr:`text`."""
        dropped = dict.fromkeys(clusters, self.text)
        if self.field == "name_taken":
            return dataclasses.replace(request, name_taken=dropped)
        return dataclasses.replace(request, copy_lost=dropped)


SAME_NAME = Guard(
    "name_taken",
    "same-name",
    RejectionReason.NAME_TAKEN,
    "Job default/wl exists there and is not a copy of ours",
)
COPY_LOST = Guard(
    "copy_lost",
    "copy-lost",
    RejectionReason.COPY_LOST,
    "its admitted copy there vanished; left out for 60 s from then (C91)",
)
GUARDS = [pytest.param(SAME_NAME, id="same-name"), pytest.param(COPY_LOST, id="copy-lost")]


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


@pytest.mark.parametrize("guard", GUARDS)
@pytest.mark.parametrize(
    ("names", "plugins", "dropped", "nominated"),
    [
        pytest.param(("gpu-type-affinity", "capacity-first"), (), (), ("w2",), id="default-free"),
        pytest.param(("gpu-type-affinity", "capacity-first"), (), ("w2",), ("w3",), id="default"),
        pytest.param(("all-at-once",), (), ("w2",), ("w1", "w3"), id="all-at-once"),
        pytest.param(("incremental",), (), ("w1",), ("w2", "w3"), id="incremental"),
        pytest.param(("capacity-first",), (("prefer", PreferW1()),), (), ("w1",), id="plugin-free"),
        pytest.param(("capacity-first",), (("prefer", PreferW1()),), ("w1",), ("w2",), id="plugin"),
        pytest.param(("capacity-first",), (), ("w1", "w2", "w3"), (), id="everywhere"),
    ],
)
def test_a_guard_drops_the_cluster_in_every_pipeline(
    guard: Guard,
    names: tuple[str, ...],
    plugins: tuple[tuple[str, object], ...],
    dropped: tuple[str, ...],
    nominated: tuple[str, ...],
) -> None:
    request = guard.fill(make_request(cpu=1), dropped)
    decision = decide(request, FLEET, names=names, plugins=plugins)
    assert decision.nominate == nominated
    for verdict in decision.verdicts:
        if verdict.cluster in dropped:
            assert not verdict.kept
            assert verdict.dropped_by == guard.stage
            assert verdict.reason_code is guard.code
            assert verdict.reason == guard.text
        else:
            assert verdict.dropped_by != guard.stage
    if dropped:
        assert f"dropped by {guard.stage}: {guard.text}" in describe_decision(decision)


@pytest.mark.parametrize(
    ("cluster", "guards", "dropped_by"),
    [
        pytest.param(
            make_cluster("w1", cpu=4, active=False), (SAME_NAME,), "active", id="inactive-first"
        ),
        pytest.param(
            make_cluster("w1", cpu=4, active=False),
            (COPY_LOST,),
            "active",
            id="inactive-before-copy-lost",
        ),
        pytest.param(
            make_cluster("w1", cpu=4), (SAME_NAME, COPY_LOST), "same-name", id="same-name-first"
        ),
        pytest.param(make_cluster("w1", cpu=4), (COPY_LOST,), "copy-lost", id="copy-lost"),
    ],
)
def test_the_guards_order(
    cluster: ClusterSnapshot, guards: tuple[Guard, ...], dropped_by: str
) -> None:
    """``active`` first (an unreachable cluster says so), then ``same-name`` (a taken name holds
    longer than a lost copy), then ``copy-lost``."""
    request = make_request(cpu=1)
    for guard in guards:
        request = guard.fill(request, ["w1"])
    decision = decide(request, [cluster, FLEET[2]])
    assert decision.verdict("w1").dropped_by == dropped_by
    assert decision.nominate == ("w3",)
