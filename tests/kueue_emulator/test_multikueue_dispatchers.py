"""Kueue's built-in dispatchers as baselines: AllAtOnce and Incremental (C56–C61, S54, S63)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from dispatcher_sandbox.harness.multikueue import Env, eventually, start_env
from dispatcher_sandbox.kueue_emulator.multikueue import (
    ADMITTED_TOTAL,
    DISPATCHED_TOTAL,
    dispatchers,
)
from dispatcher_sandbox.kueue_emulator.runtime import ALL_AT_ONCE, INCREMENTAL, KueueConfig

ROUND = 300.0  # C58: 5-minute rounds
T0 = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("current", "connected", "expected"),
    [
        pytest.param([], ["w2", "w1"], ["w1", "w2"], id="first-broadcast-sorted"),
        pytest.param(["w2", "w1"], ["w1", "w2"], None, id="already-everywhere"),
        pytest.param(["w1", "w2"], ["w1"], ["w1"], id="a-worker-disconnected"),
        pytest.param(["w1"], ["w1", "w3"], ["w1", "w3"], id="a-worker-connected"),
    ],
)
def test_c56_all_at_once_nominates_every_connected_cluster(
    current: list[str], connected: list[str], expected: list[str] | None
) -> None:
    assert dispatchers.all_at_once(current, connected) == expected


@pytest.mark.parametrize(
    ("current", "started", "step", "expected"),
    [
        pytest.param(
            [], None, 1, dispatchers.IncrementalStep(["c"], True, ROUND), id="first-round"
        ),
        pytest.param(
            ["c"], 100.0, 1, dispatchers.IncrementalStep(["c"], False, ROUND - 100), id="in-a-round"
        ),
        pytest.param(
            ["c"], ROUND, 2, dispatchers.IncrementalStep(["c", "a", "b"], True, ROUND), id="next-2"
        ),
        pytest.param(
            ["c", "a", "b"],
            ROUND,
            3,
            dispatchers.IncrementalStep(["c", "a", "b"], False, None),
            id="no-more-workers",
        ),
        pytest.param(
            [], None, 0, dispatchers.IncrementalStep(["c"], True, ROUND), id="step-at-least-1"
        ),
    ],
)
def test_c59_incremental_appends_a_step_per_round_in_config_order(
    current: list[str], started: float | None, step: int, expected: dispatchers.IncrementalStep
) -> None:
    began = None if started is None else T0
    now = T0 + datetime.timedelta(seconds=started or 0.0)
    decided = dispatchers.incremental(
        current, ["c", "a", "b"], began, now, round_seconds=ROUND, step_size=step
    )
    assert decided == expected


def _nominated(obj: dict[str, Any]) -> list[str]:
    return list((obj.get("status") or {}).get("nominatedClusterNames") or [])


async def _wait_nominated(env: Env, name: str, expected: list[str]) -> None:
    await env.wait_workload(name, lambda o: _nominated(o) == expected)


async def _advance_until_nominated(env: Env, name: str, expected: list[str]) -> None:
    """Advance the ManualClock one round at a time until the nomination is ``expected``.

    A round may need a second advance when the clock moved before the round timer was armed; the
    nomination must never skip ahead of ``expected`` (one step per round, C59).
    """
    for _ in range(3):
        env.clock.advance(ROUND)
        try:
            await _wait_nominated_within(env, name, expected, 1.0)
            return
        except AssertionError:
            current = _nominated(await env.get(name) or {})
            assert current == expected[: len(current)], current
    raise AssertionError(f"nomination never became {expected}")


async def _wait_nominated_within(env: Env, name: str, expected: list[str], seconds: float) -> None:
    async def probe() -> bool:
        obj = await env.get(name)
        return obj is not None and _nominated(obj) == expected

    await eventually(probe, deadline=seconds, what=f"nomination {expected}")


async def test_c56_all_at_once_copies_everywhere_first_admission_wins() -> None:
    workers = ("worker3", "worker1", "worker2")
    async with start_env(workers=workers, dispatcher_name=ALL_AT_ONCE) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker1", "worker2", "worker3"])  # sorted
        await env.wait_copies("wl", workers)
        assert env.controllers.counters.get(DISPATCHED_TOTAL) == 3
        await env.worker_admit("worker2", "wl")
        local = await env.wait_workload(
            "wl", lambda o: (o.get("status") or {}).get("clusterName") == "worker2"
        )
        assert not _nominated(local)
        await env.wait_copies("wl", ["worker2"])
        assert env.controllers.counters.get(ADMITTED_TOTAL) == 1
        assert env.controllers.counters.get(DISPATCHED_TOTAL) == 3


async def test_c56_c20_earliest_admission_wins_when_several_are_admitted() -> None:
    """C56 with C20: two copies admitted within Kueue's 1 s batch period reach one reconcile,
    and the copy with the earlier ``Admitted`` transition wins (``bestMatchByCondition``)."""
    async with start_env(
        workers=("worker1", "worker2"), dispatcher_name=ALL_AT_ONCE, batch_period_seconds=1.0
    ) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.wait_copies("wl", ["worker1", "worker2"])
        await env.settle()
        await env.worker_admit("worker1", "wl", at=20)
        await env.worker_admit("worker2", "wl", at=10)  # admitted earlier
        await env.wait_workload(
            "wl", lambda o: (o.get("status") or {}).get("clusterName") == "worker2"
        )
        await env.wait_copies("wl", ["worker2"])


async def test_s63_c20_only_connected_clusters_nominated() -> None:
    """S63 (C56): AllAtOnce nominates the connected clusters only; a cluster that connects
    later is added the next time the Workload is reconciled (C20: not on its connection)."""
    async with start_env(
        workers=("worker1", "worker2", "worker3"), dispatcher_name=ALL_AT_ONCE
    ) as env:
        await env.workers["worker2"].down()
        await env.wait_condition("multikueueclusters", "worker2", "False", "ClientConnectionFailed")
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker1", "worker3"])
        await env.wait_copies("wl", ["worker1", "worker3"])
        # The copies' events reconcile the Workload once more (C20); under load they can still
        # be in flight here, and a reconcile after worker2 is back would nominate it.
        await env.remote_seen("wl", ["worker1", "worker3"])
        await env.settle()
        await env.workers["worker2"].up()
        await env.wait_condition("multikueueclusters", "worker2", "True", "Active")
        # C20: Kueue's workload reconciler does not watch MultiKueueClusters, and worker2 holds
        # no copy whose watch event would queue the Workload: the nomination stays as it is ...
        await env.settle()
        assert _nominated(await env.get("wl") or {}) == ["worker1", "worker3"]
        # ... until the Workload is reconciled for another reason (here: a label change).
        await env.objects().patch_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "team-a",
            "workloads",
            "wl",
            {"metadata": {"labels": {"touched": "yes"}}},
            _content_type="application/merge-patch+json",
        )
        await _wait_nominated(env, "wl", ["worker1", "worker2", "worker3"])
        await env.wait_copies("wl", ["worker1", "worker2", "worker3"])


async def test_s54_config_reevaluation() -> None:
    async with start_env(
        workers=("worker1", "worker2"), config_clusters=["worker1"], dispatcher_name=ALL_AT_ONCE
    ) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker1"])
        await env.wait_copies("wl", ["worker1"])
        await env.set_config_clusters(["worker1", "worker2"])
        await _wait_nominated(env, "wl", ["worker1", "worker2"])
        await env.wait_copies("wl", ["worker1", "worker2"])


async def test_c59_incremental_one_cluster_per_round_in_config_order() -> None:
    config_order = ["worker3", "worker1", "worker2"]  # not alphabetical (C59)
    async with start_env(
        workers=("worker1", "worker2", "worker3"),
        config_clusters=config_order,
        dispatcher_name=INCREMENTAL,
        incremental_step_size=1,
        incremental_round_seconds=ROUND,
    ) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker3"])
        await env.wait_copies("wl", ["worker3"])
        await env.settle()
        assert _nominated(await env.get("wl") or {}) == ["worker3"]  # no new round yet
        await _advance_until_nominated(env, "wl", ["worker3", "worker1"])
        await env.wait_copies("wl", ["worker3", "worker1"])
        await _advance_until_nominated(env, "wl", config_order)
        await env.wait_copies("wl", config_order)
        env.clock.advance(ROUND)  # ErrNoMoreWorkers: no change (C59 step 4)
        await env.settle()
        assert _nominated(await env.get("wl") or {}) == config_order
        assert env.controllers.counters.get(DISPATCHED_TOTAL) == 3
        await env.worker_admit("worker1", "wl")
        await env.wait_workload(
            "wl", lambda o: (o.get("status") or {}).get("clusterName") == "worker1"
        )
        await env.wait_copies("wl", ["worker1"])


async def test_c60_incremental_step_size() -> None:
    async with start_env(
        workers=("worker1", "worker2", "worker3"),
        dispatcher_name=INCREMENTAL,
        incremental_step_size=2,
        incremental_round_seconds=ROUND,
    ) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker1", "worker2"])
        await _advance_until_nominated(env, "wl", ["worker1", "worker2", "worker3"])


async def test_c59_incremental_nominates_unreachable_clusters_too() -> None:
    async with start_env(
        workers=("worker1", "worker2"),
        dispatcher_name=INCREMENTAL,
        incremental_step_size=1,
        incremental_round_seconds=ROUND,
    ) as env:
        await env.workers["worker1"].down()
        await env.wait_condition("multikueueclusters", "worker1", "False", "ClientConnectionFailed")
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker1"])  # connectivity is not checked (C59, C61)

        async def no_client() -> bool:
            errors = env.controllers.workloads.nomination_errors
            return any("cluster worker1: no remote client" in e for e in errors)

        await eventually(no_client, what="the no-remote-client error for worker1")
        assert await env.copies("wl") == set()
        await _advance_until_nominated(env, "wl", ["worker1", "worker2"])
        await env.wait_copies("wl", ["worker2"])


async def test_c61_incremental_timer_is_in_memory_and_eviction_restarts() -> None:
    async with start_env(
        workers=("worker1", "worker2", "worker3"),
        dispatcher_name=INCREMENTAL,
        incremental_step_size=1,
        incremental_round_seconds=ROUND,
    ) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker1"])
        # A manager restart forgets the round: the next round fires at once (C61).
        await env.stop_controllers()
        await env.start_controllers()
        await _wait_nominated(env, "wl", ["worker1", "worker2"])
        # Eviction resets the nomination; after requeue it starts from the head again (C61).
        await env.evict_on_manager("wl")
        await env.wait_copies("wl", [])
        await env.reserve_quota("wl")
        await _wait_nominated(env, "wl", ["worker1"])
        await env.wait_copies("wl", ["worker1"])


def test_c58_incremental_defaults_and_c2_default_dispatcher() -> None:
    """Kueue's defaults: AllAtOnce unless configured (C2), Incremental 3 per 5-minute round."""
    config = KueueConfig()
    assert config.dispatcher_name == ALL_AT_ONCE
    assert config.incremental_step_size == 3
    assert config.incremental_round_seconds == ROUND
