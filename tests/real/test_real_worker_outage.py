"""Issue 17 on real Kueue v0.19.2: the H100 worker's API server is killed (SIGKILL) shortly after
a mix is submitted, while H100-only Jobs hold the manager's whole GPU quota.

The mix (default topology: the manager has 12 GPUs of quota, worker-h100 4 H100s, worker-a100
8 A100s): 6 H100-only Jobs of 2 GPUs submitted first (they take the manager's 12 GPUs; worker-h100
admits 2, the 4 others queue there as copies), then 6 A100-only Jobs of 2 GPUs, 4 Jobs of 1 GPU
of any type and 6 CPU-only Jobs. worker-h100 is killed 10 s after the submission. Cases:

- ``policy-off``: our dispatcher, ``unplaceable_release`` off: the GPU Jobs another worker could
  run starve; the holders are named (``Unplaceable``, ``BlockedByUnplaceable`` Events).
- ``policy-on``: the policy on (patience 10 s): every Job another reachable worker can run is
  admitted (0 starved); worker-h100 back: the released Jobs are restored and admitted there.
- ``all-at-once``: Kueue's built-in AllAtOnce dispatcher under the same outage.

Each case prints one ``OUTAGE [case]`` line (admitted, starved, time to the last admission): the
figures of docs/outage.md (docs/figures/outage.toml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatcher.topology import WorkloadLine, default_topology
from dispatcher_sandbox.harness.scenario import A100, H100
from dispatcher_sandbox.real_kueue.mix import Dispatcher, run_outage

pytestmark = [pytest.mark.slow, pytest.mark.real]

WORKER = "worker-h100"


def line(name: str, namespace: str, requests: dict[str, Any], run: int, **extra: Any) -> Any:
    data = {"name": name, "namespace": namespace, "count": 1, "requests": requests}
    return WorkloadLine.model_validate(data | {"runSeconds": run} | extra)


def outage_mix() -> tuple[list[Any], set[str]]:
    """The mix and the keys of its H100-only Jobs."""
    gpu2 = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 2}
    lines = [line(f"h100-{i}", "team-a", gpu2, 300, gpuType=H100) for i in range(6)]
    lines += [line(f"a100-{i}", "team-a", gpu2, 30, gpuType=A100) for i in range(6)]
    lines += [
        line(f"gpu-{i}", "team-b", {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1}, 30)
        for i in range(4)
    ]
    lines += [line(f"cpu-{i}", "team-b", {"cpu": "2", "memory": "4Gi"}, 20) for i in range(6)]
    return lines, {f"team-a/h100-{i}" for i in range(6)}


CASES = [
    pytest.param("external", False, id="policy-off"),
    pytest.param("external", True, id="policy-on"),
    pytest.param("all-at-once", False, id="all-at-once"),
]


@pytest.mark.parametrize(("dispatcher", "release"), CASES)
async def test_worker_killed_mid_mix(
    tmp_path: Path,
    dispatcher: Dispatcher,
    release: bool,
    record_property: pytest.RecordProperty,
) -> None:
    lines, only_h100 = outage_mix()
    outcome = await run_outage(
        tmp_path,
        default_topology(),
        lines,
        only_h100,
        worker=WORKER,
        kill_after=10.0,
        dispatcher=dispatcher,
        settings={"unplaceable_release": release, "unplaceable_patience_seconds": 10.0},
        # With the policy on, a deadline (every Job another worker can run is admitted in
        # about 40 s); off, and under AllAtOnce, the window in which nothing more is admitted:
        # 60 s after the kill, while the last admission comes 10-13 s after the submission, and
        # no Kueue timer would release the holders (workerLostTimeout applies only to workloads
        # admitted on the lost worker).
        outage_seconds=120.0 if release else 60.0,
        back=release,
    )
    case = "policy-on" if release else ("policy-off" if dispatcher == "external" else dispatcher)
    record_property(f"outage_{case}", outcome.line())
    print(f"OUTAGE [{case}] {outcome.line()}")
    for key, message in outcome.pending_messages().items():
        print(f"  starved {key}: {message}")
    if release:
        assert outcome.starved == [], outcome.line()
        assert outcome.events.get("QuotaReleased", 0) >= 1, outcome.line()
        assert outcome.held_admitted_after_back == outcome.held, outcome.line()
        assert outcome.events.get("QuotaRestored_after_back", 0) >= 1, outcome.line()
    elif dispatcher == "external":
        assert outcome.starved, "nothing starved: the scenario does not show the problem"
        assert outcome.events.get("Unplaceable", 0) >= 1, outcome.line()
        assert outcome.events.get("BlockedByUnplaceable", 0) >= 1, outcome.line()
        assert outcome.events.get("QuotaReleased", 0) == 0, outcome.line()
        # The metrics name the holders too: the count per ClusterQueue, the GPUs they hold.
        assert outcome.unplaceable.get("workloads/cluster-queue", 0) >= 1, outcome.line()
        gpus = [v for k, v in outcome.unplaceable.items() if k.endswith("/nvidia.com/gpu")]
        assert gpus, outcome.line()
        assert max(gpus) >= 2, outcome.line()
