"""Helpers shared by the simulator tests: small traces and runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dispatcher.plugins import PluginHost
from dispatcher.sim.engine import Latencies, SimResult, parse_algorithms, simulate
from dispatcher.sim.report import algorithm_metrics
from dispatcher.sim.trace import FaultEvent, Trace, TraceWorkload
from dispatcher.sim.world import SimTopology, default_topology
from dispatcher.topology import WorkloadLine

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"


def workload(
    name: str,
    arrival: float,
    *,
    gpus: int = 1,
    gpu_type: str | None = None,
    preferred: Sequence[str] | None = None,
    run: float = 600.0,
    priority_class: str | None = None,
) -> TraceWorkload:
    """One trace workload of ``gpus`` GPUs (0: 4 CPUs) in ``default/user-queue``."""
    data: dict[str, Any] = {"name": name, "runSeconds": run}
    if gpus:
        data["requests"] = {
            "cpu": str(8 * gpus),
            "memory": f"{64 * gpus}Gi",
            "nvidia.com/gpu": gpus,
        }
    else:
        data["requests"] = {"cpu": "4", "memory": "16Gi"}
    if gpu_type:
        data["gpuType"] = gpu_type
    if preferred:
        data["preferredGpuTypes"] = list(preferred)
    if priority_class:
        data["priorityClass"] = priority_class
    return TraceWorkload(arrival, WorkloadLine.model_validate(data))


def trace(*items: TraceWorkload, faults: Sequence[FaultEvent] = ()) -> Trace:
    """A trace from workloads (sorted by arrival) and faults."""
    return Trace(tuple(sorted(items, key=lambda w: w.arrival)), tuple(faults), source="test")


def run(
    algorithms: str,
    the_trace: Trace,
    *,
    topology: SimTopology | None = None,
    latencies: Latencies | None = None,
    options: dict[str, Any] | None = None,
    host: PluginHost | None = None,
) -> dict[str, tuple[SimResult, dict[str, Any]]]:
    """Run the algorithms; name → (raw result, metrics)."""
    topo = topology or default_topology()
    choices = parse_algorithms(algorithms, options)
    results = simulate(topo, the_trace, choices, latencies=latencies, host=host)
    return {r.algorithm: (r, algorithm_metrics(r, topo)) for r in results}
