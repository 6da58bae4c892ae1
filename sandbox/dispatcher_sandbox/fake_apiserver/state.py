"""The cluster as its parts see it: the attributes they read on every request (a Protocol).

Middleware, routing, handlers, watch and namespaces hold the
:class:`~dispatcher_sandbox.fake_apiserver.server.FakeCluster` they serve through
:class:`ClusterState` and read it at request time, never a copy taken at start: tests replace
``faults`` and ``journal`` and change ``bookmark_interval`` or ``rejections_expected`` on a
running cluster, and ``port`` is known only once it listens.
"""

from __future__ import annotations

from typing import Protocol

from dispatcher_sandbox.fake_apiserver.admission import AdmissionChain
from dispatcher_sandbox.fake_apiserver.faults import Faults, Journal
from dispatcher_sandbox.fake_apiserver.registry import Registry
from dispatcher_sandbox.fake_apiserver.store import Store


class ClusterState(Protocol):
    """One fake cluster's shared state and settings."""

    name: str
    host: str
    port: int
    token: str
    anonymous_health: bool
    bookmark_interval: float
    default_field_manager: str
    rejections_expected: bool
    registry: Registry
    store: Store
    admission: AdmissionChain
    faults: Faults
    journal: Journal

    def now(self) -> str:
        """The cluster's clock: every time stamp it writes."""
        ...
