"""Leader election on a fake cluster's Lease (README, *Operations*; docs/fake-apiserver.md F61).

Short real leases (1–3 s) with deadlines, and an injected fake clock where the production
defaults (15 s / 10 s / 2 s) are checked without waiting. No timing assertions: every wait is a
condition under a deadline.
"""

from __future__ import annotations

import datetime
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.leases import LeaseRecord, create_lease, format_micro_time, get_lease
from dispatcher.leader import LeaderElectionSettings, LeaderElector, LeadershipLost, Role
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.harness.leader import NS, FakeClock

SHORT = LeaderElectionSettings(
    lease_name="dispatcher",
    namespace=NS,
    lease_duration_seconds=1,
    renew_deadline_seconds=0.6,
    retry_period_seconds=0.1,
)
# Takeover after a crash: the lease expires a duration after the follower saw the last
# renewal, which it sees at most a retry period late, and it notices at its next retry.
TAKEOVER = SHORT.lease_duration_seconds + 2 * SHORT.retry_period_seconds
SLACK = 3.0


class Replica:
    """One elector whose work waits forever until cancelled; records what happened."""

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self.leading = anyio.Event()
        self.work_ended = anyio.Event()
        self.done = anyio.Event()
        self.error: BaseException | None = None
        self.scope = anyio.CancelScope()

    async def work(self) -> None:
        self.leading.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.work_ended.set()

    async def main(self) -> None:
        with self.scope:
            try:
                await self.elector.run(self.work)
            except LeadershipLost as error:
                self.error = error
        self.done.set()


def replica(
    api: KubeApi, identity: str, settings: LeaderElectionSettings = SHORT, **kw: Any
) -> Replica:
    return Replica(LeaderElector(api, settings, identity, **kw))


async def holder(api: KubeApi, settings: LeaderElectionSettings = SHORT) -> LeaseRecord:
    lease = await get_lease(api, NS, settings.lease_name)
    assert lease is not None
    return lease.record


async def first_leader(*replicas: Replica) -> Replica:
    with anyio.fail_after(SLACK):
        async with anyio.create_task_group() as tg:
            winner: list[Replica] = []

            async def watch(r: Replica) -> None:
                await r.leading.wait()
                winner.append(r)
                tg.cancel_scope.cancel()

            for r in replicas:
                tg.start_soon(watch, r)
    return winner[0]


async def test_two_replicas_one_leader(cluster: FakeCluster, apis: list[KubeApi]) -> None:
    a, b = replica(apis[0], "a"), replica(apis[1], "b")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.main)
        tg.start_soon(b.main)
        leader = await first_leader(a, b)
        follower = b if leader is a else a
        # Let the leader renew several times while the follower keeps retrying.
        with anyio.fail_after(SLACK):
            await leader.elector.wait_for(lambda e: e.renewals >= 5)
        assert not follower.leading.is_set()
        assert follower.elector.role == Role.FOLLOWER
        assert follower.elector.leader_identity == leader.elector.identity
        record = await holder(apis[0])
        assert record.holder_identity == leader.elector.identity
        assert record.lease_transitions == 0
        assert record.lease_duration_seconds == 1
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("when", ["from-the-start", "decided-while-leading"])
async def test_killed_leader_is_replaced_after_the_lease_expires(
    apis: list[KubeApi], when: str
) -> None:
    # "decided-while-leading": the sandbox's S14 marks its leading replica as killed only then;
    # the elector read the flag at acquisition before, and released the Lease anyway.
    a = replica(apis[0], "a", release_on_cancel=when != "from-the-start")
    b = replica(apis[1], "b")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.main)
        await a.leading.wait()
        a.elector.release_on_cancel = False  # a crash: no release
        tg.start_soon(b.main)
        a.scope.cancel()
        await a.done.wait()
        assert (await holder(apis[0])).holder_identity == "a", "the Lease was not released"
        with anyio.fail_after(TAKEOVER + SLACK):
            await b.leading.wait()
        record = await holder(apis[0])
        assert record.holder_identity == "b"
        assert record.lease_transitions == 1
        tg.cancel_scope.cancel()


async def test_release_on_shutdown_hands_over_at_the_next_retry(apis: list[KubeApi]) -> None:
    slow = SHORT.model_copy(update={"lease_duration_seconds": 30, "renew_deadline_seconds": 20.0})
    a, b = replica(apis[0], "a", slow), replica(apis[1], "b", slow)
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.main)
        await a.leading.wait()
        tg.start_soon(b.main)
        with anyio.fail_after(SLACK):
            await b.elector.wait_for(lambda e: e.leader_identity == "a")
        a.scope.cancel()  # SIGTERM: the work is cancelled, the lease released
        await a.done.wait()
        assert a.work_ended.is_set()
        released = await holder(apis[0], slow)
        assert released.holder_identity in ("", "b")
        # Far sooner than the 30 s lease: the follower sees an empty holder.
        with anyio.fail_after(SLACK):
            await b.leading.wait()
        record = await holder(apis[0], slow)
        assert record.holder_identity == "b"
        assert record.lease_transitions == 1
        assert record.lease_duration_seconds == 30
        tg.cancel_scope.cancel()


async def test_release_writes_an_empty_holder_and_one_second(apis: list[KubeApi]) -> None:
    elector = LeaderElector(apis[0], SHORT, "a")
    await elector.run(anyio.lowlevel.checkpoint)  # the work returns at once
    record = await holder(apis[0])
    assert record.holder_identity == ""
    assert record.lease_duration_seconds == 1
    assert elector.role == Role.STOPPED


async def test_a_409_on_renew_is_retried(cluster: FakeCluster, apis: list[KubeApi]) -> None:
    a = replica(apis[0], "a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.main)
        await a.leading.wait()
        fault = cluster.faults.error(409, verbs=("update",), path="/leases/", count=2)
        renewals = a.elector.renewals
        with anyio.fail_after(SLACK):
            await a.elector.wait_for(lambda e: e.renewals >= renewals + 2)
        assert fault.fired == 2
        assert a.elector.role == Role.LEADER
        assert not a.work_ended.is_set()
        tg.cancel_scope.cancel()


async def test_renewal_failing_past_the_deadline_steps_down(
    cluster: FakeCluster, apis: list[KubeApi]
) -> None:
    a = replica(apis[0], "a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.main)
        await a.leading.wait()
        cluster.faults.error(500, verbs=("update",), path="/leases/")
        with anyio.fail_after(SHORT.renew_deadline_seconds + SLACK):
            await a.done.wait()
    assert isinstance(a.error, LeadershipLost)
    assert "within 0.6s" in str(a.error)
    assert a.work_ended.is_set()
    assert a.elector.role == Role.STOPPED
    cluster.faults.clear()
    record = await holder(apis[0])
    assert record.holder_identity == "a"  # no release after a loss: it may not be ours


async def test_another_holder_makes_the_leader_step_down(apis: list[KubeApi]) -> None:
    """Someone overwrote the Lease (a split brain seen by the API): step down at once."""
    a = replica(apis[0], "a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.main)
        await a.leading.wait()
        lease = await get_lease(apis[1], NS, SHORT.lease_name)
        assert lease is not None
        now = datetime.datetime.now(datetime.UTC)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease.name, "namespace": NS},
            "spec": LeaseRecord("intruder", 1, now, now, 5).to_spec(),
        }
        await apis[1].request(
            "PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease.name}", body=body
        )
        with anyio.fail_after(SLACK):
            await a.done.wait()
    assert isinstance(a.error, LeadershipLost)
    assert "intruder" in str(a.error)


async def test_an_exception_in_the_work_releases_and_propagates(apis: list[KubeApi]) -> None:
    elector = LeaderElector(apis[0], SHORT, "a")

    async def crash() -> None:
        raise RuntimeError("controller crashed")

    with pytest.raises(ExceptionGroup) as caught:
        await elector.run(crash)
    assert caught.group_contains(RuntimeError, match="controller crashed")
    assert (await holder(apis[0])).holder_identity == ""


async def test_standalone_runs_at_once_without_a_lease(cluster: FakeCluster) -> None:
    settings = SHORT.model_copy(update={"enabled": False})
    elector = LeaderElector(None, settings, "solo")
    seen: list[bool] = []

    async def work() -> None:
        seen.append(elector.is_leader)

    await elector.run(work)
    assert seen == [True]
    assert not [e for e in cluster.journal.entries() if "/leases" in e.path]


async def test_takeover_with_default_timings_on_a_fake_clock(apis: list[KubeApi]) -> None:
    """Production defaults (15 s lease, 2 s retry) in virtual time: a lease left by a dead
    holder is taken no earlier than its duration after it was first seen, and no later than
    one retry period after that."""
    settings = LeaderElectionSettings(lease_name="defaults", namespace=NS)
    now = datetime.datetime.now(datetime.UTC)
    await create_lease(apis[0], NS, "defaults", LeaseRecord("dead", 15, now, now, 3))
    clock = FakeClock()
    elector = LeaderElector(apis[1], settings, "b", clock=clock)
    started = clock.now
    with anyio.fail_after(SLACK * 3):
        async with anyio.create_task_group() as tg:

            async def acquire() -> None:
                await elector.acquire()
                await clock.advance(0)  # wakes the waits below

            tg.start_soon(acquire)
            # Step the virtual time one retry period whenever the elector is parked in a sleep.
            while True:
                await clock.wait_for(lambda: clock.sleepers >= 1 or elector.role == Role.LEADER)
                if elector.role == Role.LEADER:
                    break
                sleeps = clock.sleeps
                await clock.advance(settings.retry_period_seconds)
                await clock.wait_for(
                    lambda s=sleeps: clock.sleeps > s or elector.role == Role.LEADER
                )
    waited = clock.now - started
    assert settings.lease_duration_seconds <= waited
    assert waited <= settings.lease_duration_seconds + settings.retry_period_seconds
    record = await holder(apis[0], settings)
    assert (record.holder_identity, record.lease_transitions) == ("b", 4)
    assert record.renew_time is not None
    assert format_micro_time(record.renew_time).endswith("Z")


def test_settings_defaults_and_validation() -> None:
    default = LeaderElectionSettings()
    assert (
        default.enabled,
        default.lease_duration_seconds,
        default.renew_deadline_seconds,
        default.retry_period_seconds,
    ) == (True, 15, 10.0, 2.0)
    with pytest.raises(ValidationError, match="renew_deadline_seconds must be shorter"):
        LeaderElectionSettings(lease_duration_seconds=10, renew_deadline_seconds=10)
    with pytest.raises(ValidationError, match="retry_period_seconds must be shorter"):
        LeaderElectionSettings(renew_deadline_seconds=2, retry_period_seconds=2)
    assert LeaderElectionSettings(namespace="x").resolved_namespace() == "x"
