"""Leader election with a ``coordination.k8s.io/v1`` Lease, on anyio (README, *Operations*).

Not kubernetes_asyncio's ``leaderelection`` (its leader coroutine outlives a cancelled ``run()``
and a crashed one keeps the lease renewed). The algorithm is client-go's:

- **acquire**: every ``retry_period``, read the Lease; take it when it does not exist, is free
  (empty ``holderIdentity``) or expired. Expiry is judged from the *local* time at which this
  replica last saw the record change, plus the record's ``leaseDurationSeconds``, never from
  the remote clock. Writes carry the resourceVersion read, so of two racing replicas one gets
  409 and stays a follower. ``leaseTransitions`` grows by one at each change of holder.
- **renew**: while leading, renew every ``retry_period``; attempts are retried until
  ``renew_deadline`` after the round began. Past it, or when another holder shows up, the
  leader **steps down**: the work is cancelled and :meth:`LeaderElector.run` raises
  :class:`LeadershipLost` (the process should exit, as controller-runtime's managers do).
- **release** (client-go's ``ReleaseOnCancel``): when the work ends or is cancelled (SIGTERM),
  the Lease is written with an empty holder and ``leaseDurationSeconds: 1`` in a shielded,
  bounded scope, so a follower takes over at its next retry instead of a lease duration later.

With ``enabled: false`` the elector is **standalone**: it runs the work at once, no Lease.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from enum import StrEnum

import anyio

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.clock import SYSTEM_CLOCK, Clock
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.leases import (
    Lease,
    LeaseConflict,
    LeaseRecord,
    create_lease,
    get_lease,
    replace_lease,
)
from dispatcher.leader.settings import LeaderElectionSettings

log = logging.getLogger(__name__)

RELEASE_TIMEOUT = 2.0


class LeadershipLost(Exception):
    """The lease could not be renewed within the renew deadline, or another replica holds it.

    The work was cancelled; the process should exit (a new leader may already be running).
    """


class Role(StrEnum):
    """What this replica currently is."""

    FOLLOWER = "follower"
    LEADER = "leader"
    STANDALONE = "standalone"
    STOPPED = "stopped"


def default_identity() -> str:
    """Pod name (``POD_NAME``, set by the Deployment: docs/deployment.md) or host name, plus a
    random suffix."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "dispatcher"
    return f"{base}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """Runs work only while holding the Lease; see the module docstring for the algorithm.

    ``api`` is the manager cluster's client (None only in standalone mode); ``clock`` is
    injectable for tests; ``release_on_cancel`` False skips the release (a killed process).
    """

    def __init__(
        self,
        api: KubeApi | None,
        settings: LeaderElectionSettings,
        identity: str | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        release_on_cancel: bool = True,
        release_timeout: float = RELEASE_TIMEOUT,
    ) -> None:
        if settings.enabled and api is None:
            raise ValueError("leader election needs a client for the manager cluster")
        self.api = api
        self.settings = settings
        self.identity = identity or default_identity()
        self.namespace = settings.resolved_namespace()
        self.clock = clock
        self.release_on_cancel = release_on_cancel
        self.release_timeout = release_timeout
        self.role = Role.STANDALONE if not settings.enabled else Role.FOLLOWER
        self.elected = anyio.Event()
        self.renewals = 0
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._lost_reason = ""
        self._changed = anyio.Event()

    # --- state -----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this replica may do the work now (leader or standalone)."""
        return self.role in (Role.LEADER, Role.STANDALONE)

    @property
    def leader_identity(self) -> str:
        """The holder last seen in the Lease (this replica's identity when it leads)."""
        if self.role == Role.STANDALONE:
            return self.identity
        return self._observed.holder_identity if self._observed else ""

    async def wait_for(self, predicate: Callable[[LeaderElector], bool]) -> None:
        """Wait until ``predicate(self)`` holds; checked again after every attempt on the
        Lease and every change of role (for readiness, metrics and tests)."""
        while not predicate(self):
            await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def _set_role(self, role: Role) -> None:
        self.role = role
        self._notify()

    # --- running ---------------------------------------------------------------------------

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Wait for leadership, then run ``work`` while renewing the Lease.

        Returns when ``work`` returns (after releasing the Lease). Raises
        :class:`LeadershipLost` when renewal fails past the renew deadline (``work`` is
        cancelled first); an exception of ``work`` propagates (in an ``ExceptionGroup``) after
        the release; cancellation releases the Lease and propagates.
        """
        if not self.settings.enabled:
            self._set_role(Role.STANDALONE)
            self.elected.set()
            try:
                await work()
            finally:
                self._set_role(Role.STOPPED)
            return
        release = False
        try:
            await self.acquire()
            release = True
            self._lost_reason = ""
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._renew_loop, tg.cancel_scope)
                await work()
                tg.cancel_scope.cancel()
            if self._lost_reason:
                release = False
                raise LeadershipLost(self._lost_reason)
        finally:
            was_leader = self.role == Role.LEADER
            self._set_role(Role.STOPPED)
            # ``release_on_cancel`` is read now, not at acquisition: a harness may decide that
            # this replica dies like a killed process while it leads.
            if release and self.release_on_cancel and was_leader:
                await self.release()

    async def acquire(self) -> None:
        """Return once this replica holds the Lease (retrying every retry period)."""
        while True:
            if await self.try_acquire_or_renew():
                self._set_role(Role.LEADER)
                self.elected.set()
                log.info(
                    "leader election: %s became the leader of lease %s/%s",
                    self.identity,
                    self.namespace,
                    self.settings.lease_name,
                )
                return
            await self.clock.sleep(self.settings.retry_period_seconds)

    async def _renew_loop(self, work_scope: anyio.CancelScope) -> None:
        retry = self.settings.retry_period_seconds
        deadline_after = self.settings.renew_deadline_seconds
        while True:
            await self.clock.sleep(retry)
            round_start = self.clock.monotonic()
            while True:
                remaining = round_start + deadline_after - self.clock.monotonic()
                renewed = await self.try_acquire_or_renew(request_timeout=max(0.1, remaining))
                if renewed:
                    self.renewals += 1
                    self._notify()
                    break
                other = self.leader_identity
                if other and other != self.identity:
                    self._step_down(work_scope, f"the lease is held by {other}")
                    return
                if self.clock.monotonic() - round_start >= deadline_after:
                    self._step_down(
                        work_scope, f"failed to renew the lease within {deadline_after:g}s"
                    )
                    return
                remaining = round_start + deadline_after - self.clock.monotonic()
                await self.clock.sleep(max(0.0, min(retry, remaining)))

    def _step_down(self, work_scope: anyio.CancelScope, reason: str) -> None:
        log.error("leader election: %s steps down: %s", self.identity, reason)
        self._lost_reason = reason
        self._set_role(Role.FOLLOWER)
        work_scope.cancel()

    async def try_acquire_or_renew(self, *, request_timeout: float | None = None) -> bool:
        """One attempt (client-go's ``tryAcquireOrRenew``): True when this replica now holds
        the Lease. API failures and lost races (409) are False."""
        assert self.api is not None
        api = self.api
        if request_timeout is not None:
            api = KubeApi(api.api_client, request_timeout=request_timeout, name=api.name)
        name, namespace = self.settings.lease_name, self.namespace
        try:
            lease = await get_lease(api, namespace, name)
            now, wall = self.clock.monotonic(), self.clock.utcnow()
            duration = self.settings.lease_duration_seconds
            if lease is None:
                record = LeaseRecord(self.identity, duration, wall, wall, 0)
                created = await create_lease(api, namespace, name, record)
                self._observe(created, now)
                return True
            if lease.record != self._observed:
                self._observed, self._observed_at = lease.record, now
            old = lease.record
            holder = old.holder_identity
            if holder and holder != self.identity:
                valid_for = old.lease_duration_seconds or duration
                if self._observed_at + valid_for > now:
                    return False
            if holder == self.identity:
                record = LeaseRecord(
                    self.identity,
                    duration,
                    old.acquire_time or wall,
                    wall,
                    old.lease_transitions,
                )
            else:
                record = LeaseRecord(self.identity, duration, wall, wall, old.lease_transitions + 1)
            self._observe(await replace_lease(api, lease, record), now)
            return True
        except LeaseConflict:
            log.info("leader election: lost a race on lease %s/%s (409)", namespace, name)
            return False
        except ApiError as error:
            log.warning("leader election: lease %s/%s: %s", namespace, name, error)
            return False
        finally:
            self._notify()

    def _observe(self, lease: Lease, now: float) -> None:
        self._observed, self._observed_at = lease.record, now

    async def release(self) -> bool:
        """Give the Lease up if this replica holds it: empty holder, ``leaseDurationSeconds: 1``.

        Shielded from cancellation and bounded by ``release_timeout``; never raises. True when
        the Lease was released.
        """
        if self.api is None:
            return False
        api = KubeApi(self.api.api_client, request_timeout=self.release_timeout)
        name, namespace = self.settings.lease_name, self.namespace
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.release_timeout):
            try:
                lease = await get_lease(api, namespace, name)
                if lease is None or lease.record.holder_identity != self.identity:
                    return False
                wall = self.clock.utcnow()
                record = LeaseRecord("", 1, wall, wall, lease.record.lease_transitions)
                self._observe(await replace_lease(api, lease, record), self.clock.monotonic())
                log.info("leader election: %s released lease %s/%s", self.identity, namespace, name)
                return True
            except (LeaseConflict, ApiError) as error:
                log.warning("leader election: release of %s/%s failed: %s", namespace, name, error)
                return False
        log.warning("leader election: release of %s/%s timed out", namespace, name)
        return False
