"""Issue 5 "must show", one test per bullet, all through the sandbox: fake API servers over
HTTPS, the emulated Kueue, and the real manager process."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.fake_apiserver.faults import Fault
from dispatcher_sandbox.harness.metrics_doc import documented_series
from dispatcher_sandbox.harness.scenario import (
    A100,
    H100,
    EventWatch,
    NominationRecorder,
    b64,
    by_job,
    cluster_of,
    cpu_jobs,
    decoded_kubeconfig,
    dispatcher_events,
    gpu_job,
    nominated,
    placed_all,
    replace_secret_data,
    run_cli_process,
    scrape,
    start_replica,
    worker_secret,
)

pytestmark = pytest.mark.slow

STUCK_SERIES = "multikueue_dispatcher_stuck_workloads_total"
STUCK_EVICTION_SERIES = {
    "multikueue_dispatcher_stuck_evictions_total",
    "multikueue_dispatcher_stuck_eviction_releases_total",
}
NO_FEASIBLE_SERIES = "multikueue_dispatcher_no_feasible_cluster_total"
GPU_MISMATCH_SERIES = "multikueue_dispatcher_gpu_type_mismatches_total"
LEFTOVER_JOB_SERIES = "multikueue_dispatcher_leftover_jobs_total"
START_ERROR_SERIES = "multikueue_dispatcher_predicted_start_error_seconds"
MAX_EXEC = {"kueue.x-k8s.io/max-exec-time-seconds": "3600"}
UNPLACEABLE_SERIES = {
    "multikueue_dispatcher_unplaceable_quota",
    "multikueue_dispatcher_unplaceable_workloads",
    "multikueue_dispatcher_unplaceable_actions_total",
}


# --- 1. the field-manager pitfall (C43) --------------------------------------------------------


@pytest.mark.parametrize("remedy", ["none", "policy", "gate"])
async def test_field_manager_pitfall(
    tmp_path: Path, crds_dir: Path, remedy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``apply`` mode without a remedy: detected and reported (log, Event, metric); with the
    admission policy or the WorkloadRequestUseMergePatch gate on Kueue, everything is admitted."""
    lines = cpu_jobs("pitfall", 2)
    names = {line.name for line in lines}
    # Kueue batches worker events for 1 s before it sets clusterName (issue 14 item 10): a 2 s
    # threshold reported remedied workloads as stuck on a loaded CI machine (CI at 31647f9).
    settings = {"stuck_after_seconds": 6.0, "write_mode": "apply"}
    async with environment(
        tmp_path, default_topology(), crds=crds_dir, remedy=remedy, settings=settings
    ) as env:
        assert env.dispatcher is not None
        if remedy != "none":
            await env.submit(lines)
            await env.wait_for_manager(placed_all(names), within=30)
            assert not await dispatcher_events(env, "AdmissionStuck")
            return
        # Kueue's admission write (clusterName while our field manager owns the nomination)
        # is refused by its own webhook rule: provoked on purpose here.
        env.sandbox.manager.rejections_expected = True
        watch = EventWatch()
        watch.install(env.sandbox.manager)
        await env.submit(lines)
        # Logged, counted, then recorded as an Event: the Event comes last.
        await watch.wait_for("AdmissionStuck", len(lines), within=30)
        workloads = by_job(await env.workloads())
        assert all(cluster_of(w) is None for w in workloads.values())
        # Log: one clear error line per workload, naming the cause and the remedies.
        stuck_logs = [
            r
            for r in caplog.records
            if r.name == "dispatcher.controller.stuck"
            and r.levelno == logging.ERROR
            and "is stuck" in r.getMessage()
        ]
        assert len(stuck_logs) == len(lines)
        for record in stuck_logs:
            text = record.getMessage()
            for words in ("status.clusterName", "field manager", "issue 6185"):
                assert words in text, text  # what is wrong, and why
            for remedy_named in ("clear-nominated-cluster-names", "WorkloadRequestUseMergePatch"):
                assert remedy_named in text, text  # and what to do
        # Event: a Warning AdmissionStuck on each Workload.
        events = await dispatcher_events(env, "AdmissionStuck")
        assert {e["involvedObject"]["name"] for e in events} == {
            w["metadata"]["name"] for w in workloads.values()
        }
        assert all(e["type"] == "Warning" for e in events)
        # Metric: the documented series counts them.
        assert STUCK_SERIES in documented_series()
        samples = await scrape(env.dispatcher)
        assert sum(value for _, value in samples[STUCK_SERIES]) == len(lines)


# --- 2. a worker dropped and back -------------------------------------------------------------


async def test_worker_dropped_renominated_and_used_again(tmp_path: Path, crds_dir: Path) -> None:
    """Nominated to worker-a100, which then refuses connections: re-nominated elsewhere within
    30 s; when it is back, it is used again."""
    prefer: dict[str, Any] = {"preferredGpuTypes": [A100, H100]}
    lines = [gpu_job(f"drop-{i}", **prefer) for i in range(2)]
    names = {line.name for line in lines}
    async with environment(tmp_path, default_topology(), crds=crds_dir) as env:
        assert env.dispatcher is not None
        a100 = env.sandbox.cluster("worker-a100")
        # Kueue's copy creation on worker-a100 hangs, so the workloads stay nominated there
        # (not admitted) until the worker drops.
        a100.faults.add(Fault("latency", verbs=("create",), path="/workloads", delay=120.0))
        await env.submit(lines)

        def on_a100(ws: list[dict[str, Any]]) -> bool:
            found = by_job(ws)
            return all(n in found and nominated(found[n]) == ("worker-a100",) for n in names)

        await env.wait_for_manager(on_a100, within=30)
        await a100.down()
        started = anyio.current_time()

        def moved(ws: list[dict[str, Any]]) -> bool:
            found = by_job(ws)
            return all(
                n in found
                and (
                    cluster_of(found[n]) not in (None, "worker-a100")
                    or (nominated(found[n]) and "worker-a100" not in nominated(found[n]))
                )
                for n in names
            )

        with anyio.fail_after(30):
            await env.wait_for_manager(moved, within=30)
            renominated = anyio.current_time() - started
            final = by_job(await env.wait_for_manager(placed_all(names), within=30))
            admitted = anyio.current_time() - started
        assert {cluster_of(final[n]) for n in names} == {"worker-h100"}
        print(f"re-nominated in {renominated:.2f}s, admitted elsewhere in {admitted:.2f}s")

        # Back: a job only worker-a100 can take (A100 required), submitted as it returns, is
        # nominated there once the dispatcher has reconnected and Kueue reports it Active.
        a100.faults.clear()
        await a100.up()
        returned = anyio.current_time()
        await env.submit([gpu_job("after-return", required=A100)])
        final = by_job(await env.wait_for_manager(placed_all({"after-return"}), within=60))
        assert cluster_of(final["after-return"]) == "worker-a100"
        print(f"worker-a100 used again {anyio.current_time() - returned:.2f}s after it returned")


# --- 3. restart mid-burst ----------------------------------------------------------------------


async def test_restart_mid_burst_dispatches_each_workload_once(
    tmp_path: Path, crds_dir: Path
) -> None:
    """Kill the dispatcher mid-burst and start a new one: every workload ends dispatched exactly
    once, and no nomination we wrote contradicts where it was admitted."""
    lines = cpu_jobs("burst", 20)
    names = {line.name for line in lines}
    recorder = NominationRecorder()
    async with (
        environment(tmp_path, default_topology(), crds=crds_dir, run_dispatcher=False) as env,
        anyio.create_task_group() as group,
    ):
        recorder.install(env.sandbox.manager)
        first = await start_replica(env, group)
        await env.submit(lines)
        await recorder.wait_for_writes(5, within=30)
        await first.kill()
        written_before = len(recorder.writes)
        await start_replica(env, group)
        try:
            final = by_job(await env.wait_for_manager(placed_all(names), within=60))
        except TimeoutError:
            stuck = {
                w["metadata"]["name"]: (nominated(w), recorder.of(w["metadata"]["name"]))
                for w in await env.workloads()
                if not cluster_of(w)
            }
            pytest.fail(f"not admitted (current nomination, our writes): {stuck}")
        print(f"killed after {written_before} nomination writes; {len(recorder.writes)} in all")
        assert written_before < len(lines), "the kill came too late to be mid-burst"
        for name in names:
            workload = final[name]
            cluster = cluster_of(workload)
            ours = recorder.of(workload["metadata"]["name"])
            assert ours, f"{name} was never nominated by us"
            contradicting = [n for n in ours if n and cluster not in n]
            assert not contradicting, f"{name} admitted on {cluster}, nominated {ours}"
        copies: dict[str, list[str]] = {}
        for worker in ("worker-a100", "worker-h100", "worker-cpu"):
            for copy in await env.worker_workloads(worker):
                copies.setdefault(copy["metadata"]["name"], []).append(worker)
        assert sorted(copies) == sorted(w["metadata"]["name"] for w in final.values())
        assert all(len(where) == 1 for where in copies.values()), copies
        dispatched, admitted = env.kueue.manager.dispatched(), env.kueue.manager.admitted()
        print(f"copies per admitted workload: {dispatched / admitted:.3f}")
        assert admitted == len(lines)
        assert dispatched <= 1.1 * admitted
        group.cancel_scope.cancel()


# --- 4. two replicas with leader election ------------------------------------------------------


LEASE = {
    "leader_election.enabled": True,
    "leader_election.namespace": "default",
    "leader_election.lease_duration_seconds": 3,
    "leader_election.renew_deadline_seconds": 2,
    "leader_election.retry_period_seconds": 0.5,
}


async def test_two_replicas_only_leader_writes_and_hands_over(
    tmp_path: Path, crds_dir: Path
) -> None:
    """Two replicas: only the leader writes; the leader killed (Lease not released, as with
    kill -9) hands over within lease duration + 2 s."""
    from dispatcher.leader.elector import LeaderElector, Role

    recorder = NominationRecorder()
    async with (
        environment(tmp_path, default_topology(), crds=crds_dir, run_dispatcher=False) as env,
        anyio.create_task_group() as group,
    ):
        recorder.install(env.sandbox.manager)
        a = await start_replica(
            env, group, identity="replica-a", overrides=LEASE, release_on_cancel=False
        )
        with anyio.fail_after(15):
            await a.manager.elector.wait_for(lambda e: e.role == Role.LEADER)
        b = await start_replica(
            env, group, identity="replica-b", overrides=LEASE, release_on_cancel=False
        )
        with anyio.fail_after(15):
            await b.manager.elector.wait_for(
                lambda e: e.role == Role.FOLLOWER and e.leader_identity == "replica-a"
            )
        first = cpu_jobs("leader-a", 3)
        await env.submit(first)
        await env.wait_for_manager(placed_all({line.name for line in first}), within=30)
        assert a.manager.nominator is not None
        follower = b.manager
        assert follower.nominator is None, "the follower must not run the nomination loop"
        assert follower.registry is None
        assert recorder.writes
        assert len(recorder.writes) == a.manager.nominator.writes
        assert (await b.manager.ready()).ok  # followers are ready while idle

        await a.kill()
        killed = anyio.current_time()

        def leads(e: LeaderElector) -> bool:
            return e.role == Role.LEADER

        with anyio.fail_after(3 + 2 + 5):
            await b.manager.elector.wait_for(leads)
        handover = anyio.current_time() - killed
        print(f"handover took {handover:.2f}s (lease 3s)")
        assert handover <= 3 + 2
        writes_by_a = len(recorder.writes)
        second = cpu_jobs("leader-b", 3)
        await env.submit(second)
        await env.wait_for_manager(placed_all({line.name for line in second}), within=30)
        leader_now = b.manager.nominator
        assert leader_now is not None
        assert len(recorder.writes) - writes_by_a == leader_now.writes > 0
        group.cancel_scope.cancel()


# --- 5. bad kubeconfig Secrets -----------------------------------------------------------------


def _exec_plugin(config: dict[str, Any]) -> None:
    config["users"][0]["user"] = {"exec": {"apiVersion": "v1", "command": "get-token"}}


def _insecure_tls(config: dict[str, Any]) -> None:
    cluster = config["clusters"][0]["cluster"]
    cluster.pop("certificate-authority-data", None)
    cluster["insecure-skip-tls-verify"] = True


def _file_ca(config: dict[str, Any]) -> None:
    cluster = config["clusters"][0]["cluster"]
    cluster.pop("certificate-authority-data", None)
    cluster["certificate-authority"] = "/etc/kubernetes/pki/ca.crt"


BAD_SECRETS = [
    pytest.param(
        "missing-key", None, "BadKubeConfig", 'key "kubeconfig" not found', id="missing-key"
    ),
    pytest.param("not-yaml", None, "BadKubeConfig", "not valid YAML", id="not-yaml"),
    pytest.param("exec", _exec_plugin, "InsecureKubeConfig", "exec plugins", id="exec-plugin"),
    pytest.param(
        "insecure",
        _insecure_tls,
        "InsecureKubeConfig",
        "insecure-skip-tls-verify",
        id="insecure-tls",
    ),
    pytest.param("file-ca", _file_ca, "InsecureKubeConfig", "certificate-authority", id="file-ca"),
]


@pytest.mark.parametrize(("kind", "mutate", "reason", "message"), BAD_SECRETS)
async def test_bad_kubeconfig_secret_marks_worker_unusable(
    tmp_path: Path, crds_dir: Path, kind: str, mutate: Any, reason: str, message: str
) -> None:
    """A bad kubeconfig Secret for worker-h100: that worker is unusable with the reason, and a
    workload that prefers H100 is still dispatched (to worker-a100)."""
    async with (
        environment(tmp_path, default_topology(), crds=crds_dir, run_dispatcher=False) as env,
        anyio.create_task_group() as group,
    ):
        secret = await worker_secret(env, "worker-h100")
        if kind == "missing-key":
            data: dict[str, Any] = {"kubeconfig": None, "config": secret["data"]["kubeconfig"]}
        elif kind == "not-yaml":
            data = {"kubeconfig": b64("apiVersion: v1\nclusters: [unclosed\n  - : :\n")}
        else:
            config = decoded_kubeconfig(secret)
            mutate(config)
            data = {"kubeconfig": b64(yaml.safe_dump(config))}
        await replace_secret_data(env, "worker-h100", data)
        replica = await start_replica(env, group)
        line = gpu_job(f"bad-{kind}", preferredGpuTypes=[H100, A100])
        await env.submit([line])
        final = by_job(await env.wait_for_manager(placed_all({line.name}), within=30))
        assert cluster_of(final[line.name]) == "worker-a100"
        registry = replica.manager.registry
        assert registry is not None
        states = registry.states()
        h100 = states["worker-h100"]
        assert (h100.phase, h100.reason) == ("Unusable", reason), h100
        assert message in h100.message, h100.message
        assert {n: s.phase for n, s in states.items() if n != "worker-h100"} == {
            "worker-a100": "Connected",
            "worker-cpu": "Connected",
        }
        group.cancel_scope.cancel()


# --- 6. /metrics and explain -------------------------------------------------------------------


async def test_metrics_show_documented_series_and_explain_prints_verdicts(
    tmp_path: Path, crds_dir: Path
) -> None:
    """After dispatching, ``/metrics`` shows every documented series with values, and
    ``explain NS/NAME`` prints the verdicts per cluster."""
    recorder = NominationRecorder(conflicts_to_inject=1)  # one write conflict: errors_total
    lines = [
        *cpu_jobs("metrics-cpu", 2),
        # One of the two waits; their limit lets its nomination predict when (C90).
        gpu_job("h100-first", gpus=4, required=H100, labels=MAX_EXEC),
        gpu_job("h100-second", gpus=4, required=H100, labels=MAX_EXEC),
    ]
    async with environment(tmp_path, default_topology(), crds=crds_dir) as env:
        assert env.dispatcher is not None
        recorder.install(env.sandbox.manager)
        await env.submit(lines)
        h100_jobs = ("h100-first", "h100-second")

        def done(ws: list[dict[str, Any]]) -> bool:
            found = by_job(ws)
            if not placed_all({"metrics-cpu-0", "metrics-cpu-1"})(ws):
                return False
            h100 = [found[n] for n in h100_jobs if n in found]
            return sorted((cluster_of(w) or "", nominated(w)) for w in h100) == [
                ("", ("worker-h100",)),  # waits behind the other: only H100 fits it
                ("worker-h100", ()),
            ]

        workloads = by_job(await env.wait_for_manager(done, within=30))
        assert recorder.injected == 1
        samples = await scrape(env.dispatcher)
        missing = []
        for series, kind in documented_series().items():
            if series == STUCK_SERIES:
                continue  # only after the pitfall: test_field_manager_pitfall[none]
            if series in STUCK_EVICTION_SERIES:
                continue  # only after a copy vanished: tests/controller/test_stuck_eviction.py
            if series == NO_FEASIBLE_SERIES:
                continue  # only when no cluster can take a workload: test_scrape_after_faults
            if series in UNPLACEABLE_SERIES:
                continue  # only while a worker is down: tests/e2e_sandbox/test_worker_outage.py
            if series == GPU_MISMATCH_SERIES:
                continue  # after a GPU type mismatch: tests/controller/test_nominator_metrics.py
            if series == LEFTOVER_JOB_SERIES:
                continue  # a leftover Job in the way: tests/controller/test_stuck_leftover_job.py
            if series == START_ERROR_SERIES:
                continue  # once a predicted wait ended: tests/controller/test_nominator_metrics.py
            name = f"{series}_count" if kind == "histogram" else series
            values = [value for _, value in samples.get(name, [])]
            if not values or (kind != "gauge" and sum(values) <= 0):
                missing.append(series)
        assert not missing, f"documented series without values: {missing}"
        by_cluster = {
            labels["cluster"]: value
            for labels, value in samples["multikueue_dispatcher_nominations_total"]
        }
        assert by_cluster.get("worker-h100", 0) >= 2  # both H100 jobs
        assert sum(by_cluster.values()) >= len(lines)
        conflicts = [
            v
            for labels, v in samples["multikueue_dispatcher_errors_total"]
            if labels["kind"] == "write_conflict"
        ]
        assert conflicts == [1.0]

        waiting = next(workloads[n]["metadata"] for n in h100_jobs if not cluster_of(workloads[n]))
        kubeconfig = env.sandbox.kubeconfig_path(env.sandbox.manager)
        argv = [
            "explain",
            f"{waiting['namespace']}/{waiting['name']}",
            "--kubeconfig",
            str(kubeconfig),
            "--sync-timeout",
            "10",
        ]
        code, out, err = await run_cli_process(argv)
        assert code == 0, out + err
        assert f"workload {waiting['namespace']}/{waiting['name']}" in out
        assert "Nominated" in out  # the last decision's Event
        assert "#0 worker-h100: kept" in out
        assert "-- worker-a100: dropped by" in out
        assert "-- worker-cpu: dropped by" in out

        # The admitted one: explain compares the flavor worker-h100 assigned with the type it
        # requires (issue 18 item 4).
        admitted = next(workloads[n]["metadata"] for n in h100_jobs if cluster_of(workloads[n]))
        argv[1] = f"{admitted['namespace']}/{admitted['name']}"
        code, out, err = await run_cli_process(argv)
        assert code == 0, out + err
        [line] = [x for x in out.splitlines() if x.startswith("GPU type ")]
        assert line.startswith("GPU type verified on worker-h100: flavor "), line
        assert line.endswith(f"; the workload requires {H100}"), line
