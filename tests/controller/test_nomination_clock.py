"""Nomination clocks survive a restart (issue 16): the age of a nomination (capacity-first's
patience, Incremental's round, the in-flight ages) is recovered from the API, from the ``time``
of our field manager's managedFields entry for the status subresource, when no in-memory clock
exists. The fake API server stamps that time as kube-apiserver does (only when the apply
changed the object, to the second; tests/fakeapi/test_managed_unit.py)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from typing import Any

import pytest

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.nominator import Nominator, nomination_time
from dispatcher_sandbox.harness.controller import World, keep_or_first, world

FIELD_MANAGER = "multikueue-dispatcher"
STAMP = "2026-01-01T10:00:00Z"
STAMPED = datetime.datetime(2026, 1, 1, 10, tzinfo=datetime.UTC).timestamp()
OURS_FIELDS = {"f:status": {"f:nominatedClusterNames": {}}}


def entry(
    manager: str = FIELD_MANAGER,
    operation: str = "Apply",
    subresource: str | None = "status",
    fields: dict[str, Any] | None = None,
    stamp: str | None = STAMP,
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "fieldsType": "FieldsV1",
        "fieldsV1": OURS_FIELDS if fields is None else fields,
    }
    if subresource is not None:
        found["subresource"] = subresource
    if stamp is not None:
        found["time"] = stamp
    return found


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([entry()], STAMPED, id="ours"),
        pytest.param(
            [entry("kueue-admission", fields={"f:status": {"f:clusterName": {}}}), entry()],
            STAMPED,
            id="ours-beside-kueue",
        ),
        pytest.param(
            [entry(fields={"f:status": {"f:other": {}}})], None, id="field-taken-by-another"
        ),
        pytest.param([entry(manager="someone-else")], None, id="another-manager"),
        pytest.param([entry(operation="Update")], None, id="not-an-apply"),
        pytest.param([entry(subresource=None)], None, id="main-resource-entry"),
        pytest.param([entry(stamp=None)], None, id="entry-without-time"),
        pytest.param([entry(stamp="yesterday")], None, id="unreadable-time"),
        pytest.param([], None, id="no-managed-fields"),
    ],
)
def test_nomination_time_reads_our_status_apply_entry(
    entries: list[dict[str, Any]], expected: float | None
) -> None:
    workload = {"metadata": {"name": "job", "namespace": "default", "managedFields": entries}}
    assert nomination_time(workload, FIELD_MANAGER) == expected


class Ages:
    """A pipeline stand-in that records each decision's view of the nomination, then keeps the
    nomination while it is younger than ``patience`` seconds and moves it to the next active
    cluster after (capacity-first's ``on_patience: move`` in miniature)."""

    def __init__(self, patience: float = 3600.0) -> None:
        self.patience = patience
        self.seen: list[tuple[tuple[str, ...], float | None, float]] = []

    def __call__(self, request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        self.seen.append((request.nominated, request.nominated_at, request.now))
        age = request.nomination_age
        if age is None or age < self.patience:
            return keep_or_first(request, snapshots)
        others = [s.name for s in snapshots if s.active and s.name not in request.nominated]
        return Decision("patience", tuple(others[:1]), f"not admitted after {age:.0f}s")

    def after(self, count: int) -> list[tuple[tuple[str, ...], float | None, float]]:
        return self.seen[count:]


async def nominate_then_restart(env: World, ages: Ages, offset: float) -> tuple[float, float, int]:
    """Nominate ``job`` to w1 with one dispatcher, stop it, and start a new one whose clock is
    ``offset`` seconds later; returns the first dispatcher's decision time, the time the
    nomination was seen written (the server stamped its second in between) and how many
    decisions were made before the restart."""
    await env.start_dispatcher()
    await env.add_workload("job")
    await env.wait(lambda: env.nominated("job") == ("w1",) and env.idle("job"))
    written_after = time.time()
    decided = next(now for nominated, _, now in ages.seen if not nominated)
    found = env.mirrors.manager.cache("workloads").get("job", "default")
    assert found is not None
    assert nomination_time(found, FIELD_MANAGER) is not None
    env.stop_dispatcher()
    before_restart = len(ages.seen)
    await env.start_dispatcher(now=lambda: time.time() + offset)
    return decided, written_after, before_restart


async def test_restart_keeps_the_nomination_clock() -> None:
    """A new controller on the same API, 100 s later by its clock: its first decision sees the
    nomination as 100 s old (the old clock, to the managedFields' second), not as new; it keeps
    the nomination and writes nothing."""
    ages = Ages()
    async with world(decide=ages) as env:
        decided, written_after, before_restart = await nominate_then_restart(
            env, ages, offset=100.0
        )
        await env.wait(lambda: any(n for n, _, _ in ages.after(before_restart)) and env.idle("job"))
        nominated, since, now = next(s for s in ages.after(before_restart) if s[0])
        assert nominated == ("w1",)
        assert since is not None
        # The server stamped a time between the decision and the answer, to the second.
        assert decided - 1.0 < since <= written_after
        assert now - since >= 100.0
        assert env.loop.writes == 0
        assert env.nominated("job") == ("w1",)
        # The in-flight ledger is re-seeded with the same age: its entry expires 600 s after
        # the recovered time, not 600 s after the restart.
        flying = env.loop.in_flight
        assert [w.key for w in flying.on("w1", now)] == ["default/job"]
        assert flying.on("w1", since + flying.expiry_seconds + 1.0) == ()


async def test_patience_that_ran_out_before_a_restart_moves_at_once() -> None:
    """Patience 60 s, a restart 100 s after the nomination: the first decision after the
    restart moves it (the patience ran out during the old process), instead of granting a new
    60 s."""
    ages = Ages(patience=60.0)
    async with world(decide=ages) as env:
        await nominate_then_restart(env, ages, offset=100.0)
        await env.wait(lambda: env.nominated("job") == ("w2",) and env.idle("job"))
        assert env.loop.writes == 1


async def test_explain_sees_the_recovered_age() -> None:
    """``explain`` builds a fresh controller: its evaluation sees the recovered age too."""
    ages = Ages()
    async with world(decide=ages) as env:
        await nominate_then_restart(env, ages, offset=100.0)
        evaluated = Ages()  # its own recorder: the restarted dispatcher keeps deciding
        fresh = Nominator(
            env.mirrors,
            evaluated,
            config=ControllerConfig(),
            now=lambda: time.time() + 200.0,
        )
        reason, decision = await fresh.evaluate("default/job")
        assert decision is not None, reason
        [(nominated, since, now)] = evaluated.seen
        assert nominated == ("w1",)
        assert since is not None
        assert now - since >= 200.0
