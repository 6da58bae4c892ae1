"""Issue 14's new user's mix on the sandbox: the 50 short Jobs of
``tests/sandbox/data/new-user-mix.jsonl`` (priorities, required and preferred GPU types, CPU
only) through the demo, as ``make sandbox ARGS="--workloads FILE"`` runs them.

Every Job must end admitted (``status.clusterName`` set), or finished after being admitted: no
manager Workload may end ``Finished`` with its MultiKueue check ``Pending`` and no
``clusterName`` (C28, C43). The real-Kueue twin is ``tests/real/test_real_new_user_mix.py``.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dispatcher.topology import default_topology, load_workloads
from dispatcher_sandbox.demo import DemoOptions, TimedLine, run_demo

pytestmark = [pytest.mark.mix]  # make new-user-mix; not in the default run (about 90 s)

MIX = Path(__file__).parent / "data" / "new-user-mix.jsonl"


@pytest.mark.slow
async def test_new_user_mix_every_job_admitted_with_cluster_name(
    tmp_path: Path, crds_dir: Path
) -> None:
    topology = default_topology()
    lines = load_workloads(MIX, topology)
    assert len(lines) == 50
    out = io.StringIO()
    options = DemoOptions(
        topology=topology,
        workloads=[TimedLine(0.0, line) for line in lines],
        directory=tmp_path / "clusters",
        live=False,
        crds=crds_dir,
        # Kueue v0.19's worker clients make 5 requests/s per worker and kind (C20): 50 Jobs
        # take longer than the demo's default 40 s to be admitted, on real Kueue as here.
        timeout=180.0,
    )
    report = await run_demo(options, out)
    never_admitted = [r.key for r in report.results if r.cluster is None]
    finished_unadmitted = [
        r.key for r in report.results if r.finished_at is not None and r.admitted_at is None
    ]
    assert (never_admitted, finished_unadmitted) == ([], []), out.getvalue()[-4000:]
    assert report.ok, out.getvalue()[-4000:]
