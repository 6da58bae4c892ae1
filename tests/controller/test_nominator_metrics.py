"""The nomination loop's series, one test per emission site: decision latency over the whole
decision (snapshots included) with its ``cluster_queue``; the rejection counters by filter and
reason code; a failed nomination write counted as ``write`` (not ``api``); an unexpected
reconcile exception counted as ``unexpected``.

The manager is a fake API server over HTTPS without Kueue's schema, the real registry and
nomination loop run on it. Its MultiKueueConfig names two workers that have no
MultiKueueCluster, so both candidates are inactive: the real pipeline drops both (``active``,
``inactive``); a stub decision nominates one anyway when a test needs a write.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest, QueuedWorkload
from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.controller import nominator as nominator_module
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.nominator import Nominator
from dispatcher.k8s.client import USER_AGENT, KubeApi
from dispatcher.k8s.resources import (
    ADMISSION_CHECKS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    WORKLOADS,
)
from dispatcher.k8s.watching import BackoffPolicy, WatchSettings
from dispatcher.kueue.gputypes import GpuTypeCheck
from dispatcher.telemetry.metrics import Metrics
from dispatcher.testing import make_host
from dispatcher.topology import multikueue_admission_check
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS
from dispatcher_sandbox.metrics_text import Samples, samples_of

Decide = Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]
KUEUE = "kueue.x-k8s.io/v1beta2"
NS = "kueue-system"
CQ = "cq-main"
KEY = "team-a/wl"
FAST = WatchSettings(
    server_timeout=30, inactivity_timeout=None, backoff=BackoffPolicy(0.05, 2, 0.2)
)
MERGE = "application/merge-patch+json"
ELIGIBLE = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "reserved on the manager",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
    "admission": {"clusterQueue": CQ, "podSetAssignments": []},
    "admissionChecks": [
        {
            "name": "multikueue",
            "state": "Pending",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}
WORKLOAD = {
    "apiVersion": KUEUE,
    "kind": "Workload",
    "metadata": {"name": "wl", "namespace": "team-a"},
    "spec": {
        "queueName": "user-queue",
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "busybox",
                                "resources": {"requests": {"cpu": "1"}},
                            }
                        ]
                    }
                },
            }
        ],
    },
}


def pipeline() -> Decide:
    """The default pipeline with the built-in plugins only."""
    host = make_host()
    built = host.pipeline()

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        return host.decide(built, request, snapshots)

    return decide


def nominate_w1(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
    """A stub decision that nominates w1 whatever its state (so that a write happens)."""
    return Decision("stub", ("w1",), "the test wants a write")


@dataclass
class Loop:
    manager: FakeCluster
    api: KubeApi
    registry: ClusterRegistry
    nominator: Nominator
    metrics: Metrics
    reconciles: int = 0
    changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self, *_: object) -> None:
        event, self.changed = self.changed, anyio.Event()
        event.set()

    async def wait(self, predicate: Callable[[], bool], within: float = 15) -> None:
        """Wait until ``predicate()`` holds, re-checked after every cache change and reconcile."""
        with anyio.fail_after(within):
            while not predicate():
                await self.changed.wait()

    def samples(self) -> Samples:
        return samples_of(generate_latest(self.metrics.registry).decode())

    def errors(self) -> dict[str, float]:
        return {
            labels["kind"]: value
            for labels, value in self.samples().get("multikueue_dispatcher_errors_total", [])
        }

    def nominated(self) -> tuple[str, ...]:
        found = self.registry.manager.cache("workloads").get("wl", "team-a") or {}
        return tuple((found.get("status") or {}).get("nominatedClusterNames") or ())

    def cluster_name(self) -> str | None:
        found = self.registry.manager.cache("workloads").get("wl", "team-a") or {}
        return (found.get("status") or {}).get("clusterName")


@asynccontextmanager
async def loop(decide: Decide, *, run: bool = True) -> AsyncIterator[Loop]:
    """The manager with one eligible Workload and the nomination loop on it (running, unless
    ``run`` is false: then the test calls ``reconcile`` itself)."""
    metrics = Metrics(registry=CollectorRegistry())
    async with (
        FakeCluster("manager", resources=KUEUE_SHORT_FORMS) as manager,
        await KubeApi.from_kubeconfig(manager.kubeconfig, name="manager") as api,
    ):
        for namespace in (NS, "team-a"):
            await api.create(NAMESPACES, {"metadata": {"name": namespace}})
        await api.create(
            MULTIKUEUE_CONFIGS,
            {
                "apiVersion": KUEUE,
                "kind": "MultiKueueConfig",
                "metadata": {"name": "multikueue"},
                "spec": {"clusters": ["w1", "w2"]},
            },
        )
        await api.create(
            ADMISSION_CHECKS,
            multikueue_admission_check(),
        )
        await api.create(WORKLOADS, WORKLOAD, namespace="team-a")
        await api.request(
            "PATCH",
            WORKLOADS.path("team-a", "wl") + "/status",
            body={"status": ELIGIBLE},
            content_type=MERGE,
        )
        env: Loop

        def on_change(cluster: str, resource: str, item: Any) -> None:
            env.nominator.on_change(cluster, resource, item)
            env.notify()

        registry = ClusterRegistry(
            api, kueue_namespace=NS, watch_settings=FAST, on_change=on_change, metrics=metrics
        )
        nominator = Nominator(
            registry,
            decide,
            config=ControllerConfig(resync_seconds=30.0, sync_grace_seconds=0.0),
            metrics=metrics,
        )
        env = Loop(manager, api, registry, nominator, metrics)
        reconcile = nominator.reconcile

        async def counted(key: str) -> None:
            try:
                await reconcile(key)
            finally:
                env.reconciles += 1
                env.notify()

        nominator.reconcile = counted  # type: ignore[method-assign]
        try:
            async with anyio.create_task_group() as group:
                await group.start(registry.run)
                await env.wait(
                    lambda: (
                        registry.synced
                        and registry.manager.cache("workloads").get("wl", "team-a") is not None
                    )
                )
                if run:
                    group.start_soon(nominator.run)
                yield env
                group.cancel_scope.cancel()
        finally:
            metrics.shutdown()


class SteppedClock:
    """Stands in for the ``anyio`` module inside the nominator: everything is anyio's except
    ``current_time``, which only moves when the test steps it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def current_time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(anyio, name)


async def test_decision_latency_spans_the_snapshots_and_names_the_cluster_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with loop(pipeline(), run=False) as env:
        nominator = env.nominator
        clock = SteppedClock()
        monkeypatch.setattr(nominator_module, "anyio", clock)
        inputs = nominator._inputs

        def slow_inputs(*args: Any) -> Any:
            built = inputs(*args)
            clock.now += 5.0  # building the snapshots "takes" 5 s; the pipeline takes 0 s
            return built

        nominator._inputs = slow_inputs  # type: ignore[method-assign]
        await nominator.reconcile(KEY)
        samples = env.samples()
    [(labels, total)] = samples["multikueue_dispatcher_decision_latency_seconds_sum"]
    assert labels == {
        "cluster_queue": CQ,
        "algorithm": "gpu-type-affinity+capacity-first",
        "replica_role": "standalone",
    }
    assert total == 5.0


async def test_a_workload_no_cluster_can_take_counts_its_rejections() -> None:
    async with loop(pipeline(), run=False) as env:
        await env.nominator.reconcile(KEY)
        await env.nominator.reconcile(KEY)  # decided again (a resync): counted again
        samples = env.samples()
    filtered = {
        (labels["plugin"], labels["reason"]): value
        for labels, value in samples["multikueue_dispatcher_filtered_clusters_total"]
    }
    assert filtered == {("active", "inactive"): 4.0}  # two clusters, two decisions
    assert samples["multikueue_dispatcher_no_feasible_cluster_total"] == [
        (
            {
                "cluster_queue": CQ,
                "algorithm": "gpu-type-affinity+capacity-first",
                "replica_role": "standalone",
            },
            2.0,
        )
    ]


async def test_a_nominating_decision_is_not_a_no_feasible_cluster() -> None:
    async with loop(nominate_w1, run=False) as env:
        await env.nominator.reconcile(KEY)
        await env.wait(lambda: env.nominated() == ("w1",))
        samples = env.samples()
    assert "multikueue_dispatcher_no_feasible_cluster_total" not in samples
    assert "multikueue_dispatcher_filtered_clusters_total" not in samples


async def test_a_failed_nomination_write_counts_as_write_not_api() -> None:
    async with loop(nominate_w1, run=False) as env:
        fault = env.manager.faults.error(
            500,
            verbs=("patch",),
            path="/workloads/wl/status$",
            count=1,
            message="injected",
            user_agent=f"^{USER_AGENT}$",
        )
        async with anyio.create_task_group() as group:
            group.start_soon(env.nominator.run)
            await env.wait(lambda: env.nominated() == ("w1",))  # written on the retry
            group.cancel_scope.cancel()
        assert fault.fired == 1
        assert env.errors() == {"write": 1.0}


async def test_an_unexpected_reconcile_exception_is_counted_and_retried() -> None:
    async with loop(nominate_w1, run=False) as env:
        reconcile = env.nominator.reconcile
        raised: list[str] = []

        async def buggy(key: str) -> None:
            if not raised:
                raised.append(key)
                raise RuntimeError("a bug nobody foresaw")
            await reconcile(key)

        env.nominator.reconcile = buggy  # type: ignore[method-assign]
        async with anyio.create_task_group() as group:
            group.start_soon(env.nominator.run)
            await env.wait(lambda: env.nominated() == ("w1",))  # the retry wrote it
            group.cancel_scope.cancel()
        assert raised == [KEY]
        assert env.errors() == {"unexpected": 1.0}


@pytest.mark.parametrize(
    ("status", "kept"),
    [
        pytest.param(500, False, id="500-refused-rolled-back"),
        pytest.param(422, False, id="422-refused-rolled-back"),
        pytest.param(403, False, id="403-refused-rolled-back"),
        pytest.param(504, True, id="504-may-still-land-kept"),
    ],
)
async def test_a_refused_write_leaves_no_in_flight_capacity(status: int, kept: bool) -> None:
    """Issue 15: a nomination write the API refused did not land, so its in-flight entry (the
    capacity a burst's next decisions would count as taken) is rolled back at once, not left
    until it expires; a 504 may still be applied by the server, so it is kept, as for a lost
    answer."""
    async with loop(nominate_w1, run=False) as env:
        fault = env.manager.faults.error(
            status,
            verbs=("patch",),
            path="/workloads/wl/status$",
            count=1,
            message="injected",
            user_agent=f"^{USER_AGENT}$",
        )
        with pytest.raises(nominator_module.WriteFailed):
            await env.nominator.reconcile(KEY)
        assert fault.fired == 1
        assert env.nominator.in_flight.clusters_of(KEY) == (("w1",) if kept else ())
        assert env.errors() == {}  # counted by the loop that ran the reconcile, not here


async def test_a_write_publishes_the_in_flight_gauge_of_the_clusters_it_changed_only() -> None:
    """Issue 15 (operation count): with other workloads in flight on four more clusters, the
    nomination of one workload to w1 sets the gauge of w1 alone, not of every cluster."""
    async with loop(nominate_w1, run=False) as env:
        for cluster in ("w2", "w3", "w4", "w5"):
            env.nominator.in_flight.record(
                (cluster,), QueuedWorkload(key=f"team-a/other-{cluster}"), env.nominator._now()
            )
        env.nominator._publish_in_flight()
        published: list[tuple[str, int]] = []
        set_in_flight = env.metrics.set_in_flight

        def spy(cluster: str, count: int) -> None:
            published.append((cluster, count))
            set_in_flight(cluster, count)

        env.metrics.set_in_flight = spy  # type: ignore[method-assign]
        await env.nominator.reconcile(KEY)
        await env.wait(lambda: env.nominated() == ("w1",))
        assert published == [("w1", 1)]
        gauge = {
            labels["cluster"]: value
            for labels, value in env.samples()["multikueue_dispatcher_in_flight_nominations"]
        }
        assert gauge == {"w1": 1.0, "w2": 1.0, "w3": 1.0, "w4": 1.0, "w5": 1.0}


def nominate_w1_predicted(
    request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]
) -> Decision:
    """A stub decision nominating w1 where it predicts a 300 s wait."""
    return Decision(
        "stub", ("w1",), "w1 in 300 s", predictions={"w1": request.now + 300.0, "w2": 0.0}
    )


async def test_a_predicted_wait_is_published_and_its_error_observed_at_admission() -> None:
    """Issue 18 item 2: the nomination publishes the predicted wait of the nominated cluster
    (not of the others the decision predicted), and the admission on it observes how far off
    it was, with its direction."""
    async with loop(nominate_w1_predicted, run=False) as env:
        await env.nominator.reconcile(KEY)
        await env.wait(lambda: env.nominated() == ("w1",))
        wait = env.samples()["multikueue_dispatcher_predicted_wait_seconds"]
        assert wait == [({"cluster": "w1", "replica_role": "standalone"}, 300.0)]
        predicted = env.nominator.records[KEY].predicted["w1"]
        admitted = datetime.datetime.fromtimestamp(int(predicted) + 41, datetime.UTC)
        status = {
            "clusterName": "w1",
            "nominatedClusterNames": None,
            "conditions": [
                *ELIGIBLE["conditions"],
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "message": "admitted on w1",
                    "lastTransitionTime": admitted.strftime("%Y-%m-%dT%H:%M:%SZ"),
                },
            ],
        }
        await env.api.request(
            "PATCH",
            WORKLOADS.path("team-a", "wl") + "/status",
            body={"status": status},
            content_type=MERGE,
        )
        await env.wait(lambda: env.cluster_name() == "w1")
        await env.nominator.reconcile(KEY)
        samples = env.samples()
    [(labels, count)] = samples["multikueue_dispatcher_predicted_start_error_seconds_count"]
    [(_, total)] = samples["multikueue_dispatcher_predicted_start_error_seconds_sum"]
    assert labels == {"cluster": "w1", "direction": "late", "replica_role": "standalone"}
    assert count == 1.0
    assert 40.0 < total <= 41.0


@pytest.mark.parametrize(
    "mismatch",
    [pytest.param("required", id="required-type"), pytest.param("preferred", id="preferred-type")],
)
async def test_a_gpu_type_mismatch_is_counted_once_per_admission(mismatch: str) -> None:
    """Issue 18 item 4: the admission on w1 is checked once; a mismatch counts in
    ``multikueue_dispatcher_gpu_type_mismatches_total`` with the cluster and its kind, and goes
    out as a Warning ``GPUTypeMismatch`` Event. The worker's side (its flavors, the copy's
    admission) is stood in for: what a mismatch is, is tests/kueue_model's and
    tests/e2e/test_e2e_placement.py's."""
    async with loop(nominate_w1, run=False) as env:
        nominator = env.nominator
        await nominator.reconcile(KEY)
        await env.wait(lambda: env.nominated() == ("w1",))
        checked: list[str] = []

        def copy_admission(workload: Any) -> tuple[str, Any]:
            return "w1", {"clusterQueue": "cq", "podSetAssignments": []}

        def check(workload: Any, cluster: str, admission: Any) -> GpuTypeCheck:
            checked.append(cluster)
            return GpuTypeCheck(cluster, (("h100", "H100"),), mismatch, "a test's mismatch")

        nominator._copy_admission = copy_admission  # type: ignore[method-assign]
        nominator._check_gpu_type = check  # type: ignore[method-assign]
        recorded = nominator.events.recorded
        await env.api.request(
            "PATCH",
            WORKLOADS.path("team-a", "wl") + "/status",
            body={"status": {"clusterName": "w1", "nominatedClusterNames": None}},
            content_type=MERGE,
        )
        await env.wait(lambda: env.cluster_name() == "w1")
        await nominator.reconcile(KEY)
        await nominator.reconcile(KEY)  # the same admission: not checked again
        samples = env.samples()
        assert checked == ["w1"]
        assert nominator.events.recorded == recorded + 1
    assert samples["multikueue_dispatcher_gpu_type_mismatches_total"] == [
        ({"cluster": "w1", "kind": mismatch, "replica_role": "standalone"}, 1.0)
    ]
