"""When a workload that must wait would start on one worker ClusterQueue: a pure forecast.

The dispatcher sees each worker's ClusterQueue from its mirror
(``dispatcher.controller.snapshots``): the workloads holding quota there, those queued in it,
and how long the workloads of that queue that finished ran. :func:`predicted_start` replays the
future of that queue in event time:

* each holder releases its quota at its **expected end** (:func:`expected_end`): its start plus
  the conditional median of the observed run times longer than it has already run (a job that
  has run 50 minutes is not expected to end in the 10 the median job takes), capped by its
  ``spec.maximumExecutionTimeSeconds`` (Kueue deactivates a Workload admitted for longer, contract
  C90); with no run time observed longer than it has run, that cap alone; with neither, never
  (its quota is taken to stay held, and a forecast that needs it is unknown);
* the workloads **ahead** of it (queued with at least its priority, and our own in-flight
  nominations there, in order) are admitted as soon as they fit, in order, skipping those that
  do not (``BestEffortFIFO``), and release their quota after their own expected run time (their
  ``maximumExecutionTimeSeconds``, else the median observed);
* the workload starts at the first moment it fits once every workload ahead that fits has
  been placed.

It is an estimate, and says so: it does not model ``StrictFIFO``, preemption of or by other
workloads, quota lent to or reclaimed by the cohort after now, nor workloads that arrive later.
The simulator reports its error against what happened (``docs/simulator.md``).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dispatcher.kueue.flavorfit import assign_flavors
from dispatcher.kueue.objects import (
    ClusterQueueView,
    FlavorResource,
    PodSetView,
    ResourceFlavorView,
)

__all__ = [
    "MAX_AHEAD",
    "MAX_SAMPLES",
    "Ahead",
    "Running",
    "expected_end",
    "expected_run",
    "predicted_start",
]

MAX_SAMPLES = 256
"""How many recent run times are kept per worker ClusterQueue."""

MAX_AHEAD = 64
"""The most workloads ahead a forecast replays (with more ahead it is unknown): a forecast runs
inside a decision, which must stay cheap when a queue is long."""

_MAX_STEPS = 512
"""Bound on the release times one forecast replays (the forecast is unknown beyond it)."""

_TRIES_PER_STEP = 4
"""At each release time, how many workloads ahead that still do not fit are tried before the
rest wait for the next release (bounds the work of a long queue of large workloads)."""


@dataclass(frozen=True, slots=True)
class Running:
    """A workload holding quota: what it releases, and when (``None``: not known)."""

    usage: Mapping[FlavorResource, int]
    ends_at: float | None


@dataclass(frozen=True, slots=True)
class Ahead:
    """A workload queued ahead: what it needs and how long it would run (``None``: unknown)."""

    pod_sets: tuple[PodSetView, ...]
    runs_for: float | None


def _median(values: Sequence[float]) -> float:
    middle = len(values) // 2
    if len(values) % 2:
        return values[middle]
    return (values[middle - 1] + values[middle]) / 2


def expected_run(samples: Sequence[float], max_execution: float | None) -> float | None:
    """How long a workload not started yet is expected to run: the median of ``samples``
    (sorted run times of the queue), capped by its ``maximumExecutionTimeSeconds``."""
    if samples:
        median = _median(samples)
        return median if max_execution is None else min(median, max_execution)
    return max_execution


def expected_end(
    started: float, now: float, samples: Sequence[float], max_execution: float | None
) -> float | None:
    """When a workload that started at ``started`` is expected to end (see the module
    docstring); ``samples`` are sorted run times of its queue."""
    elapsed = max(0.0, now - started)
    longer = samples[bisect.bisect_right(samples, elapsed) :]
    cap = None if max_execution is None else started + max_execution
    if longer:
        end = started + _median(longer)
        return end if cap is None else min(end, cap)
    if cap is not None:
        return max(now, cap)
    return None


def predicted_start(
    pod_sets: Sequence[PodSetView],
    cluster_queue: ClusterQueueView,
    flavors: Mapping[str, ResourceFlavorView],
    available: Mapping[FlavorResource, int],
    now: float,
    running: Sequence[Running],
    ahead: Sequence[Ahead] = (),
) -> float | None:
    """The first time the workload would fit, or ``None`` when the forecast cannot tell (it
    needs quota whose release time is unknown, more than :data:`MAX_AHEAD` workloads are ahead,
    or more than a bounded number of release times pass)."""
    if len(ahead) > MAX_AHEAD:
        return None
    free = dict(available)
    releases: list[tuple[float, int, Mapping[FlavorResource, int]]] = []
    for index, holder in enumerate(running):
        if holder.ends_at is not None:
            releases.append((max(now, holder.ends_at), index, holder.usage))
    heapq.heapify(releases)
    serial = len(running)
    queue = list(ahead)
    moment = now
    for _ in range(_MAX_STEPS):
        waiting = []
        misses = 0
        for item in queue:
            if misses >= _TRIES_PER_STEP:
                waiting.append(item)
                continue
            placed = assign_flavors(item.pod_sets, cluster_queue, flavors, free)
            if not placed.fits:
                waiting.append(item)
                misses += 1
                continue
            for fr, amount in placed.usage.items():
                free[fr] = free.get(fr, 0) - amount
            if item.runs_for is not None:
                heapq.heappush(releases, (moment + item.runs_for, serial, placed.usage))
                serial += 1
        queue = waiting
        if assign_flavors(pod_sets, cluster_queue, flavors, free).fits:
            return moment
        if not releases:
            return None
        moment = releases[0][0]
        while releases and releases[0][0] <= moment:
            _, _, usage = heapq.heappop(releases)
            for fr, amount in usage.items():
                free[fr] = free.get(fr, 0) + amount
    return None
