"""The sandbox's own client (used by the Kueue emulator and the sandbox CLI).

A remote the emulator has stopped may still be referenced by a reconcile in flight (C11: a
cluster that goes inactive is disconnected while work on its copies continues). Such a late
request must fail like an unreachable cluster, not reopen a connection pool that nobody closes
(that pool was garbage-collected unclosed in later tests).
"""

from __future__ import annotations

import aiohttp
import pytest

from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kube_client import KubeClient
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
