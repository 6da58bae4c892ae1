"""Mirror scale: memory and snapshot time with 100,000 mirrored workloads over 20 clusters.

Not a test: it prints figures (and writes them as JSON with ``--json FILE``).

Each of ``--clusters`` workers (default 20) gets ``--workloads / clusters`` Workload copies
(default 100,000 in all) shaped as Kueue writes them on a worker: metadata with labels, an owner
and the two ``managedFields`` entries (``kueue`` and ``kueue-admission``), a pod set with its
template, and a status with conditions and ``admission``; half are admitted, 30 % pending, 20 %
finished. Each object is encoded to JSON and decoded again, as a LIST answer is, then fed to the
dispatcher's own structures through the production path: a :class:`~dispatcher.clusters.mirror.
Mirror` per worker (its :class:`~dispatcher.k8s.watching.ObjectCache` s applying ``LISTED``
events and the ``Listed`` marker), :meth:`dispatcher.controller.snapshots.WorkerIndex.refresh`
(the parsed views a decision reads) and :func:`dispatcher.controller.snapshots.build_snapshot`
for one request over all the clusters, then one decision of the default pipeline.

Baselines, measured in the same run on the same objects:

- **memory**: the decoded objects alone, held in a list (what any Kubernetes client holding
  those objects pays; measured with ``tracemalloc``), against the mirrors holding them and the
  indexes built from them. Peak RSS of the process is printed too;
- **time**: decoding the objects from JSON (the least work a LIST of them costs), and a bare
  pass over every cached object reading one field (the least work any full scan costs),
  against the index build (all workers, and one worker after a change) and the snapshots of one
  decision.

``--strip-managed-fields`` drops ``metadata.managedFields`` before caching (as client-go
informers can with a transform) to show what they cost.

    .venv/bin/python benchmarks/mirror_scale.py [--workloads 100000] [--clusters 20] [--json F]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
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
    rss_start = rss_mb()
    encoded = {
        name: [json.dumps(workload(c, i)).encode() for i in range(per_cluster)]
        for c, name in enumerate(clusters)
    }
    json_bytes = sum(len(b) for blobs in encoded.values() for b in blobs)

    def strip(obj: Obj) -> Obj:
        if args.strip_managed_fields:
            obj["metadata"].pop("managedFields", None)
        return obj

    # --- time (tracemalloc off) ---------------------------------------------------------------

    # Baseline 1: decoding the objects into a plain list.
    def decode_all() -> list[Obj]:
        return [strip(json.loads(b)) for blobs in encoded.values() for b in blobs]

    decode_s, raw = timed(decode_all)
    del raw
    gc.collect()

    # The mirrors, through ObjectCache.apply.
    def fill() -> dict[str, Mirror]:
        mirrors = {}
        for name in clusters:
            mirror = Mirror(name, None, WORKER_RESOURCES)  # type: ignore[arg-type]
            for resource_name, objects in queue_objects().items():
                cache = mirror.cache(resource_name)
                for obj in objects:
                    cache.apply(ObjectEvent("LISTED", obj))
                cache.apply(Listed("1", frozenset(object_key(o) for o in objects)))
            cache = mirror.cache("workloads")
            keys = set()
            for blob in encoded[name]:
                obj = strip(json.loads(blob))
                cache.apply(ObjectEvent("LISTED", obj))
                keys.add(object_key(obj))
            cache.apply(Listed("2", frozenset(keys)))
            mirrors[name] = mirror
        return mirrors

    fill_s, mirrors = timed(fill)
    rss_mirrors = rss_mb()

    # Baseline 2: a bare pass reading one field of every cached object.
    def bare_pass() -> int:
        seen = 0
        for mirror in mirrors.values():
            for obj in mirror.cache("workloads").objects.values():
                if (obj.get("status") or {}).get("admission"):
                    seen += 1
        return seen

    scan_s, _ = timed(bare_pass, repeat=5)

    # The indexes (what a decision reads), built from scratch for every worker.
    def index_all() -> dict[str, WorkerIndex]:
        indexes = {}
        for name, mirror in mirrors.items():
            index = WorkerIndex()
            index.refresh(mirror, 1)
            indexes[name] = index
        return indexes

    index_all_s, indexes = timed(index_all, repeat=3)
    rss_indexed = rss_mb()
    errors = sum(len(index.errors) for index in indexes.values())

    # One worker changed: its index is rebuilt (what the controller does per worker event).
    first = clusters[0]

    def refresh_one() -> None:
        indexes[first].refresh(mirrors[first], indexes[first].version + 1)

    index_one_s, _ = timed(refresh_one, repeat=5)

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
    mirrors, indexes, built = {}, {}, []  # let the timing phase's structures go
    gc.collect()

    # --- memory (tracemalloc on: each structure built once more) ------------------------------
    tracemalloc.start()
    raw_bytes, raw = traced(decode_all)
    del raw
    mirror_bytes, mirrors = traced(fill)
    index_bytes, _ = traced(lambda: index_all())
    tracemalloc.stop()
    mb = 2**20
    return {
        "workloads": per_cluster * len(clusters),
        "clusters": len(clusters),
        "managed_fields": not args.strip_managed_fields,
        "json_mb": round(json_bytes / mb, 1),
        "memory_mb": {
            "decoded_objects_baseline": round(raw_bytes / mb, 1),
            "mirrors": round(mirror_bytes / mb, 1),
            "indexes": round(index_bytes / mb, 1),
            "mirrors_plus_indexes": round((mirror_bytes + index_bytes) / mb, 1),
            "per_workload_kb": round(
                (mirror_bytes + index_bytes) / per_cluster / len(clusters) / 1024, 2
            ),
        },
        "memory_ratio_to_baseline": round((mirror_bytes + index_bytes) / raw_bytes, 2),
        "rss_mb": {
            "start": round(rss_start, 1),
            "with_mirrors": round(rss_mirrors, 1),
            "with_indexes": round(rss_indexed, 1),
            "peak": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        },
        "time_s": {
            "decode_json_baseline": round(decode_s, 3),
            "fill_mirrors": round(fill_s, 3),
            "bare_scan_baseline": round(scan_s, 4),
            "index_all_workers": round(index_all_s, 3),
            "index_one_worker": round(index_one_s, 4),
            "snapshots_one_decision": round(snapshot_s, 5),
            "decision_default_pipeline_with_snapshots": round(decide_s, 5),
        },
        "ratios": {
            "index_all_over_bare_scan": round(index_all_s / scan_s, 1),
            "index_all_over_decode": round(index_all_s / decode_s, 2),
            "fill_over_decode": round(fill_s / decode_s, 2),
        },
        "pending_in_snapshots": pending,
        "admitted_indexed": admitted,
        "index_errors": errors,
        "decision": {"nominate": list(decision.nominate), "reason": decision.reason},
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }


def report(f: dict[str, Any]) -> str:
    """The figures as text."""
    m, t, r = f["memory_mb"], f["time_s"], f["ratios"]
    return "\n".join(
        [
            f"mirror scale: {f['workloads']} workloads over {f['clusters']} clusters "
            f"({f['json_mb']} MB of JSON; managedFields "
            f"{'kept' if f['managed_fields'] else 'stripped'})",
            f"  memory (tracemalloc)       decoded objects alone {m['decoded_objects_baseline']} MB"
            f" (baseline); mirrors {m['mirrors']} MB + indexes {m['indexes']} MB = "
            f"{m['mirrors_plus_indexes']} MB ({f['memory_ratio_to_baseline']}x baseline, "
            f"{m['per_workload_kb']} KB per workload)",
            f"  RSS                        start {f['rss_mb']['start']} MB, with mirrors "
            f"{f['rss_mb']['with_mirrors']} MB, with indexes {f['rss_mb']['with_indexes']} MB, "
            f"peak {f['rss_mb']['peak']} MB",
            f"  decode JSON (baseline)     {t['decode_json_baseline']:.3f} s; fill mirrors "
            f"{t['fill_mirrors']:.3f} s ({r['fill_over_decode']}x)",
            f"  bare scan (baseline)       {t['bare_scan_baseline'] * 1000:.1f} ms",
            f"  index all workers          {t['index_all_workers']:.3f} s "
            f"({r['index_all_over_bare_scan']}x bare scan, {r['index_all_over_decode']}x decode)",
            f"  index one worker (change)  {t['index_one_worker'] * 1000:.1f} ms",
            f"  snapshots, one decision    {t['snapshots_one_decision'] * 1000:.2f} ms "
            f"(20 clusters, {f['pending_in_snapshots']} pending workloads in them)",
            f"  decision incl. snapshots   "
            f"{t['decision_default_pipeline_with_snapshots'] * 1000:.2f} ms"
            f" -> {f['decision']['nominate']}",
        ]
    )


def main() -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--strip-managed-fields", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    figures = run(args)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["index_errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
