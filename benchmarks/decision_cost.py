"""Micro-benchmark: cost of one dispatch decision per workload, at 20 and 100 clusters.

Not a test: it prints figures. Every figure is also given as a ratio to all-at-once (the
cheapest possible algorithm: no fit computation) measured in the same run on the same
snapshots, so results compare across machines.

Two modes: *steady* (every decision sees the same snapshots, as between cluster changes) and
*burst* (each nomination is recorded as in-flight on a new snapshot before the next decision, as
the controller does while a burst arrives; the baseline pays the same snapshot updates).

``--paced MS`` adds a third table: the same steady decisions, each call's CPU time, back to
back and then each after MS milliseconds of the process sleeping (as the controller idles between
events at 25 nominations/s: 40 ms), alternated round by round. It shows what an idle gap costs
the same code on this machine (cold caches and branch predictors, a CPU woken from idle), the
fixed per-wake-up cost that separates the light-load figures of ``dispatch_latency.py`` from
its burst figures.

Each cluster has a two-flavor ClusterQueue (A100 and H100, CPU + memory + GPU), a reservation,
``--in-flight`` in-flight workloads and a few pending ones; requests ask for 1–4 GPUs, some with
a required or preferred GPU type. Plugins are not loaded (built-ins only).

    .venv/bin/python benchmarks/decision_cost.py [--clusters 20 100] [--workloads 200] [--json F]
    .venv/bin/python benchmarks/decision_cost.py --clusters 20 --paced 40
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

from dispatcher.algorithms import ClusterSnapshot, DispatchRequest, Pipeline, queued_workload
from dispatcher.plugins import PluginHost
from dispatcher.testing import FlavorSpec, make_cluster, make_host, make_request, with_in_flight

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
PIPELINES: dict[str, tuple[str, ...]] = {
    "all-at-once": ("all-at-once",),
    "incremental": ("incremental",),
    "capacity-first": ("capacity-first",),
    "default (gpu-type-affinity + capacity-first)": ("gpu-type-affinity", "capacity-first"),
}
BASELINE = "all-at-once"


def fleet(count: int, in_flight: int) -> list[ClusterSnapshot]:
    """``count`` clusters with mixed load."""
    filler = [make_request(f"other-{i}", cpu=4, gpus=1 + i % 2) for i in range(in_flight)]
    clusters = []
    for i in range(count):
        label = "nvidia.com/gpu.product"
        flavors = [
            FlavorSpec(
                "a100",
                {"cpu": 256, "memory": "2Ti", "nvidia.com/gpu": 16},
                used={"cpu": 64 + i % 128, "nvidia.com/gpu": i % 16},
                node_labels={label: A100},
            ),
            FlavorSpec(
                "h100",
                {"cpu": 128, "memory": "1Ti", "nvidia.com/gpu": 8 * (i % 3)},
                used={"nvidia.com/gpu": (i * 3) % 8 if i % 3 else 0},
                node_labels={label: H100},
            ),
        ]
        clusters.append(
            make_cluster(
                f"worker-{i:03d}",
                flavors=flavors,
                order=i,
                in_flight=[queued_workload(r) for r in filler],
                pending=[queued_workload(r) for r in filler[:3]],
            )
        )
    return clusters


def requests(count: int) -> list[DispatchRequest]:
    """A mix of GPU requests."""
    out = []
    for i in range(count):
        kind = i % 4
        out.append(
            make_request(
                f"wl-{i}",
                cpu=8,
                memory="64Gi",
                gpus=1 + i % 4,
                gpu_type=H100 if kind == 1 else None,
                preferred=[H100, A100] if kind == 2 else (),
            )
        )
    return out


def one_round(
    host: PluginHost,
    pipeline: Pipeline,
    snapshots: Sequence[ClusterSnapshot],
    reqs: Sequence[DispatchRequest],
    burst: bool,
) -> float:
    """Mean seconds per decision over ``reqs``, on fresh copies of ``snapshots``.

    ``burst``: after each decision the nominated clusters get a new snapshot with the workload
    in flight (what the controller does), so per-snapshot caches only help the other clusters.
    Otherwise every decision sees the same snapshots (a steady state between changes).
    """
    current: Sequence[ClusterSnapshot] = [dataclasses.replace(s) for s in snapshots]
    start = time.perf_counter()
    for request in reqs:
        decision = host.decide(pipeline, request, current)
        if burst:
            current = with_in_flight(current, request, decision.nominate)
    return (time.perf_counter() - start) / len(reqs)


def timed_calls(
    host: PluginHost,
    pipeline: Pipeline,
    snapshots: Sequence[ClusterSnapshot],
    reqs: Sequence[DispatchRequest],
    gap: float,
) -> float:
    """Mean CPU seconds (the thread's, as the dispatcher's figures count its process's CPU) per
    steady decision, each call timed alone; with ``gap`` > 0 the process sleeps that long
    before each call (outside the timed part)."""
    current: Sequence[ClusterSnapshot] = [dataclasses.replace(s) for s in snapshots]
    total = 0.0
    for request in reqs:
        if gap:
            time.sleep(gap)
        start = time.thread_time()
        host.decide(pipeline, request, current)
        total += time.thread_time() - start
    return total / len(reqs)


def interleaved_medians(
    pipelines: Mapping[str, Pipeline],
    rounds: int,
    samplers: Mapping[str, Callable[[Pipeline], float]],
    warm_up: Callable[[Pipeline], object],
) -> dict[str, dict[str, float]]:
    """Median of each sampler's figure per pipeline, sampler → label → seconds. Rounds are
    interleaved across pipelines and samplers so that a change in machine load affects all of
    them alike; every pipeline is warmed up first."""
    for pipeline in pipelines.values():
        warm_up(pipeline)
    samples: dict[str, dict[str, list[float]]] = {
        name: {label: [] for label in pipelines} for name in samplers
    }
    for _ in range(rounds):
        for label, pipeline in pipelines.items():
            for name, sample in samplers.items():
                samples[name][label].append(sample(pipeline))
    return {
        name: {label: statistics.median(values) for label, values in by_label.items()}
        for name, by_label in samples.items()
    }


def measure_paced(
    snapshots: Sequence[ClusterSnapshot],
    reqs: Sequence[DispatchRequest],
    rounds: int,
    gap: float,
    labels: Sequence[str],
) -> dict[str, tuple[float, float]]:
    """Median seconds per decision back to back and after ``gap`` of sleep, per pipeline;
    the two ways alternate round by round."""
    host = make_host()
    medians = interleaved_medians(
        {label: host.pipeline(PIPELINES[label]) for label in labels},
        rounds,
        {
            "tight": lambda p: timed_calls(host, p, snapshots, reqs, 0.0),
            "paced": lambda p: timed_calls(host, p, snapshots, reqs, gap),
        },
        lambda p: timed_calls(host, p, snapshots, reqs[:10], 0.0),
    )
    return {label: (medians["tight"][label], medians["paced"][label]) for label in labels}


def measure_all(
    snapshots: Sequence[ClusterSnapshot], reqs: Sequence[DispatchRequest], rounds: int, burst: bool
) -> dict[str, float]:
    """Median seconds per decision for every pipeline, interleaved (:func:`interleaved_medians`)."""
    host = make_host()
    return interleaved_medians(
        {label: host.pipeline(names) for label, names in PIPELINES.items()},
        rounds,
        {"mean": lambda p: one_round(host, p, snapshots, reqs, burst)},
        lambda p: one_round(host, p, snapshots, reqs[:10], burst),
    )["mean"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clusters", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--in-flight", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument(
        "--paced",
        type=float,
        metavar="MS",
        help="also time steady decisions each after MS ms of idle sleep, against back to back",
    )
    args = parser.parse_args(argv)

    reqs = requests(args.workloads)
    results: list[dict[str, object]] = []
    print(
        f"decision cost per workload ({args.workloads} workloads, {args.in_flight} in-flight "
        f"per cluster at start, median of {args.rounds} rounds)"
    )
    header = ("mode", "clusters", "algorithm", "µs/decision", "decisions/s", "× baseline")
    print(
        f"{header[0]:<7} {header[1]:>8}  {header[2]:<46} {header[3]:>12} {header[4]:>12} "
        f"{header[5]:>11}"
    )
    for mode in ("steady", "burst"):
        burst = mode == "burst"
        for count in args.clusters:
            snapshots = fleet(count, args.in_flight)
            figures = measure_all(snapshots, reqs, args.rounds, burst)
            baseline = figures[BASELINE]
            for label, seconds in figures.items():
                ratio = seconds / baseline
                micros, rate = seconds * 1e6, 1 / seconds
                print(
                    f"{mode:<7} {count:>8}  {label:<46} {micros:>12.1f} {rate:>12.0f} "
                    f"{ratio:>10.1f}×"
                )
                results.append(
                    {
                        "mode": mode,
                        "clusters": count,
                        "algorithm": label,
                        "seconds_per_decision": seconds,
                        "ratio_to_baseline": ratio,
                    }
                )
    paced_results: list[dict[str, object]] = []
    if args.paced:
        gap = args.paced / 1000
        labels = (BASELINE, "default (gpu-type-affinity + capacity-first)")
        print(
            f"\nsteady decisions, each call's CPU time, back to back and each after "
            f"{args.paced:g} ms of idle sleep (median of {args.rounds} alternated rounds)"
        )
        print(
            f"{'clusters':>8}  {'algorithm':<46} {'CPU µs back to back':>20} "
            f"{'CPU µs after idle':>18} {'idle ×':>7}"
        )
        for count in args.clusters:
            snapshots = fleet(count, args.in_flight)
            for label, (tight, paced) in measure_paced(
                snapshots, reqs, args.rounds, gap, labels
            ).items():
                print(
                    f"{count:>8}  {label:<46} {tight * 1e6:>20.1f} {paced * 1e6:>18.1f} "
                    f"{paced / tight:>6.2f}×"
                )
                paced_results.append(
                    {
                        "clusters": count,
                        "algorithm": label,
                        "gap_ms": args.paced,
                        "seconds_back_to_back": tight,
                        "seconds_after_idle": paced,
                        "ratio": paced / tight,
                    }
                )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"baseline": BASELINE, "results": results, "paced": paced_results}, fh, indent=2
            )


if __name__ == "__main__":
    main()
