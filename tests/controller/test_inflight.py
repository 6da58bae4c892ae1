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


def test_ordered_view_is_reused_until_the_cluster_changes() -> None:
    """Decisions read every candidate's ledger; only a change on that cluster re-sorts it (the
    controller's snapshot cache relies on the tuple's identity)."""
    ledger = InFlight(expiry_seconds=60)
    ledger.record(("a",), wl("ns/1"), now=0)
    ledger.record(("b",), wl("ns/2"), now=0)
    first = ledger.on("a", now=1)
    ledger.record(("b",), wl("ns/3"), now=2)
    assert ledger.on("a", now=2) is first
    ledger.record(("a",), wl("ns/1"), now=3)  # the same nomination again: no change
    assert ledger.on("a", now=3) is first
    ledger.record(("a",), wl("ns/4"), now=4)
    assert [w.key for w in ledger.on("a", now=4)] == ["ns/1", "ns/4"]
    ledger.settle("a", "ns/4")
    assert [w.key for w in ledger.on("a", now=5)] == ["ns/1"]
    assert ledger.on("a", now=61) == ()  # expiry still applies to a cached view
    assert ledger.count("b", now=61) == 1


def test_changed_names_each_cluster_whose_entries_changed_once() -> None:
    """The in-flight gauge publishes only these (issue 15: a write changes one or a few of
    many clusters); a no-op record and a read that drops nothing change nothing."""
    ledger = InFlight(expiry_seconds=60)
    ledger.record(("a", "b"), wl("ns/w"), now=0)
    assert ledger.changed() == {"a", "b"}
    assert ledger.changed() == set()
    ledger.record(("a", "b"), wl("ns/w"), now=1)  # the same nomination again
    ledger.on("a", now=2)
    assert ledger.changed() == set()
    ledger.record(("c",), wl("ns/w"), now=3)  # moved: a and b lose it, c gains it
    assert ledger.changed() == {"a", "b", "c"}
    ledger.record(("d",), wl("ns/x"), now=4)
    ledger.changed()
    ledger.on("d", now=100)  # expired on read
    assert ledger.changed() == {"d"}
    ledger.settle("c", "ns/w")
    ledger.forget("ns/none")
    assert ledger.changed() == {"c"}
