"""The trace recorder of the e2e runs (:mod:`dispatcher_sandbox.harness.e2e.trace`, issue 14):
what it makes of a sequence of watch events, on a clock the test sets."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dispatcher_sandbox.harness.e2e import trace as e2e_trace

ORIGIN = {"kueue.x-k8s.io/multikueue-origin": "multikueue"}


def job(uid: str = "job-uid") -> dict[str, Any]:
    return {"metadata": {"name": "j", "uid": uid, "resourceVersion": "1"}}


def workload(
    rv: str,
    *,
    uid: str = "wl-uid",
    job_uid: str = "job-uid",
    nominated: list[str] | None = None,
    cluster: str | None = None,
    conditions: dict[str, tuple[str, str]] | None = None,
    check: str | None = None,
    copy: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {"type": k, "status": s, "reason": r, "message": f"{k} is {s}"}
            for k, (s, r) in (conditions or {}).items()
        ]
    }
    if nominated:
        status["nominatedClusterNames"] = nominated
    if cluster:
        status["clusterName"] = cluster
    if check:
        status["admissionChecks"] = [{"name": "multikueue", "state": check, "message": ""}]
    if conditions and conditions.get("QuotaReserved", ("",))[0] == "True":
        status["admission"] = {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {"name": "main", "count": 1, "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "1"}}
            ],
        }
    meta: dict[str, Any] = {"name": "job-j-1", "uid": uid, "resourceVersion": rv}
    if copy:
        meta["labels"] = ORIGIN
    else:
        meta["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": job_uid}]
    return {"metadata": meta, "status": status}


class Feed:
    """Drives a recorder as the mirrors would: each event at a given time, the collection
    (``current``) kept as a mirror keeps it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.recorder = e2e_trace.TraceRecorder()
        self.recorder.clock = lambda: self.now
        self.current: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}

    def at(
        self, t: float, cluster: str, key: str, obj: dict[str, Any], deleted: bool = False
    ) -> None:
        self.now = 100.0 + t
        items = self.current.setdefault((cluster, key), {})
        if deleted:
            items.pop(obj["metadata"]["name"], None)
        else:
            items[obj["metadata"]["name"]] = obj
        self.recorder.observe(cluster, key, obj, items)

    def relist(self, t: float, cluster: str, key: str, objs: list[dict[str, Any]]) -> None:
        """The mirror listed again (after the cluster was away): ``objs`` are all there is."""
        self.now = 100.0 + t
        items = {o["metadata"]["name"]: o for o in objs}
        self.current[(cluster, key)] = items
        for obj in objs:
            self.recorder.observe(cluster, key, obj, items)
        self.recorder.observe(cluster, key, {}, items)


def admitted_run(feed: Feed, copy_gone: str = "deleted", copy_admitted: bool = True) -> None:
    """A Job nominated to worker2, copied there, admitted; the copy then goes away. Without
    ``copy_admitted`` the copy's admission is not seen (the worker's watch is behind)."""
    feed.at(0.0, "manager", "jobs", job())
    feed.at(0.1, "manager", "workloads", workload("1"))
    quota = {"QuotaReserved": ("True", "QuotaReserved")}
    feed.at(0.2, "manager", "workloads", workload("2", conditions=quota, check="Pending"))
    feed.at(
        0.5,
        "manager",
        "workloads",
        workload("3", conditions=quota, check="Pending", nominated=["worker2"]),
    )
    feed.at(0.6, "worker2", "workloads", workload("w1", uid="copy-1", copy=True))
    admitted = quota | {"Admitted": ("True", "Admitted")}
    if copy_admitted:
        feed.at(
            0.7,
            "worker2",
            "workloads",
            workload("w2", uid="copy-1", copy=True, conditions=admitted),
        )
    feed.at(
        0.9,
        "manager",
        "workloads",
        workload("4", conditions=admitted, check="Ready", cluster="worker2"),
    )
    if copy_gone == "deleted":
        feed.at(2.0, "worker2", "workloads", workload("w2", uid="copy-1", copy=True), deleted=True)
    elif copy_gone == "relisted":
        feed.relist(3.0, "worker2", "workloads", [])


@pytest.mark.parametrize(
    ("gone", "expected"),
    [
        pytest.param("deleted", [(0.6, "appeared"), (2.0, "disappeared")], id="deleted-event"),
        pytest.param("relisted", [(0.6, "appeared"), (3.0, "disappeared")], id="gone-at-relist"),
        pytest.param("stays", [(0.6, "appeared")], id="still-there"),
    ],
)
def test_copies_appear_and_disappear(gone: str, expected: list[tuple[float, str]]) -> None:
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed, gone)
    [trace] = feed.recorder.export(since)["jobs"]["j"]
    assert [(e["t"], e["event"]) for e in trace["copies"]["worker2"]] == expected
    assert trace["remoteCopiesCreated"] == 1
    assert trace["final"]["copies"] == ([] if gone != "stays" else ["worker2"])
    held = [q["held"] for q in trace["quota"]["worker2"]]
    assert held[0] == {
        "clusterQueue": "cluster-queue",
        "podSets": [{"name": "main", "count": 1, "flavors": {"cpu": "f"}, "usage": {"cpu": "1"}}],
    }
    assert held[1:] == ([None] if gone != "stays" else [])


def test_manager_sequences_and_final_state() -> None:
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed)
    [trace] = feed.recorder.export(since)["jobs"]["j"]
    assert [(e["t"], e["value"]) for e in trace["nominations"]] == [
        (0.1, []),
        (0.5, ["worker2"]),
        (0.9, []),
    ]
    assert [e["value"] for e in trace["clusterName"]] == [None, "worker2"]
    assert [(e["type"], e["status"], e["write"]) for e in trace["conditions"]] == [
        ("QuotaReserved", "True", 2),
        ("Admitted", "True", 4),
    ]
    assert [e["state"] for e in trace["checks"]] == ["Pending", "Ready"]
    assert [(e["type"], e["write"]) for e in trace["copyConditions"]["worker2"]] == [
        ("Admitted", 2),
        ("QuotaReserved", 2),
    ], "set in one write, numbered as one"
    assert trace["final"]["outcome"] == "admitted"
    assert trace["final"]["clusterName"] == "worker2"


def test_a_job_submitted_again_gets_a_second_entry_with_its_own_copies() -> None:
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed)
    feed.at(5.0, "manager", "jobs", job(), deleted=True)
    feed.at(5.1, "manager", "workloads", workload("4"), deleted=True)
    feed.at(10.0, "manager", "jobs", job("job-uid-2"))
    feed.at(10.1, "manager", "workloads", workload("9", uid="wl-uid-2", job_uid="job-uid-2"))
    feed.at(10.5, "worker1", "workloads", workload("w9", uid="copy-2", copy=True))
    first, second = feed.recorder.export(since)["jobs"]["j"]
    assert first["final"]["outcome"] == "deleted"
    assert set(first["copies"]) == {"worker2"}
    assert set(second["copies"]) == {"worker1"}
    assert second["copies"]["worker1"] == [{"t": 0.5, "event": "appeared"}]


@pytest.mark.parametrize(
    ("copy_gone", "finished", "expected"),
    [
        pytest.param("stays", False, [], id="running-with-its-copy"),
        pytest.param("stays", True, ["j"], id="finished-copy-left"),
        pytest.param("deleted", True, [], id="finished-copy-removed"),
        pytest.param("relisted", True, [], id="finished-copy-gone-at-relist"),
    ],
)
def test_a_finished_job_with_a_copy_left_is_unsettled(
    copy_gone: str, finished: bool, expected: list[str]
) -> None:
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed, copy_gone)
    if finished:
        done = {
            "QuotaReserved": ("True", "QuotaReserved"),
            "Admitted": ("True", "Admitted"),
            "Finished": ("True", "Succeeded"),
        }
        feed.at(
            4.0,
            "manager",
            "workloads",
            workload("5", conditions=done, check="Ready", cluster="worker2"),
        )
    assert feed.recorder.unsettled(since) == expected


@pytest.mark.parametrize(
    ("copy_seen", "expected"),
    [
        pytest.param("created-only", ["j"], id="worker-watch-behind-the-manager"),
        pytest.param("admitted", [], id="copy-admitted-seen"),
        pytest.param("deleted", [], id="copy-gone"),
    ],
)
def test_a_cluster_name_before_its_copy_shows_admitted_is_unsettled(
    copy_seen: str, expected: list[str]
) -> None:
    # Real Kueue under load (the CI at bd762d9): the manager's clusterName reached this
    # recorder before the worker's Admitted on the copy, and the teardown cut the copy's
    # conditions off on one backend only.
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed, "stays", copy_admitted=False)
    if copy_seen == "admitted":
        admitted = {"QuotaReserved": ("True", "QuotaReserved"), "Admitted": ("True", "Admitted")}
        feed.at(
            1.0,
            "worker2",
            "workloads",
            workload("w2", uid="copy-1", copy=True, conditions=admitted),
        )
    elif copy_seen == "deleted":
        feed.at(1.0, "worker2", "workloads", workload("w1", uid="copy-1", copy=True), deleted=True)
    assert feed.recorder.unsettled(since) == expected


def test_jobs_seen_before_the_mark_are_left_out() -> None:
    feed = Feed()
    admitted_run(feed)
    since = feed.recorder.mark()
    feed.at(5.0, "manager", "jobs", job(), deleted=True)
    assert feed.recorder.export(since) == {"jobs": {}, "local": {}}


def teardown_race(feed: Feed) -> None:
    """What a teardown can show on one backend and not the other: the admitted copy removed
    first, then the manager's check set to Retry and clusterName cleared, then the Workload
    deleted; and, for a second Workload name, a copy made while the Jobs are being deleted."""
    feed.at(3.0, "worker2", "workloads", workload("w2", uid="copy-1", copy=True), deleted=True)
    quota = {"QuotaReserved": ("True", "QuotaReserved")}
    feed.at(3.1, "manager", "workloads", workload("5", conditions=quota, check="Retry"))
    feed.at(3.2, "worker1", "workloads", workload("w7", uid="copy-late", copy=True))
    feed.at(3.3, "manager", "jobs", job(), deleted=True)
    feed.at(3.4, "manager", "workloads", workload("5"), deleted=True)


@pytest.mark.parametrize(
    ("ended", "copies", "checks", "outcome"),
    [
        pytest.param(
            False,
            {"worker2": ["appeared", "disappeared"], "worker1": ["appeared"]},
            ["Pending", "Ready", "Retry"],
            "deleted",
            id="recorded-without-end",
        ),
        pytest.param(
            True, {"worker2": ["appeared"]}, ["Pending", "Ready"], "admitted", id="ended-at-reset"
        ),
    ],
)
def test_a_trace_ends_where_the_teardown_starts(
    ended: bool, copies: dict[str, list[str]], checks: list[str], outcome: str
) -> None:
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed, "stays")
    if ended:
        with feed.recorder.teardown():
            teardown_race(feed)
    else:
        teardown_race(feed)
    [trace] = feed.recorder.export(since)["jobs"]["j"]
    assert {w: [e["event"] for e in events] for w, events in trace["copies"].items()} == copies
    assert [e["state"] for e in trace["checks"]] == checks
    assert trace["final"]["outcome"] == outcome
    assert trace["remoteCopiesCreated"] == len(copies)


def test_an_ended_run_is_not_waited_for() -> None:
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed, "stays")
    done = {"QuotaReserved": ("True", "QuotaReserved"), "Finished": ("True", "Succeeded")}
    feed.at(4.0, "manager", "workloads", workload("5", conditions=done, check="Ready"))
    assert feed.recorder.unsettled(since) == ["j"]
    with feed.recorder.teardown():
        pass
    assert feed.recorder.unsettled(since) == []


def test_after_a_teardown_the_same_job_name_is_recorded_again() -> None:
    # S10 submits its Jobs again under the next Kueue dispatcher. The new copy's watch event
    # may reach the test before its manager Workload's (COPY_GRACE): it is still recorded.
    feed = Feed()
    since = feed.recorder.mark()
    admitted_run(feed, "stays")
    with feed.recorder.teardown():
        teardown_race(feed)
    feed.at(10.0, "manager", "jobs", job("job-uid-2"))
    feed.at(10.1, "worker1", "workloads", workload("w9", uid="copy-2", copy=True))
    feed.at(10.2, "manager", "workloads", workload("9", uid="wl-uid-2", job_uid="job-uid-2"))
    feed.at(11.0, "worker1", "workloads", workload("w9", uid="copy-2", copy=True), deleted=True)
    first, second = feed.recorder.export(since)["jobs"]["j"]
    assert set(first["copies"]) == {"worker2"}
    assert second["copies"]["worker1"] == [
        {"t": 0.1, "event": "appeared"},
        {"t": 1.0, "event": "disappeared"},
    ]


@pytest.mark.parametrize(
    ("nodeid", "name"),
    [
        pytest.param(
            "tests/e2e/test_e2e_scenarios.py::test_s1_x",
            "test_e2e_scenarios.py_test_s1_x.json",
            id="plain",
        ),
        pytest.param(
            "tests/e2e/test_fidelity_a.py::test_b[worker-1]",
            "test_fidelity_a.py_test_b_worker-1.json",
            id="parametrized",
        ),
    ],
)
def test_trace_file_names(nodeid: str, name: str) -> None:
    assert e2e_trace.trace_file_name(nodeid) == name


def finished_with_its_copy(feed: Feed) -> None:
    admitted_run(feed, "stays")
    done = {"QuotaReserved": ("True", "QuotaReserved"), "Finished": ("True", "Succeeded")}
    feed.at(4.0, "manager", "workloads", workload("5", conditions=done, check="Ready"))


@pytest.mark.anyio
async def test_a_teardown_first_waits_for_a_finished_jobs_copy_to_go() -> None:
    # Kueue removes a finished Workload's copy (C24) in its next reconcile; a teardown that
    # froze the run before that would record the copy on one backend and its removal on the
    # other.
    feed = Feed()
    finished_with_its_copy(feed)
    settled: list[bool] = []

    async def wait() -> None:
        settled.append(await feed.recorder.wait_settled(5.0))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        assert settled == []
        feed.at(4.5, "worker2", "workloads", workload("w2", uid="copy-1", copy=True), deleted=True)
    assert settled == [True]


@pytest.mark.anyio
async def test_waiting_for_a_run_to_settle_is_bounded() -> None:
    feed = Feed()
    finished_with_its_copy(feed)
    assert await feed.recorder.wait_settled(0.05) is False
    with feed.recorder.teardown():
        pass
    assert await feed.recorder.wait_settled(0.05) is True  # an ended run is not waited for
