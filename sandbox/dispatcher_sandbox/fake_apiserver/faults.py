"""Fault injection and the request journal (docs/fake-apiserver.md F52–F58)."""

from __future__ import annotations

import itertools
import random
import re
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")

_ids = itertools.count(1)


@dataclass
class Fault:
    """One injected fault: an error (F53) or a delay (F54) for matching requests.

    ``count`` None means "until cleared". ``fired`` counts how often it was used (F58).
    ``probability`` below 1 makes the fault apply to that fraction of matching requests only,
    drawn from the cluster's seeded random source (an extension of F53/F54 for "10% of requests
    fail" fault suites); a request it spares does not count as fired. ``user_agent`` (another
    extension) restricts the fault to clients whose ``User-Agent`` header it matches (a regular
    expression searched in the header; empty matches every client), so that a fault suite can
    target one client (the dispatcher) among several on the same cluster (the emulated Kueue).
    ``hold`` (a third extension, latency only) applies the delay *after* the request took
    effect: the answer is held back, so with a delay past the client's timeout a write lands
    while the client sees a timeout, as with a real API server whose answer is lost.
    """

    kind: str  # "error" or "latency"
    verbs: tuple[str, ...] = ()  # empty: every verb
    path: str = ""  # regular expression searched in the request path; empty matches all
    user_agent: str = ""  # regular expression searched in the User-Agent header; empty: all
    count: int | None = None
    code: int = 500
    message: str = ""
    retry_after: int | None = None
    delay: float = 0.0
    jitter: float = 0.0
    probability: float = 1.0
    hold: bool = False
    fired: int = 0
    id: int = field(default_factory=lambda: next(_ids))

    def __post_init__(self) -> None:
        if self.kind not in ("error", "latency"):
            raise ValueError(f"fault kind must be 'error' or 'latency', not {self.kind!r}")
        unknown = set(self.verbs) - set(VERBS)
        if unknown:
            raise ValueError(f"unknown verbs {sorted(unknown)}; expected some of {VERBS}")
        # Admin bodies are JSON: refuse wrong types here rather than fail every request later.
        for name in ("count", "code", "retry_after", "delay", "jitter", "probability"):
            value = getattr(self, name)
            numeric = (int, float) if name in ("delay", "jitter", "probability") else (int,)
            optional = name in ("count", "retry_after")
            if isinstance(value, bool) or not (
                isinstance(value, numeric) or (optional and value is None)
            ):
                raise ValueError(f"fault field {name!r} must be a number, not {value!r}")
        if not isinstance(self.hold, bool):
            raise ValueError(f"fault field 'hold' must be true or false, not {self.hold!r}")
        if self.hold and self.kind != "latency":
            raise ValueError("fault field 'hold' applies to latency faults only")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"fault probability must be within [0, 1], not {self.probability!r}")
        self._pattern = _regex("path", self.path)
        self._agent = _regex("user_agent", self.user_agent)

    def matches(self, verb: str, path: str, user_agent: str = "") -> bool:
        """Whether this fault applies to a request and still has uses left."""
        if self.count is not None and self.fired >= self.count:
            return False
        if self.verbs and verb not in self.verbs:
            return False
        if self._agent is not None and self._agent.search(user_agent) is None:
            return False
        return self._pattern is None or self._pattern.search(path) is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the admin endpoint."""
        data = asdict(self)
        data["verbs"] = list(self.verbs)
        return data


def _regex(name: str, value: object) -> re.Pattern[str] | None:
    """The compiled pattern of a fault field (None when empty); a ValueError names the field."""
    if not isinstance(value, str):
        raise ValueError(f"fault field {name!r} must be a string, not {value!r}")
    try:
        return re.compile(value) if value else None
    except re.error as exc:
        raise ValueError(
            f"fault field {name!r}: {value!r} is not a regular expression: {exc}"
        ) from exc


class Picked(NamedTuple):
    """What the faults do to one request: ``delay`` before it is handled, the ``error`` to
    answer with instead, and ``hold``, a delay after it was handled (see ``Fault.hold``)."""

    delay: float
    error: Fault | None
    hold: float = 0.0


@dataclass(frozen=True)
class JournalEntry:
    """One request as the server saw it (F58)."""

    method: str
    verb: str
    path: str
    query: str
    content_type: str
    field_manager: str
    user_agent: str
    status: int


class Faults:
    """The faults of one cluster, with a seeded random source for jitter."""

    def __init__(self, seed: int = 0) -> None:
        self._faults: list[Fault] = []
        self._random = random.Random(seed)
        self.expire_next_watches = 0

    def add(self, fault: Fault) -> Fault:
        """Add a fault; returns it (keep it to read ``fired``)."""
        self._faults.append(fault)
        return fault

    def error(
        self,
        code: int,
        *,
        verbs: tuple[str, ...] = (),
        path: str = "",
        count: int | None = None,
        message: str = "",
        retry_after: int | None = None,
        probability: float = 1.0,
        user_agent: str = "",
    ) -> Fault:
        """Fail matching requests with ``code`` (F53); ``probability`` < 1 fails that fraction;
        ``user_agent`` (a regular expression) restricts it to matching clients."""
        return self.add(
            Fault(
                "error",
                verbs=verbs,
                path=path,
                user_agent=user_agent,
                count=count,
                code=code,
                message=message,
                retry_after=retry_after,
                probability=probability,
            )
        )

    def latency(
        self,
        delay: float,
        *,
        jitter: float = 0.0,
        verbs: tuple[str, ...] = (),
        path: str = "",
        count: int | None = None,
        probability: float = 1.0,
        user_agent: str = "",
        hold: bool = False,
    ) -> Fault:
        """Delay matching requests (F54); ``probability`` < 1 delays that fraction;
        ``user_agent`` (a regular expression) restricts it to matching clients; ``hold`` delays
        the answer after the request took effect instead of the request itself."""
        return self.add(
            Fault(
                "latency",
                verbs=verbs,
                path=path,
                user_agent=user_agent,
                count=count,
                delay=delay,
                jitter=jitter,
                probability=probability,
                hold=hold,
            )
        )

    def clear(self) -> list[Fault]:
        """Remove every fault; returns them with their counts."""
        removed, self._faults = self._faults, []
        self.expire_next_watches = 0
        return removed

    def remove(self, fault_id: int) -> bool:
        """Remove one fault by id."""
        before = len(self._faults)
        self._faults = [f for f in self._faults if f.id != fault_id]
        return len(self._faults) != before

    def list(self) -> list[Fault]:
        """Current faults."""
        return list(self._faults)

    def pick(self, verb: str, path: str, user_agent: str = "") -> Picked:
        """The delays to add and the error fault to answer with, counting their use."""
        delay = hold = 0.0
        error: Fault | None = None
        for fault in self._faults:
            if not fault.matches(verb, path, user_agent):
                continue
            if fault.kind == "error" and error is not None:
                continue  # an earlier error answers: do not draw or count this one
            if fault.probability < 1.0 and self._random.random() >= fault.probability:
                continue
            if fault.kind == "latency":
                fault.fired += 1
                jitter = self._random.uniform(0.0, fault.jitter) if fault.jitter else 0.0
                if fault.hold:
                    hold += fault.delay + jitter
                else:
                    delay += fault.delay + jitter
            else:
                fault.fired += 1
                error = fault
        # An error answer means the request never took effect: nothing to hold.
        return Picked(delay, error, 0.0 if error is not None else hold)


class Journal:
    """A bounded record of requests (F58)."""

    def __init__(self, size: int = 5000) -> None:
        self._entries: deque[JournalEntry] = deque(maxlen=size)

    def record(self, entry: JournalEntry) -> None:
        """Append one request."""
        self._entries.append(entry)

    def entries(self) -> list[JournalEntry]:
        """All kept entries, oldest first."""
        return list(self._entries)

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()
