"""Fixtures for leader-election tests: a fake cluster and two clients."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dispatcher.k8s.client import KubeApi
from dispatcher_sandbox.fake_apiserver import FakeCluster


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    """A fake cluster (Leases are built in, F61)."""
    async with FakeCluster("leader-test") as fake:
        yield fake


@pytest.fixture
async def apis(cluster: FakeCluster) -> AsyncIterator[list[KubeApi]]:
    """Two clients (two replicas) for ``cluster``."""
    first = await KubeApi.from_kubeconfig(cluster.kubeconfig, request_timeout=5.0, name="a")
    async with first:
        second = await KubeApi.from_kubeconfig(cluster.kubeconfig, request_timeout=5.0, name="b")
        async with second:
            yield [first, second]
