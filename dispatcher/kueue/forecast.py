"""When a workload that must wait would start on one worker ClusterQueue: a pure forecast.

The dispatcher sees each worker's ClusterQueue from its mirror
(``dispatcher.controller.snapshots``): the workloads holding quota there, those queued in it,
and how long the workloads of that queue that finished ran. :func:`predicted_start` replays the
future of that queue in event time:

* each holder releases its quota when it ends: its start plus a run time drawn from the observed
  run times **longer than it has already run** (a job that has run 50 minutes is not expected to
  end in the 10 the median job takes), capped by its ``spec.maximumExecutionTimeSeconds`` (Kueue
  deactivates a Workload admitted for longer, contract C90); with no run time observed longer
  than it has run, the cap alone; with neither, never (its quota is taken to stay held);
* the workloads **ahead** of it (queued with at least its priority, and our own in-flight
  nominations there, in order) are admitted as soon as they fit, in order, skipping those that
  do not (``BestEffortFIFO``), and run for a drawn run time, or their own cap;
* the workload starts at the first moment it fits once every workload ahead that fits has
  been placed.

Run times are drawn :data:`DRAWS` times, deterministically (a low-discrepancy sequence of
quantiles), and the forecast is the **median start** of those futures. Replaying each workload's
median end instead would be late: of several holders the first to end is, typically, well
before the earliest of their median ends (the simulator measures the error of both:
``docs/simulator.md``).

It is an estimate, and says so: it does not model ``StrictFIFO``, preemption of or by other
workloads, quota lent to or reclaimed by the cohort after now, nor workloads that arrive later.
The simulator reports its error against what happened (``docs/simulator.md``).
"""

from __future__ import annotations

import bisect
import collections
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
    "DRAWS",
    "MAX_AHEAD",
    "MAX_SAMPLES",
    "Ahead",
    "RunTimes",
    "Running",
    "end_at",
    "predicted_start",
    "run_for",
]

MAX_SAMPLES = 256
"""How many recent run times are kept per worker ClusterQueue."""


class RunTimes:
    """How long the workloads that finished ran, per worker ClusterQueue: the most recent
    :data:`MAX_SAMPLES` of each queue, handed out sorted (sorted once per change).

    The dispatcher's mirror fills it from the finished Workloads it sees; the simulator from
    the workloads it ends, so both forecast from the same statistics."""

    __slots__ = ("_recent", "_sorted")

    def __init__(self) -> None:
        self._recent: dict[str, collections.deque[float]] = {}
        self._sorted: dict[str, tuple[float, ...]] = {}

    def add(self, cq: str, seconds: float) -> None:
        """A workload of ClusterQueue ``cq`` finished after running ``seconds``."""
        self._recent.setdefault(cq, collections.deque(maxlen=MAX_SAMPLES)).append(seconds)
        self._sorted.pop(cq, None)

    def sorted(self, cq: str) -> tuple[float, ...]:
        """The run times kept for ``cq``, shortest first (empty when none finished there)."""
        found = self._sorted.get(cq)
        if found is None:
            found = self._sorted[cq] = tuple(sorted(self._recent.get(cq, ())))
        return found


MAX_AHEAD = 64
"""The most workloads ahead a forecast replays (with more ahead it is unknown): a forecast runs
inside a decision, which must stay cheap when a queue is long."""

_MAX_STEPS = 512
"""Bound on the release times one forecast replays (the forecast is unknown beyond it)."""

_TRIES_PER_STEP = 4
"""At each release time, how many workloads ahead that still do not fit are tried before the
rest wait for the next release (bounds the work of a long queue of large workloads)."""


DRAWS = 9
"""How many futures a forecast replays (its answer is their median start)."""

_GOLDEN = 0.6180339887498949
"""Spreads the quantiles drawn for different workloads of one future (a low-discrepancy
sequence: deterministic, and not the same quantile for every workload)."""


@dataclass(frozen=True, slots=True)
class Running:
    """A workload holding quota: what it releases, since when it runs, and its limit."""

    usage: Mapping[FlavorResource, int]
    started: float
    max_execution: float | None = None
    """Its ``maximumExecutionTimeSeconds`` (``None``: not set)."""


@dataclass(frozen=True, slots=True)
class Ahead:
    """A workload queued ahead: what it needs, and its limit."""

    pod_sets: tuple[PodSetView, ...]
    max_execution: float | None = None


def _quantile(ordered: Sequence[float], u: float) -> float:
    return ordered[min(len(ordered) - 1, int(u * len(ordered)))]


def end_at(holder: Running, now: float, samples: Sequence[float], u: float) -> float | None:
    """When ``holder`` ends in a future where its run time is the ``u``-quantile of the
    ``samples`` (sorted run times of its queue) longer than it has already run, capped by its
    limit; with no such sample, at its limit; with no limit either, ``None`` (never known)."""
    elapsed = max(0.0, now - holder.started)
    longer = samples[bisect.bisect_right(samples, elapsed) :]
    cap = None if holder.max_execution is None else holder.started + holder.max_execution
    if longer:
        end = holder.started + _quantile(longer, u)
        return end if cap is None else min(end, cap)
    return None if cap is None else max(now, cap)


def run_for(item: Ahead, samples: Sequence[float], u: float) -> float | None:
    """How long a workload not started yet runs in a future where it is the ``u``-quantile of
    ``samples``, capped by its limit (``None``: neither is known)."""
    if samples:
        drawn = _quantile(samples, u)
        return drawn if item.max_execution is None else min(drawn, item.max_execution)
    return item.max_execution


def predicted_start(
    pod_sets: Sequence[PodSetView],
    cluster_queue: ClusterQueueView,
    flavors: Mapping[str, ResourceFlavorView],
    available: Mapping[FlavorResource, int],
    now: float,
    running: Sequence[Running],
    ahead: Sequence[Ahead] = (),
    samples: Sequence[float] = (),
) -> float | None:
    """The median start over :data:`DRAWS` futures, or ``None`` when most of them cannot tell
    (quota whose release is never known is needed, more than :data:`MAX_AHEAD` workloads are
    ahead, or more than a bounded number of release times pass).

    In future ``j`` the ``i``-th workload's run time is the quantile ``frac(i·φ + (j + ½) /
    DRAWS)`` of the observed ``samples`` (sorted): each future is a plausible draw, workloads
    do not all end at their median together, and the answer is the same for the same input.
    The median of the futures, not the future of the medians: the first of several holders to
    end is earlier than the earliest of their median ends.
    """
    if len(ahead) > MAX_AHEAD:
        return None
    if assign_flavors(pod_sets, cluster_queue, flavors, available).fits and not ahead:
        return now
    # Even with every holder gone whose end can ever be known, does it fit? If not, no future
    # tells when (one flavor assignment instead of a replay per future).
    releasable = dict(available)
    for holder in running:
        if samples or holder.max_execution is not None:
            for fr, amount in holder.usage.items():
                releasable[fr] = releasable.get(fr, 0) + amount
    if not assign_flavors(pod_sets, cluster_queue, flavors, releasable).fits:
        return None
    starts: list[float] = []
    for draw in range(DRAWS):
        offset = (draw + 0.5) / DRAWS

        def u(index: int, offset: float = offset) -> float:
            return (index * _GOLDEN + offset) % 1.0

        releases = [
            (end, usage)
            for index, holder in enumerate(running)
            if (end := end_at(holder, now, samples, u(index))) is not None
            for usage in (holder.usage,)
        ]
        runs = [run_for(item, samples, u(len(running) + i)) for i, item in enumerate(ahead)]
        found = _replay(pod_sets, cluster_queue, flavors, available, now, releases, ahead, runs)
        if found is not None:
            starts.append(found)
    if len(starts) <= DRAWS // 2:
        return None
    starts.sort()
    return starts[DRAWS // 2]


def _replay(
    pod_sets: Sequence[PodSetView],
    cluster_queue: ClusterQueueView,
    flavors: Mapping[str, ResourceFlavorView],
    available: Mapping[FlavorResource, int],
    now: float,
    ends: Sequence[tuple[float, Mapping[FlavorResource, int]]],
    ahead: Sequence[Ahead],
    runs: Sequence[float | None],
) -> float | None:
    """One future: the first time the workload fits, or ``None``."""
    free = dict(available)
    releases: list[tuple[float, int, Mapping[FlavorResource, int]]] = [
        (max(now, end), index, usage) for index, (end, usage) in enumerate(ends)
    ]
    heapq.heapify(releases)
    serial = len(releases)
    queue = list(zip(ahead, runs, strict=True))
    moment = now
    for _ in range(_MAX_STEPS):
        waiting = []
        misses = 0
        for item, runs_for in queue:
            if misses >= _TRIES_PER_STEP:
                waiting.append((item, runs_for))
                continue
            placed = assign_flavors(item.pod_sets, cluster_queue, flavors, free)
            if not placed.fits:
                waiting.append((item, runs_for))
                misses += 1
                continue
            for fr, amount in placed.usage.items():
                free[fr] = free.get(fr, 0) - amount
            if runs_for is not None:
                heapq.heappush(releases, (moment + runs_for, serial, placed.usage))
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
