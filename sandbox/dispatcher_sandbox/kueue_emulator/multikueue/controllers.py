"""What the manager's MultiKueue controllers share: the constants, the hook types, the
reconcile loop and the condition writer.

Mirrors Kueue v0.19.2 ``pkg/controller/admissionchecks/multikueue/controllers.go`` (the
setup options and defaults shared by the controllers) and the small helpers its siblings share.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from dispatcher_sandbox.kube_client import (
    KubeClient,
    KubeError,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    KUEUE_MANAGER,
    Clock,
    Controller,
    Obj,
    RemoteObjectNotOwned,
    condition,
    set_condition,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]

# Errors of one reconcile that Kueue returns, so that its work queue retries the key with
# backoff (a worker may vanish mid-request, a write may be refused, a remote Job may belong to
# someone else).
TRANSIENT = (KubeError, OSError, TimeoutError, aiohttp.ClientError, RemoteObjectNotOwned)

SyncRemoteJob = Callable[[KubeClient, Obj, str], Awaitable[bool]]
"""``sync_remote_job(worker_client, local_workload, cluster_name)`` (C28 step 2, C33); True when
the status sync was deferred (the manager Job still suspended while the worker's runs): the
caller comes back after :data:`SYNC_DEFERRED_REQUEUE_SECONDS` (C26, C28 step 4)."""

SYNC_DEFERRED_REQUEUE_SECONDS = 2.0
"""Kueue's ``syncDeferredRequeueAfter``: the manager Job is unsuspended shortly after the check
turns ``Ready``, which does not wake the workload reconciler (it does not watch local Jobs)."""

RemoveRemoteJob = Callable[[KubeClient, Obj, str], Awaitable[None]]
"""``remove_remote_job(worker_client, workload, cluster_name)`` (C24, C32, C41): delete the
worker's Job named by ``workload``'s controller owner (the manager Workload, or for the GC the
copy) if this manager owns it."""


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))


class _Loop(Controller):
    """A :class:`Controller` whose error retries run in wall-clock time, not the injected clock."""

    def retry_soon(self, seconds: float) -> None:
        """Mark dirty again after ``seconds`` of real time (errors, connection backoff)."""

        async def later() -> None:
            await asyncio.sleep(seconds)
            self.mark_dirty()

        task = asyncio.get_running_loop().create_task(later())
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            self.cancel_timers()


class _RetryingLoop(_Loop):
    """A :class:`_Loop` whose whole pass (``_reconcile``) is retried 0.1 s after an error of
    one API call (:data:`TRANSIENT`)."""

    async def reconcile(self) -> float | None:
        try:
            return await self._reconcile()
        except TRANSIENT as error:
            log.info("%s: %s", self.name, error)
            self.retry_soon(0.1)
            return None

    async def _reconcile(self) -> float | None:
        raise NotImplementedError


def _condition_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    if old is None:
        return True
    return any(old.get(f) != new.get(f) for f in ("status", "reason", "message"))


async def _write_condition(
    client: KubeClient,
    resource: Resource,
    obj: Obj,
    kind: str,
    value: bool,
    reason: str,
    message: str,
    clock: Clock,
) -> bool:
    """Set one status condition (merge patch as ``kueue``) when it changed; True if written.
    An object deleted meanwhile (404) has nothing to write: False."""
    status = copy.deepcopy(obj.get("status") or {})
    old = condition(status, kind)
    wanted = {"status": "True" if value else "False", "reason": reason, "message": message}
    if not _condition_changed(old, wanted):
        return False
    set_condition(status, kind, value, reason, message, clock)
    try:
        await client.merge_patch(
            resource,
            obj["metadata"]["name"],
            {"status": {"conditions": status["conditions"]}},
            subresource="status",
            field_manager=KUEUE_MANAGER,
        )
    except KubeError as error:
        if error.status == 404:
            return False
        raise
    return True
