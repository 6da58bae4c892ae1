"""Issue 15: slim cached records and the incremental :class:`WorkerIndex`, counted, never timed.

- What a worker mirror keeps of a Workload, ClusterQueue, LocalQueue and ResourceFlavor
  (``dispatcher.clusters.slim``) gives the index, the snapshots and the controller's readers of
  copies exactly what the whole objects give, without ``managedFields``; the manager's
  Workloads keep what the nomination's time is read from.
- The index follows its mirror event by event and never differs from an index built from
  scratch on the same caches (random event sequences, fixed seeds).
- One Workload event parses one Workload, not the worker.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

import pytest

from dispatcher.algorithms.stages import StageContext
from dispatcher.clusters import slim
from dispatcher.clusters.mirror import Mirror, Watched
from dispatcher.clusters.registry import WORKER_RESOURCES, Candidate
from dispatcher.clusters.slim import PREBUILT_LABEL
from dispatcher.controller.inflight import InFlight
from dispatcher.controller.nominator import nomination_time
from dispatcher.controller.records import transition_time as _transition_time
from dispatcher.controller.snapshots import (
    ORIGIN_LABEL,
    SnapshotCache,
    WorkerIndex,
    build_snapshot,
    condition_status,
    is_copy,
)
from dispatcher.k8s.watching import Listed, ObjectEvent, WatchItem, object_key
from dispatcher.kueue.gputypes import DEFAULT_GPU_LABEL, DEFAULT_GPU_RESOURCE_PATTERN
from dispatcher.testing import make_request, queued_workload

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
FIELD_MANAGER = "multikueue-dispatcher"


def _stamp(i: int) -> str:
    return f"2026-11-30T10:{(i // 60) % 60:02d}:{i % 60:02d}Z"


def _condition(kind: str, status: str, i: int) -> Obj:
    return {
        "type": kind,
        "status": status,
        "reason": kind if status == "True" else "Pending",
        "message": f"a long message about {kind} that nobody reads " * 3,
        "lastTransitionTime": _stamp(i),
        "observedGeneration": 1,
    }


def managed_fields(i: int) -> list[Obj]:
    return [
        {
            "manager": "kueue",
            "operation": "Update",
            "apiVersion": KUEUE,
            "time": _stamp(i),
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": {"f:podSets": {}}},
        },
        {
            "manager": "kueue-admission",
            "operation": "Apply",
            "apiVersion": KUEUE,
            "time": _stamp(i + 1),
            "fieldsType": "FieldsV1",
            "subresource": "status",
            "fieldsV1": {"f:status": {"f:admission": {"f:clusterQueue": {}}}},
        },
    ]


def workload(
    name: str,
    *,
    state: str = "pending",
    namespace: str = "team-a",
    queue: str = "user-queue",
    priority: int = 0,
    gpus: int = 1,
    i: int = 0,
    copy_of: str | None = "multikueue",
    **spec: Any,
) -> Obj:
    """A worker Workload as Kueue writes it; ``state`` is pending, reserved, admitted,
    evicting (admitted, ``Evicted=True`` and not released yet), finished or inactive."""
    requests = {"cpu": f"{4 * gpus}", "memory": f"{16 * gpus}Gi", GPU: str(gpus)}
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if copy_of is not None:
        labels[ORIGIN_LABEL] = copy_of
    obj: Obj = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": str(100 + i),
            "generation": 1,
            "creationTimestamp": _stamp(i),
            "labels": labels,
            "annotations": {"note": "not read"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": "j",
                    "controller": True,
                }
            ],
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            "managedFields": managed_fields(i),
        },
        "spec": {
            "queueName": queue,
            "priority": priority,
            "priorityClassName": "high",
            "active": state != "inactive",
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "minCount": 1,
                    "template": {
                        "metadata": {"labels": {"app": "train"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {DEFAULT_GPU_LABEL: "NVIDIA-A100-SXM4-80GB"},
                            "tolerations": [{"key": GPU, "operator": "Exists"}],
                            "affinity": {
                                "nodeAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": {
                                        "nodeSelectorTerms": [
                                            {
                                                "matchExpressions": [
                                                    {
                                                        "key": "zone",
                                                        "operator": "In",
                                                        "values": ["a", "b"],
                                                    }
                                                ]
                                            }
                                        ]
                                    },
                                    "preferredDuringSchedulingIgnoredDuringExecution": [],
                                },
                                "podAntiAffinity": {"not": "read"},
                            },
                            "overhead": {"cpu": "100m"},
                            "initContainers": [
                                {
                                    "name": "sidecar",
                                    "image": "proxy:1",
                                    "restartPolicy": "Always",
                                    "resources": {"requests": {"cpu": "250m"}},
                                },
                                {
                                    "name": "fetch",
                                    "image": "fetch:1",
                                    "command": ["fetch", "--all"],
                                    "resources": {"requests": {"memory": "64Gi"}},
                                },
                            ],
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "train:1.2.3",
                                    "args": ["--epochs", "10"],
                                    "env": [{"name": "A", "value": "1"}],
                                    "resources": {"requests": requests, "limits": {GPU: str(gpus)}},
                                }
                            ],
                        },
                    },
                }
            ],
            **spec,
        },
    }
    conditions = []
    if state in ("reserved", "admitted", "evicting", "finished"):
        conditions.append(_condition("QuotaReserved", "True", i + 2))
        obj["status"] = {
            "admission": {
                "clusterQueue": "cluster-queue",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": 2,
                        "flavors": dict.fromkeys(requests, "a100"),
                        "resourceUsage": {
                            "cpu": str(8 * gpus),
                            "memory": f"{32 * gpus}Gi",
                            GPU: str(2 * gpus),
                        },
                    }
                ],
            }
        }
    else:
        conditions.append(_condition("QuotaReserved", "False", i + 2))
        obj["status"] = {}
    if state in ("admitted", "evicting", "finished"):
        conditions.append(_condition("Admitted", "True", i + 3))
    if state == "evicting":
        conditions.append(_condition("Evicted", "True", i + 4))
    if state == "finished":
        conditions.append(_condition("Finished", "True", i + 4))
    obj["status"]["conditions"] = conditions
    obj["status"]["requeueState"] = {"count": 1}
    return obj


def cluster_queue(name: str = "cluster-queue", gpus: int = 16, **spec: Any) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "managedFields": managed_fields(0),
        },
        "spec": {
            "namespaceSelector": {},
            "cohortName": "all",
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "256"},
                                {"name": "memory", "nominalQuota": "1Ti"},
                                {
                                    "name": GPU,
                                    "nominalQuota": str(gpus),
                                    "borrowingLimit": "4",
                                    "lendingLimit": "2",
                                },
                            ],
                        }
                    ],
                }
            ],
            **spec,
        },
        "status": {
            "conditions": [_condition("Active", "True", 0)],
            "flavorsReservation": [
                {"name": "a100", "resources": [{"name": GPU, "total": "3", "borrowed": "0"}]}
            ],
            "flavorsUsage": [{"name": "a100", "resources": [{"name": GPU, "total": "2"}]}],
            "pendingWorkloads": 3,
            "reservingWorkloads": 2,
            "admittedWorkloads": 1,
        },
    }


def local_queue(
    namespace: str = "team-a", name: str = "user-queue", cq: str = "cluster-queue"
) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "8",
            "managedFields": managed_fields(0),
        },
        "spec": {"clusterQueue": cq, "stopPolicy": "None"},
        "status": {"pendingWorkloads": 1, "conditions": [_condition("Active", "True", 0)]},
    }


def resource_flavor(name: str = "a100") -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "resourceVersion": "9", "managedFields": managed_fields(0)},
        "spec": {
            "nodeLabels": {DEFAULT_GPU_LABEL: "NVIDIA-A100-SXM4-80GB"},
            "nodeTaints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}],
            "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
            "topologyName": "not-read",
        },
    }


FULL = {key: dataclasses.replace(spec, transform=None) for key, spec in WORKER_RESOURCES.items()}


def mirror_of(objects: dict[str, list[Obj]], watched: dict[str, Watched]) -> Mirror:
    mirror = Mirror("w1", None, watched)  # type: ignore[arg-type]
    for resource in watched:
        items = copy.deepcopy(objects.get(resource, []))
        cache = mirror.cache(resource)
        for obj in items:
            cache.apply(ObjectEvent("LISTED", obj))
        cache.apply(Listed("1", frozenset(object_key(o) for o in items)))
    return mirror


def built(mirror: Mirror) -> WorkerIndex:
    """An index built from scratch on ``mirror``'s caches, not following them."""
    index = WorkerIndex()
    index.refresh(mirror)
    index.detach()
    return index


def views(index: WorkerIndex) -> tuple[Any, ...]:
    """Every public view of an index, comparable."""
    return (
        index.local_queues,
        index.cluster_queues,
        index.flavors,
        {cq: index.pending[cq] for cq in index.pending},
        set(index.reserved_keys),
        dict(index.admitted),
        set(index.copies),
        index.errors,
        {cq: index.holders(cq) for cq in ("cluster-queue", "second", "stopped")},
    )


def queues(**extra: list[Obj]) -> dict[str, list[Obj]]:
    return {
        "clusterqueues": [cluster_queue()],
        "localqueues": [local_queue(), local_queue("team-b")],
        "resourceflavors": [resource_flavor()],
        **extra,
    }


def bad_quantity() -> Obj:
    obj = workload("bad-quantity")
    container = obj["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["cpu"] = "lots"
    return obj


def odd_shapes() -> Obj:
    obj = workload("odd-shapes")
    pod_set = obj["spec"]["podSets"][0]
    pod_set["template"]["spec"]["containers"] = "not a list"
    pod_set["template"]["spec"]["affinity"] = ["not", "a", "mapping"]
    pod_set["count"] = "three"
    return obj


def bad_admission() -> Obj:
    obj = workload("bad-admission", state="reserved")
    obj["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] = "x"
    return obj


WORLDS = [
    pytest.param(queues(workloads=[workload("w")]), id="one-pending-copy"),
    pytest.param(
        queues(
            workloads=[
                workload("p-low", priority=1, i=3),
                workload("p-high", priority=5, i=9, namespace="team-b"),
                workload("r", state="reserved", gpus=2, i=1),
                workload("a", state="admitted", i=2),
                workload("f", state="finished", i=4),
                workload("off", state="inactive", i=5),
                workload("own", copy_of=None, i=6),
                workload("other-manager", copy_of="elsewhere", state="admitted", i=7),
                workload("no-queue", queue="missing", i=8),
            ]
        ),
        id="every-state",
    ),
    pytest.param(
        queues(workloads=[bad_quantity(), odd_shapes(), bad_admission()]), id="unparseable"
    ),
    pytest.param(
        {
            "clusterqueues": [cluster_queue(), cluster_queue("stopped", stopPolicy="Hold")],
            "localqueues": [local_queue(), local_queue("team-b", cq="stopped")],
            "resourceflavors": [resource_flavor(), resource_flavor("spare")],
            "workloads": [workload("a"), workload("b", namespace="team-b", state="reserved")],
        },
        id="two-queues-and-flavors",
    ),
]


@pytest.mark.parametrize("objects", WORLDS)
def test_the_slim_records_give_what_the_whole_objects_give(objects: dict[str, list[Obj]]) -> None:
    """The index, a decision's snapshot and the controller's readers of copies see the same
    on whole objects and on what the worker mirror keeps; no managedFields are kept."""
    full, kept = mirror_of(objects, FULL), mirror_of(objects, WORKER_RESOURCES)
    indexes = []
    for mirror in (full, kept):
        index = WorkerIndex()
        index.refresh(mirror)
        indexes.append(index)
    assert views(indexes[0]) == views(indexes[1])
    request = make_request("w", namespace="team-a", queue="user-queue", cpu=8, gpus=1)
    candidate = Candidate("w1", 0, True, "", {}, None)
    snapshots = [
        build_snapshot(
            candidate,
            index,
            request,
            InFlight(),
            label_key=DEFAULT_GPU_LABEL,
            resource_pattern=DEFAULT_GPU_RESOURCE_PATTERN,
        )
        for index in indexes
    ]
    assert snapshots[0] == snapshots[1]
    for resource in WORKER_RESOURCES:
        for key, whole in full.cache(resource).objects.items():
            record = kept.cache(resource).objects[key]
            assert "managedFields" not in record["metadata"]
            assert object_key(record) == key
            assert record["metadata"]["resourceVersion"] == whole["metadata"]["resourceVersion"]
            if resource == "workloads":  # nominator._copies, _holding_copy, _leftover
                assert is_copy(record, "multikueue") == is_copy(whole, "multikueue")
                for kind in ("Admitted", "QuotaReserved", "Finished"):
                    assert condition_status(record, kind) == condition_status(whole, kind)
                    assert _transition_time(record, kind) == _transition_time(whole, kind)


def test_holders_are_the_possible_victims_with_what_least_disruption_weighs() -> None:
    """Every unfinished Workload holding quota is a holder of its ClusterQueue, ours or not,
    with its priority, since when it holds quota, whether it is admitted or being evicted; an
    unreadable priority is an error naming the field, and its quota still counts."""
    bad = workload("bad", state="admitted", i=9)
    bad["spec"]["priority"] = "high"
    mirror = mirror_of(
        queues(
            workloads=[
                workload("pending", i=1),
                workload("reserved", state="reserved", priority=10, i=2),
                workload("admitted", state="admitted", priority=100, i=3, copy_of=None),
                workload("leaving", state="evicting", priority=5, i=4),
                workload("done", state="finished", i=5),
                bad,
            ]
        ),
        WORKER_RESOURCES,
    )
    index = built(mirror)
    found = {
        h.key: (h.priority, h.admitted, h.evicting, h.reserved_at.isoformat())
        for h in index.holders("cluster-queue")
    }
    assert found == {
        "team-a/reserved": (10, False, False, "2026-11-30T10:00:04+00:00"),
        "team-a/admitted": (100, True, False, "2026-11-30T10:00:05+00:00"),
        "team-a/leaving": (5, True, True, "2026-11-30T10:00:06+00:00"),
    }
    assert "Workload team-a/bad: spec.priority: invalid literal for int() with base 10: 'high'" in (
        index.errors
    )
    gpus = dict(index.cluster_queues[0].reserved)[("a100", GPU)]
    assert gpus == 4 * 2000  # four holders of 2 GPUs each, the bad one included


def test_the_slim_workload_is_a_fraction_of_the_whole() -> None:
    whole = workload("w", state="admitted")
    assert len(repr(slim.worker_workload(whole))) < len(repr(whole)) / 2


def our_entry(owned: bool, manager: str = FIELD_MANAGER, **extra: Any) -> Obj:
    fields: Obj = {"f:status": {"f:nominatedClusterNames": {}}} if owned else {"f:status": {}}
    return {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": KUEUE,
        "subresource": "status",
        "time": "2026-11-30T10:00:07Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **extra,
    }


MANAGED = [
    pytest.param([*managed_fields(0), our_entry(True)], 2, id="ours-owns-the-nomination"),
    pytest.param([*managed_fields(0), our_entry(False)], 2, id="ours-no-longer-owns-it"),
    pytest.param(managed_fields(0), 1, id="no-entry-of-ours"),
    pytest.param([our_entry(True, manager="someone-else")], 1, id="another-managers-entry"),
    pytest.param(
        [{**our_entry(True), "subresource": None}, our_entry(True)], 1, id="not-the-status-one"
    ),
    pytest.param([our_entry(True, fieldsV1=None)], 1, id="no-fieldsV1"),
    pytest.param("not a list", None, id="odd-shape-kept-as-is"),
]


@pytest.mark.parametrize(("entries", "kept_entries"), MANAGED)
def test_a_manager_workload_keeps_what_its_nomination_time_is_read_from(
    entries: Any, kept_entries: int | None
) -> None:
    """The manager's Workloads keep only the status-apply managedFields entries, reduced to
    whether they own the nomination: ``nomination_time`` reads the same from them."""
    whole = workload("w", state="reserved")
    whole["metadata"]["managedFields"] = entries
    before = copy.deepcopy(whole)
    kept = slim.manager_workload(whole)
    assert whole == before  # pure
    for manager in (FIELD_MANAGER, "someone-else", "kueue-admission"):
        assert nomination_time(kept, manager) == nomination_time(whole, manager)
    assert {k: v for k, v in kept.items() if k != "metadata"} == {
        k: v for k, v in whole.items() if k != "metadata"
    }
    if kept_entries is None:
        assert kept["metadata"]["managedFields"] == entries
    else:
        found = kept["metadata"]["managedFields"]
        assert len(found) == kept_entries
        assert all(e["operation"] == "Apply" and e["subresource"] == "status" for e in found)


# --- the incremental index --------------------------------------------------------------------


class World:
    """One worker's mirror changed by random events, its index fed by the caches."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.mirror = mirror_of(queues(), WORKER_RESOURCES)
        self.index = WorkerIndex()
        self.index.refresh(self.mirror)
        self.version = 0

    def apply(self, resource: str, item: WatchItem) -> None:
        self.mirror.cache(resource).apply(item)

    def event(self, resource: str, obj: Obj) -> None:
        cache = self.mirror.cache(resource)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(1000 + self.version)
        kind = "MODIFIED" if object_key(obj) in cache.objects else "ADDED"
        self.apply(resource, ObjectEvent(kind, obj))

    def delete(self, resource: str) -> None:
        cache = self.mirror.cache(resource)
        if not cache.objects:
            self.event(resource, self.random_workload())
            return
        key = self.rng.choice(sorted(cache.objects))
        self.apply(resource, ObjectEvent("DELETED", copy.deepcopy(cache.objects[key])))

    def relist(self, resource: str) -> None:
        """A re-list: some objects gone, some changed, some new."""
        cache = self.mirror.cache(resource)
        objects = [copy.deepcopy(o) for o in cache.objects.values() if self.rng.random() < 0.8]
        if resource == "workloads":
            objects += [self.random_workload() for _ in range(self.rng.randrange(3))]
        for obj in objects:
            self.apply(resource, ObjectEvent("LISTED", obj))
        self.apply(resource, Listed("r", frozenset(object_key(o) for o in objects)))

    def random_workload(self) -> Obj:
        rng = self.rng
        name = f"wl-{rng.randrange(40):02d}"
        namespace = rng.choice(["team-a", "team-b", "team-c"])
        maker = rng.random()
        if maker < 0.05:
            obj = bad_quantity()
            obj["metadata"]["name"] = name
            return obj
        if maker < 0.08:
            obj = bad_admission()
            obj["metadata"]["name"] = name
            return obj
        return workload(
            name,
            namespace=namespace,
            state=rng.choice(
                ["pending", "pending", "reserved", "admitted", "evicting", "finished", "inactive"]
            ),
            queue=rng.choice(["user-queue", "user-queue", "other-queue"]),
            priority=rng.choice([0, 0, 10, 100]),
            gpus=rng.randrange(1, 4),
            i=rng.randrange(60),
            copy_of=rng.choice(["multikueue", "multikueue", None]),
        )

    def step(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            self.event("workloads", self.random_workload())
            return "workload"
        if roll < 0.7:
            self.delete("workloads")
            return "workload-deleted"
        if roll < 0.78:
            lq = local_queue(
                rng.choice(["team-a", "team-b", "team-c"]),
                rng.choice(["user-queue", "other-queue"]),
                rng.choice(["cluster-queue", "second"]),
            )
            if rng.random() < 0.3:
                self.apply("localqueues", ObjectEvent("DELETED", lq))
            else:
                self.event("localqueues", lq)
            return "localqueue"
        if roll < 0.85:
            cq = cluster_queue(rng.choice(["cluster-queue", "second"]), gpus=rng.randrange(4, 64))
            if rng.random() < 0.2:
                self.apply("clusterqueues", ObjectEvent("DELETED", cq))
            else:
                self.event("clusterqueues", cq)
            return "clusterqueue"
        if roll < 0.9:
            self.event("resourceflavors", resource_flavor(rng.choice(["a100", "h100"])))
            return "flavor"
        if roll < 0.97:
            self.relist(rng.choice(["workloads", "workloads", "localqueues", "clusterqueues"]))
            return "relist"
        self.apply("workloads", ObjectEvent("LISTED", self.random_workload()))  # staged only
        self.relist("workloads")
        return "relist"


@pytest.mark.parametrize("seed", [pytest.param(seed, id=f"seed-{seed}") for seed in (1, 2, 3, 4)])
def test_the_index_never_differs_from_a_full_build(seed: int) -> None:
    """After each of 400 random events (workloads added, changed, deleted; LocalQueues moving
    queues between ClusterQueues; ClusterQueues and flavors changed; re-lists), the index fed
    event by event equals one built from scratch on the same caches, and its version moved."""
    env = World(seed)
    kinds: set[str] = set()
    for _ in range(400):
        before = env.index.version
        kinds.add(env.step())
        assert views(env.index) == views(built(env.mirror))
        assert env.index.version != before
    assert kinds >= {"workload", "workload-deleted", "localqueue", "clusterqueue", "relist"}
    assert env.index.builds > 1  # the re-lists


def big_worker(workloads: int) -> Mirror:
    states = ["pending", "reserved", "admitted", "finished"]
    return mirror_of(
        queues(
            workloads=[
                workload(f"wl-{i:05d}", state=states[i % 4], namespace=f"team-{'ab'[i % 2]}", i=i)
                for i in range(workloads)
            ]
        ),
        WORKER_RESOURCES,
    )


WORKERS = 1_000

EVENTS = [
    pytest.param(
        "workloads", lambda: workload("wl-00007", state="admitted", i=7), 1, id="workload-modified"
    ),
    pytest.param("workloads", lambda: workload("new", i=3), 1, id="workload-added"),
    pytest.param("clusterqueues", lambda: cluster_queue(gpus=99), 1, id="clusterqueue-modified"),
    pytest.param("resourceflavors", lambda: resource_flavor("h100"), 1, id="flavor-added"),
    pytest.param(
        "localqueues",
        lambda: local_queue("team-b", cq="elsewhere"),
        1 + WORKERS // 4,  # the LocalQueue, then team-b's unfinished workloads (odd i, i % 4 == 1)
        id="localqueue-moved-re-derives-its-workloads",
    ),
]


@pytest.mark.parametrize(("resource", "make", "parses"), EVENTS)
def test_one_event_parses_what_it_changed_not_the_worker(
    resource: str, make: Any, parses: int
) -> None:
    """A full build parses every object of the worker; one event, only what it changed."""
    mirror = big_worker(WORKERS)
    index = WorkerIndex()
    index.refresh(mirror)
    assert index.parses == WORKERS + 4
    start = index.parses
    mirror.cache(resource).apply(ObjectEvent("MODIFIED", make()))
    assert index.parses - start == parses
    assert index.builds == 1
    assert views(index) == views(built(mirror))


def test_a_relist_is_one_update_and_refresh_costs_nothing_after_it() -> None:
    mirror = big_worker(100)
    index = WorkerIndex()
    index.refresh(mirror)
    cache = mirror.cache("workloads")
    version, parses = index.version, index.parses
    objects = [copy.deepcopy(o) for o in cache.objects.values()]
    for obj in objects:
        cache.apply(ObjectEvent("LISTED", obj))
    assert (index.version, index.parses) == (version, parses)  # nothing until the marker
    cache.apply(Listed("2", frozenset(object_key(o) for o in objects)))
    assert index.builds == 2
    assert index.version != version
    version, parses = index.version, index.parses
    index.refresh(mirror, 12345)
    assert (index.version, index.parses) == (version, parses)


def test_a_new_mirror_rebuilds_and_the_old_one_no_longer_feeds_the_index() -> None:
    """A reconnect replaces the worker's mirror: the index is built from the new one and no
    longer follows the old one; its version never repeats an earlier one."""
    old, new = big_worker(10), big_worker(20)
    index = WorkerIndex()
    index.refresh(old)
    seen = {index.version}
    index.refresh(new)
    assert index.builds == 2
    assert index.version not in seen
    assert len(index.copies) == 20  # the new mirror's
    parses = index.parses
    old.cache("workloads").apply(ObjectEvent("ADDED", workload("late")))
    assert index.parses == parses
    assert old.cache("workloads").listeners == []


def test_a_cached_snapshot_is_rebuilt_after_a_worker_event() -> None:
    mirror = big_worker(10)
    index = WorkerIndex()
    index.refresh(mirror)
    cache = SnapshotCache()
    request = make_request("x", namespace="team-a", queue="user-queue", cpu=1)
    candidate = Candidate("w1", 0, True, "", {}, None)

    def snapshot() -> Any:
        return cache.get(
            candidate,
            index,
            request,
            InFlight(),
            label_key=DEFAULT_GPU_LABEL,
            resource_pattern=DEFAULT_GPU_RESOURCE_PATTERN,
        )

    first = snapshot()
    assert snapshot() is first
    mirror.cache("workloads").apply(ObjectEvent("ADDED", workload("late", i=50)))
    second = snapshot()
    assert second is not first
    assert len(second.pending) == len(first.pending) + 1


def test_a_copy_reserving_its_nominated_quota_continues_the_replay(assignments: list[int]) -> None:
    """Kueue's event stream under a burst: the copy at the head of the in-flight ledger reserves
    on the worker (its Workload and the ClusterQueue's status change, a new index version). The
    next decision's snapshot continues the replay of the one it replaces (the other in-flight
    workloads keep their places: no flavor assignment for them) and ends exactly as a full
    replay of it."""
    flavor = resource_flavor()
    del flavor["spec"]["nodeTaints"]
    mirror = mirror_of(
        queues(resourceflavors=[flavor]), {**WORKER_RESOURCES, "jobs": WORKER_RESOURCES["jobs"]}
    )
    index = WorkerIndex()
    index.refresh(mirror)
    now = 1_800_000_000.0
    in_flight = InFlight()
    for i in range(10):
        request = make_request(f"f{i}", namespace="team-a", queue="user-queue", cpu=8)
        in_flight.record(("w1",), queued_workload(request), now + i)
    decider = make_request("decider", namespace="team-a", queue="user-queue", cpu=1, now=now + 20)
    cache = SnapshotCache()
    candidate = Candidate("w1", 0, True, "", {}, None)

    def decide() -> tuple[Any, Any, int]:
        before = assignments[0]
        snapshot = cache.get(
            candidate,
            index,
            decider,
            in_flight,
            label_key=DEFAULT_GPU_LABEL,
            resource_pattern=DEFAULT_GPU_RESOURCE_PATTERN,
        )
        found = StageContext(decider, [snapshot]).fit(snapshot)
        return snapshot, found, assignments[0] - before - 2  # the probe itself: ever and now

    first, first_fit, replayed = decide()
    assert (replayed, cache.seeded) == (10, 0)
    # f0's copy reserves the 8 CPUs its nomination counted on (the index sums the quota held
    # from the copies' admissions), and the ClusterQueue's status follows.
    copy_ = workload("f0", state="reserved", i=30)
    assignment = copy_["status"]["admission"]["podSetAssignments"][0]
    assignment["flavors"], assignment["resourceUsage"] = {"cpu": "a100"}, {"cpu": "8"}
    mirror.cache("workloads").apply(ObjectEvent("ADDED", copy_))
    queue = cluster_queue()
    queue["status"]["pendingWorkloads"] = 2
    queue["metadata"]["resourceVersion"] = "31"
    mirror.cache("clusterqueues").apply(ObjectEvent("MODIFIED", queue))
    second, second_fit, replayed = decide()
    assert second is not first
    assert [w.key for w in second.in_flight] == [f"team-a/f{i}" for i in range(1, 10)]
    assert (replayed, cache.seeded) == (0, 1)
    fresh = dataclasses.replace(second)  # the same snapshot without the seed: a full replay
    assert StageContext(decider, [fresh]).fit(fresh) == second_fit
    assert second_fit.queued_ahead == first_fit.queued_ahead


def job(name: str, origin: str | None, runs: str | None = None) -> Obj:
    """A worker Job; ``runs``: the copy it runs (MultiKueue's prebuilt-Workload label)."""
    labels = {"batch.kubernetes.io/job-name": name}
    if origin is not None:
        labels[ORIGIN_LABEL] = origin
    if runs is not None:
        labels[PREBUILT_LABEL] = runs
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels, "uid": "u"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
        "status": {"active": 1},
    }


@pytest.mark.parametrize(
    ("objects", "taken"),
    [
        pytest.param({}, "", id="nothing-there"),
        pytest.param(
            {"workloads": [workload("wl", copy_of=None)]},
            "Workload team-a/wl exists there and is not a copy of ours",
            id="foreign-workload",
        ),
        pytest.param(
            {"workloads": [workload("wl", copy_of="other-manager")]},
            "Workload team-a/wl exists there and is not a copy of ours",
            id="another-managers-copy",
        ),
        pytest.param({"workloads": [workload("wl")]}, "", id="our-copy"),
        pytest.param(
            {"workloads": [workload("wl", copy_of=None, state="finished")]},
            "Workload team-a/wl exists there and is not a copy of ours",
            id="finished-foreign-workload",
        ),
        pytest.param(
            {"jobs": [job("train", None)]},
            "Job team-a/train exists there and is not a copy of ours",
            id="foreign-job",
        ),
        pytest.param({"jobs": [job("train", "multikueue")]}, "", id="our-job"),
        pytest.param({"jobs": [job("train", "multikueue", "wl")]}, "", id="our-job-of-this-copy"),
        pytest.param(
            {"jobs": [job("train", "multikueue", "wl-earlier")]},
            "Job team-a/train exists there for another Workload (wl-earlier), a leftover of an "
            "earlier Job of that name",
            id="our-leftover-job-of-another-copy",
        ),
        pytest.param(
            {"jobs": [job("train", None, "wl-earlier")]},
            "Job team-a/train exists there and is not a copy of ours",
            id="foreign-job-with-a-prebuilt-label",
        ),
        pytest.param({"jobs": [job("other", None)]}, "", id="another-name"),
    ],
)
def test_the_same_name_guard_reads_workloads_and_jobs(
    objects: dict[str, list[Obj]], taken: str
) -> None:
    """Issue 18 item 5: which names a worker's index reports taken for the manager Workload
    ``team-a/wl`` owned by the Job ``train`` (C28, C33). The slim Job keeps only what the guard
    reads; the same answer comes from a full build and from events applied one by one."""
    mirror = mirror_of(queues(**objects), WORKER_RESOURCES)
    assert built(mirror).name_taken("team-a", "wl", "train") == taken
    for obj in mirror.cache("jobs").objects.values():
        assert set(obj) == {"apiVersion", "kind", "metadata"}
        assert set(obj["metadata"].get("labels") or {}) <= {ORIGIN_LABEL, PREBUILT_LABEL}
    following = WorkerIndex()
    following.refresh(mirror_of(queues(), WORKER_RESOURCES))
    fed = following.mirror
    assert fed is not None
    for resource in ("workloads", "jobs"):
        for obj in copy.deepcopy(objects.get(resource, [])):
            fed.cache(resource).apply(ObjectEvent("ADDED", obj))
    assert following.name_taken("team-a", "wl", "train") == taken
    for resource in ("workloads", "jobs"):
        for obj in copy.deepcopy(objects.get(resource, [])):
            fed.cache(resource).apply(ObjectEvent("DELETED", obj))
    assert following.name_taken("team-a", "wl", "train") == ""


@pytest.mark.parametrize(
    ("flying_is_a_copy", "pending"),
    [
        pytest.param(True, ["team-a/other"], id="the-copy-of-an-in-flight-workload"),
        pytest.param(False, ["team-a/flying", "team-a/other"], id="a-same-named-stranger"),
    ],
)
def test_a_workload_in_flight_is_counted_once_not_again_as_pending(
    flying_is_a_copy: bool, pending: list[str]
) -> None:
    """The copy of a workload in flight on the worker is left to the in-flight replay (which
    counts what it takes, claims or queues) once the worker shows it pending, so a decision
    does not change with how soon the copy became visible; a same-named Workload that is not a
    copy stays a competitor."""
    mirror = mirror_of(
        queues(
            workloads=[
                workload("flying", i=1, copy_of="multikueue" if flying_is_a_copy else None),
                workload("other", i=2),
            ]
        ),
        WORKER_RESOURCES,
    )
    in_flight = InFlight()
    now = 1_800_000_000.0
    in_flight.record(("w1",), queued_workload(make_request("flying", namespace="team-a")), now)
    snapshot = build_snapshot(
        Candidate("w1", 0, True, "", {}, None),
        built(mirror),
        make_request("decider", namespace="team-a", queue="user-queue", now=now),
        in_flight,
        label_key=DEFAULT_GPU_LABEL,
        resource_pattern=DEFAULT_GPU_RESOURCE_PATTERN,
    )
    assert sorted(w.key for w in snapshot.pending) == pending
    assert [w.key for w in snapshot.in_flight] == ["team-a/flying"]
