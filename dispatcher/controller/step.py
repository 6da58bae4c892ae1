"""The decision step both the controller and the simulator take: a decision in, a typed outcome out.

Pure and synchronous: given the plugin pipeline's :class:`~dispatcher.algorithms.model.Decision`,
the standing nomination and the snapshots it was decided over, :func:`outcome` says what to do
with the nomination; :func:`account` applies it to the in-flight ledger. The nomination loop
(:mod:`dispatcher.controller.nominator`) writes, records Events and schedules follow-ups around
it; the simulator (:mod:`dispatcher.sim.engine`) models the write's latency around the same step,
so the two cannot drift apart.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from dispatcher.algorithms.building import queued_workload
from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.controller.inflight import InFlight

__all__ = ["Action", "Outcome", "account", "outcome"]


class Action(enum.Enum):
    """What becomes of the nomination."""

    WRITE = "write"
    """The target differs from the standing nomination: write it."""
    UNCHANGED = "unchanged"
    """The decision keeps the standing nomination."""
    KEEP = "keep"
    """The decision nominates nothing while every candidate is inactive (a blip on our side or
    Kueue's): an empty nomination would have Kueue delete copies that may be about to be
    admitted, so the standing one stays until a cluster is back."""
    WITHHELD = "withheld"
    """A fail-closed filter failed: nothing is written, the decision is taken again later."""


@dataclass(frozen=True)
class Outcome:
    """The step's answer for one decision."""

    action: Action
    target: tuple[str, ...]
    """The nomination after the step (the standing one unless ``action`` is ``WRITE``)."""
    follow_up: float | None
    """When the pipeline asked to decide again (seconds), None: at the resync."""


def outcome(
    decision: Decision, current: tuple[str, ...], snapshots: Sequence[ClusterSnapshot]
) -> Outcome:
    """What to do with the standing nomination ``current`` after ``decision``."""
    if decision.withheld:
        return Outcome(Action.WITHHELD, current, decision.requeue_after)
    target = tuple(decision.nominate)
    if not target and current and not any(snap.active for snap in snapshots):
        return Outcome(Action.KEEP, current, decision.requeue_after)
    if target == current:
        return Outcome(Action.UNCHANGED, current, decision.requeue_after)
    return Outcome(Action.WRITE, target, decision.requeue_after)


def account(step: Outcome, in_flight: InFlight, request: DispatchRequest, now: float) -> None:
    """Count a written nomination as in flight from the decision on (the controller rolls it
    back when the write cannot have landed); an empty one takes the workload out."""
    if step.action is not Action.WRITE:
        return
    if step.target:
        in_flight.record(step.target, queued_workload(request), now)
    else:
        in_flight.forget(request.key)
