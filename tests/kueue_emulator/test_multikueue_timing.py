"""Event timing of the emulated MultiKueue manager (contract C10, C20, C32; issue 14 item 10).

What Kueue v0.19.2 does (``pkg/controller/admissionchecks/multikueue``): events of a manager
Workload queue it at once, events of a remote cluster and of a MultiKueueConfig after the 1 s
batch period (``constants.UpdatesBatchPeriod``); MultiKueueClusters and AdmissionChecks are not
watched by the workload reconciler; a failed reconcile ("no remote client for nominated cluster"
among others) is retried with controller-runtime's backoff (5 ms doubling to 1000 s); the
manager's clients to a worker are rate-limited by client-go's defaults, 5 QPS and a burst of 10
for each kind (v0.19), or Kueue's ``clientConnection``, 1000/1000 per worker (v0.20).
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from dispatcher_sandbox.harness.multikueue import NS, check_state, eventually, start_env
from dispatcher_sandbox.kube_client import JOBS, WORKLOADS
from dispatcher_sandbox.kueue_emulator import runtime
from dispatcher_sandbox.kueue_emulator.runtime import (
    KueueConfig,
    RateLimitedKubeClient,
    RetryLimiter,
    TokenBucket,
    WorkerClientLimit,
    kind_of_path,
)


def _admitted_on(cluster: str) -> Any:
    return lambda o: (o.get("status") or {}).get("clusterName") == cluster


# --- defaults ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "qps", "burst", "per_kind"),
    [
        pytest.param("v0.19", 5.0, 10, True, id="c10-v019-client-go-defaults-per-kind"),
        pytest.param("v0.20", 1000.0, 1000, False, id="c10-v020-client-connection-per-worker"),
    ],
)
def test_c10_c20_worker_client_limits_and_batch_period_default_to_kueues(
    version: str, qps: float, burst: int, per_kind: bool
) -> None:
    config = KueueConfig(version=version)  # type: ignore[arg-type]
    assert config.worker_client_limit == WorkerClientLimit(qps, burst, per_kind)
    assert config.batch_period_seconds == 1.0  # constants.UpdatesBatchPeriod


def test_c10_the_knob_sets_the_limit_and_inf_turns_it_off() -> None:
    assert KueueConfig(worker_client_qps=50, worker_client_burst=100).worker_client_limit == (
        WorkerClientLimit(50, 100, True)
    )
    assert KueueConfig(worker_client_qps=math.inf).worker_client_limit.unlimited


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("worker_client_qps", 0.0, "worker_client_qps must be a positive", id="qps-0"),
        pytest.param("worker_client_burst", 0, "worker_client_burst must be at least 1", id="b-0"),
        pytest.param("batch_period_seconds", -1.0, "batch_period_seconds must not be", id="neg"),
    ],
)
def test_bad_timing_settings_are_refused_naming_the_field(
    field: str, value: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KueueConfig(**{field: value})


# --- the rate limiter and the retry backoff, on a controlled clock --------------------------------


class _Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_c10_token_bucket_serves_a_burst_then_qps(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Monotonic()
    monkeypatch.setattr(runtime.time, "monotonic", clock)
    bucket = TokenBucket(5.0, 10)
    assert [bucket.reserve() for _ in range(10)] == [0.0] * 10  # the burst
    waits = [bucket.reserve() for _ in range(3)]  # then one token per 1/5 s, in order
    assert waits == pytest.approx([0.2, 0.4, 0.6])
    clock.now += 10.0  # refilled, but never above the burst
    assert [bucket.reserve() for _ in range(10)] == [0.0] * 10
    assert bucket.reserve() == pytest.approx(0.2)


def test_c32_retry_backoff_doubles_from_5_ms_to_1000_s_and_forget_resets() -> None:
    limiter = RetryLimiter(qps=math.inf)  # the per-key part alone
    delays = [limiter.when("k") for _ in range(20)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert max(delays) == 1000.0  # capped, and well past the emulation's former 2 s
    assert delays[18] == 1000.0
    limiter.forget("k")
    assert limiter.when("k") == pytest.approx(0.005)
    assert limiter.when("other") == pytest.approx(0.005)  # per key


def test_c32_retry_backoff_shares_a_10_qps_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime.time, "monotonic", _Monotonic())
    limiter = RetryLimiter()
    first = [limiter.when(f"k{i}") for i in range(100)]  # a burst of 100 keys fails once
    assert first == pytest.approx([0.005] * 100)
    assert limiter.when("k100") == pytest.approx(0.1)  # the 101st waits for the bucket


KIND_CASES = [
    ("/apis/kueue.x-k8s.io/v1beta2/namespaces/a/workloads/x/status", "kueue.x-k8s.io/workloads"),
    ("/apis/batch/v1/namespaces/a/jobs", "batch/jobs"),
    ("/apis/kueue.x-k8s.io/v1beta2/workloads", "kueue.x-k8s.io/workloads"),
    ("/api/v1/namespaces/a/events", "/events"),
]


@pytest.mark.parametrize(
    ("path", "kind"), KIND_CASES, ids=["status", "collection", "all-namespaces", "core"]
)
def test_c10_requests_are_limited_per_kind(path: str, kind: str) -> None:
    assert kind_of_path(path) == kind


# --- the limits on the wire ---------------------------------------------------------------------


async def test_c10_v019_each_kind_has_its_own_budget_of_5_qps_burst_10() -> None:
    """C10: 10 Job GETs go at once; 12 Workload GETs need at least (12 - 10) / 5 = 0.4 s, as
    Workloads have a budget of their own (controller-runtime: one REST client, hence one
    limiter, per kind)."""
    async with start_env(workers=("worker1",)) as env:
        kubeconfig = env.workers["worker1"].kubeconfig
        async with RateLimitedKubeClient(kubeconfig, KueueConfig().worker_client_limit) as api:
            for _ in range(10):
                await api.get(JOBS, "absent", NS)
            assert api.throttled_seconds == 0.0
            started = time.monotonic()
            for _ in range(12):
                await api.get(WORKLOADS, "absent", NS)
            assert time.monotonic() - started >= 0.4
            assert api.throttled_seconds > 0


async def test_c10_every_reconcile_charges_a_get_per_connected_worker() -> None:
    """C23: Kueue's ``readGroup`` GETs each connected worker's copy on every reconcile; the
    emulation serves it from its informer but charges it to that worker's limiter."""
    async with start_env(workers=("worker1", "worker2")) as env:
        remotes = env.controllers.clusters.remotes
        before = {name: remote.client.requests for name, remote in remotes.items()}  # type: ignore[attr-defined]
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker1"])
        await env.wait_copies("wl", ["worker1"])
        await env.settle()
        reconciles = env.controllers.workloads.reconciles
        assert reconciles >= 2
        for name, remote in remotes.items():
            sent = remote.client.requests - before[name]  # type: ignore[attr-defined]
            assert sent >= 2, (name, sent)  # at least the reserve and the nomination passes


# --- the work queue ---------------------------------------------------------------------------


async def test_c20_remote_events_wait_the_batch_period_manager_events_do_not() -> None:
    """C20: a remote event queues its Workload after the batch period (Kueue's 1 s here), an
    event of the manager Workload queues it at once."""
    async with start_env(workers=("worker1",), batch_period_seconds=1.0) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.settle()
        workloads = env.controllers.workloads
        key = (NS, "wl")
        workloads.on_remote_change(
            "worker1", "MODIFIED", {"metadata": {"namespace": NS, "name": "wl"}}
        )
        assert key not in workloads._keys
        assert key in workloads._wall_timers  # due in 1 s
        workloads.on_manager_change(
            WORKLOADS, "MODIFIED", {"metadata": {"namespace": NS, "name": "wl"}}
        )
        assert key in workloads._keys  # at once
        await env.settle()


async def test_c20_admission_is_recorded_no_sooner_than_the_batch_period() -> None:
    """C20 on the wire: the worker's admission reaches the manager Workload after >= 1 s."""
    async with start_env(workers=("worker1",), policy_hook=True, batch_period_seconds=1.0) as env:
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker1"])
        await env.wait_copies("wl", ["worker1"])
        await env.settle()
        started = time.monotonic()
        await env.worker_admit("worker1", "wl")
        await env.wait_workload("wl", _admitted_on("worker1"))
        assert time.monotonic() - started >= 1.0


async def test_c32_no_remote_client_is_retried_with_growing_backoff() -> None:
    """C32: a nominated cluster without a connected client makes the reconcile fail; Kueue's
    work queue retries it with exponential backoff (not the emulation's former 2 s cap), and a
    successful reconcile (the cluster back) forgets the failures."""
    async with start_env(workers=("worker1", "worker2")) as env:
        await env.workers["worker2"].down()
        await env.wait_condition("multikueueclusters", "worker2", "False", "ClientConnectionFailed")
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.nominate("wl", ["worker1", "worker2"])
        workloads = env.controllers.workloads
        key = (NS, "wl")

        async def failing() -> bool:
            return workloads.retry.failures(key) >= 6

        await eventually(failing, what="six failed reconciles")
        errors = [e for e in workloads.nomination_errors if "cluster worker2" in e]
        assert len(errors) >= 6
        await env.workers["worker2"].up()

        async def both() -> bool:  # the next retry may be a few seconds away by now
            return await env.copies("wl") == {"worker1", "worker2"}

        await eventually(both, deadline=30, what="copies on both workers")

        async def forgotten() -> bool:
            return workloads.retry.failures(key) == 0

        await eventually(forgotten, what="the failures forgotten after a successful reconcile")


async def test_c20_admission_check_changes_queue_no_workload() -> None:
    """C20: an AdmissionCheck change queues no Workload (Kueue's workload reconciler does not
    watch AdmissionChecks)."""
    async with start_env(workers=("worker1",)) as env:
        await env.create_workload("wl")
        reserved = await env.reserve_quota("wl")
        # The reservation's watch event must have reached the controller before settle() can
        # tell it is idle: under load it came after, and its reconcile was counted below.
        await env.seen("wl", reserved["metadata"]["resourceVersion"])
        await env.settle()
        workloads = env.controllers.workloads
        passes = workloads.reconciles
        await env.objects().patch_cluster_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "admissionchecks",
            "mk-check",
            {"metadata": {"labels": {"touched": "yes"}}},
            _content_type="application/merge-patch+json",
        )
        await env.settle()
        assert workloads.reconciles == passes  # not even woken
        local = await env.get("wl")
        assert (check_state(local) or {})["state"] == "Pending"
