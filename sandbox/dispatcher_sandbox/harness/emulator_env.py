"""Fixtures for the Kueue emulator: one fake cluster with the real CRDs and a running CoreKueue.

Tests drive the emulation only through the API (a kubernetes_asyncio client over HTTPS) and wait
for its effects with watches under a deadline. The clock is a :class:`ManualClock` that starts at
the wall-clock second the cluster starts (so creation times and condition times compare sensibly);
tests move it with ``env.clock.advance(seconds)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, config, watch

from dispatcher_sandbox.fake_apiserver import FakeCluster, load_crd_documents
from dispatcher_sandbox.kueue_emulator.core import CoreKueue
from dispatcher_sandbox.kueue_emulator.runtime import (
    ClusterConnection,
    KueueConfig,
    ManualClock,
    admission_status_body,
)

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
DEADLINE = 5.0


def get_condition(obj: Obj | None, kind: str) -> Obj | None:
    """The condition ``kind`` of an object's status, if any."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            found: Obj = item
            return found
    return None


def has(kind: str, status: str = "True", reason: str | None = None) -> Callable[[Obj], bool]:
    """Predicate: the object has condition ``kind`` with that status (and reason)."""

    def check(obj: Obj) -> bool:
        found = get_condition(obj, kind)
        return (
            found is not None
            and found.get("status") == status
            and (reason is None or found.get("reason") == reason)
        )

    return check


@dataclass
class KueueEnv:
    """One fake cluster, a client for it, and the emulated Kueue core running against it."""

    cluster: FakeCluster
    api: client.ApiClient
    kueue: CoreKueue
    clock: ManualClock
    config: KueueConfig

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    async def get(self, plural: str, name: str, namespace: str | None = None) -> Obj:
        """GET one Kueue object."""
        if namespace is None:
            found: Obj = await self.custom.get_cluster_custom_object(KUEUE, V1BETA2, plural, name)
        else:
            found = await self.custom.get_namespaced_custom_object(
                KUEUE, V1BETA2, namespace, plural, name
            )
        return found

    async def workload(self, name: str, namespace: str = "default") -> Obj:
        """GET a Workload."""
        return await self.get("workloads", name, namespace)

    async def wait_for(
        self,
        plural: str,
        name: str,
        predicate: Callable[[Obj], bool],
        namespace: str | None = None,
        *,
        deadline: float = DEADLINE,
        seen: list[Obj] | None = None,
        since: str | None = None,
    ) -> Obj:
        """Wait (list, then watch) until the object satisfies ``predicate``; returns it.

        Every version observed is appended to ``seen`` when given. With ``since`` (a
        resourceVersion, e.g. from the answer to the test's own write, or from
        :meth:`resource_version` before a create) there is no initial list: the watch replays
        every change after it, so intermediate states cannot be missed.
        """
        selector = f"metadata.name={name}"
        last: Obj | None = None
        if namespace is None:
            lister: Any = self.custom.list_cluster_custom_object
            args: tuple[Any, ...] = (KUEUE, V1BETA2, plural)
        else:
            lister = self.custom.list_namespaced_custom_object
            args = (KUEUE, V1BETA2, namespace, plural)
        rv = since
        try:
            with anyio.fail_after(deadline):
                while True:
                    if rv is None:
                        listed = await lister(*args, field_selector=selector)
                        for item in listed["items"]:
                            last = item
                            if seen is not None:
                                seen.append(item)
                            if predicate(item):
                                return last
                        rv = listed["metadata"]["resourceVersion"]
                    async with watch.Watch() as w:
                        async for event in w.stream(
                            lister,
                            *args,
                            field_selector=selector,
                            resource_version=rv,
                            timeout_seconds=5,
                        ):
                            if event["type"] not in ("ADDED", "MODIFIED"):
                                continue
                            last = event["object"]
                            rv = last["metadata"]["resourceVersion"]
                            if seen is not None:
                                seen.append(last)
                            if predicate(last):
                                return last
        except TimeoutError:
            pytest.fail(f"{plural}/{name}: condition not reached; last seen: {last}")

    async def resource_version(self, plural: str = "workloads", namespace: str = "default") -> str:
        """The current resourceVersion of a collection (to watch from before a create)."""
        listed = await self.custom.list_namespaced_custom_object(
            KUEUE, V1BETA2, namespace, plural, limit=1
        )
        return str(listed["metadata"]["resourceVersion"])

    async def wait_workload(
        self, name: str, predicate: Callable[[Obj], bool], namespace: str = "default", **kw: Any
    ) -> Obj:
        """:meth:`wait_for` on a Workload."""
        return await self.wait_for("workloads", name, predicate, namespace, **kw)

    async def merge_status(
        self, plural: str, name: str, status: Obj, namespace: str | None = None
    ) -> Obj:
        """A merge patch of ``status`` as field manager ``test`` (a user or another controller)."""
        body = {"status": status}
        if namespace is None:
            done: Obj = await self.custom.patch_cluster_custom_object_status(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
                KUEUE, V1BETA2, plural, name, body, field_manager="test", _content_type=MERGE
            )
        else:
            done = await self.custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
                KUEUE,
                V1BETA2,
                namespace,
                plural,
                name,
                body,
                field_manager="test",
                _content_type=MERGE,
            )
        return done

    async def apply_admission_status(
        self, name: str, change: Callable[[Obj], None], namespace: str = "default"
    ) -> Obj:
        """Change a Workload's status the way Kueue's other controllers do (C42).

        GET, ``change(status)`` in place, then server-side apply of the whole admission-status
        body as ``kueue-admission`` with force and the resourceVersion (stands in for the
        MultiKueue controller, as upstream's integration tests use ``PatchAdmissionStatus``).
        """
        current = await self.workload(name, namespace)
        status = copy.deepcopy(current.get("status") or {})
        change(status)
        body = {
            "apiVersion": f"{KUEUE}/{V1BETA2}",
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
            "status": admission_status_body(status),
        }
        done: Obj = await self.custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
            KUEUE,
            V1BETA2,
            namespace,
            "workloads",
            name,
            body,
            field_manager="kueue-admission",
            force=True,
            _content_type=APPLY,
        )
        return done

    def timestamp(self, seconds: float = 0.0) -> str:
        """The clock's time plus ``seconds``, as Kubernetes writes it."""
        when = self.clock.now() + datetime.timedelta(seconds=seconds)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.cache
def crd_documents(crds_dir: Path) -> tuple[Obj, ...]:
    """The CRD documents, parsed once per session (parsing the YAML is the slow part)."""
    return tuple(load_crd_documents(crds_dir))


@contextlib.asynccontextmanager
async def start_env(
    crds_dir: Path, *, role: str = "worker", kueue_config: KueueConfig | None = None
) -> AsyncIterator[KueueEnv]:
    """A fake cluster with the real CRDs and a CoreKueue of ``role`` running against it."""
    cfg = kueue_config or KueueConfig(batch_period_seconds=0.005)
    async with FakeCluster(f"kueue-{role}", crds=crd_documents(crds_dir)) as cluster:
        clock = ManualClock(datetime.datetime.now(datetime.UTC).replace(microsecond=0))
        conn = ClusterConnection(role, cluster.kubeconfig, CoreKueue.RESOURCES)
        kueue = CoreKueue(conn, cfg, clock, role=role)
        tasks = [asyncio.create_task(conn.run()), asyncio.create_task(kueue.run())]
        api = await config.new_client_from_config_dict(cluster.kubeconfig)
        try:
            async with api:
                yield KueueEnv(cluster, api, kueue, clock, cfg)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            kueue.cancel_timers()
            await conn.close()
        assert kueue.rejected_writes == 0
        assert kueue.errors == 0
