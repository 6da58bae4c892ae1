"""In-flight bookkeeping (issue 4/5: stop a burst from over-filling one idle cluster)."""

from __future__ import annotations

from dispatcher.algorithms.model import QueuedWorkload
from dispatcher.controller.inflight import InFlight


def wl(key: str) -> QueuedWorkload:
    return QueuedWorkload(key=key)


def test_record_moves_a_workload_between_clusters() -> None:
    ledger = InFlight()
    ledger.record(("a",), wl("ns/w"), now=0)
    ledger.record(("b", "c"), wl("ns/w"), now=1)
    assert ledger.on("a", now=1) == ()
    assert ledger.clusters_of("ns/w") == ("b", "c")


def test_oldest_first_and_since_kept_on_renomination() -> None:
    ledger = InFlight()
    ledger.record(("a",), wl("ns/second"), now=5)
    ledger.record(("a",), wl("ns/first"), now=1)
    ledger.record(("a",), wl("ns/first"), now=9)  # same nomination again: keeps its age
    assert [w.key for w in ledger.on("a", now=10)] == ["ns/first", "ns/second"]


def test_settle_and_forget() -> None:
    ledger = InFlight()
    ledger.record(("a", "b"), wl("ns/w"), now=0)
    assert ledger.settle("a", "ns/w")
    assert not ledger.settle("a", "ns/w")
    assert ledger.count("b") == 1
    ledger.forget("ns/w")
    assert ledger.clusters() == ()


def test_entries_expire() -> None:
    ledger = InFlight(expiry_seconds=60)
    ledger.record(("a",), wl("ns/old"), now=0)
    ledger.record(("a",), wl("ns/new"), now=50)
    assert [w.key for w in ledger.on("a", now=70)] == ["ns/new"]
