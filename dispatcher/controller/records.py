"""What the nomination loop remembers of each workload, and the time helpers its parts share."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.controller.outage import Placement

__all__ = ["PITFALL_ADVICE", "Record", "Unconfirmed", "parse_time", "transition_time"]


@dataclass(frozen=True)
class Unconfirmed:
    """A nomination write that got no answer (timeout, connection cut): it may have landed."""

    target: tuple[str, ...]
    algorithm: str
    message: str


PITFALL_ADVICE = (
    "its admission write is rejected because nominatedClusterNames is owned by another field "
    "manager (the field-manager pitfall, Kueue issue 6185). Install Kueue's "
    "clear-nominated-cluster-names MutatingAdmissionPolicy (Kubernetes >= 1.36) or enable Kueue's "
    "WorkloadRequestUseMergePatch feature gate (each admits 9 of the 10 demo workloads on real "
    "Kueue v0.19.2, where no remedy admits 0)"
)


@dataclass
class Record:
    """What the controller remembers of one workload (rebuilt from the API after a restart)."""

    nominated_at: float | None = None
    nominated: tuple[str, ...] = ()
    stuck_reported: bool = False
    leftover_job_reported: bool = False
    """Its admission on a worker where a leftover Job of ours takes its Job's name was reported
    (C68)."""
    eviction_reported: float | None = None
    """The ``Evicted`` transition (epoch seconds) already reported as a stuck eviction (C93)."""
    eviction_released: float | None = None
    """The ``Evicted`` transition whose stuck eviction the opt-in policy released (C93)."""
    event_message: str = ""
    first_nominated_at: float | None = None
    admission_reported: bool = False
    gpu_checked: bool = False
    """The GPU type its worker assigned was compared with what it asked for (once)."""
    predicted: Mapping[str, float] = field(default_factory=dict)
    """Predicted start per nominated cluster where it had to wait (epoch seconds), from the
    decision that wrote the nomination; compared with the admission once."""
    problem: str = ""
    unconfirmed: Unconfirmed | None = None
    leftover_since: float | None = None
    copies_lost: dict[str, float] = field(default_factory=dict)
    """Workers where its admitted copy vanished (Kueue: "Admitting remote no longer exists"),
    with when the dispatcher saw it (epoch seconds): left out of its decisions for
    ``lost_copy_cooldown_seconds`` (contract C91)."""
    copies_evicted: dict[str, str] = field(default_factory=dict)
    """Workers that evicted its admitted copy by Kueue's word (the ``Retry`` of C26) while the
    dispatcher's mirror still showed that copy holding quota, with the copy's
    ``creationTimestamp``: until the mirror shows it released or gone, it holds nothing for the
    holder rule (``Nominator._holding_copy``)."""
    placement: Placement | None = None
    """The last placement of a quota-holding workload (None when it holds none)."""
    outage_message: str = ""
    """The last ``Unplaceable`` Event's message (one Event per change)."""
    starved_message: str = ""
    """The last ``BlockedByUnplaceable`` Event's message."""


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch, or None."""
    if not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp()


def transition_time(obj: Mapping[str, Any], kind: str) -> float | None:
    """When condition ``kind`` of ``obj`` last changed, or None."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return parse_time(item.get("lastTransitionTime"))
    return None
