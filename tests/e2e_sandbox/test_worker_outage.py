"""Issue 17 through the sandbox (fake API servers, the emulated Kueue, the real manager process):
worker-h100 is down; H100-only Jobs hold the manager's whole GPU quota (12 GPUs: 3 Jobs of 4),
so A100 Jobs that worker-a100 could run wait on the manager with "insufficient unused quota".

- Policy off: the holders are named (``Unplaceable`` Events on them, ``BlockedByUnplaceable`` on
  the starved, the ``unplaceable_quota`` gauge), nothing is deactivated.
- Policy on: after the patience the holders are released, the A100 Jobs are admitted on
  worker-a100; when worker-h100 is back the held Jobs are restored and admitted there.

Jobs, never bare Workloads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatcher.controller.outage import RELEASED_AT
from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.harness.scenario import (
    A100,
    H100,
    EventWatch,
    by_job,
    cluster_of,
    gpu_job,
    placed_all,
    scrape,
)

pytestmark = pytest.mark.slow

Obj = dict[str, Any]
HOLDERS = {f"h100-only-{i}" for i in range(3)}
STARVED = {f"a100-only-{i}" for i in range(2)}


def reserved(names: set[str]) -> Any:
    def check(workloads: list[Obj]) -> bool:
        found = by_job(workloads)
        return all(
            n in found
            and any(
                c.get("type") == "QuotaReserved" and c.get("status") == "True"
                for c in (found[n].get("status") or {}).get("conditions") or []
            )
            for n in names
        )

    return check


def starved(names: set[str]) -> Any:
    def check(workloads: list[Obj]) -> bool:
        found = by_job(workloads)
        return all(
            n in found
            and any(
                "insufficient unused quota" in str(c.get("message") or "")
                for c in (found[n].get("status") or {}).get("conditions") or []
            )
            for n in names
        )

    return check


@pytest.mark.parametrize("release", [False, True], ids=["policy-off", "policy-on"])
async def test_h100_worker_down_h100_jobs_hold_the_managers_gpu_quota(
    tmp_path: Path, crds_dir: Path, release: bool
) -> None:
    settings = {"unplaceable_release": release, "unplaceable_patience_seconds": 2.0}
    events = EventWatch()
    async with environment(tmp_path, default_topology(), crds=crds_dir, settings=settings) as env:
        assert env.dispatcher is not None
        events.install(env.sandbox.manager)
        h100 = env.sandbox.cluster("worker-h100")
        await h100.down()
        await env.submit(
            [gpu_job(name, gpus=4, required=H100, runSeconds=1) for name in sorted(HOLDERS)]
        )
        await env.wait_for_manager(reserved(HOLDERS), within=30)
        await env.submit(
            [gpu_job(name, gpus=4, required=A100, runSeconds=1) for name in sorted(STARVED)]
        )
        unplaceable = await events.wait_for("Unplaceable", len(HOLDERS), within=60)
        assert all("worker-h100" in str(e.get("message")) for e in unplaceable)

        if not release:
            await env.wait_for_manager(starved(STARVED), within=30)
            blocked = await events.wait_for("BlockedByUnplaceable", len(STARVED), within=30)
            assert {e["involvedObject"]["name"] for e in blocked} == {
                w["metadata"]["name"]
                for n, w in by_job(await env.workloads()).items()
                if n in STARVED
            }
            holders = {
                w["metadata"]["name"]
                for n, w in by_job(await env.workloads()).items()
                if n in HOLDERS
            }
            assert all(any(h in str(e.get("message")) for h in holders) for e in blocked), blocked
            samples = await scrape(env.dispatcher)
            gpus = sum(
                value
                for labels, value in samples["multikueue_dispatcher_unplaceable_quota"]
                if labels["resource"] == "nvidia.com/gpu"
            )
            assert gpus == 12.0
            assert [v for _, v in samples["multikueue_dispatcher_unplaceable_workloads"]] == [3.0]
            assert events.of("QuotaReleased") == []
            final = by_job(await env.workloads())
            assert all(cluster_of(final[n]) is None for n in STARVED)
            return

        # Policy on: released after the patience, the A100 Jobs get the quota and run.
        await events.wait_for("QuotaReleased", len(HOLDERS), within=60)
        final = by_job(await env.wait_for_manager(placed_all(STARVED), within=60))
        assert {cluster_of(final[n]) for n in STARVED} == {"worker-a100"}
        assert all(
            (final[n]["metadata"].get("annotations") or {}).get(RELEASED_AT) for n in HOLDERS
        )

        # worker-h100 back: restored (reactivated) and admitted there, one at a time (4 GPUs).
        await h100.up()
        await events.wait_for("QuotaRestored", len(HOLDERS), within=120)
        final = by_job(await env.wait_for_manager(placed_all(HOLDERS), within=120))
        assert {cluster_of(final[n]) for n in HOLDERS} == {"worker-h100"}
        samples = await scrape(env.dispatcher)
        actions = {
            labels["action"]: value
            for labels, value in samples["multikueue_dispatcher_unplaceable_actions_total"]
        }
        assert actions == {"release": 3.0, "restore": 3.0}
