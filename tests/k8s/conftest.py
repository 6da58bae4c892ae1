"""Fixtures for dispatcher.k8s tests: a fake cluster with the Kueue kinds, and a KubeApi."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dispatcher.k8s.client import KubeApi
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    """A fake cluster (HTTPS, token) with the Kueue kinds registered without schemas, and
    bookmarks every 0.2 s."""
    async with FakeCluster("k8s-test", resources=KUEUE_SHORT_FORMS, bookmark_interval=0.2) as fake:
        yield fake


@pytest.fixture
async def api(cluster: FakeCluster) -> AsyncIterator[KubeApi]:
    """A KubeApi for ``cluster`` built from its kubeconfig (validated as Kueue does)."""
    kube = await KubeApi.from_kubeconfig(cluster.kubeconfig, request_timeout=10.0, name="test")
    async with kube:
        yield kube


@pytest.fixture
async def quiet_cluster() -> AsyncIterator[FakeCluster]:
    """A fake cluster that sends no bookmarks (an hour apart)."""
    async with FakeCluster("quiet", resources=KUEUE_SHORT_FORMS, bookmark_interval=3600) as fake:
        yield fake


@pytest.fixture
async def quiet_api(quiet_cluster: FakeCluster) -> AsyncIterator[KubeApi]:
    """A KubeApi for ``quiet_cluster``."""
    kube = await KubeApi.from_kubeconfig(quiet_cluster.kubeconfig, request_timeout=10.0)
    async with kube:
        yield kube
