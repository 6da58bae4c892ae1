"""One trace span per reconcile (issue 5 scope 7), exported only when a tracer is configured."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dispatcher.algorithms.model import Decision
from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.controller.nominator import Nominator
from dispatcher.k8s.client import KubeApi
from dispatcher_sandbox.fake_apiserver import FakeCluster


async def test_reconcile_records_a_span_with_the_workload_and_outcome() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with (
        FakeCluster("m") as cluster,
        await KubeApi.from_kubeconfig(cluster.kubeconfig) as api,
    ):
        nominator = Nominator(
            ClusterRegistry(api),
            lambda request, snapshots: Decision("none", (), "unused"),
            tracer=provider.get_tracer("test"),
        )
        await nominator.reconcile("team-a/missing")
    [span] = exporter.get_finished_spans()
    assert span.name == "dispatcher.reconcile"
    assert span.attributes is not None
    assert span.attributes["kueue.workload"] == "missing"
    assert span.attributes["k8s.namespace.name"] == "team-a"
    assert span.attributes["dispatcher.outcome"] == "deleted"
    provider.shutdown()
