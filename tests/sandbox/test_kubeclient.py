"""The sandbox's own client (used by the Kueue emulator and the sandbox CLI).

A remote the emulator has stopped may still be referenced by a reconcile in flight (C11: a
cluster that goes inactive is disconnected while work on its copies continues). Such a late
request must fail like an unreachable cluster, not reopen a connection pool that nobody closes
(that pool was garbage-collected unclosed in later tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import anyio
import pytest

from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kube_client import NAMESPACES, Informer, KubeClient, Obj
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS


async def test_c11_a_closed_remote_client_refuses_requests_instead_of_reopening() -> None:
    async with FakeCluster("w1", resources=KUEUE_SHORT_FORMS) as fake:
        kube = KubeClient(fake.kubeconfig)
        namespaces = await kube.request("GET", "/api/v1/namespaces")
        assert namespaces["kind"] == "NamespaceList"
        await kube.close()
        with pytest.raises(aiohttp.ClientConnectionError, match="is closed"):
            await kube.request("GET", "/api/v1/namespaces")
        assert kube._session is None  # nothing was opened again
        await kube.close()  # closing twice is harmless


async def test_c11_a_client_closed_before_its_first_request_opens_nothing() -> None:
    async with FakeCluster("w1", resources=KUEUE_SHORT_FORMS) as fake:
        async with KubeClient(fake.kubeconfig) as kube:
            pass
        with pytest.raises(aiohttp.ClientConnectionError):
            await kube.request("GET", "/api/v1/namespaces")
        assert kube._session is None


async def test_an_informer_survives_a_connection_closed_under_its_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiohttp raises a bare ``RuntimeError("Connection closed.")`` for a read after the
    connection was closed under it; an informer's watch (the real backend's Job finisher and mix
    harness use them) takes it as a cut stream and lists and watches again, instead of ending
    the task group it runs in (CI at a44fba7, tests/real/test_real_remedies.py)."""
    cut: list[bool] = []
    readline = aiohttp.StreamReader.readline

    async def closed_once_armed(self: aiohttp.StreamReader) -> bytes:
        if cut == [False]:
            cut[0] = True
            raise RuntimeError("Connection closed.")
        line: bytes = await readline(self)
        return line

    monkeypatch.setattr(aiohttp.StreamReader, "readline", closed_once_armed)
    errors: list[str] = []
    changed = asyncio.Event()

    def noted(kind: str, obj: Obj) -> None:
        if kind == "DISCONNECTED":
            errors.append(informer.last_error)
        changed.set()

    async def until(predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(30):
            while not predicate():
                changed.clear()
                await changed.wait()

    async with (
        FakeCluster("w1", resources=KUEUE_SHORT_FORMS) as fake,
        KubeClient(fake.kubeconfig) as kube,
        anyio.create_task_group() as group,
    ):
        informer = Informer(kube, NAMESPACES, noted)
        group.start_soon(informer.run)
        await until(informer.synced.is_set)
        cut.append(False)  # the watch's next read finds the connection closed
        await kube.create(NAMESPACES, {"metadata": {"name": "first"}})
        await until(lambda: bool(errors))
        assert cut == [True]
        assert errors == ["Connection closed."]
        await kube.create(NAMESPACES, {"metadata": {"name": "second"}})
        await until(lambda: informer.get("second") is not None)
        assert informer.get("first") is not None
        group.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("message", "raised"),
    [
        pytest.param("Connection closed.", aiohttp.ClientConnectionError, id="closed-under-read"),
        pytest.param("something else", RuntimeError, id="any-other-runtime-error"),
    ],
)
async def test_a_request_whose_connection_closed_under_its_read_is_a_connection_error(
    monkeypatch: pytest.MonkeyPatch, message: str, raised: type[Exception]
) -> None:
    """The same rule for one request: what the callers already retry, and nothing else."""

    async def closed(self: aiohttp.ClientResponse) -> bytes:
        raise RuntimeError(message)

    async with (
        FakeCluster("w1", resources=KUEUE_SHORT_FORMS) as fake,
        KubeClient(fake.kubeconfig) as kube,
    ):
        monkeypatch.setattr(aiohttp.ClientResponse, "read", closed)
        with pytest.raises(raised, match=message):
            await kube.request("GET", "/api/v1/namespaces")
