"""The field-manager pitfall and its remedies (C42–C46, upstream #6185), with the real CRDs.

The dispatcher owns ``status.nominatedClusterNames`` under its own field manager. Kueue's
admission write (server-side apply as ``kueue-admission`` with its full body, C42) leaves the
field out, which does not remove a field another manager owns, so the CEL rule "clusterName and
nominatedClusterNames are mutually exclusive" (C17) rejects it (C43) unless the merge-patch gate
(C45) or the ``clear-nominated-cluster-names`` policy (C46) is on.
"""

from __future__ import annotations

from pathlib import Path

from dispatcher_sandbox.harness.multikueue import (
    DISPATCHER,
    Env,
    check_state,
    eventually,
    start_env,
)
from dispatcher_sandbox.kueue_emulator.multikueue import ADMITTED_TOTAL

MUTUALLY_EXCLUSIVE = "clusterName and nominatedClusterNames are mutually exclusive"


async def _admit_externally_nominated(env: Env) -> None:
    await env.create_workload("wl")
    await env.reserve_quota("wl")
    await env.nominate("wl", ["worker1"], field_manager=DISPATCHER)
    await env.wait_copies("wl", ["worker1"])
    await env.worker_admit("worker1", "wl")


def _nomination_owners(obj: dict) -> set[str]:
    return {
        entry["manager"]
        for entry in obj["metadata"].get("managedFields") or []
        if "f:nominatedClusterNames" in (entry.get("fieldsV1") or {}).get("f:status", {})
    }


async def test_c43_pitfall_without_remedy_admission_stuck(crds_dir: Path) -> None:
    async with start_env() as env:
        env.manager.rejections_expected = True  # C43 is provoked on purpose here
        await _admit_externally_nominated(env)
        workloads = env.controllers.workloads

        async def refused() -> bool:
            return any(
                e.code == 422 and MUTUALLY_EXCLUSIVE in e.message
                for e in workloads.status_write_errors
            )

        await eventually(refused, what="the admission write to be refused with 422")
        local = await env.get("wl")
        assert local is not None
        status = local["status"]
        assert "clusterName" not in status
        assert status["nominatedClusterNames"] == ["worker1"]
        assert _nomination_owners(local) == {DISPATCHER}
        assert (check_state(local) or {})["state"] == "Pending"
        assert env.controllers.counters.get(ADMITTED_TOTAL) == 0
        rejected = [
            e
            for e in env.manager.journal.entries()
            if e.status == 422 and e.field_manager == "kueue-admission"
        ]
        assert rejected
        assert all(e.path.endswith("/workloads/wl/status") for e in rejected)


async def test_c45_merge_patch_gate_unsticks(crds_dir: Path) -> None:
    async with start_env(merge_patch_gate=True) as env:
        await _admit_externally_nominated(env)
        local = await env.wait_workload(
            "wl", lambda o: (o.get("status") or {}).get("clusterName") == "worker1"
        )
        assert not local["status"].get("nominatedClusterNames")
        assert (check_state(local) or {})["state"] == "Ready"
        assert not env.controllers.workloads.status_write_errors
        # Under the gate Kueue merge-patches what it changes, without a field manager of its
        # own: the API server names it after Kueue's user agent, "kueue".
        writes = [
            e
            for e in env.manager.journal.entries()
            if e.field_manager == "kueue" and e.path.endswith("/workloads/wl/status")
        ]
        assert writes
        assert all(e.content_type.startswith("application/merge-patch+json") for e in writes)


async def test_c43_a_nomination_merge_patched_by_another_manager_is_refused_too(
    crds_dir: Path,
) -> None:
    """C43 (issue 14 item 3): the pitfall does not depend on how the other manager wrote the
    nomination. A JSON merge patch makes it an ``Update`` manager of ``nominatedClusterNames``,
    which Kueue's server-side apply cannot drop either: the admission write is refused with
    422, "clusterName and nominatedClusterNames are mutually exclusive" (seen on real Kueue
    v0.19.2: 0 of 10 admitted)."""
    async with start_env() as env:
        env.manager.rejections_expected = True  # C43 is provoked on purpose here
        await env.create_workload("wl")
        await env.reserve_quota("wl")
        await env.objects().patch_namespaced_custom_object_status(
            "kueue.x-k8s.io",
            "v1beta2",
            "team-a",
            "workloads",
            "wl",
            {"status": {"nominatedClusterNames": ["worker1"]}},
            field_manager=DISPATCHER,
            _content_type="application/merge-patch+json",
        )
        await env.wait_copies("wl", ["worker1"])
        await env.worker_admit("worker1", "wl")
        workloads = env.controllers.workloads

        async def refused() -> bool:
            return any(
                e.code == 422 and MUTUALLY_EXCLUSIVE in e.message
                for e in workloads.status_write_errors
            )

        await eventually(refused, what="the admission write to be refused with 422")
        local = await env.get("wl")
        assert local is not None
        assert "clusterName" not in local["status"]
        assert local["status"]["nominatedClusterNames"] == ["worker1"]
        assert _nomination_owners(local) == {DISPATCHER}
        assert env.controllers.counters.get(ADMITTED_TOTAL) == 0


async def test_c46_policy_hook_unsticks(crds_dir: Path) -> None:
    async with start_env(policy_hook=True) as env:
        await _admit_externally_nominated(env)
        local = await env.wait_workload(
            "wl", lambda o: (o.get("status") or {}).get("clusterName") == "worker1"
        )
        assert not local["status"].get("nominatedClusterNames")
        assert (check_state(local) or {})["state"] == "Ready"
        assert not env.controllers.workloads.status_write_errors
        writes = [
            e
            for e in env.manager.journal.entries()
            if e.field_manager == "kueue-admission" and e.path.endswith("/workloads/wl/status")
        ]
        assert writes[-1].content_type.startswith("application/apply-patch+yaml")
