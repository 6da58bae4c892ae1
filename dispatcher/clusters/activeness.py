"""Whether a worker may be dispatched to: two separate inputs, with hysteresis on ours.

Two things must hold for the dispatcher to nominate a worker:

- **Kueue's view**: the MultiKueueCluster's ``Active`` condition. Kueue creates copies only on
  clusters it reports ``Active=True`` (contract C32, C50), so anything else makes the worker
  inactive **at once**.
- **Our mirror's freshness**: the dispatcher's own list-then-watch mirror of the worker, which
  every decision reads. A mirror that never synced has nothing to decide from (inactive). A
  mirror that synced and then lost a stream (a failed re-watch, a refused connection) still
  holds the worker's objects as they were seconds ago: it is **stale**, and the worker stays a
  candidate for ``grace`` seconds. Only a mirror stale for ``grace`` seconds or more makes the
  worker lost for dispatch, and its nominations move. A fresh stream again (recovery) counts at
  once.

So a blip of our own watches shorter than the grace moves no nomination and re-queues nothing,
while Kueue's own verdict is never delayed. :func:`judge` is the pure state function; the
registry feeds it and schedules the moment a stale mirror's grace runs out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_STALE_GRACE_SECONDS", "Activeness", "MirrorHealth", "judge"]

DEFAULT_STALE_GRACE_SECONDS = 5.0
"""Why 5 s: our watch loop retries a failed stream after 1 s, then 2 s (two failed re-watches of
one resource keep the mirror stale about 3 s), and Kueue's own reconnect backoff starts at 5 s
(``retryIncrement`` in Kueue's MultiKueueCluster controller). A real outage still moves the
nominations within 5 s plus one decision, far inside the 30 s the fault suites allow; and when
Kueue itself loses the worker it reports ``Active=False``, which counts without any grace."""


@dataclass(frozen=True)
class MirrorHealth:
    """Our side of one worker at one moment (from the registry's :class:`Worker`)."""

    phase: str
    """The connection phase: ``Connecting``, ``Connected``, ``Disconnected`` or ``Unusable``."""
    detail: str
    """Reason and message of the phase, for people (never a secret)."""
    synced: bool
    """The mirror has listed every required resource at least once."""
    stale_since: float | None
    """When the synced mirror stopped being connected (the registry's monotonic clock); None
    while it is connected."""


@dataclass(frozen=True)
class Activeness:
    """The verdict on one worker, with both inputs spelt out (``explain``, logs)."""

    active: bool
    reason: str
    """Why the worker is not dispatched to; empty when it is."""
    kueue: str
    """Kueue's view: ``Active=True``, ``Active=False (Reason)``, or that there is none yet."""
    mirror: str
    """Our mirror's view: ``fresh``, ``stale for 1.2s of a 5s grace: …``, ``lost: …``."""
    grace_left: float | None = None
    """Seconds until a stale mirror counts as lost (None when it is not stale)."""

    def describe(self) -> str:
        """One line: the verdict, then both inputs."""
        verdict = "dispatched to" if self.active else f"not dispatched to: {self.reason}"
        return f"{verdict} (Kueue: {self.kueue}; our mirror: {self.mirror})"


def _kueue_view(active: Mapping[str, Any] | None) -> tuple[bool, str]:
    if active is None:
        return False, "no Active condition yet (Kueue has not connected to it)"
    status = str(active.get("status"))
    reason = str(active.get("reason") or "")
    text = f"Active={status}" + (f" ({reason})" if reason and status != "True" else "")
    return status == "True", text


def judge(
    active_condition: Mapping[str, Any] | None,
    health: MirrorHealth | None,
    *,
    now: float,
    grace: float,
) -> Activeness:
    """Whether a worker is dispatched to, from Kueue's ``Active`` condition on its
    MultiKueueCluster (None: no condition yet) and our mirror's ``health`` (None: no supervisor
    for it), at ``now`` on the clock ``health.stale_since`` is measured on."""
    kueue_ok, kueue = _kueue_view(active_condition)
    problems: list[str] = []
    grace_left: float | None = None
    if health is None:
        mirror = "none (not connected)"
        problems.append("not connected")
    elif not health.synced:
        mirror = ": ".join(part for part in (health.phase, health.detail) if part)
        problems.append(mirror)
    elif health.stale_since is None:
        mirror = "fresh"
    else:
        stale = max(0.0, now - health.stale_since)
        detail = f": {health.detail}" if health.detail else ""
        if stale < grace:
            grace_left = grace - stale
            mirror = f"stale for {stale:.1f}s of a {grace:g}s grace{detail}"
        else:
            mirror = f"lost: stale for {stale:.1f}s, over the {grace:g}s grace{detail}"
            problems.append(f"our mirror of it has been {health.phase} for {stale:.0f}s{detail}")
    if not kueue_ok:
        problems.append(
            f"Kueue reports {kueue}"
            if active_condition is not None
            else "Kueue has not connected to it yet"
        )
    return Activeness(not problems, "; ".join(problems), kueue, mirror, grace_left)
