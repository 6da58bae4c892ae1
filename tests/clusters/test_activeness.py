"""The activeness state function (issue 16): Kueue's ``Active`` condition and our mirror's
freshness are separate inputs; only ours has a grace (hysteresis), and recovery is immediate."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.clusters.activeness import Activeness, MirrorHealth, judge

GRACE = 5.0
NOW = 1000.0


def kueue(status: str | None, reason: str = "") -> dict[str, Any] | None:
    """The MultiKueueCluster's ``Active`` condition as Kueue writes it (None: not yet)."""
    if status is None:
        return None
    return {"type": "Active", "status": status, "reason": reason or "Active"}


def fresh() -> MirrorHealth:
    return MirrorHealth("Connected", "", synced=True, stale_since=None)


def stale(seconds: float) -> MirrorHealth:
    detail = "ClientConnectionFailed: clusterqueues: connection refused"
    return MirrorHealth("Disconnected", detail, synced=True, stale_since=NOW - seconds)


def connecting() -> MirrorHealth:
    return MirrorHealth("Connecting", "Connecting", synced=False, stale_since=None)


def unusable() -> MirrorHealth:
    detail = 'BadKubeConfig: secret "kueue-system/w1" not found'
    return MirrorHealth("Unusable", detail, synced=False, stale_since=None)


CASES = [
    # (id, Kueue's condition, our mirror, active, words the reason must contain)
    ("both-fine", kueue("True"), fresh(), True, ()),
    ("blip-1s-within-grace", kueue("True"), stale(1.0), True, ()),
    ("blip-just-under-grace", kueue("True"), stale(GRACE - 0.01), True, ()),
    ("stale-at-grace-is-lost", kueue("True"), stale(GRACE), False, ("Disconnected", "5s")),
    ("outage-10s-lost", kueue("True"), stale(10.0), False, ("10s", "connection refused")),
    ("kueue-inactive-at-once", kueue("False", "ClientConnectionFailed"), fresh(), False,
     ("Kueue reports Active=False (ClientConnectionFailed)",)),
    ("kueue-inactive-during-blip", kueue("False", "ClientConnectionFailed"), stale(1.0), False,
     ("Kueue reports Active=False",)),
    ("kueue-unknown", kueue("Unknown", "Pending"), fresh(), False, ("Active=Unknown",)),
    ("kueue-not-connected-yet", None, fresh(), False, ("Kueue has not connected to it yet",)),
    ("never-synced", kueue("True"), connecting(), False, ("Connecting",)),
    ("unusable-kubeconfig", kueue("True"), unusable(), False, ("Unusable", "BadKubeConfig")),
    ("no-supervisor", kueue("True"), None, False, ("not connected",)),
    ("both-bad-both-named", kueue("False", "ClientConnectionFailed"), stale(10.0), False,
     ("Disconnected for 10s", "Kueue reports Active=False")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("condition", "health", "active", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_activeness(
    condition: dict[str, Any] | None,
    health: MirrorHealth | None,
    active: bool,
    words: tuple[str, ...],
) -> None:
    verdict = judge(condition, health, now=NOW, grace=GRACE)
    assert verdict.active is active
    assert (verdict.reason == "") is active
    for word in words:
        assert word in verdict.reason


@pytest.mark.parametrize(
    ("health", "mirror", "grace_left"),
    [
        pytest.param(fresh(), "fresh", None, id="fresh"),
        pytest.param(
            stale(1.0),
            "stale for 1.0s of a 5s grace: ClientConnectionFailed: clusterqueues: "
            "connection refused",
            4.0,
            id="stale",
        ),
        pytest.param(
            stale(7.0),
            "lost: stale for 7.0s, over the 5s grace: ClientConnectionFailed: clusterqueues: "
            "connection refused",
            None,
            id="lost",
        ),
    ],
)
def test_both_inputs_are_spelt_out(
    health: MirrorHealth, mirror: str, grace_left: float | None
) -> None:
    """``explain`` and the logs show Kueue's view and ours separately."""
    verdict = judge(kueue("True"), health, now=NOW, grace=GRACE)
    assert verdict.kueue == "Active=True"
    assert verdict.mirror == mirror
    assert verdict.grace_left == grace_left


def test_describe_names_the_verdict_and_both_inputs() -> None:
    verdict = judge(kueue("False", "ClientConnectionFailed"), fresh(), now=NOW, grace=GRACE)
    assert verdict.describe() == (
        "not dispatched to: Kueue reports Active=False (ClientConnectionFailed) "
        "(Kueue: Active=False (ClientConnectionFailed); our mirror: fresh)"
    )
    assert Activeness(True, "", "Active=True", "fresh").describe() == (
        "dispatched to (Kueue: Active=True; our mirror: fresh)"
    )


def test_zero_grace_loses_the_worker_at_the_first_failure() -> None:
    assert not judge(kueue("True"), stale(0.0), now=NOW, grace=0.0).active


def test_recovery_is_immediate() -> None:
    """A mirror connected again is fresh whatever happened before: no recovery delay."""
    lost = judge(kueue("True"), stale(60.0), now=NOW, grace=GRACE)
    back = judge(kueue("True"), fresh(), now=NOW, grace=GRACE)
    assert (lost.active, back.active) == (False, True)
