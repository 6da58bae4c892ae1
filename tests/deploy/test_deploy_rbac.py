"""The manifests' RBAC covers every request the dispatcher makes, and grants nothing more.

The required accesses are not listed by hand: they come from a **recorded run**. The real
manager process (leader election on, as deployed) dispatches a few Jobs on the sandbox; the fake
API servers' request journals record method, verb and path of every request, and the
dispatcher's requests are the ones with its user agent (``multikueue-dispatcher/<version>``).
Each is mapped to an RBAC access (group, resource[/subresource], verb, namespace) and checked
against the rules bound to the dispatcher's ServiceAccount in ``manifests/base`` (manager
cluster) and to Kueue's MultiKueue ServiceAccount in ``manifests/worker`` (worker clusters).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from dispatcher.app.manager import run_manager
from dispatcher.app.settings import load_settings
from dispatcher.topology import load_topology, parse_workload_lines
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.fake_apiserver.admission import AdmissionRequest, Match, ValidatingHook
from dispatcher_sandbox.harness.deploy import (
    FIXTURES,
    MANIFESTS,
    Access,
    access_of,
    allowed,
    build,
    grants_for,
)
from dispatcher_sandbox.kube_client import NAMESPACES

pytestmark = [pytest.mark.kubectl, pytest.mark.crds, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DISPATCHER_SA = ("multikueue-dispatcher-system", "multikueue-dispatcher")
WORKER_SA = ("kueue-system", "multikueue-sa")
DISPATCHER_AGENT = "multikueue-dispatcher/"
# Granted although a run does not use them: `get` on the kinds it lists and watches (one-off
# reads of the operator commands `check-config` and `explain` when run in the pod). Nothing else.
EXTRA_READS = {
    ("kueue.x-k8s.io", r, "get")
    for r in ("workloads", "admissionchecks", "multikueueconfigs", "multikueueclusters")
} | {
    ("kueue.x-k8s.io", "clusterqueues", "get"),
    ("kueue.x-k8s.io", "localqueues", "get"),
    ("", "secrets", "get"),
}
# Granted for the opt-in unplaceable_release policy (off in the recorded run: nothing is
# unplaceable there); tests/controller/test_unplaceable.py exercises it. Events patch: a repeat
# of an Event already recorded raises its count (the recorded run repeats none);
# tests/controller/test_events.py exercises it. Jobs status patch: the opt-in
# stuck_eviction_release policy (off in the recorded run: nothing is stuck there);
# tests/controller/test_stuck_eviction.py and tests/e2e/test_e2e_copy_lost.py exercise it.
EXTRA_WRITES = {
    ("kueue.x-k8s.io", "workloads", "patch"),
    ("", "events", "patch"),
    ("batch", "jobs/status", "patch"),
}
EXTRA_WORKER_READS = {
    ("kueue.x-k8s.io", r, "get")
    for r in ("clusterqueues", "localqueues", "resourceflavors", "workloads")
} | {("batch", "jobs", "get")}  # the stuck detector's one read of a stuck workload's Job

JOBS = [
    json.dumps(
        {
            "name": "rbac-h100",
            "namespace": "team-a",
            "count": 1,
            "requests": {"cpu": "1", "nvidia.com/gpu": 1},
            "gpuType": "NVIDIA-H100-80GB-HBM3",
        }
    ),
    json.dumps({"name": "rbac-cpu", "namespace": "team-a", "count": 1, "requests": {"cpu": "1"}}),
]


class Seen:
    """A validating hook (it sees every write as it happens) counting the dispatcher's Lease
    updates and Event creations, so the run can end once both were made."""

    def __init__(self) -> None:
        self.counts = {"leases": 0, "events": 0}
        self.changed = anyio.Event()

    def hook(self) -> ValidatingHook:
        return ValidatingHook(
            "test-rbac-seen",
            Match(resources=("leases", "events"), operations=("CREATE", "UPDATE")),
            self._saw,
        )

    def _saw(self, request: AdmissionRequest) -> None:
        if request.resource == "leases" and request.operation == "UPDATE":
            self.counts["leases"] += 1
        elif request.resource == "events":
            source = ((request.object or {}).get("source") or {}).get("component")
            self.counts["events"] += source == "multikueue-dispatcher"
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    async def wait(self, leases: int, events: int, within: float) -> None:
        with anyio.fail_after(within):
            while self.counts["leases"] < leases or self.counts["events"] < events:
                await self.changed.wait()


@pytest.fixture(scope="module")
async def recorded(
    tmp_path_factory: pytest.TempPathFactory, crds_dir: Path
) -> AsyncIterator[dict[str, set[Access]]]:
    """The dispatcher's accesses per cluster (``manager``, ``workers``) in a recorded run."""
    topology = load_topology(ROOT / "tests" / "e2e" / "topology.yaml")
    directory = tmp_path_factory.mktemp("rbac")
    async with environment(directory, topology, crds=crds_dir, run_dispatcher=False) as env:
        await env.manager_client.create(
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DISPATCHER_SA[0]}},
        )
        settings = load_settings(
            {
                "leader_election.namespace": DISPATCHER_SA[0],
                "leader_election.retry_period_seconds": 0.2,
                "leader_election.renew_deadline_seconds": 5,
                "health_address": "127.0.0.1:0",
                "metrics_address": "127.0.0.1:0",
                "log_format": "text",
            },
            MANIFESTS / "base" / "config.yaml",
        )
        manager = env.sandbox.manager
        seen = Seen()
        manager.admission.add_validating(seen.hook())
        async with anyio.create_task_group() as group:
            started = anyio.Event()
            group.start_soon(
                lambda: run_manager(
                    settings,
                    kubeconfig=env.sandbox.kubeconfig_path(manager),
                    handle_signals=False,
                    on_started=lambda _m: started.set(),
                )
            )
            await started.wait()
            await env.submit(parse_workload_lines(JOBS))
            await env.wait_for_manager(
                lambda ws: (
                    len(ws) == 2 and all((w.get("status") or {}).get("clusterName") for w in ws)
                ),
                within=60,
            )

            # The decisions' Events, then two more Lease renewals: a write answered after the
            # ones needed means those were answered (and journaled) already.
            await seen.wait(leases=1, events=len(JOBS), within=30)
            await seen.wait(leases=seen.counts["leases"] + 2, events=len(JOBS), within=30)
            group.cancel_scope.cancel()
        out: dict[str, set[Access]] = {"manager": set(), "workers": set()}
        for cluster in env.sandbox.clusters:
            key = "manager" if cluster is manager else "workers"
            for entry in cluster.journal.entries():
                if entry.user_agent.startswith(DISPATCHER_AGENT):
                    access = access_of(entry.verb, entry.path)
                    if access is not None:
                        out[key].add(access)
        yield out


async def test_recorded_run_made_the_expected_kinds_of_requests(
    recorded: dict[str, set[Access]],
) -> None:
    manager = {(a.group, a.resource, a.verb) for a in recorded["manager"]}
    assert {
        ("kueue.x-k8s.io", "workloads", "watch"),
        ("kueue.x-k8s.io", "workloads/status", "patch"),
        ("kueue.x-k8s.io", "localqueues", "watch"),
        ("", "secrets", "list"),
        ("", "events", "create"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
    } <= manager
    workers = {(a.group, a.resource, a.verb) for a in recorded["workers"]}
    assert ("kueue.x-k8s.io", "resourceflavors", "watch") in workers
    assert all(verb in ("get", "list", "watch") for _, _, verb in workers), "workers: read only"


async def test_manager_rbac_covers_every_recorded_request(recorded: dict[str, set[Access]]) -> None:
    grants, _ = grants_for(build(MANIFESTS / "base"), DISPATCHER_SA)
    missing = sorted(str(a) for a in recorded["manager"] if not allowed(a, grants))
    assert not missing, "manifests/base does not allow: " + "; ".join(missing)


async def test_worker_rbac_covers_every_recorded_request(recorded: dict[str, set[Access]]) -> None:
    grants, _ = grants_for(build(MANIFESTS / "worker"), WORKER_SA)
    missing = sorted(str(a) for a in recorded["workers"] if not allowed(a, grants))
    assert not missing, "manifests/worker does not allow: " + "; ".join(missing)


async def test_manager_rbac_is_least_privilege(recorded: dict[str, set[Access]]) -> None:
    objects = build(MANIFESTS / "base")
    grants, wildcards = grants_for(objects, DISPATCHER_SA)
    assert not wildcards
    used = {(a.group, a.resource, a.verb) for a in recorded["manager"]}
    unused = sorted(
        {(g.group, g.resource, g.verb) for g in grants} - used - EXTRA_READS - EXTRA_WRITES,
    )
    assert not unused, f"granted but never used: {unused}"
    for grant in grants:
        if grant.resource == "secrets":
            assert grant.namespace == "kueue-system", "Secrets only in Kueue's namespace"
        if grant.group == "coordination.k8s.io":
            assert grant.namespace == DISPATCHER_SA[0], "Leases only in our namespace"
    assert not [g for g in grants if g.verb in ("delete", "deletecollection", "escalate", "bind")]


async def test_worker_reader_role_is_read_only(recorded: dict[str, set[Access]]) -> None:
    objects = [
        o for o in build(MANIFESTS / "worker") if "multikueue-dispatcher" in o["metadata"]["name"]
    ]
    grants, wildcards = grants_for(objects, WORKER_SA)
    assert not wildcards
    assert {g.verb for g in grants} == {"get", "list", "watch"}
    used = {(a.group, a.resource, a.verb) for a in recorded["workers"]}
    assert not {(g.group, g.resource, g.verb) for g in grants} - used - EXTRA_WORKER_READS


async def test_broken_rbac_fixture_is_caught(recorded: dict[str, set[Access]]) -> None:
    grants, _ = grants_for(build(FIXTURES / "broken-rbac"), DISPATCHER_SA)
    missing = {str(a) for a in recorded["manager"] if not allowed(a, grants)}
    assert "watch workloads.kueue.x-k8s.io cluster-wide" in missing, missing
