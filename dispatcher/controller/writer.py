"""The nomination writer: our writes to manager Workloads, and the expectations of their echoes.

:meth:`NominationWriter.write` applies ``status.nominatedClusterNames`` with server-side apply
(our field manager, forced) and the resourceVersion the decision was based on; a conflict or
Kueue's admission meanwhile is a lost race (False: decide again on fresh data), any other error
propagates. Each accepted write's answer names the version it produced: until the watch shows
that version, our cache of the Workload is behind our own write (client-go's "expectations").
Its echo then needs no reconcile (the reconcile that wrote it did everything the echo could ask
for), and a reconcile asked for before it waits for it (:meth:`behind`) instead of deciding from
the object before the write and writing again with its stale resourceVersion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.patching import MERGE_PATCH, AdmittedMeanwhile, apply_status
from dispatcher.k8s.resources import KUEUE_GROUP, KUEUE_VERSION, WORKLOADS
from dispatcher.k8s.watching import ObjectEvent, key_text
from dispatcher.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["ECHO_TTL_SECONDS", "NominationWriter"]

ECHO_TTL_SECONDS = 30.0
"""How long a reconcile waits for the watch to show our own write before it decides anyway."""


class NominationWriter:
    """Writes nominations (and the release policy's patches) to the manager's Workloads."""

    def __init__(
        self,
        api: Callable[[], KubeApi],
        *,
        field_manager: str,
        metrics: Metrics | None,
        now: Callable[[], float],
        cached_version: Callable[[str], str | None] = lambda key: None,
    ) -> None:
        self._api = api
        self._cached_version = cached_version
        self._field_manager = field_manager
        self._metrics = metrics
        self._now = now
        self.writes = 0
        """Nomination writes accepted."""
        self.races = 0
        """Nomination writes that lost a race."""
        self._echoes: dict[str, tuple[str, bool, float]] = {}
        """Expectations: the resourceVersion our last write of a Workload produced, whether its
        echo on the watch may be skipped (a nomination: the reconcile that wrote it already did
        everything the echo could ask for), and when it was written. Kept until that version is
        seen (or :data:`ECHO_TTL_SECONDS`): until then our cache of it is behind our own write."""
        self._deferred: set[str] = set()
        """Keys whose reconcile waited for the echo of our write: the echo queues them."""
        self.echoes_skipped = 0
        """Echoes of our own nomination writes that queued nothing (operation counts)."""

    async def write(self, workload: Mapping[str, Any], target: tuple[str, ...]) -> bool:
        """Write the nomination; False when it lost a race (re-read and decide again)."""
        meta = workload["metadata"]
        api = self._api()
        rv = str(meta.get("resourceVersion", ""))
        body: dict[str, Any] = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "Workload",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "resourceVersion": rv,
            },
            "status": {"nominatedClusterNames": list(target)},
        }
        result = await apply_status(
            api,
            KUEUE_GROUP,
            KUEUE_VERSION,
            meta["namespace"],
            "workloads",
            meta["name"],
            body,
            self._field_manager,
            force=True,
        )
        if isinstance(result, AdmittedMeanwhile):
            self.races += 1
            log.info(
                "workload %s/%s changed meanwhile (%s): deciding again",
                meta["namespace"],
                meta["name"],
                result.status,
                extra={"workload": f"{meta['namespace']}/{meta['name']}"},
            )
            if self._metrics is not None:
                self._metrics.error("write_conflict")
            return False
        self.writes += 1
        self.expect(f"{meta['namespace']}/{meta['name']}", result.object, skip=True, base=rv)
        log.info(
            "workload %s/%s: nominated %s",
            meta["namespace"],
            meta["name"],
            list(target),
            extra={"workload": f"{meta['namespace']}/{meta['name']}", "clusters": list(target)},
        )
        return True

    async def merge_patch_workload(self, meta: Mapping[str, Any], body: Mapping[str, Any]) -> None:
        """Merge-patch a manager Workload's metadata and spec (the release policy's writes; their
        echo is reconciled: the released or restored workload's bookkeeping follows from it)."""
        answer = await self._api().request(
            "PATCH",
            WORKLOADS.path(meta["namespace"], meta["name"]),
            body=dict(body),
            content_type=MERGE_PATCH,
        )
        base = str(meta.get("resourceVersion") or "") or None
        self.expect(f"{meta['namespace']}/{meta['name']}", answer, skip=False, base=base)

    def own_echo(self, item: ObjectEvent) -> bool:
        """Whether ``item`` is the echo of our own nomination write, which needs no reconcile
        (client-go's "expectations"): the object the write's answer carried, by
        resourceVersion. Any later change has another version and is reconciled as usual."""
        key = key_text(item.object)
        expected = self._echoes.get(key)
        if expected is None:
            return False
        if item.type == "DELETED":
            del self._echoes[key]
            self._deferred.discard(key)
            return False
        if item.resource_version != expected[0]:
            return False
        del self._echoes[key]
        if key in self._deferred:
            self._deferred.discard(key)
            return False  # a reconcile asked meanwhile: it runs now, on the current object
        if expected[1]:
            self.echoes_skipped += 1
        return expected[1]

    def expect(
        self, key: str, answer: Mapping[str, Any], skip: bool, base: str | None = None
    ) -> None:
        """Remember the version our write of ``key`` produced (from the write's answer). With
        ``base`` (the version the write was based on): only while the cache still shows it. The
        watch may deliver the echo before the answer arrives; then it has been reconciled
        already, and waiting for it would hold the key's reconciles back until the TTL."""
        version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        if base is not None and self._cached_version(key) != base:
            self._echoes.pop(key, None)
            return
        if version:
            self._echoes[key] = (version, skip, self._now())
        else:
            self._echoes.pop(key, None)

    def behind(self, key: str) -> bool:
        """Whether our cache of ``key`` does not show our last write to it yet: a reconcile now
        would decide from the object before that write (and write again with its stale
        resourceVersion, a certain conflict). It is deferred to the echo instead."""
        expected = self._echoes.get(key)
        if expected is None:
            return False
        if self._now() - expected[2] >= ECHO_TTL_SECONDS:
            del self._echoes[key]  # the echo never came: decide from what the cache shows
            return False
        self._deferred.add(key)
        return True

    def awaiting(self, key: str) -> bool:
        """Whether a write of ours to ``key`` has not come back on the watch yet."""
        return key in self._echoes

    def forget_echoes(self) -> None:
        """A re-list: every listed Workload is reconciled anyway; no echo is awaited."""
        self._echoes.clear()
        self._deferred.clear()
