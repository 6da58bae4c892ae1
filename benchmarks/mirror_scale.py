"""Mirror scale: memory and per-event index time with 100,000 mirrored workloads over 20 clusters.

Not a test: it prints figures (and writes them as JSON with ``--json FILE``).

Each of ``--clusters`` workers (default 20) gets ``--workloads / clusters`` Workload copies
(default 100,000 in all) shaped as Kueue writes them on a worker: metadata with labels, an owner
and the two ``managedFields`` entries (``kueue`` and ``kueue-admission``), a pod set with its
template, and a status with conditions and ``admission``; half are admitted, 30 % pending, 20 %
finished. Each object is encoded to JSON and decoded again, as a LIST answer is, then fed to the
dispatcher's own structures through the production path: a :class:`~dispatcher.clusters.mirror.
Mirror` per worker with the registry's ``WORKER_RESOURCES`` (its
:class:`~dispatcher.k8s.watching.ObjectCache` s applying the slim transform of
:mod:`dispatcher.clusters.slim` to ``LISTED`` events, replacing their contents at the ``Listed``
marker), a :class:`~dispatcher.controller.snapshots.WorkerIndex` per worker attached to its
mirror (built once, then fed by every applied event), and
:func:`dispatcher.controller.snapshots.build_snapshot` for one request over all the clusters,
then one decision of the default pipeline.

Then ``--events`` (default 1,000) watch events of mixed kinds (a pending copy reserving quota,
a reserved one admitted, an admitted one finishing, one evicted back to pending, a new copy, a
deleted one, a ClusterQueue status update) are applied to the first worker's caches, one at a
time, each decoded from JSON beforehand: the time of each ``ObjectCache.apply`` (transform,
cache, index update) and the objects the index parsed for it.

Baselines, measured in the same run on the same objects:

- **memory**: the decoded whole objects alone, held in a list (what any Kubernetes client
  holding those objects pays; measured with ``tracemalloc``), against the slim mirrors and the
  indexes. RSS is taken before any baseline is built (the objects' JSON is made per object, not
  kept);
- **time**: decoding the objects from JSON, a bare pass over every cached object reading one
  field, and a full build of one worker's index (what every worker event cost before the index
  was incremental), against the per-event update.

    .venv/bin/python benchmarks/mirror_scale.py [--workloads 100000] [--clusters 20] \
        [--events 1000] [--json F]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
GPU_LABEL = "nvidia.com/gpu.product"
A100 = "NVIDIA-A100-SXM4-80GB"


def _stamp(i: int) -> str:
    return f"2026-11-30T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z"


def workload(cluster: int, i: int) -> Obj:
    """One worker copy of a Workload, shaped as Kueue writes it (``i % 10`` picks the state)."""
    name = f"job-train-{cluster:02d}-{i:06d}-{i * 7919 % 100000:05x}"
    state = i % 10
    gpus = 1 + i % 4
    requests = {"cpu": f"{4 * gpus}", "memory": f"{16 * gpus}Gi", "nvidia.com/gpu": str(gpus)}
    obj: Obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": f"team-{i % 3}",
            "uid": f"{cluster:08x}-{i:04x}-4000-8000-{i * 2654435761 % 2**48:012x}",
            "resourceVersion": str(1000 + i),
            "generation": 1,
            "creationTimestamp": _stamp(i),
            "labels": {
                "kueue.x-k8s.io/multikueue-origin": "multikueue",
                "kueue.x-k8s.io/queue-name": "user-queue",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"train-{i:06d}",
                    "uid": f"{i:08x}-0000-4000-8000-000000000000",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kueue",
                    "operation": "Update",
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "time": _stamp(i),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:labels": {
                                ".": {},
                                "f:kueue.x-k8s.io/multikueue-origin": {},
                                "f:kueue.x-k8s.io/queue-name": {},
                            },
                            "f:ownerReferences": {".": {}},
                        },
                        "f:spec": {"f:podSets": {}, "f:priority": {}, "f:queueName": {}},
                    },
                },
                {
                    "manager": "kueue-admission",
                    "operation": "Apply",
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "time": _stamp(i + 5),
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {
                        "f:status": {
                            "f:admission": {"f:clusterQueue": {}, "f:podSetAssignments": {}},
                            "f:conditions": {'k:{"type":"QuotaReserved"}': {".": {}}},
                        }
                    },
                },
            ],
        },
        "spec": {
            "queueName": "user-queue",
            "priority": 100 * (i % 3),
            "active": True,
            "podSets": [
                {
                    "name": "main",
                    "count": 1 + i % 2,
                    "template": {
                        "metadata": {},
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {GPU_LABEL: A100},
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "registry.example.com/train:1.2.3",
                                    "args": ["--epochs", "10"],
                                    "resources": {
                                        "requests": requests,
                                        "limits": {"nvidia.com/gpu": str(gpus)},
                                    },
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }
    if state < 7:  # reserved (and mostly admitted) or finished
        count = 1 + i % 2
        conditions = [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "Quota reserved in ClusterQueue cluster-queue",
                "lastTransitionTime": _stamp(i + 5),
                "observedGeneration": 1,
            },
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "The workload is admitted",
                "lastTransitionTime": _stamp(i + 5),
                "observedGeneration": 1,
            },
        ]
        if state < 2:
            conditions.append(
                {
                    "type": "Finished",
                    "status": "True",
                    "reason": "Succeeded",
                    "message": "Job finished successfully",
                    "lastTransitionTime": _stamp(i + 60),
                    "observedGeneration": 1,
                }
            )
        obj["status"] = {
            "conditions": conditions,
            "admission": {
                "clusterQueue": "cluster-queue",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": count,
                        "flavors": dict.fromkeys(requests, "a100"),
                        "resourceUsage": {
                            "cpu": str(4 * gpus * count),
                            "memory": f"{16 * gpus * count}Gi",
                            "nvidia.com/gpu": str(gpus * count),
                        },
                    }
                ],
            },
        }
    else:
        obj["status"] = {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "couldn't assign flavors to pod set main: insufficient unused "
                    "quota for nvidia.com/gpu in flavor a100",
                    "lastTransitionTime": _stamp(i + 1),
                    "observedGeneration": 1,
                }
            ]
        }
    return obj


def queue_objects() -> dict[str, list[Obj]]:
    """The ClusterQueue, LocalQueues and ResourceFlavor of one worker."""
    return {
        "clusterqueues": [
            {
                "metadata": {"name": "cluster-queue"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "a100",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "100000"},
                                        {"name": "memory", "nominalQuota": "400000Gi"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": "25000"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        ],
        "localqueues": [
            {
                "metadata": {"name": "user-queue", "namespace": f"team-{n}"},
                "spec": {"clusterQueue": "cluster-queue"},
            }
            for n in range(3)
        ],
        "resourceflavors": [
            {"metadata": {"name": "a100"}, "spec": {"nodeLabels": {GPU_LABEL: A100}}}
        ],
    }


def timed(action: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Median seconds of ``repeat`` runs, and the last result."""
    times = []
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def traced(action: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated by ``action`` after it returned (tracemalloc), and its result."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    result = action()
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before, result


def rss_mb() -> float:
    """Current resident set size of this process."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def decoded(obj: Obj) -> Obj:
    """``obj`` as a LIST or watch answer delivers it: encoded to JSON and decoded again."""
    return dict(json.loads(json.dumps(obj)))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build everything and measure."""
    from dispatcher.clusters.mirror import Mirror
    from dispatcher.clusters.registry import WORKER_RESOURCES, Candidate
    from dispatcher.controller.inflight import InFlight
    from dispatcher.controller.snapshots import WorkerIndex, build_snapshot
    from dispatcher.k8s.watching import Listed, ObjectEvent, object_key
    from dispatcher.kueue.gputypes import DEFAULT_GPU_LABEL, DEFAULT_GPU_RESOURCE_PATTERN
    from dispatcher.plugins import PluginHost
    from dispatcher.testing import make_request

    clusters = [f"worker-{c + 1:02d}" for c in range(args.clusters)]
    per_cluster = args.workloads // args.clusters
    json_bytes = sum(len(json.dumps(workload(0, i))) for i in range(100)) / 100
    gc.collect()
    rss_start = rss_mb()

    def objects(c: int) -> Iterator[Obj]:
        for i in range(per_cluster):
            yield decoded(workload(c, i))

    # --- the production path (no baseline in memory yet) -----------------------------------

    def fill() -> dict[str, Mirror]:
        """The mirrors, through ObjectCache.apply with the registry's transforms."""
        mirrors = {}
        for c, name in enumerate(clusters):
            mirror = Mirror(name, None, WORKER_RESOURCES)  # type: ignore[arg-type]
            for resource_name, items in queue_objects().items():
                cache = mirror.cache(resource_name)
                for obj in items:
                    cache.apply(ObjectEvent("LISTED", obj))
                cache.apply(Listed("1", frozenset(object_key(o) for o in items)))
            cache = mirror.cache("workloads")
            keys = set()
            for obj in objects(c):
                keys.add(object_key(obj))
                cache.apply(ObjectEvent("LISTED", obj))
            cache.apply(Listed("2", frozenset(keys)))
            mirrors[name] = mirror
        return mirrors

    def index_all(mirrors: dict[str, Mirror]) -> dict[str, WorkerIndex]:
        """An index per worker, built from its mirror and attached to it."""
        indexes = {}
        for name, mirror in mirrors.items():
            index = WorkerIndex()
            index.refresh(mirror)
            indexes[name] = index
        return indexes

    fill_s, mirrors = timed(fill)
    gc.collect()
    rss_mirrors = rss_mb()
    index_all_s, indexes = timed(lambda: index_all(mirrors))
    gc.collect()
    rss_indexed = rss_mb()
    errors = sum(len(index.errors) for index in indexes.values())

    # One worker's index built from scratch (what each worker event cost before).
    first = clusters[0]

    def full_build() -> None:
        index = WorkerIndex()
        index.refresh(mirrors[first])
        index.detach()

    full_build_s, _ = timed(full_build, repeat=5)

    # Baseline: a bare pass reading one field of every cached object.
    def bare_pass() -> int:
        seen = 0
        for mirror in mirrors.values():
            for obj in mirror.cache("workloads").objects.values():
                if (obj.get("status") or {}).get("admission"):
                    seen += 1
        return seen

    scan_s, _ = timed(bare_pass, repeat=5)

    # --- one worker event at a time ----------------------------------------------------------
    rng = random.Random(15)
    events: list[tuple[str, str, ObjectEvent]] = []
    # The state of workload i follows i % 10 (see workload()): 0-1 finished, 2-6 admitted,
    # 7-9 pending; an event moves it to another state's shape.
    shape_of = {"reserve": 2, "admit": 3, "finish": 0, "evict": 8}
    for n in range(args.events):
        kind = rng.choice(["reserve", "admit", "finish", "evict", "add", "delete", "cq"])
        if kind == "cq":
            cq = queue_objects()["clusterqueues"][0]
            cq["metadata"]["resourceVersion"] = str(10_000 + n)
            cq["status"] = {"pendingWorkloads": n, "flavorsReservation": []}
            events.append((kind, "clusterqueues", ObjectEvent("MODIFIED", decoded(cq))))
            continue
        i = rng.randrange(per_cluster)
        if kind == "add":
            obj = workload(0, per_cluster + n)
            events.append((kind, "workloads", ObjectEvent("ADDED", decoded(obj))))
            continue
        obj = workload(0, i)
        if kind == "delete":
            events.append((kind, "workloads", ObjectEvent("DELETED", decoded(obj))))
            continue
        shaped = workload(0, i - i % 10 + shape_of[kind])
        shaped["metadata"] = obj["metadata"]  # the same workload, in the new state
        shaped["spec"] = obj["spec"]
        shaped["metadata"]["resourceVersion"] = str(20_000 + n)
        events.append((kind, "workloads", ObjectEvent("MODIFIED", decoded(shaped))))
    index = indexes[first]
    caches = {name: mirrors[first].cache(name) for name in ("workloads", "clusterqueues")}
    times: list[float] = []
    parses: list[int] = []
    by_kind: dict[str, list[float]] = {}
    for kind, resource_name, event in events:
        cache = caches[resource_name]
        before = index.parses
        started = time.perf_counter()
        cache.apply(event)
        took = time.perf_counter() - started
        times.append(took)
        parses.append(index.parses - before)
        by_kind.setdefault(kind, []).append(took)
    check = WorkerIndex()
    check.refresh(mirrors[first])
    check.detach()
    same_as_full_build = (
        index.local_queues,
        index.cluster_queues,
        index.flavors,
        dict(index.pending),
        set(index.reserved_keys),
        index.admitted,
        set(index.copies),
        index.errors,
    ) == (
        check.local_queues,
        check.cluster_queues,
        check.flavors,
        dict(check.pending),
        set(check.reserved_keys),
        check.admitted,
        set(check.copies),
        check.errors,
    )
    workers_after = len(mirrors[first].cache("workloads").objects)

    # One decision's snapshots over every cluster, then the default pipeline's decision.
    in_flight = InFlight()
    request = make_request(
        "wl-new", namespace="team-1", queue="user-queue", cpu=8, memory="32Gi", gpus=2
    )
    candidates = [Candidate(name, n, True, "", {}, None) for n, name in enumerate(clusters)]

    def snapshots() -> list[Any]:
        return [
            build_snapshot(
                c,
                indexes[c.name],
                request,
                in_flight,
                label_key=DEFAULT_GPU_LABEL,
                resource_pattern=DEFAULT_GPU_RESOURCE_PATTERN,
            )
            for c in candidates
        ]

    snapshot_s, built = timed(snapshots, repeat=20)
    host = PluginHost.load()
    pipeline = host.pipeline(["gpu-type-affinity", "capacity-first"], {})
    decide_s, decision = timed(lambda: host.decide(pipeline, request, snapshots()), repeat=10)
    pending = sum(len(s.pending) for s in built)
    admitted = sum(len(index.admitted) for index in indexes.values())
    mirrors, indexes, built, index, check = {}, {}, [], None, None  # type: ignore[assignment]
    gc.collect()

    # --- baselines: decoding, and memory (tracemalloc on: each structure built once more) ----
    def decode_all() -> list[Obj]:
        return [obj for c in range(len(clusters)) for obj in objects(c)]

    decode_s, raw = timed(decode_all)
    del raw
    gc.collect()
    tracemalloc.start()
    raw_bytes, raw = traced(decode_all)
    sample = copy.deepcopy(raw[:200])
    del raw
    mirror_bytes, mirrors = traced(fill)
    index_bytes, indexes = traced(lambda: index_all(mirrors))
    tracemalloc.stop()
    del sample
    mb = 2**20
    total = per_cluster * len(clusters)
    return {
        "workloads": total,
        "clusters": len(clusters),
        "json_kb": round(json_bytes / 1024, 1),
        "memory_mb": {
            "decoded_objects_baseline": round(raw_bytes / mb, 1),
            "mirrors": round(mirror_bytes / mb, 1),
            "indexes": round(index_bytes / mb, 1),
            "mirrors_plus_indexes": round((mirror_bytes + index_bytes) / mb, 1),
            "baseline_per_workload_kb": round(raw_bytes / total / 1024, 2),
            "per_workload_kb": round((mirror_bytes + index_bytes) / total / 1024, 2),
        },
        "memory_ratio_to_baseline": round((mirror_bytes + index_bytes) / raw_bytes, 3),
        "rss_mb": {
            "start": round(rss_start, 1),
            "with_mirrors": round(rss_mirrors, 1),
            "with_indexes": round(rss_indexed, 1),
            "peak_including_baselines": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
            ),
        },
        "time_s": {
            "decode_json_baseline": round(decode_s, 3),
            "fill_mirrors": round(fill_s, 3),
            "bare_scan_baseline": round(scan_s, 4),
            "index_all_workers": round(index_all_s, 3),
            "full_build_one_worker_baseline": round(full_build_s, 4),
            "snapshots_one_decision": round(snapshot_s, 5),
            "decision_default_pipeline_with_snapshots": round(decide_s, 5),
        },
        "event_ms": {
            "events": len(times),
            "p50": round(percentile(times, 0.5) * 1000, 4),
            "p99": round(percentile(times, 0.99) * 1000, 4),
            "max": round(max(times) * 1000, 4),
            "mean": round(statistics.fmean(times) * 1000, 4),
            "p50_by_kind": {
                k: round(percentile(v, 0.5) * 1000, 4) for k, v in sorted(by_kind.items())
            },
            "parses_max": max(parses),
            "parses_mean": round(statistics.fmean(parses), 3),
            "workloads_on_the_worker_after": workers_after,
        },
        "ratios": {
            "full_build_over_event_p50": round(full_build_s / percentile(times, 0.5)),
            "index_all_over_bare_scan": round(index_all_s / scan_s, 1),
            "fill_over_decode": round(fill_s / decode_s, 2),
        },
        "index_same_as_full_build_after_events": same_as_full_build,
        "pending_in_snapshots": pending,
        "admitted_indexed": admitted,
        "index_errors": errors,
        "decision": {"nominate": list(decision.nominate), "reason": decision.reason},
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": [round(x, 1) for x in os.getloadavg()],
        },
    }


def report(f: dict[str, Any]) -> str:
    """The figures as text."""
    m, t, r, e = f["memory_mb"], f["time_s"], f["ratios"], f["event_ms"]
    return "\n".join(
        [
            f"mirror scale: {f['workloads']} workloads over {f['clusters']} clusters "
            f"({f['json_kb']} KB of JSON each)",
            f"  RSS                        start {f['rss_mb']['start']} MB, with mirrors "
            f"{f['rss_mb']['with_mirrors']} MB, with indexes {f['rss_mb']['with_indexes']} MB "
            f"(peak with the baselines {f['rss_mb']['peak_including_baselines']} MB)",
            f"  memory (tracemalloc)       decoded whole objects {m['decoded_objects_baseline']} MB"
            f" ({m['baseline_per_workload_kb']} KB each, baseline); slim mirrors {m['mirrors']} MB"
            f" + indexes {m['indexes']} MB = {m['mirrors_plus_indexes']} MB "
            f"({f['memory_ratio_to_baseline']}x baseline, {m['per_workload_kb']} KB per workload)",
            f"  one worker event           p50 {e['p50']:.3f} ms, p99 {e['p99']:.3f} ms, max "
            f"{e['max']:.3f} ms over {e['events']} events ({e['parses_mean']} parses each, at "
            f"most {e['parses_max']}); p50 by kind {e['p50_by_kind']}",
            f"  full build of one worker   {t['full_build_one_worker_baseline'] * 1000:.1f} ms "
            f"(baseline: {r['full_build_over_event_p50']}x the event p50); index same as a full "
            f"build after the events: {f['index_same_as_full_build_after_events']}",
            f"  decode JSON (baseline)     {t['decode_json_baseline']:.3f} s; fill mirrors "
            f"{t['fill_mirrors']:.3f} s ({r['fill_over_decode']}x)",
            f"  bare scan (baseline)       {t['bare_scan_baseline'] * 1000:.1f} ms; index all "
            f"workers {t['index_all_workers']:.3f} s ({r['index_all_over_bare_scan']}x)",
            f"  snapshots, one decision    {t['snapshots_one_decision'] * 1000:.2f} ms "
            f"(20 clusters, {f['pending_in_snapshots']} pending workloads in them)",
            f"  decision incl. snapshots   "
            f"{t['decision_default_pipeline_with_snapshots'] * 1000:.2f} ms"
            f" -> {f['decision']['nominate']}",
            f"  machine                    {f['machine']}",
        ]
    )


def main() -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--events", type=int, default=1_000)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    figures = run(args)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    ok = figures["index_errors"] == 0 and figures["index_same_as_full_build_after_events"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
