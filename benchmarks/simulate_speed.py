"""Benchmark: simulator wall time for 100,000 workloads over 50 clusters (issue 6).

Not a test: it prints figures (and writes them as JSON with ``--json``). The big run uses
``scaled_topology(50)`` (the default workers' kinds repeated: A100, A100, H100, unlabelled L4, CPU)
and a generated trace whose arrival rate is scaled with the capacity, so each cluster sees about
the load of the default run. The **baseline**, measured in the same run, is the default run's
shape (5,000 workloads over the 5 default workers, same seed): the ratio of microseconds per
workload says how the simulator scales with 20 × the workloads and 10 × the clusters.

    .venv/bin/python benchmarks/simulate_speed.py [--workloads 100000] [--clusters 50]
        [--algorithms gpu-type-affinity+capacity-first,all-at-once,incremental] [--json F]

Each algorithm runs separately on the same trace; ``wall_s`` and ``cpu_s`` (process CPU time,
the steadier figure on a shared machine) exclude trace generation and topology building, which
are reported on their own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from typing import Any

from dispatcher.plugins import PluginHost
from dispatcher.sim.engine import Latencies, Simulation, parse_algorithms
from dispatcher.sim.trace import TraceParams, generate_trace
from dispatcher.sim.world import default_topology, scaled_topology

DEFAULT_ALGORITHMS = "gpu-type-affinity+capacity-first,all-at-once,incremental"


def measure(workloads: int, clusters: int, algorithms: str, seed: int) -> dict[str, Any]:
    """Generate, build and simulate; figures per algorithm."""
    started = time.perf_counter()
    topology = default_topology() if clusters == 5 else scaled_topology(clusters)
    built = time.perf_counter() - started
    base = TraceParams()
    params = dataclasses.replace(
        base,
        workloads=workloads,
        seed=seed,
        mean_interarrival_s=base.mean_interarrival_s * 5 / clusters,
        faults=(),
    )
    started = time.perf_counter()
    trace = generate_trace(params)
    generated = time.perf_counter() - started
    host = PluginHost.load()
    out: dict[str, Any] = {
        "workloads": workloads,
        "clusters": clusters,
        "topology_s": round(built, 3),
        "trace_s": round(generated, 3),
        "algorithms": {},
    }
    for choice in parse_algorithms(algorithms):
        sim = Simulation(topology, trace, choice, latencies=Latencies(), host=host)
        cpu = time.process_time()
        result = sim.run()
        cpu = time.process_time() - cpu
        admitted = sum(1 for o in result.outcomes if o.first_admitted is not None)
        out["algorithms"][choice.name] = {
            "wall_s": round(result.wall_s, 2),
            "cpu_s": round(cpu, 2),
            "us_per_workload": round(1e6 * result.wall_s / workloads, 1),
            "events": result.events,
            "events_per_s": round(result.events / result.wall_s) if result.wall_s else 0,
            "decisions": result.decisions,
            "copies": result.copies_created,
            "admitted": admitted,
        }
        print(
            f"  {choice.name:<34} {result.wall_s:9.2f} s wall {cpu:9.2f} s CPU  "
            f"{1e6 * result.wall_s / workloads:9.1f} µs/workload  "
            f"{result.events:>10} events  {admitted}/{workloads} admitted",
            flush=True,
        )
    return out


def main() -> None:
    """Run the baseline and the big run, print the figures and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--algorithms", default=DEFAULT_ALGORITHMS)
    parser.add_argument("--seed", type=int, default=TraceParams().seed)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print("baseline: 5000 workloads over 5 clusters")
    baseline = measure(5000, 5, args.algorithms, args.seed)
    print(f"run: {args.workloads} workloads over {args.clusters} clusters")
    big = measure(args.workloads, args.clusters, args.algorithms, args.seed)
    print(f"trace generation {big['trace_s']:.2f} s, topology {big['topology_s']:.2f} s")
    ratios = {}
    for name, figures in big["algorithms"].items():
        small = baseline["algorithms"][name]
        ratios[name] = {
            "wall_ratio": round(figures["wall_s"] / small["wall_s"], 2),
            "cpu_ratio": round(figures["cpu_s"] / small["cpu_s"], 2),
            "per_workload_ratio": round(figures["us_per_workload"] / small["us_per_workload"], 2),
        }
        print(
            f"  {name:<34} wall ×{ratios[name]['wall_ratio']:.1f}, CPU "
            f"×{ratios[name]['cpu_ratio']:.1f} for ×"
            f"{args.workloads / 5000:.0f} workloads and ×{args.clusters / 5:.0f} clusters; "
            f"per workload ×{ratios[name]['per_workload_ratio']:.2f}"
        )
    if args.json:
        document = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "baseline": baseline,
            "run": big,
            "ratios": ratios,
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
            handle.write("\n")


if __name__ == "__main__":
    main()
