"""Kueue's built-in MultiKueue dispatchers (C56–C61): which clusters a Workload is nominated to.

Kueue v0.19.2 keeps AllAtOnce as a branch of the workload reconciler
(``pkg/controller/admissionchecks/multikueue/workload.go``, ``nominateAndSynchronizeWorkers``)
and Incremental as its own controller (``pkg/controller/workloaddispatcher/
incrementaldispatcher.go``). Here both are pure decisions over what the workload reconciler
(:mod:`.workload`) read; it writes the nomination they return and keeps the Incremental rounds'
start times in memory, as Kueue does (C61). An external dispatcher (C32) is not here: the
reconciler reads the nomination as it was written.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def all_at_once(current: Sequence[str], connected: Iterable[str]) -> list[str] | None:
    """C56: every connected cluster of the config, sorted by name; None when the nomination
    already names exactly those (nothing to write)."""
    nominated = sorted(connected)
    return None if sorted(current) == nominated else nominated


@dataclass(frozen=True)
class IncrementalStep:
    """What one Incremental reconcile decides (C59).

    ``nominated``: the nomination after this reconcile; ``write``: whether it changed (a new round
    started now); ``requeue``: seconds until the current round ends (None: no round running, the
    candidates are used up — Kueue's ``ErrNoMoreWorkers``)."""

    nominated: list[str]
    write: bool
    requeue: float | None


def incremental(
    current: Sequence[str],
    clusters: Sequence[str],
    round_started: datetime.datetime | None,
    now: datetime.datetime,
    *,
    round_seconds: float,
    step_size: int,
) -> IncrementalStep:
    """C59 steps 2–4: while a round runs, wait for its end; otherwise append the next
    ``step_size`` (at least 1) of the config's clusters not nominated yet, in config order
    (``clusters``, connected or not), and start a round."""
    elapsed = (now - round_started).total_seconds() if round_started is not None else None
    if elapsed is not None and elapsed < round_seconds:
        return IncrementalStep(list(current), False, round_seconds - elapsed)
    candidates = [c for c in clusters if c not in current]
    if not candidates:
        return IncrementalStep(list(current), False, None)
    return IncrementalStep([*current, *candidates[: max(1, step_size)]], True, round_seconds)
