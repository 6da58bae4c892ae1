"""The Kueue emulation's v0.20 mode (``KueueConfig.version``, ``docs/kueue-versions.md``).

Each test names the v0.20 change it covers:

* V020-API: ``kueue.x-k8s.io/v1beta1`` is not served (404, gone from discovery, ``served: false``
  in the CRD), and the dispatcher dispatches Jobs end to end without ever asking for v1beta1;
* V020-UNADMITTED: UnadmittedWorkloadsObservability on by default: pending Workloads carry
  ``QuotaReserved=False`` with the granular reason and ``Admitted=False``/``NoReservation``, and
  the dispatcher's eligibility reads ``QuotaReserved`` by its status;
* V020-PREEMPTION: MultiKueueOrchestratedPreemption on by default: remote copies carry the
  MultiKueue preemption gate and the manager lets one worker at a time preempt.

Where the difference is a value, the test is table-driven over both versions (v0.19 being the
default), so the v0.19 row shows the behaviour the v0.20 one replaces.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from dispatcher.kueue.eligibility import eligibility
from dispatcher.topology import WorkloadLine, generic_topology
from dispatcher_sandbox.environment import Environment, environment
from dispatcher_sandbox.kube_client import KubeClient, KubeError
from dispatcher_sandbox.kueue_emulator.multikueue.workload import _Group, clone_for_create
from dispatcher_sandbox.kueue_emulator.runtime import (
    MULTIKUEUE_PREEMPTION_GATE,
    Controller,
    KueueConfig,
    ManualClock,
    condition,
)
from dispatcher_sandbox.seeding import submit_workloads

pytestmark = pytest.mark.slow

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io"
WORKERS = ["worker-1", "worker-2"]
VERSIONS = ["v0.19", "v0.20"]
DEADLINE = 60.0
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _cond(obj: Obj, kind: str) -> Obj:
    return condition(obj.get("status"), kind) or {}


def _job(name: str, cpu: str, priority_class: str | None = None) -> WorkloadLine:
    return WorkloadLine(
        name=name, requests={"cpu": cpu, "memory": "1Gi"}, priority_class=priority_class
    )


def _owned_by(job: str) -> Callable[[Obj], bool]:
    def matches(wl: Obj) -> bool:
        owners = wl["metadata"].get("ownerReferences") or []
        return bool(owners) and owners[0].get("name") == job

    return matches


def _manager_workload(workloads: list[Obj], job: str) -> Obj | None:
    return next((w for w in workloads if _owned_by(job)(w)), None)


async def _eventually(probe: Callable[[], Any], what: str, within: float = DEADLINE) -> Any:
    """Re-check an async probe until it returns something truthy; fails after ``within``."""
    with anyio.fail_after(within):
        while True:
            found = await probe()
            if found:
                return found
            await anyio.sleep(0.02)


# --- V020-API --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"kueue-{v}")
async def test_v020_api_v1beta1_unserved(tmp_path: Path, crds_dir: Path, version: str) -> None:
    """V020-API: v0.20 answers 404 for every v1beta1 path of a Kueue kind, lists only v1beta2
    in discovery and marks v1beta1 ``served: false`` in each CRD; v0.19 serves both."""
    topology = generic_topology(WORKERS)
    async with environment(
        tmp_path, topology, run_dispatcher=False, kueue={"version": version}, crds=crds_dir
    ) as env:
        served_v1beta1 = version == "v0.19"
        for cluster in env.sandbox.clusters:
            async with KubeClient(cluster.kubeconfig, user_agent="v020-test") as kube:
                for path in (
                    "/apis/kueue.x-k8s.io/v1beta1/clusterqueues",
                    "/apis/kueue.x-k8s.io/v1beta1/namespaces/default/workloads",
                    "/apis/kueue.x-k8s.io/v1beta1/multikueueclusters",
                ):
                    if served_v1beta1:
                        assert "items" in await kube.request("GET", path)
                    else:
                        with pytest.raises(KubeError) as caught:
                            await kube.request("GET", path)
                        assert caught.value.status == 404, path
                listed = await kube.request("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
                assert listed["items"], cluster.name  # v1beta2 serves the same objects
                group = await kube.request("GET", "/apis/kueue.x-k8s.io")
                versions = {v["version"] for v in group["versions"]}
                assert versions == ({"v1beta1", "v1beta2"} if served_v1beta1 else {"v1beta2"})
                crd = await kube.request(
                    "GET",
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                    "workloads.kueue.x-k8s.io",
                )
                served = {v["name"]: v["served"] for v in crd["spec"]["versions"]}
                assert served == {"v1beta1": served_v1beta1, "v1beta2": True}
                storage = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
                assert storage == ["v1beta2"]


async def test_v020_api_dispatcher_never_needs_v1beta1(tmp_path: Path, crds_dir: Path) -> None:
    """V020-API: with v1beta1 unserved everywhere, the real dispatcher places submitted Jobs on
    the workers, and no request from any client ever went to a v1beta1 path."""
    topology = generic_topology(WORKERS)
    lines = [_job(f"job-{i}", "2") for i in range(4)]
    async with environment(tmp_path, topology, kueue={"version": "v0.20"}, crds=crds_dir) as env:
        await env.submit(lines)

        def all_placed(workloads: list[Obj]) -> bool:
            found = [_manager_workload(workloads, line.name) for line in lines]
            return all(
                w is not None
                and (w.get("status") or {}).get("clusterName")
                and _cond(w, "Admitted").get("status") == "True"
                for w in found
            )

        workloads = await env.wait_for_manager(all_placed, within=DEADLINE)
        for wl in workloads:
            assert wl["status"]["clusterName"] in WORKERS
        copies = await env.copies_by_workload()
        assert sorted(copies) == sorted(w["metadata"]["name"] for w in workloads)
        v1beta1 = [
            (cluster.name, entry.user_agent, entry.method, entry.path)
            for cluster in env.sandbox.clusters
            for entry in cluster.journal.entries()
            if "/kueue.x-k8s.io/v1beta1" in entry.path
        ]
        assert v1beta1 == []
        dispatcher_requests = [
            e for e in env.sandbox.manager.journal.entries() if "dispatcher" in e.user_agent
        ]
        assert dispatcher_requests, "the dispatcher's requests are in the manager's journal"


# --- V020-UNADMITTED -------------------------------------------------------------------------

# version -> (QuotaReserved reason of a Job too big for the manager's ClusterQueue, the
# Admitted condition's (status, reason) or None when absent).
UNADMITTED_CASES = {
    "v0.19": ("Pending", None),
    "v0.20": ("ExceedsMaxQuota", ("False", "NoReservation")),
}


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"kueue-{v}")
async def test_v020_unadmitted_pending_workload_carries_quota_reserved_false(
    tmp_path: Path, crds_dir: Path, version: str
) -> None:
    """V020-UNADMITTED: a Workload that cannot reserve quota gets ``QuotaReserved=False``
    (v0.20: reason ``ExceedsMaxQuota`` and ``Admitted=False``/``NoReservation``; v0.19: reason
    ``Pending``, no Admitted condition) and the dispatcher never nominates it, while a Job that
    fits is placed."""
    reason, admitted = UNADMITTED_CASES[version]
    topology = generic_topology(WORKERS)  # the manager's ClusterQueue has 16 CPUs
    async with environment(tmp_path, topology, kueue={"version": version}, crds=crds_dir) as env:
        await env.submit([_job("too-big", "100"), _job("fits", "1")])

        def settled(workloads: list[Obj]) -> bool:
            big, small = (
                _manager_workload(workloads, "too-big"),
                _manager_workload(workloads, "fits"),
            )
            return (
                big is not None
                and _cond(big, "QuotaReserved").get("status") == "False"
                and small is not None
                and bool((small.get("status") or {}).get("clusterName"))
            )

        workloads = await env.wait_for_manager(settled, within=DEADLINE)
        big = _manager_workload(workloads, "too-big")
        assert big is not None
        reserved = _cond(big, "QuotaReserved")
        assert reserved["reason"] == reason
        assert reserved["message"].startswith("couldn't assign flavors to pod set main")
        found = _cond(big, "Admitted")
        assert ((found["status"], found["reason"]) if found else None) == admitted
        assert not (big.get("status") or {}).get("nominatedClusterNames")
        assert not (big.get("status") or {}).get("admissionChecks")


def _workload(conditions: list[Obj]) -> Obj:
    return {
        "metadata": {"name": "wl", "namespace": "default"},
        "spec": {"active": True},
        "status": {
            "conditions": conditions,
            "admissionChecks": [{"name": "multikueue", "state": "Pending"}],
        },
    }


def _qr(status: str, reason: str) -> Obj:
    return {"type": "QuotaReserved", "status": status, "reason": reason, "message": "m"}


@pytest.mark.parametrize(
    ("conditions", "eligible"),
    [
        pytest.param([], False, id="no-condition-v0.19-fresh"),
        pytest.param([_qr("False", "Pending")], False, id="false-Pending-v0.19"),
        pytest.param([_qr("False", "WaitingForQuota")], False, id="false-WaitingForQuota-v0.20"),
        pytest.param(
            [_qr("False", "PendingEvaluation"), {"type": "Admitted", "status": "False"}],
            False,
            id="false-PendingEvaluation-admitted-false-v0.20",
        ),
        pytest.param([_qr("True", "QuotaReserved")], True, id="true-both-versions"),
        pytest.param(
            [
                _qr("True", "QuotaReserved"),
                {"type": "Admitted", "status": "False", "reason": "UnsatisfiedAdmissionChecks"},
            ],
            True,
            id="true-admitted-false-unsatisfied-checks-v0.20",
        ),
    ],
)
def test_v020_unadmitted_eligibility_reads_quota_reserved_status(
    conditions: list[Obj], eligible: bool
) -> None:
    """V020-UNADMITTED: ``QuotaReserved`` counts by its status, not its presence, and the
    ``Admitted=False`` conditions v0.20 writes do not block a nomination."""
    verdict = eligibility(_workload(conditions), {"multikueue"})
    assert verdict.eligible is eligible, verdict.reason


# --- V020-PREEMPTION -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "gates"),
    [
        pytest.param("v0.19", [{"name": "example.com/mine"}], id="kueue-v0.19-copies-spec"),
        pytest.param("v0.20", [{"name": MULTIKUEUE_PREEMPTION_GATE}], id="kueue-v0.20-mk-gate"),
    ],
)
def test_v020_preemption_clone_carries_the_multikueue_gate(version: str, gates: list[Obj]) -> None:
    """V020-PREEMPTION: v0.20 replaces the manager's own preemption gates with the MultiKueue
    gate on remote copies (``cloneForCreate``); v0.19 copies the spec as it is."""
    local = {
        "metadata": {"name": "wl", "namespace": "default", "labels": {}},
        "spec": {"queueName": "q", "preemptionGates": [{"name": "example.com/mine"}]},
    }
    config = KueueConfig(version=version)  # type: ignore[arg-type]
    clone = clone_for_create(local, "multikueue", preemption_gated=config.orchestrated_preemption)
    assert clone["spec"]["preemptionGates"] == gates
    assert local["spec"]["preemptionGates"] == [{"name": "example.com/mine"}]


class _RecordingClient:
    def __init__(self) -> None:
        self.patches: list[Obj] = []

    async def merge_patch(self, resource: Any, name: str, body: Obj, **options: Any) -> Obj:
        self.patches.append({"name": name, "body": body, **options})
        return body


class _Remote:
    def __init__(self) -> None:
        self.client = _RecordingClient()


def _copy(blocked_at: float | None = None, opened_at: float | None = None) -> Obj:
    def at(seconds: float) -> str:
        return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    status: Obj = {"conditions": [], "preemptionGates": []}
    if blocked_at is not None:
        status["conditions"].append(
            {
                "type": "BlockedOnPreemptionGates",
                "status": "True",
                "reason": "PreemptionGated",
                "lastTransitionTime": at(blocked_at),
            }
        )
    position = "Open" if opened_at is not None else "Closed"
    status["preemptionGates"].append(
        {
            "name": MULTIKUEUE_PREEMPTION_GATE,
            "position": position,
            "lastTransitionTime": at(opened_at if opened_at is not None else 0),
        }
    )
    return {
        "metadata": {"name": "wl", "namespace": "default", "resourceVersion": "7"},
        "spec": {"preemptionGates": [{"name": MULTIKUEUE_PREEMPTION_GATE}]},
        "status": status,
    }


# now (seconds after T0), copies per cluster -> (the cluster whose gate opens, requeue seconds)
GATE_CASES = {
    "nobody-blocked": (10.0, {"w1": _copy(), "w2": _copy()}, (None, None)),
    "one-blocked-opens": (10.0, {"w1": _copy(), "w2": _copy(blocked_at=5)}, ("w2", 300.0)),
    "oldest-blocked-first": (
        10.0,
        {"w1": _copy(blocked_at=8), "w2": _copy(blocked_at=3)},
        ("w2", 300.0),
    ),
    "tie-by-cluster-name": (
        10.0,
        {"w2": _copy(blocked_at=3), "w1": _copy(blocked_at=3)},
        ("w1", 300.0),
    ),
    "one-open-recently-waits": (
        110.0,
        {"w1": _copy(blocked_at=0, opened_at=10), "w2": _copy(blocked_at=5)},
        (None, 200.0),
    ),
    "one-open-five-minutes-ago-next": (
        310.0,
        {"w1": _copy(blocked_at=0, opened_at=10), "w2": _copy(blocked_at=5)},
        ("w2", 300.0),
    ),
}


@pytest.mark.parametrize("case", list(GATE_CASES), ids=str)
async def test_v020_preemption_one_gate_at_a_time(case: str) -> None:
    """V020-PREEMPTION: the manager opens the gate of the copy blocked longest, at most one per
    ``singleClusterPreemptionTimeout`` (5 minutes), and asks to look again when it is due."""
    from dispatcher_sandbox.kueue_emulator.multikueue.workload import WorkloadController

    now, copies, (opened, requeue) = GATE_CASES[case]
    clock = ManualClock(T0)
    clock.advance(now)
    remotes = {name: _Remote() for name in copies}
    group = _Group(
        local={"metadata": {"name": "wl", "namespace": "default"}},
        check={"name": "multikueue", "state": "Pending"},
        clusters=sorted(copies),
        remotes=remotes,  # type: ignore[arg-type]
        copies=dict(copies),
    )
    # The gate step reads only the configuration and the clock: no connection is needed.
    controller = WorkloadController.__new__(WorkloadController)
    Controller.__init__(controller, KueueConfig(version="v0.20"), clock)
    assert await controller._open_preemption_gate(group) == requeue
    patched = {name for name, r in remotes.items() if r.client.patches}
    assert patched == ({opened} if opened else set())
    if opened:
        (patch,) = remotes[opened].client.patches
        assert patch["subresource"] == "status"
        (gate,) = patch["body"]["status"]["preemptionGates"]
        assert gate["name"] == MULTIKUEUE_PREEMPTION_GATE
        assert gate["position"] == "Open"
        assert gate["lastTransitionTime"] == clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


async def _fill_workers(env: Environment) -> None:
    """A low-priority Workload taking all 8 CPUs of each worker, admitted there."""
    filler = WorkloadLine(
        kind="Workload", name="filler", requests={"cpu": "8"}, priority_class="low"
    )
    for worker in env.sandbox.workers:
        async with KubeClient(worker.kubeconfig, user_agent="v020-test") as kube:
            await submit_workloads(kube, [filler], env.topology)

    async def admitted() -> bool:
        for worker in env.sandbox.workers:
            found = [w for w in await env.worker_workloads(worker.name) if _is_filler(w)]
            if not found or _cond(found[0], "Admitted").get("status") != "True":
                return False
        return True

    await _eventually(admitted, "fillers admitted on every worker")


def _is_filler(wl: Obj) -> bool:
    return bool(wl["metadata"]["name"] == "filler")


async def test_v020_preemption_only_one_worker_preempts(tmp_path: Path, crds_dir: Path) -> None:
    """V020-PREEMPTION end to end: both workers are full of low-priority work; a high-priority
    Job nominated to both (the dispatcher's all-at-once pipeline) gets gated copies; the manager
    opens one gate, that worker preempts and admits, and the other worker's filler is never
    preempted (its gate cannot open for 5 minutes of Kueue's clock, which does not move)."""
    topology = generic_topology(WORKERS)
    async with environment(
        tmp_path,
        topology,
        kueue={"version": "v0.20"},
        settings={"algorithms": ["all-at-once"]},
        clock=ManualClock(T0),
        crds=crds_dir,
    ) as env:
        await _fill_workers(env)
        await env.submit([_job("urgent", "8", priority_class="high")])
        workloads = await env.wait_for_manager(
            lambda ws: bool(
                (w := _manager_workload(ws, "urgent")) is not None
                and _cond(w, "Admitted").get("status") == "True"
            ),
            within=DEADLINE,
        )
        urgent = _manager_workload(workloads, "urgent")
        assert urgent is not None
        winner = urgent["status"]["clusterName"]
        (other,) = [w for w in WORKERS if w != winner]
        name = urgent["metadata"]["name"]
        copy_ = next(w for w in await env.worker_workloads(winner) if w["metadata"]["name"] == name)
        assert copy_["spec"]["preemptionGates"] == [{"name": MULTIKUEUE_PREEMPTION_GATE}]
        (gate,) = copy_["status"]["preemptionGates"]
        assert gate["position"] == "Open"
        assert _cond(copy_, "BlockedOnPreemptionGates").get("status") == "False"
        fillers = {
            w: next(x for x in await env.worker_workloads(w) if _is_filler(x)) for w in WORKERS
        }
        assert _cond(fillers[winner], "Preempted").get("status") == "True"
        assert _cond(fillers[other], "Admitted").get("status") == "True"
        assert not _cond(fillers[other], "Evicted")
        assert not _cond(fillers[other], "Preempted")
