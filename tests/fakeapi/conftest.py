"""Fixtures for the fake API server's conformance tests: clusters and clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS

# A kind without a schema, for tests of the generic custom-resource paths (F2).
WIDGET = "example.com/v1/widgets=Widget+status"


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    """A fake cluster with the Kueue kinds registered without schemas and a test kind."""
    async with FakeCluster("test", resources=[*KUEUE_SHORT_FORMS, WIDGET]) as fake:
        yield fake


@pytest.fixture
async def kueue_cluster(crds_dir: Path) -> AsyncIterator[FakeCluster]:
    """A fake cluster enforcing the real Kueue v0.19.2 CRDs (F40–F47)."""
    async with FakeCluster("kueue", crd_paths=[crds_dir], resources=[WIDGET]) as fake:
        yield fake


async def _client(fake: FakeCluster) -> client.ApiClient:
    return await config.new_client_from_config_dict(fake.kubeconfig)


@pytest.fixture
async def api(cluster: FakeCluster) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio client for ``cluster`` through its kubeconfig (HTTPS + token)."""
    api_client = await _client(cluster)
    async with api_client:
        yield api_client


@pytest.fixture
async def kueue_api(kueue_cluster: FakeCluster) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio client for ``kueue_cluster``."""
    api_client = await _client(kueue_cluster)
    async with api_client:
        yield api_client
