"""Issue 14's new user's mix on real Kueue v0.19.2: ``sandbox --backend real --workloads
tests/sandbox/data/new-user-mix.jsonl``, run as a process as a user runs it.

Every Job of the 50 must end admitted (``status.clusterName`` set), or finished after being
admitted: no manager Workload may end ``Finished`` with its MultiKueue check ``Pending`` and no
``clusterName`` (the field-manager pitfall's signature, C43; or a nomination moved away from a
worker that had already admitted the copy, C28). The sandbox twin is
``tests/sandbox/test_new_user_mix.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.real, pytest.mark.mix]

MIX = Path(__file__).parents[1] / "sandbox" / "data" / "new-user-mix.jsonl"


def test_new_user_mix_every_job_admitted_with_cluster_name(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dispatcher",
            "sandbox",
            "--backend",
            "real",
            "--workloads",
            str(MIX),
            "--json",
            str(summary),
            "--timeout",
            "180",  # Kueue v0.19's worker clients: 5 requests/s per worker and kind (C20)
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=os.environ | {"TERM": "dumb"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(summary.read_text())
    without_cluster = [w["name"] for w in report["workloads"] if not w["cluster"]]
    assert without_cluster == [], report["summary"]
    assert report["summary"]["admitted"] == 50, report["summary"]
