"""Issue 15: :class:`ObjectCache`'s ingest transform and its atomic re-list.

A re-list (``LISTED`` events, then a :class:`Listed` marker) replaces the contents at the
marker: a reader in between sees the old contents, and listeners see one change. The
transform is applied to every object, whatever the event type.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.k8s.watching import (
    Disconnected,
    Listed,
    ObjectCache,
    ObjectEvent,
    Watching,
    WatchItem,
)

Obj = dict[str, Any]


def obj(name: str, version: str = "1", **extra: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}, **extra}


def listed(*names: str) -> Listed:
    return Listed("9", frozenset(("ns", n) for n in names))


def contents(cache: ObjectCache) -> dict[str, str]:
    """name -> resourceVersion of what a reader sees."""
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in cache.objects.values()}


def filled(*names: str) -> ObjectCache:
    cache = ObjectCache()
    for name in names:
        cache.apply(ObjectEvent("LISTED", obj(name)))
    cache.apply(listed(*names))
    return cache


RELISTS = [
    pytest.param(
        [ObjectEvent("LISTED", obj("a", "2"))],
        {"a": "1", "b": "1"},
        [listed("a")],
        {"a": "2"},
        id="one-listed-item-is-not-seen-before-the-marker",
    ),
    pytest.param(
        [ObjectEvent("LISTED", obj("a", "2")), ObjectEvent("LISTED", obj("c", "2"))],
        {"a": "1", "b": "1"},
        [listed("a", "c")],
        {"a": "2", "c": "2"},
        id="new-and-deleted-objects-change-at-the-marker",
    ),
    pytest.param(
        [],
        {"a": "1", "b": "1"},
        [listed("b")],
        {"b": "1"},
        id="a-marker-alone-drops-what-was-not-listed",
    ),
    pytest.param(
        [ObjectEvent("LISTED", obj("a", "2"))],
        {"a": "1", "b": "1"},
        [Disconnected("cut", 0, 1.0), listed("a", "b")],
        {"a": "1", "b": "1"},
        id="a-list-cut-short-is-dropped",
    ),
    pytest.param(
        [ObjectEvent("LISTED", obj("a", "2")), ObjectEvent("LISTED", obj("z", "2"))],
        {"a": "1", "b": "1"},
        [listed("a")],
        {"a": "2"},
        id="a-listed-item-outside-the-markers-keys-is-dropped",
    ),
]


@pytest.mark.parametrize(("during", "seen_during", "end", "seen_after"), RELISTS)
def test_a_relist_replaces_the_contents_at_its_marker(
    during: list[WatchItem],
    seen_during: dict[str, str],
    end: list[WatchItem],
    seen_after: dict[str, str],
) -> None:
    """Between the first ``LISTED`` event and the marker a reader sees the old contents; at
    the marker, the listed ones (Listed.keys semantics: what is not in the keys goes)."""
    cache = filled("a", "b")
    changes: list[WatchItem] = []
    cache.listeners.append(changes.append)
    for item in during:
        cache.apply(item)
    assert contents(cache) == seen_during
    assert changes == []
    for item in end:
        cache.apply(item)
    assert contents(cache) == seen_after
    assert [type(c) for c in changes] == [Listed]
    assert cache.lists == 2


def test_listeners_see_each_watch_event_once_after_it_is_applied() -> None:
    cache = filled("a")
    seen: list[tuple[str, dict[str, str]]] = []

    def listener(item: ObjectEvent | Listed) -> None:
        assert isinstance(item, ObjectEvent)
        seen.append((item.type, contents(cache)))

    cache.listeners.append(listener)
    cache.apply(Watching("9"))
    cache.apply(ObjectEvent("ADDED", obj("b", "3")))
    cache.apply(ObjectEvent("MODIFIED", obj("a", "4")))
    cache.apply(ObjectEvent("DELETED", obj("b", "5")))
    assert seen == [
        ("ADDED", {"a": "1", "b": "3"}),
        ("MODIFIED", {"a": "4", "b": "3"}),
        ("DELETED", {"a": "4"}),
    ]
    assert cache.resource_version == "5"


def slim(o: Obj) -> Obj:
    return {"metadata": {k: v for k, v in o["metadata"].items() if k != "managedFields"}}


@pytest.mark.parametrize("kind", ["LISTED", "ADDED", "MODIFIED", "DELETED"])
def test_the_transform_applies_to_every_event_type(kind: str) -> None:
    """The cache keeps, the listeners and the caller get, the transformed object; the input
    is not changed."""
    cache = ObjectCache(slim)
    heard: list[WatchItem] = []
    cache.listeners.append(heard.append)
    raw = obj("a", spec={"big": "x" * 100})
    raw["metadata"]["managedFields"] = [{"manager": "kueue"}]
    if kind != "LISTED":
        cache.apply(ObjectEvent("LISTED", obj("a")))
        cache.apply(listed("a"))
        heard.clear()
    applied = cache.apply(ObjectEvent(kind, raw))  # type: ignore[arg-type]
    if kind == "LISTED":
        cache.apply(listed("a"))
    assert isinstance(applied, ObjectEvent)
    assert applied.object == {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}
    assert "managedFields" in raw["metadata"]
    if kind == "DELETED":
        assert cache.objects == {}
    else:
        assert cache.objects == {("ns", "a"): applied.object}
    for item in heard:
        if isinstance(item, ObjectEvent):
            assert item.object is applied.object


def test_health_changes_moves_only_when_synced_or_connected_changes() -> None:
    """Issue 15: what derives a health from the caches (a mirror's ``listed`` and ``connected``,
    read for every candidate of every decision) recomputes it only when this counter moved."""
    cache = ObjectCache()
    start = ObjectCache.health_changes
    cache.apply(ObjectEvent("LISTED", obj("a")))  # first item: connected
    cache.apply(listed("a"))  # synced
    after_list = ObjectCache.health_changes
    assert after_list - start == 2
    for version in range(2, 50):
        cache.apply(ObjectEvent("MODIFIED", obj("a", str(version))))
    cache.apply(Watching("50"))
    assert ObjectCache.health_changes == after_list  # events on a healthy cache change nothing
    cache.apply(Disconnected("cut", 0, 1.0))
    assert (cache.connected, ObjectCache.health_changes) == (False, after_list + 1)
    cache.apply(ObjectEvent("MODIFIED", obj("a", "51")))
    assert (cache.connected, ObjectCache.health_changes) == (True, after_list + 2)
