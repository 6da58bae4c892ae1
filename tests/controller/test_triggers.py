"""Issue 15: what one event or one re-list costs the controller, counted (never timed).

A fan-out is a walk that re-queues every waiting (or every) manager Workload; its count is
``Nominator.fan_outs``. Reconciles are counted per key by the controller kit, decisions by a
counting pipeline, skipped echoes of our own writes by ``Nominator.echoes_skipped``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.clusters.registry import MANAGER
from dispatcher.clusters.slim import ORIGIN_LABEL, PREBUILT_LABEL
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.nominator import CAPACITY_KEY, USAGE_KEY
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.resources import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from dispatcher.k8s.watching import ObjectEvent
from dispatcher.kueue.hints import CLUSTER_TAINTS
from dispatcher.topology import multikueue_admission_check
from dispatcher_sandbox.harness.controller import (
    ELIGIBLE_STATUS,
    KUEUE,
    World,
    keep_or_first,
    workload,
    world,
)

RELISTED = 1_000


def flavor(name: str) -> dict[str, object]:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}}


@contextlib.asynccontextmanager
async def worker_api(env: World, name: str) -> AsyncIterator[KubeApi]:
    async with await KubeApi.from_kubeconfig(env.workers[name].kubeconfig, name=name) as api:
        yield api


def counting(
    decisions: list[str],
) -> Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]:
    """``keep_or_first``, appending each decided key to ``decisions``."""

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        decisions.append(request.key)
        return keep_or_first(request, snapshots)

    return decide


def waiting_keys(env: World) -> list[str]:
    return list(env.loop.waiting)


async def test_a_worker_relist_of_a_thousand_objects_fans_out_once() -> None:
    """w1 holds 1,000 ResourceFlavors; its flavors watch expires and is re-listed: the 1,000
    LISTED events re-queue nothing, the end of the list fans out once, and the waiting
    workload is reconciled at most once for it (before: one fan-out per listed object)."""
    async with world() as env:
        async with worker_api(env, "w1") as api:
            for i in range(RELISTED):
                await api.create(RESOURCE_FLAVORS, flavor(f"f{i:04d}"))
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        assert waiting_keys(env) == ["default/job"]
        mirror = env.mirrors.workers["w1"].mirror
        assert mirror is not None
        flavors = mirror.cache("resourceflavors")
        lists, fan_outs = flavors.lists, env.loop.fan_outs
        reconciles = env.reconciles["default/job"]

        env.workers["w1"].expire_next_watches()
        assert env.workers["w1"].drop_watches("/resourceflavors") == 1
        # The end of the list asks for one delayed capacity re-queue of w1's workloads.
        await env.wait(
            lambda: flavors.lists == lists + 1 and env.loop.fan_outs > fan_outs and env.idle("job")
        )

        assert len(flavors.objects) == RELISTED
        assert env.loop.fan_outs - fan_outs == 1
        assert env.reconciles["default/job"] - reconciles <= 1


@pytest.mark.parametrize(
    ("change", "waiting"),
    [
        pytest.param("created", ["default/job"], id="a-workload-with-quota-waits"),
        pytest.param("admitted", [], id="one-with-clusterName-does-not"),
        pytest.param("deleted", [], id="a-deleted-one-does-not"),
    ],
)
async def test_the_waiting_set_follows_the_managers_workload_events(
    change: str, waiting: list[str]
) -> None:
    """A fan-out walks the workloads that hold quota and have no ``clusterName``, kept from
    the manager's events, not a scan of the whole cache."""
    async with world() as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        if change == "admitted":
            await env.api.request(
                "PATCH",
                WORKLOADS.path("default", "job") + "/status",
                body={"status": {"clusterName": env.nominated("job")[0]}},
                content_type="application/merge-patch+json",
            )
        elif change == "deleted":
            await env.api.request("DELETE", WORKLOADS.path("default", "job"))
        await env.wait(
            lambda: (
                (env.mirrors.manager.cache("workloads").get("job", "default") is None)
                == (change == "deleted")
                and not env.running
                and not len(env.loop.queue)
                and waiting_keys(env) == waiting
            )
        )


async def test_a_full_requeue_rederives_the_waiting_set_from_the_cache() -> None:
    """Events seen before the loop was attached are not needed: the walk over every workload
    that ``run`` starts with puts each waiting one back in the set."""
    async with world() as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        env.loop.triggers._waiting.clear()  # as if its events had reached no loop
        env.loop.triggers.requeue_all()
        assert waiting_keys(env) == ["default/job"]


async def test_the_echo_of_our_own_write_asks_for_no_decision() -> None:
    """Expectations: the watch event carrying our nomination write (the version its answer
    named) queues nothing, so a nomination costs one decision, not two; a change someone else
    makes afterwards (a label) is decided again as usual."""
    decisions: list[str] = []
    async with world(decide=counting(decisions)) as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        assert (len(decisions), env.loop.writes, env.loop.echoes_skipped) == (1, 1, 1)
        assert not env.loop.awaiting_echo("default/job")

        await env.api.request(
            "PATCH",
            WORKLOADS.path("default", "job"),
            body={"metadata": {"labels": {"team": "a"}}},
            content_type="application/merge-patch+json",
        )
        await env.wait(lambda: len(decisions) == 2 and env.idle("job"))
        assert (env.loop.writes, env.loop.echoes_skipped) == (1, 1)


async def test_a_burst_on_one_worker_requeues_once_only_the_workloads_that_can_go_there() -> None:
    """Twenty ResourceFlavor events on w1 ask for one delayed capacity re-queue of w1 (one heap
    entry, the later asks coalesced into it). When it fires, ``a`` (its check lists w1 and w2)
    is reconciled once and ``b`` (its check lists w2 only) not at all: an event that cannot
    change a workload costs it no reconcile. The timer is held (an hour) and fired by hand, so
    nothing here depends on how fast the events come."""
    config = ControllerConfig(
        resync_seconds=3600.0, sync_grace_seconds=10.0, capacity_coalesce_seconds=3600.0
    )
    async with world(config=config) as env:
        await env.api.create(
            MULTIKUEUE_CONFIGS,
            {
                "apiVersion": KUEUE,
                "kind": "MultiKueueConfig",
                "metadata": {"name": "only-w2"},
                "spec": {"clusters": ["w2"]},
            },
        )
        await env.api.create(ADMISSION_CHECKS, multikueue_admission_check("only-w2", "only-w2"))
        await env.start_dispatcher()
        await env.add_workload("a")
        only_w2 = copy.deepcopy(ELIGIBLE_STATUS)
        only_w2["admissionChecks"][0]["name"] = "only-w2"
        await env.api.create(WORKLOADS, workload("b"), namespace="default")
        await env.api.request(
            "PATCH",
            WORKLOADS.path("default", "b") + "/status",
            body={"status": only_w2},
            content_type="application/merge-patch+json",
        )
        await env.wait(
            lambda: (
                env.nominated("a") == ("w1",)
                and env.nominated("b") == ("w2",)
                and env.idle("a", "b")
            )
        )
        assert waiting_keys(env) == ["default/a", "default/b"]
        queue = env.loop.queue
        before = dict(env.reconciles), env.loop.fan_outs, queue.heap_entries
        async with worker_api(env, "w1") as api:
            for i in range(20):
                await api.create(RESOURCE_FLAVORS, flavor(f"burst-{i:02d}"))
        mirror = env.mirrors.workers["w1"].mirror
        assert mirror is not None
        await env.wait(lambda: len(mirror.cache("resourceflavors").objects) == 20)
        assert queue.deadline(CAPACITY_KEY + "w1") is not None
        assert queue.deadline(CAPACITY_KEY + "w2") is None
        assert (queue.heap_entries, env.loop.fan_outs) == (before[2] + 1, before[1])
        assert env.reconciles == before[0]

        queue.add(CAPACITY_KEY + "w1")  # the coalescing delay, over
        await env.wait(lambda: env.loop.fan_outs == before[1] + 1 and env.idle("a", "b"))
        assert env.reconciles["default/a"] == before[0]["default/a"] + 1
        assert env.reconciles["default/b"] == before[0]["default/b"]


async def _nominated_awaiting_echo(env: World) -> dict[str, object]:
    """Nominate ``job``, then play a write of ours whose echo (version ``echo``) has not come
    yet; returns the cached Workload."""
    await env.start_dispatcher()
    await env.add_workload("job")
    await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
    cached = env.mirrors.manager.cache("workloads").get("job", "default")
    assert cached is not None
    env.loop.writer.expect("default/job", {"metadata": {"resourceVersion": "echo"}}, True)
    return cached


async def test_a_reconcile_behind_our_own_write_waits_for_its_echo() -> None:
    """A reconcile asked for while the cache does not show our last write yet (a capacity
    re-queue right after a nomination) decides nothing: it would decide from the object before
    that write and write again with its stale resourceVersion (a certain conflict). The echo
    then queues it once. The write's answer and its echo are played by hand: the expectation
    names a version, and the loop is handed the watch event carrying it."""
    decisions: list[str] = []
    async with world(decide=counting(decisions)) as env:
        cached = await _nominated_awaiting_echo(env)
        reconciles = env.reconciles["default/job"]

        env.loop.queue.add("default/job")
        await env.wait(lambda: env.reconciles["default/job"] == reconciles + 1)
        assert (len(decisions), env.loop.awaiting_echo("default/job")) == (1, True)

        echo = copy.deepcopy(cached)
        echo["metadata"]["resourceVersion"] = "echo"
        env.loop.on_change(MANAGER, "workloads", ObjectEvent("MODIFIED", echo))
        await env.wait(lambda: len(decisions) == 2 and not env.running and not len(env.loop.queue))
        assert (env.reconciles["default/job"], env.loop.races, env.loop.echoes_skipped) == (
            reconciles + 2,
            0,
            1,
        )


async def test_events_before_the_echo_of_our_write_queue_nothing_until_it() -> None:
    """While the manager's watch has not shown our last write to a Workload, its copy's events
    on a worker, the manager's older events and the fan-outs queue nothing (a reconcile could
    only wait for the echo); the echo then queues it once. In a burst on the Kueue emulation
    with the worker limits lifted, such waiting reconciles were up to 16 per nomination. Played
    by hand, as above."""
    decisions: list[str] = []
    async with world(decide=counting(decisions)) as env:
        cached = await _nominated_awaiting_echo(env)
        reconciles, queued = env.reconciles["default/job"], len(env.loop.queue)

        copy_ = copy.deepcopy(cached)
        copy_["metadata"]["labels"] = {ORIGIN_LABEL: env.config.origin}
        older = copy.deepcopy(cached)
        older["metadata"]["resourceVersion"] = "older"
        for _ in range(5):
            env.loop.on_change("w1", "workloads", ObjectEvent("MODIFIED", copy_))
        env.loop.on_change(MANAGER, "workloads", ObjectEvent("MODIFIED", older))
        env.loop.triggers.requeue_waiting_on("w1")  # a capacity fan-out meanwhile
        env.loop.triggers.requeue_all()
        assert (len(env.loop.queue), env.running) == (queued, 0)
        assert env.reconciles["default/job"] == reconciles

        echo = copy.deepcopy(cached)
        echo["metadata"]["resourceVersion"] = "echo"
        env.loop.on_change(MANAGER, "workloads", ObjectEvent("MODIFIED", echo))
        await env.wait(lambda: len(decisions) == 2 and not env.running and not len(env.loop.queue))
        assert env.reconciles["default/job"] == reconciles + 1


async def test_a_manager_clusterqueue_status_change_requeues_nothing() -> None:
    """The manager's ClusterQueue status changes with every quota reservation; only its spec
    (the cohort) is read, so 20 status writes re-queue nothing, while a new queue and a new
    cohort each re-queue every workload once (before: every event of it re-queued all)."""
    async with world() as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        cache = env.mirrors.manager.cache("clusterqueues")
        before = env.loop.fan_outs

        queue = {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "cq"}}
        await env.api.create(CLUSTER_QUEUES, queue | {"spec": {"cohortName": "pool"}})
        await env.wait(lambda: env.loop.fan_outs == before + 1 and env.idle("job"))
        reconciles = env.reconciles["default/job"]
        for i in range(20):
            await env.api.request(
                "PATCH",
                CLUSTER_QUEUES.path(None, "cq") + "/status",
                body={"status": {"pendingWorkloads": i, "reservingWorkloads": i}},
                content_type="application/merge-patch+json",
            )
        await env.wait(
            lambda: ((cache.get("cq") or {}).get("status") or {}).get("pendingWorkloads") == 19
        )
        assert (env.loop.fan_outs, env.reconciles["default/job"]) == (before + 1, reconciles)

        await env.api.request(
            "PATCH",
            CLUSTER_QUEUES.path(None, "cq"),
            body={"spec": {"cohortName": "other"}},
            content_type="application/merge-patch+json",
        )
        await env.wait(lambda: env.loop.fan_outs == before + 2 and env.idle("job"))
        assert env.reconciles["default/job"] == reconciles + 1


async def test_a_multikueuecluster_annotation_requeues_only_when_it_is_the_taints() -> None:
    """Issue 18 item 3: of a MultiKueueCluster's annotations only its taints can change a
    decision; 10 edits of another annotation re-queue nothing, one taint re-queues every
    workload once."""
    async with world() as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        cache = env.mirrors.manager.cache("multikueueclusters")
        before, reconciles = env.loop.fan_outs, env.reconciles["default/job"]

        def annotate(key: str, value: str) -> Awaitable[object]:
            return env.api.request(
                "PATCH",
                MULTIKUEUE_CLUSTERS.path(None, "w1"),
                body={"metadata": {"annotations": {key: value}}},
                content_type="application/merge-patch+json",
            )

        def annotation(key: str) -> object:
            return ((cache.get("w1") or {}).get("metadata") or {}).get("annotations", {}).get(key)

        for i in range(10):
            await annotate("example.com/note", str(i))
        await env.wait(lambda: annotation("example.com/note") == "9")
        assert (env.loop.fan_outs, env.reconciles["default/job"]) == (before, reconciles)

        taints = '[{"key": "dedicated", "effect": "NoSchedule"}]'
        await annotate(CLUSTER_TAINTS.key, taints)
        await env.wait(lambda: env.loop.fan_outs == before + 1 and env.idle("job"))
        assert annotation(CLUSTER_TAINTS.key) == taints
        assert env.reconciles["default/job"] == reconciles + 1


def placing(
    where: dict[str, tuple[str, ...]],
) -> Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]:
    """Nominate each key where ``where`` says (an empty tuple: nowhere, the workload waits)."""

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        return Decision("placing", where[request.key], "as the test says")

    return decide


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            CAPACITY_KEY,
            {"default/on-w1": 1, "default/on-w2": 0, "default/nowhere": 1},
            id="queues-changed-nominated-there-and-nowhere",
        ),
        pytest.param(
            USAGE_KEY,
            {"default/on-w1": 0, "default/on-w2": 0, "default/nowhere": 1},
            id="usage-changed-nominated-nowhere-only",
        ),
    ],
)
async def test_a_change_on_w1_redecides_only_what_it_can_change(
    change: str, expected: dict[str, int]
) -> None:
    """A coalesced change on w1 re-decides the waiting workloads it can change. When w1's queues
    or flavors changed (``capacity:``): the one nominated to w1 and the one nominated nowhere.
    When only what its queues hold changed (``usage:``, a copy admitted, a ClusterQueue's usage):
    the one nominated nowhere. Never the one nominated to w2, which keeps its nomination while
    w2 stays eligible (before: every waiting workload was re-decided on every such event of a
    burst, the nominated ones whose copies Kueue had not admitted yet included)."""
    where = {"default/on-w1": ("w1",), "default/on-w2": ("w2",), "default/nowhere": ()}
    async with world(decide=placing(where)) as env:
        await env.start_dispatcher()
        for name in ("on-w1", "on-w2", "nowhere"):
            await env.add_workload(name)
        await env.wait(
            lambda: (
                env.nominated("on-w1") == ("w1",)
                and env.nominated("on-w2") == ("w2",)
                and env.reconciles.get("default/nowhere", 0) > 0
                and env.idle("on-w1", "on-w2", "nowhere")
            )
        )
        assert waiting_keys(env) == ["default/on-w1", "default/on-w2", "default/nowhere"]
        before, fan_outs = dict(env.reconciles), env.loop.fan_outs

        env.loop.queue.add(change + "w1")  # the coalesced change of w1, due now
        await env.wait(
            lambda: env.loop.fan_outs == fan_outs + 1 and env.idle("on-w1", "on-w2", "nowhere")
        )
        assert {k: env.reconciles[k] - before[k] for k in before} == expected


def _queues() -> tuple[dict[str, object], dict[str, object]]:
    cq = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"cohortName": "pool", "resourceGroups": []},
    }
    lq = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "user-queue", "namespace": "default"},
        "spec": {"clusterQueue": "cq"},
    }
    return cq, lq


@pytest.mark.parametrize(
    ("resource", "patch", "expected"),
    [
        pytest.param(
            "clusterqueues",
            {"status": {"flavorsUsage": [{"name": "f", "resources": []}], "pendingWorkloads": 3}},
            USAGE_KEY,
            id="a-clusterqueues-usage-is-usage",
        ),
        pytest.param(
            "clusterqueues",
            {"status": {"conditions": [{"type": "Active", "status": "False", "reason": "x"}]}},
            CAPACITY_KEY,
            id="its-active-condition-is-shape",
        ),
        pytest.param(
            "clusterqueues", {"spec": {"cohortName": "other"}}, CAPACITY_KEY, id="its-spec-is-shape"
        ),
        pytest.param(
            "localqueues",
            {"status": {"pendingWorkloads": 3, "reservingWorkloads": 1}},
            None,
            id="a-localqueues-status-is-nothing",
        ),
    ],
)
async def test_what_a_worker_queue_event_asks_for(
    resource: str, patch: dict[str, object], expected: str | None
) -> None:
    """A worker queue event asks for the wide re-queue (``capacity:``) when the queue itself
    changed, for the narrow one (``usage:``) when only what it holds did, and for none when
    nothing the decisions read changed. The coalescing delay is an hour, so what an event asked
    for stays visible until the test fires it."""
    config = ControllerConfig(
        resync_seconds=3600.0, sync_grace_seconds=10.0, capacity_coalesce_seconds=3600.0
    )
    async with world(config=config) as env:
        await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        queue = env.loop.queue
        mirror = env.mirrors.workers["w1"].mirror
        assert mirror is not None
        cq, lq = _queues()
        pending = (CAPACITY_KEY + "w1", USAGE_KEY + "w1")
        async with worker_api(env, "w1") as api:
            await api.create(CLUSTER_QUEUES, cq)
            await api.create(LOCAL_QUEUES, lq, namespace="default")
            await env.wait(
                lambda: (
                    mirror.cache("clusterqueues").get("cq") is not None
                    and mirror.cache("localqueues").get("user-queue", "default") is not None
                )
            )
            for key in pending:
                if queue.deadline(key) is not None:
                    queue.add(key)  # what the new queues asked for, due now
            await env.wait(lambda: all(queue.deadline(k) is None for k in pending))
            await env.wait(lambda: env.idle("job"))
            cache = mirror.cache(resource)
            version = cache.resource_version
            ref = CLUSTER_QUEUES if resource == "clusterqueues" else LOCAL_QUEUES
            namespace = None if resource == "clusterqueues" else "default"
            name = "cq" if resource == "clusterqueues" else "user-queue"
            path = ref.path(namespace, name) + ("/status" if "status" in patch else "")
            await api.request(
                "PATCH", path, body=patch, content_type="application/merge-patch+json"
            )
            await env.wait(lambda: cache.resource_version != version)
        asked = [k for k in pending if queue.deadline(k) is not None]
        assert asked == ([] if expected is None else [expected + "w1"])


def foreign_job(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    """A batch Job on a worker; without our origin label it is not a copy of ours."""
    metadata: dict[str, object] = {"name": name, "namespace": "default"}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {}}


def guarded(
    seen: list[dict[str, str]],
) -> Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]:
    """``keep_or_first`` over the clusters the same-name guard leaves (as every pipeline drops
    them), recording each decision's ``name_taken``."""

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        seen.append(dict(request.name_taken))
        return keep_or_first(request, [s for s in snapshots if s.name not in request.name_taken])

    return decide


async def add_owned_by_train(env: World) -> None:
    """The manager Workload ``job``, owned by the batch Job ``train``, eligible."""
    owned = workload("job")
    owned["metadata"]["ownerReferences"] = [  # type: ignore[index]
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": "0000-train",
            "controller": True,
        }
    ]
    await env.api.create(WORKLOADS, owned, namespace="default")
    await env.api.request(
        "PATCH",
        WORKLOADS.path("default", "job") + "/status",
        body={"status": ELIGIBLE_STATUS},
        content_type="application/merge-patch+json",
    )


async def test_worker_jobs_cost_nothing_unless_they_take_a_waiting_workloads_name() -> None:
    """Issue 18 item 5, counted. w1 holds a Job ``train`` that is not ours, and the manager
    Workload ``job`` is owned by a Job ``train``: its decisions see w1's name taken and it goes
    to w2. Then a foreign Job of another name created and changed three times on w1, and our
    own copy Job ``train`` on w2, cost no reconcile, no fan-out, no capacity re-queue and no
    new index version (snapshots stay valid); deleting w1's foreign ``train`` reconciles
    ``job`` exactly once, and that decision sees no name taken."""
    seen: list[dict[str, str]] = []
    async with (
        world(decide=guarded(seen)) as env,
        worker_api(env, "w1") as w1,
        worker_api(env, "w2") as w2,
    ):
        await w1.create(JOBS, foreign_job("train", {"team": "someone"}), namespace="default")
        await env.start_dispatcher()
        await add_owned_by_train(env)
        await env.wait(lambda: env.nominated("job") == ("w2",) and env.idle("job"))
        assert seen[-1] == {"w1": "Job default/train exists there and is not a copy of ours"}
        assert "w2" not in seen[-1]

        index = env.loop.indexes["w1"]
        queue = env.loop.queue
        before = (dict(env.reconciles), env.loop.fan_outs, index.version, len(seen))
        await w1.create(JOBS, foreign_job("other"), namespace="default")
        changed: dict[str, object] = {}
        for i in range(3):
            changed = await w1.request(
                "PATCH",
                JOBS.path("default", "other") + "/status",
                body={"status": {"active": i}},
                content_type="application/merge-patch+json",
            )
        await w2.create(
            JOBS, foreign_job("train", {ORIGIN_LABEL: "multikueue"}), namespace="default"
        )
        w1_mirror, w2_mirror = env.mirrors.workers["w1"].mirror, env.mirrors.workers["w2"].mirror
        assert w1_mirror is not None
        assert w2_mirror is not None
        version = changed["metadata"]["resourceVersion"]  # type: ignore[index]

        def seen_all() -> bool:
            other = w1_mirror.cache("jobs").get("other", "default") or {}
            return (
                other.get("metadata", {}).get("resourceVersion") == version
                and w2_mirror.cache("jobs").get("train", "default") is not None
            )

        await env.wait(seen_all)
        await env.wait(lambda: index.foreign_jobs == {("default", "train"), ("default", "other")})
        assert env.idle("job")
        assert dict(env.reconciles) == before[0]
        assert (env.loop.fan_outs, index.version, len(seen)) == before[1:]
        assert queue.deadline(CAPACITY_KEY + "w1") is None
        assert queue.deadline(USAGE_KEY + "w1") is None

        await w1.request("DELETE", JOBS.path("default", "train"))
        await env.wait(
            lambda: (
                env.reconciles["default/job"] == before[0]["default/job"] + 1 and env.idle("job")
            )
        )
        assert seen[-1] == {}
        assert index.foreign_jobs == {("default", "other")}
        assert env.nominated("job") == ("w2",)
        assert env.loop.fan_outs == before[1]


async def test_a_leftover_copy_job_takes_the_name_and_its_own_copy_job_costs_nothing() -> None:
    """C68, counted: w1 holds a Job ``train`` of ours that runs another Workload
    (``job-earlier``, a leftover of an earlier Job of that name), and the manager Workload
    ``job`` is owned by a Job ``train``: its decisions see w1's name taken and it goes to w2.
    The Job MultiKueue creates for ``job`` itself on w2 (prebuilt label ``job``) costs no
    reconcile and no fan-out; deleting w1's leftover reconciles ``job`` exactly once, and that
    decision sees no name taken."""
    seen: list[dict[str, str]] = []
    leftover = {ORIGIN_LABEL: "multikueue", PREBUILT_LABEL: "job-earlier"}
    async with (
        world(decide=guarded(seen)) as env,
        worker_api(env, "w1") as w1,
        worker_api(env, "w2") as w2,
    ):
        await w1.create(JOBS, foreign_job("train", leftover), namespace="default")
        await env.start_dispatcher()
        await add_owned_by_train(env)
        await env.wait(lambda: env.nominated("job") == ("w2",) and env.idle("job"))
        assert seen[-1] == {
            "w1": "Job default/train exists there for another Workload (job-earlier), a "
            "leftover of an earlier Job of that name"
        }

        before = (dict(env.reconciles), env.loop.fan_outs, len(seen))
        own = {ORIGIN_LABEL: "multikueue", PREBUILT_LABEL: "job"}
        await w2.create(JOBS, foreign_job("train", own), namespace="default")
        w2_mirror = env.mirrors.workers["w2"].mirror
        assert w2_mirror is not None
        await env.wait(lambda: w2_mirror.cache("jobs").get("train", "default") is not None)
        assert env.idle("job")
        assert (dict(env.reconciles), env.loop.fan_outs, len(seen)) == before

        await w1.request("DELETE", JOBS.path("default", "train"))
        await env.wait(
            lambda: (
                env.reconciles["default/job"] == before[0]["default/job"] + 1 and env.idle("job")
            )
        )
        assert seen[-1] == {}
        assert env.nominated("job") == ("w2",)
        assert env.loop.fan_outs == before[1]


async def test_a_deleted_worker_leaves_no_index_snapshots_or_stuck_state() -> None:
    """A MultiKueueCluster deleted: the loop drops that worker's index (detached from the old
    mirror), its cached snapshots and the stuck detector's record of it; the other worker's
    stay (before: kept for the life of the process)."""
    async with world() as env:
        nominator = await env.start_dispatcher()
        await env.add_workload("job")
        await env.wait(lambda: env.nominated("job") != () and env.idle("job"))
        assert set(nominator.indexes) == {"w1", "w2"}
        for worker in ("w1", "w2"):
            nominator.stuck.admission_recorded(worker, 1.0)
        old = nominator.indexes["w2"]

        await env.api.request("DELETE", MULTIKUEUE_CLUSTERS.path(None, "w2"))
        await env.wait(lambda: "w2" not in env.mirrors.workers and "w2" not in nominator.indexes)
        assert set(nominator.indexes) == {"w1"}
        assert nominator.stuck.clusters == {"w1"}
        assert old.mirror is not None
        listening = [
            listener
            for cache in old.mirror.caches.values()
            for listener in cache.listeners
            if getattr(listener, "func", None) == old.apply
        ]
        assert listening == []
