"""The backend interface of the scenario suite, and the part both backends share.

Scenarios (``test_e2e_scenarios.py``) are written once against :class:`Backend`. Three
backends implement it:

- ``sandbox`` (``e2e_sandbox_backend.py``, the default, runs in CI): fake API servers, the
  emulated Kueue and the real dispatcher in this process (``dispatcher_sandbox.environment``);
- ``real`` (``e2e_real_backend.py``, runs in CI): real kube-apiserver, etcd and Kueue v0.19.2
  processes on loopback (``dispatcher_sandbox.real_kueue``) and two ``multikueue-dispatcher run``
  processes;
- ``kind`` (``e2e_kind_backend.py``, opt-in): three kind clusters with the real Kueue and the
  dispatcher Deployment, set up by ``hack/kind-e2e.sh``.

All are a :class:`KubeBackend`: everything they observe goes through kubernetes_asyncio over
the clusters' kubeconfigs (HTTPS, bearer tokens), so the sandbox run exercises the same reading
code as the real and kind runs. A backend only adds what needs the environment's own controls:
taking a worker off the network, restarting the dispatcher, switching Kueue's dispatcher.

What a backend observes is kept in :class:`ClusterView` mirrors (one list-then-watch per cluster
and kind), which also keep the **history** of every Workload: the nominations written on the
manager and every remote copy that ever appeared on a worker, so scenarios can assert that
something never happened ("no copy ever appeared on worker1").
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import aiohttp
import anyio
import anyio.abc
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.topology import WorkloadLine, workload_object
from dispatcher_sandbox.harness.e2e.trace import record, recorder_of
from dispatcher_sandbox.kube_client import closed_under_read

log = logging.getLogger(__name__)

Obj = dict[str, Any]
T = TypeVar("T")
KueueMode = Literal["external", "all-at-once", "incremental"]

NAMESPACE = "team-a"
WORKERS = ("worker1", "worker2")
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_NAMESPACE = "kueue-system"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
GPU_OF = {"worker1": A100, "worker2": H100}
USER_AGENT = "multikueue-dispatcher-e2e"


@dataclass(frozen=True)
class Timeouts:
    """Deadlines of the backend's waits (Kueue's e2e: 10 s, 45 s, 90 s, 5 min; contract C79)."""

    short: float
    long: float
    quiet: float
    """How long a scenario watches for something that must not happen (S1, S9)."""


# --- what the scenarios need --------------------------------------------------------------------


class Backend(Protocol):
    """What a scenario may do and observe. Names of jobs are Job names on the manager."""

    name: str
    timeouts: Timeouts

    async def submit(self, job: WorkloadLine) -> None:
        """Create the Job on the manager (suspended, managed by MultiKueue)."""

    async def submit_to_worker(self, worker: str, job: WorkloadLine) -> None:
        """Create a Job directly on a worker (its own Kueue queues it; no MultiKueue)."""

    async def delete_job(self, name: str, worker: str | None = None) -> None:
        """Delete a Job on the manager (or on ``worker``), with its pods."""

    async def release_hold(self, worker: str, name: str) -> None:
        """Create the ConfigMap ``name`` on ``worker``: its Jobs held on it
        (``holdUntilConfigMap``, ``dispatcher.topology.runs``) may finish from now on.
        :meth:`reset` deletes it again."""

    async def wait_workload(
        self, job: str, predicate: Callable[[Obj], bool], what: str, within: float | None = None
    ) -> Obj:
        """Wait until the manager Workload of ``job`` satisfies ``predicate``; returns it."""

    async def wait_for(self, predicate: Callable[[], T | None], what: str, within: float) -> T:
        """Wait until ``predicate()`` (over what the backend observes) returns a value."""

    async def stays(self, predicate: Callable[[], bool], what: str, window: float) -> None:
        """Fail if ``predicate()`` turns false within ``window`` seconds (must-not-happen)."""

    def workload(self, job: str) -> Obj | None:
        """The manager Workload of ``job`` as last observed."""

    def copies(self, job: str) -> dict[str, Obj]:
        """The remote copies of ``job``'s Workload now, by worker."""

    def copies_ever(self, job: str) -> set[str]:
        """The workers on which a copy of ``job``'s Workload ever appeared."""

    def preempted_on(self, job: str) -> set[str]:
        """The workers whose Kueue ever evicted a copy of ``job``'s Workload to preempt it."""

    def nominations(self, job: str) -> list[tuple[str, ...]]:
        """Every distinct ``status.nominatedClusterNames`` of ``job``'s Workload, in order."""

    def revisions(self, job: str) -> list[str]:
        """Every resourceVersion of ``job``'s manager Workload observed, in order."""

    def worker_jobs(self, worker: str) -> set[str]:
        """Names of the Jobs on a worker now."""

    def cluster_active(self, worker: str) -> bool | None:
        """The MultiKueueCluster's ``Active`` condition as Kueue reports it."""

    async def disconnect_worker(self, worker: str) -> None:
        """Make the worker's API unreachable (Kueue and the dispatcher lose it)."""

    async def reconnect_worker(self, worker: str) -> None:
        """Make the worker's API reachable again."""

    async def stop_dispatcher(self) -> None:
        """Stop every dispatcher replica (Kueue keeps running)."""

    async def start_dispatcher(self) -> None:
        """Start the dispatcher again (new processes: nothing is kept in memory)."""

    async def set_dispatcher_env(self, env: Mapping[str, str]) -> None:
        """Run the dispatcher with these environment variables from now on (its settings take
        precedence over the settings file's; an empty mapping: none of them), restarting it."""

    async def restart_dispatcher(self) -> None:
        """Stop the dispatcher and start it again (a new process, nothing kept in memory)."""

    async def leader_identity(self) -> str:
        """The identity of the dispatcher replica that holds the Lease (waits for one)."""

    async def kill_leader(self) -> str:
        """End the replica that holds the Lease without a goodbye where the backend can (a
        SIGKILL on real, a forced pod deletion on kind; the sandbox cancels it in process);
        returns its identity. Another replica takes over."""

    async def add_worker_cluster(self, name: str, kubeconfig: str) -> None:
        """Create a MultiKueueCluster ``name`` whose Secret holds ``kubeconfig`` (any text) and
        add it to the MultiKueueConfig."""

    async def remove_worker_cluster(self, name: str) -> None:
        """Undo :meth:`add_worker_cluster`."""

    async def use_kueue_dispatcher(self, mode: KueueMode) -> None:
        """Switch Kueue's ``multiKueue.dispatcherName``: ``external`` (ours, with our dispatcher
        running) or one of Kueue's built-ins (with our dispatcher stopped). The clusters hold
        no scenario Jobs afterwards."""

    async def reset(self) -> None:
        """Delete every scenario Job on every cluster and wait until no Workload is left."""


# --- observed state ------------------------------------------------------------------------------


class ApiBackend(Backend, Protocol):
    """A :class:`Backend` with its API clients (every backend here is a ``KubeBackend``)."""

    apis: dict[str, client.ApiClient]

    async def create_job_on(self, cluster: str, body: Obj) -> None: ...

    async def config_clusters(self) -> list[str]: ...

    async def set_config_clusters(self, clusters: list[str]) -> None: ...

    def job_on(self, cluster: str, name: str) -> Obj | None: ...


async def listed_events(backend: ApiBackend, workload: str, reason: str) -> list[Obj]:
    """The Events of ``reason`` on the manager Workload ``workload`` now (one list call: Events
    are not mirrored)."""
    listed = await client.CoreV1Api(backend.apis["manager"]).list_namespaced_event(NAMESPACE)
    return [
        backend.apis["manager"].sanitize_for_serialization(e)
        for e in listed.items
        if e.reason == reason and e.involved_object.name == workload
    ]


async def manager_events(
    backend: ApiBackend, workload: str, reason: str, within: float
) -> list[Obj]:
    """:func:`listed_events` once there is one, waiting up to ``within`` seconds (listed again
    twice a second, bounded above)."""
    with anyio.fail_after(within):
        while not (found := await listed_events(backend, workload, reason)):  # noqa: ASYNC110
            await anyio.sleep(0.5)
    return found


async def patch_multikueue_cluster(
    backend: ApiBackend, cluster: str, metadata: Mapping[str, Any]
) -> None:
    """Merge-patch a MultiKueueCluster's metadata on the manager, as an admin labels or
    annotates it (a ``None`` value removes the key)."""
    await client.CustomObjectsApi(backend.apis["manager"]).patch_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "multikueueclusters",
        cluster,
        {"metadata": dict(metadata)},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )


@dataclass
class History:
    """What was observed of one Workload (by name) over the run."""

    nominations: list[tuple[str, ...]] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)
    copies_on: set[str] = field(default_factory=set)
    preempted_on: set[str] = field(default_factory=set)
    """Workers whose Kueue evicted a copy of it for a preemption (the copy's own ``Evicted``
    condition with reason ``Preempted``, as that worker wrote it)."""


def owner_job(obj: Obj) -> str | None:
    """The name of the Job owning a Workload (None for a Workload without one)."""
    for owner in obj["metadata"].get("ownerReferences") or []:
        if owner.get("kind") == "Job":
            return str(owner["name"])
    return None


def nominated_of(obj: Obj) -> tuple[str, ...]:
    """``status.nominatedClusterNames``."""
    return tuple(str(n) for n in (obj.get("status") or {}).get("nominatedClusterNames") or ())


def cluster_of(obj: Obj | None) -> str | None:
    """``status.clusterName`` (None until Kueue admitted the Workload on a worker)."""
    value = ((obj or {}).get("status") or {}).get("clusterName")
    return str(value) if value else None


def condition(obj: Obj | None, kind: str) -> Obj | None:
    """The condition of that type."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            found: Obj = item
            return found
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    """Whether the condition ``kind`` is True."""
    return (condition(obj, kind) or {}).get("status") == "True"


def is_false(obj: Obj | None, kind: str) -> bool:
    """Whether the condition ``kind`` is present and False (absent is neither)."""
    return (condition(obj, kind) or {}).get("status") == "False"


def admitted_on(worker: str) -> Callable[[Obj], bool]:
    """Predicate: ``clusterName`` is ``worker`` and the manager Workload is ``Admitted``."""
    return lambda w: cluster_of(w) == worker and is_true(w, "Admitted")


@dataclass(frozen=True)
class Watched:
    """A collection a :class:`ClusterView` mirrors."""

    key: str
    group: str
    version: str
    plural: str
    namespaced: bool = True


WORKLOADS = Watched("workloads", KUEUE_GROUP, KUEUE_VERSION, "workloads")
JOBS = Watched("jobs", "batch", "v1", "jobs")
MULTIKUEUE_CLUSTERS = Watched(
    "multikueueclusters", KUEUE_GROUP, KUEUE_VERSION, "multikueueclusters", namespaced=False
)


class ClusterView:
    """List-then-watch mirrors of a few collections of one cluster; survives the cluster going
    away (the last state is kept and the watch is resumed when it is back)."""

    def __init__(
        self,
        name: str,
        api: client.ApiClient,
        watched: tuple[Watched, ...],
        notify: Callable[[str, str, Obj], None],
    ) -> None:
        self.name = name
        self.api = api
        self.watched = watched
        self.objects: dict[str, dict[str, Obj]] = {w.key: {} for w in watched}
        self.synced: dict[str, bool] = {w.key: False for w in watched}
        self._notify = notify

    async def run(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Mirror every collection until cancelled; started once all are listed."""
        async with anyio.create_task_group() as group:
            for spec in self.watched:
                await group.start(self._mirror, spec)
            task_status.started()

    def _list_call(self, spec: Watched) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if spec.key == "jobs":
            return client.BatchV1Api(self.api).list_namespaced_job, (NAMESPACE,)
        objects = client.CustomObjectsApi(self.api)
        if spec.namespaced:
            return objects.list_namespaced_custom_object, (
                spec.group,
                spec.version,
                NAMESPACE,
                spec.plural,
            )
        return objects.list_cluster_custom_object, (spec.group, spec.version, spec.plural)

    async def _mirror(
        self, spec: Watched, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        call, args = self._list_call(spec)
        started = False
        while True:
            try:
                listed = await call(*args, _request_timeout=10)
                if spec.key == "jobs":
                    listed = self.api.sanitize_for_serialization(listed)
                items = {i["metadata"]["name"]: i for i in listed.get("items") or []}
                self.objects[spec.key] = items
                self.synced[spec.key] = True
                for obj in items.values():
                    self._notify(self.name, spec.key, obj)
                self._notify(self.name, spec.key, {})
                if not started:
                    started = True
                    task_status.started()
                version = (listed.get("metadata") or {}).get("resourceVersion")
                while True:
                    # Each watch ends after timeoutSeconds: resume from the last version seen,
                    # never re-list, so that an object created and deleted in between (a remote
                    # copy Kueue removes at once) is still observed. Re-list only after an error
                    # (410 Expired included).
                    async with watch.Watch() as stream:
                        async for event in stream.stream(
                            call, *args, resource_version=version, timeout_seconds=30
                        ):
                            obj = event["object"]
                            if not isinstance(obj, dict):
                                obj = self.api.sanitize_for_serialization(obj)
                            version = obj["metadata"].get("resourceVersion") or version
                            if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                                continue
                            name = obj["metadata"]["name"]
                            if event["type"] == "DELETED":
                                self.objects[spec.key].pop(name, None)
                            else:
                                self.objects[spec.key][name] = obj
                            self._notify(self.name, spec.key, obj)
            except (
                ApiException,
                aiohttp.ClientError,
                OSError,
                TimeoutError,
                ValueError,
                RuntimeError,
            ) as error:
                # The cluster is away (S8), the watch expired or its connection was closed
                # under a read: keep the last state, retry.
                if isinstance(error, RuntimeError) and not closed_under_read(error):
                    raise
                log.debug("%s %s: watch interrupted: %s", self.name, spec.key, error)
                if not started:
                    raise
                await anyio.sleep(0.2)  # retry backoff, not synchronisation


def arrived(value: object) -> bool:
    """Whether a :meth:`Backend.wait_for` predicate's answer means the awaited state is there:
    anything but None, False and an empty collection (a predicate that lists what it waits for,
    such as the Jobs preempted so far, has not arrived while the list is empty)."""
    if value is None or value is False:
        return False
    return not (isinstance(value, Sized) and not isinstance(value, str) and len(value) == 0)


class KubeBackend:
    """The observing half of every backend: clients and mirrors over kubeconfig dicts."""

    name = "kube"
    timeouts = Timeouts(short=30, long=90, quiet=10)

    def __init__(self) -> None:
        self.apis: dict[str, client.ApiClient] = {}
        self.views: dict[str, ClusterView] = {}
        self.history: dict[str, History] = {}
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._holds: set[tuple[str, str]] = set()

    # --- connecting ---------------------------------------------------------------------------

    async def connect(
        self, kubeconfigs: Mapping[str, Mapping[str, Any]], group: anyio.abc.TaskGroup
    ) -> None:
        """Build clients for ``manager`` and the workers and start the mirrors in ``group``."""
        self.history.clear()
        for name, kubeconfig in kubeconfigs.items():
            api = await config.new_client_from_config_dict(dict(kubeconfig))
            api.user_agent = USER_AGENT
            self.apis[name] = api
        scope = anyio.CancelScope()
        self._scope = scope

        async def mirrors(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with scope:
                async with anyio.create_task_group() as inner:
                    for name, api in self.apis.items():
                        watched = (
                            (WORKLOADS, MULTIKUEUE_CLUSTERS, JOBS)
                            if name == "manager"
                            else (WORKLOADS, JOBS)
                        )
                        view = ClusterView(name, api, watched, self._observed)
                        self.views[name] = view
                        await inner.start(view.run)
                    task_status.started()

        await group.start(mirrors)

    async def disconnect(self) -> None:
        """Stop the mirrors and close the clients."""
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None
        for api in self.apis.values():
            with anyio.CancelScope(shield=True):
                await api.close()
        self.apis.clear()
        self.views.clear()

    def _observed(self, cluster: str, key: str, obj: Obj) -> None:
        record(self, cluster, key, obj)  # the differential trace (harness.e2e.trace, issue 14)
        if obj and key == "workloads":
            name = obj["metadata"]["name"]
            history = self.history.setdefault(name, History())
            if cluster == "manager":
                nominated = nominated_of(obj)
                if not history.nominations or history.nominations[-1] != nominated:
                    history.nominations.append(nominated)
                rv = str(obj["metadata"].get("resourceVersion", ""))
                if not history.revisions or history.revisions[-1] != rv:
                    history.revisions.append(rv)
            elif (obj["metadata"].get("labels") or {}).get(ORIGIN_LABEL):
                history.copies_on.add(cluster)
                evicted = condition(obj, "Evicted")
                if (
                    evicted
                    and evicted.get("status") == "True"
                    and evicted.get("reason") == ("Preempted")
                ):
                    history.preempted_on.add(cluster)
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    # --- observing ----------------------------------------------------------------------------

    def _manager_workloads(self) -> dict[str, Obj]:
        return self.views["manager"].objects["workloads"]

    def workload(self, job: str) -> Obj | None:
        for obj in self._manager_workloads().values():
            if owner_job(obj) == job:
                return copy.deepcopy(obj)
        return None

    def _workload_name(self, job: str) -> str | None:
        found = self.workload(job)
        return str(found["metadata"]["name"]) if found else None

    def copies(self, job: str) -> dict[str, Obj]:
        name = self._workload_name(job)
        out: dict[str, Obj] = {}
        for worker in WORKERS:
            obj = self.views[worker].objects["workloads"].get(name or "")
            if obj is not None and (obj["metadata"].get("labels") or {}).get(ORIGIN_LABEL):
                out[worker] = copy.deepcopy(obj)
        return out

    def copies_ever(self, job: str) -> set[str]:
        name = self._workload_name(job)
        return set(self.history[name].copies_on) if name in self.history else set()

    def preempted_on(self, job: str) -> set[str]:
        name = self._workload_name(job)
        return set(self.history[name].preempted_on) if name in self.history else set()

    def nominations(self, job: str) -> list[tuple[str, ...]]:
        name = self._workload_name(job)
        return list(self.history[name].nominations) if name in self.history else []

    def revisions(self, job: str) -> list[str]:
        name = self._workload_name(job)
        return list(self.history[name].revisions) if name in self.history else []

    def worker_jobs(self, worker: str) -> set[str]:
        return set(self.views[worker].objects["jobs"])

    def cluster_active(self, worker: str) -> bool | None:
        mkc = self.views["manager"].objects["multikueueclusters"].get(worker)
        found = condition(mkc, "Active")
        return None if found is None else found.get("status") == "True"

    async def wait_for(self, predicate: Callable[[], T | None], what: str, within: float) -> T:
        """Re-evaluate ``predicate`` on every observed change until it returns a value
        (:func:`arrived`: not None, False or an empty collection)."""
        try:
            with anyio.fail_after(within):
                while True:
                    changed = self._changed
                    value = predicate()
                    if arrived(value):
                        return value  # type: ignore[return-value]  # arrived: not None
                    await changed.wait()
        except TimeoutError:
            raise AssertionError(f"[{self.name}] not within {within:g} s: {what}") from None

    async def stays(self, predicate: Callable[[], bool], what: str, window: float) -> None:
        """Watch every observed change for ``window`` seconds; fail as soon as ``predicate()``
        turns false (for things that must not happen: a copy, a nomination, a write)."""
        with anyio.move_on_after(window):
            while True:
                changed = self._changed
                assert predicate(), f"[{self.name}] {what}"
                await changed.wait()
        assert predicate(), f"[{self.name}] {what}"

    async def wait_workload(
        self, job: str, predicate: Callable[[Obj], bool], what: str, within: float | None = None
    ) -> Obj:
        def check() -> Obj | None:
            found = self.workload(job)
            return found if found is not None and predicate(found) else None

        return await self.wait_for(check, f"{job}: {what}", within or self.timeouts.short)

    # --- acting ---------------------------------------------------------------------------------

    def job_body(self, job: WorkloadLine) -> Obj:
        """The manager Job for a workload line (backends adapt the pod template)."""
        return workload_object(job)

    async def submit(self, job: WorkloadLine) -> None:
        await client.BatchV1Api(self.apis["manager"]).create_namespaced_job(
            NAMESPACE,
            self.job_body(job),  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well
        )

    async def submit_to_worker(self, worker: str, job: WorkloadLine) -> None:
        body = self.job_body(job)
        del body["spec"]["managedBy"]  # a local Job of the worker's own Kueue
        await client.BatchV1Api(self.apis[worker]).create_namespaced_job(NAMESPACE, body)  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well

    async def delete_job(self, name: str, worker: str | None = None) -> None:
        api = client.BatchV1Api(self.apis[worker or "manager"])
        with contextlib.suppress(ApiException):
            await api.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")

    async def release_hold(self, worker: str, name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE},
            # On kind the held pod waits for this key in its (optional) ConfigMap volume.
            "data": {"released": "true"},
        }
        await client.CoreV1Api(self.apis[worker]).create_namespaced_config_map(NAMESPACE, body)  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well
        self._holds.add((worker, name))

    async def _drop_holds(self) -> None:
        for worker, name in sorted(self._holds):
            with contextlib.suppress(ApiException):
                await client.CoreV1Api(self.apis[worker]).delete_namespaced_config_map(
                    name, NAMESPACE
                )
        self._holds.clear()

    async def lease_holder(self, namespace: str, name: str, identities: set[str]) -> str:
        """Wait until one of ``identities`` holds the Lease; returns it."""

        async def holder() -> str | None:
            try:
                lease = await client.CoordinationV1Api(self.apis["manager"]).read_namespaced_lease(
                    name, namespace
                )
            except ApiException:
                return None
            found = lease.spec.holder_identity if lease.spec else None
            return found if found in identities else None

        with anyio.fail_after(self.timeouts.long):
            while True:
                found = await holder()
                if found is not None:
                    return found
                await anyio.sleep(0.5)  # a Lease is not mirrored: re-read, bounded by the deadline

    # --- MultiKueue objects on the manager (the same API calls on every backend) -------------

    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.apis["manager"])

    async def _multikueue_config(self) -> tuple[str, list[str]]:
        listed = await self._custom().list_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "multikueueconfigs"
        )
        [config] = listed["items"]
        return config["metadata"]["name"], list(config["spec"]["clusters"])

    async def config_clusters(self) -> list[str]:
        """The clusters of the manager's MultiKueueConfig."""
        return (await self._multikueue_config())[1]

    async def set_config_clusters(self, clusters: list[str]) -> None:
        """Set the clusters of the manager's MultiKueueConfig."""
        name, _ = await self._multikueue_config()
        await self._custom().patch_cluster_custom_object(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
            KUEUE_GROUP,
            KUEUE_VERSION,
            "multikueueconfigs",
            name,
            {"spec": {"clusters": clusters}},
            _content_type="application/merge-patch+json",
        )

    async def add_worker_cluster(self, name: str, kubeconfig: str) -> None:
        secret = f"{name}-kubeconfig"
        await client.CoreV1Api(self.apis["manager"]).create_namespaced_secret(
            KUEUE_NAMESPACE,
            {  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": KUEUE_NAMESPACE},
                "stringData": {"kubeconfig": kubeconfig},
            },
        )
        await self._custom().create_cluster_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "multikueueclusters",
            {
                "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
                "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {
                    "clusterSource": {"kubeConfig": {"location": secret, "locationType": "Secret"}}
                },
            },
        )
        clusters = await self.config_clusters()
        await self.set_config_clusters([*clusters, name])

    async def remove_worker_cluster(self, name: str) -> None:
        clusters = await self.config_clusters()
        await self.set_config_clusters([c for c in clusters if c != name])
        with contextlib.suppress(ApiException):
            await self._custom().delete_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "multikueueclusters", name
            )
        with contextlib.suppress(ApiException):
            await client.CoreV1Api(self.apis["manager"]).delete_namespaced_secret(
                f"{name}-kubeconfig", KUEUE_NAMESPACE
            )

    async def reset(self) -> None:
        # The scenario's trace ends here, once a finished Job's copy is removed (harness.e2e.trace:
        # what the deletions cause is teardown timing, which the differential does not compare).
        async with recorder_of(self).scenario_end():
            await self._delete_scenario_objects()

    async def _delete_scenario_objects(self) -> None:
        # Jobs whose Workload holds no quota go first, and are gone before the others are
        # deleted: deleting an admitted Job first frees quota, and Kueue may then admit a
        # waiting Workload of the scenario during the teardown on one backend and not on the
        # other (a race the trace would record; seen on item 8a in CI).
        # Each is followed by its uid, not its name: a worker Job an earlier scenario left
        # there, whose prebuilt Workload is gone (Kueue stops such a Job and keeps it, C68),
        # may share its name with a copy of this scenario, whose Job MultiKueue creates there
        # once the old one is deleted (CI at 23d605e: S10's three runs, the teardown waited for
        # that name to vanish until it timed out). The new Job belongs to a live manager
        # Workload and goes with it below (C41).
        waiting = [
            (cluster, name, str((job.get("metadata") or {}).get("uid", "")))
            for cluster in ("manager", *WORKERS)
            for name, job in self.views[cluster].objects.get("jobs", {}).items()
            if not is_true(self.workload_of_job_on(cluster, name), "QuotaReserved")
        ]
        for cluster, name, _ in waiting:
            await self.delete_job(name, None if cluster == "manager" else cluster)

        def waiting_gone() -> bool:
            return all(self._job_gone(c, name, uid) for c, name, uid in waiting)

        await self.wait_for(waiting_gone, "every Job without quota deleted", self.timeouts.long)
        # Then the manager's Jobs, and the workers' only once the manager's Workloads are gone:
        # MultiKueue removes a deleted Workload's copies itself (C41), as a user's deletion would
        # have it. Deleting a copy's Job on its worker first let the manager's MultiKueue see an
        # admitted copy vanish under a live Workload and set its check to Retry ("Admitting
        # remote no longer exists") on one backend and not on the other, a teardown race the
        # trace recorded (the differential at 7619554).
        for name in list(self.views["manager"].objects.get("jobs", {})):
            await self.delete_job(name, None)

        def manager_clean() -> bool:
            objects = self.views["manager"].objects
            return not objects["workloads"] and not objects.get("jobs")

        await self.wait_for(
            manager_clean, "every manager Job and Workload deleted", self.timeouts.long
        )
        for cluster in WORKERS:
            for name in list(self.views[cluster].objects.get("jobs", {})):
                await self.delete_job(name, cluster)

        def clean() -> bool:
            return all(
                not self.views[c].objects["workloads"] and not self.views[c].objects.get("jobs")
                for c in ("manager", *WORKERS)
            )

        await self.wait_for(clean, "every Job and Workload deleted", self.timeouts.long)
        await self._drop_holds()

    # --- direct controls of one cluster (tests/e2e/test_fidelity_worker.py, issue 14) ---------

    async def create_job_on(self, cluster: str, body: Obj) -> None:
        """Create a Job on ``cluster`` exactly as given (no adaptation of the body)."""
        await client.BatchV1Api(self.apis[cluster]).create_namespaced_job(NAMESPACE, body)  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well

    async def patch_job_status_on(self, cluster: str, name: str, status: Obj) -> None:
        """Merge-patch a Job's ``/status`` on ``cluster``, as the controller named by the Job's
        ``spec.managedBy`` would."""
        await client.BatchV1Api(self.apis[cluster]).patch_namespaced_job_status(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
            name, NAMESPACE, {"status": status}, _content_type="application/merge-patch+json"
        )

    def job_on(self, cluster: str, name: str) -> Obj | None:
        """A Job of ``cluster`` as last observed."""
        found = self.views[cluster].objects["jobs"].get(name)
        return copy.deepcopy(found) if found is not None else None

    def _job_gone(self, cluster: str, name: str, uid: str) -> bool:
        """The Job ``name`` of uid ``uid`` and every Workload it owns are gone from ``cluster``
        (another Job of that name may be there now)."""
        objects = self.views[cluster].objects
        job = objects.get("jobs", {}).get(name)
        if job is not None and str((job.get("metadata") or {}).get("uid", "")) == uid:
            return False
        return not any(
            ref.get("uid") == uid
            for wl in objects["workloads"].values()
            for ref in (wl.get("metadata") or {}).get("ownerReferences") or []
        )

    def workload_of_job_on(self, cluster: str, job: str) -> Obj | None:
        """The Workload owned by Job ``job`` on ``cluster`` (a worker's own Job too), as last
        observed."""
        for obj in self.views[cluster].objects["workloads"].values():
            if owner_job(obj) == job:
                return copy.deepcopy(obj)
        return None

    async def create_kueue_object(self, cluster: str, plural: str, body: Obj) -> None:
        """Create a Kueue (v1beta2) object on ``cluster``; namespaced when the body names a
        namespace."""
        objects = client.CustomObjectsApi(self.apis[cluster])
        namespace = body["metadata"].get("namespace")
        if namespace:
            await objects.create_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, plural, body
            )
        else:
            await objects.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, body)

    async def read_kueue_object(
        self, cluster: str, plural: str, name: str, namespace: str | None = None
    ) -> Obj:
        """GET a Kueue (v1beta2) object of ``cluster`` (cluster-scoped without ``namespace``)."""
        objects = client.CustomObjectsApi(self.apis[cluster])
        if namespace:
            found: Obj = await objects.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name
            )
        else:
            found = await objects.get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, plural, name
            )
        return found

    async def patch_cluster_kueue_object(
        self, cluster: str, plural: str, name: str, patch: Obj
    ) -> None:
        """Merge-patch a cluster-scoped Kueue (v1beta2) object of ``cluster`` (a ClusterQueue's
        spec, say)."""
        await client.CustomObjectsApi(self.apis[cluster]).patch_cluster_custom_object(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
            KUEUE_GROUP,
            KUEUE_VERSION,
            plural,
            name,
            patch,
            _content_type="application/merge-patch+json",
        )

    async def delete_kueue_object(
        self, cluster: str, plural: str, name: str, namespace: str | None = None
    ) -> None:
        """Delete a Kueue (v1beta2) object of ``cluster``; one already gone is fine."""
        objects = client.CustomObjectsApi(self.apis[cluster])
        with contextlib.suppress(ApiException):
            if namespace:
                await objects.delete_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name
                )
            else:
                await objects.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)

    async def workloads_version(self, cluster: str) -> str:
        """The resourceVersion of ``cluster``'s Workload collection in the scenario namespace
        (to replay every change after it, :meth:`replay_workloads`)."""
        listed = await client.CustomObjectsApi(self.apis[cluster]).list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "workloads", limit=1
        )
        return str(listed["metadata"]["resourceVersion"])

    async def replay_workloads(
        self, cluster: str, since: str, until: Callable[[Obj], bool], within: float
    ) -> list[Obj]:
        """Every version of ``cluster``'s Workloads written after resourceVersion ``since``, in
        order, up to the first one for which ``until`` holds (a watch from ``since``: nothing in
        between is missed, unlike a mirror that may have been re-listed)."""
        objects = client.CustomObjectsApi(self.apis[cluster])
        seen: list[Obj] = []
        version = since
        with anyio.fail_after(within):
            while True:
                async with watch.Watch() as stream:
                    async for event in stream.stream(
                        objects.list_namespaced_custom_object,
                        KUEUE_GROUP,
                        KUEUE_VERSION,
                        NAMESPACE,
                        "workloads",
                        resource_version=version,
                        timeout_seconds=10,
                    ):
                        obj = event["object"]
                        version = obj["metadata"].get("resourceVersion") or version
                        if event["type"] not in ("ADDED", "MODIFIED"):
                            continue
                        seen.append(obj)
                        if until(obj):
                            return seen
