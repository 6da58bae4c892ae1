"""The manager's MultiKueue controllers of the emulated Kueue (contract C8–C11, C20–C41, C56–C62).

The package follows Kueue v0.19.2's ``pkg/controller/admissionchecks/multikueue/``:

* :mod:`.controllers` -- ``controllers.go`` (shared options and defaults; the hook types, the
  reconcile loop and the condition writer the controllers share);
* :mod:`.multikueuecluster` -- ``multikueuecluster.go`` and ``remote_client.go``
  (:class:`ClusterController`, :class:`RemoteCluster`, :func:`validate_kubeconfig`);
* :mod:`.admissioncheck` -- ``admissioncheck.go`` (:class:`AdmissionCheckController`);
* :mod:`.workload` -- ``workload.go`` (:class:`WorkloadController`, ``_Group``,
  :func:`clone_for_create`), with the orphan GC of ``multikueuecluster.go`` (``runGC``) kept
  inside the workload controller;
* :mod:`.dispatchers` -- the built-in dispatchers' decisions: AllAtOnce (a branch of
  ``workload.go``) and Incremental (``pkg/controller/workloaddispatcher/
  incrementaldispatcher.go``);
* this ``__init__`` -- ``controllers.go``'s ``SetupControllers`` (:class:`MultiKueueManager`), and
  the package's public names.

Three level-triggered controllers share one manager :class:`~.runtime.ClusterConnection`:

* :class:`ClusterController` keeps one :class:`RemoteCluster` (client + informer on the remote
  Workloads that carry the origin label) per ``MultiKueueCluster`` and reports its ``Active``
  condition (C10, C11, C62);
* :class:`AdmissionCheckController` reports the ``Active`` condition of the AdmissionChecks whose
  controller is ``kueue.x-k8s.io/multikueue`` (C8);
* :class:`WorkloadController` is Kueue's ``multikueue_workload`` reconciler (C20–C33, C36–C41),
  with the built-in AllAtOnce and Incremental dispatchers (C56–C61), the orphan garbage
  collector (C41), ``MultiKueue`` events and the two counters of C51.

:class:`MultiKueueManager` wires them together. Compose it with the Kueue core on the same
connection::

    conn = ClusterConnection("manager", kubeconfig, [])
    core = CoreKueue(conn, config, clock, role="manager")
    jobs = JobAdapter(conn, config, clock, role="manager")
    mk = MultiKueueManager(
        conn,
        config,
        clock,
        sync_remote_job=jobs.sync_remote_job,
        remove_remote_job=jobs.remove_remote_job,
    )
    await run_all(conn.run, core.run, jobs.run, mk.run)

Every admission-status write to a manager Workload goes through
:func:`.runtime.write_admission_status` (server-side apply as ``kueue-admission`` with the whole
admission body; a merge patch of the change, as ``kueue``, only under the C45 gate; strict, with
the resourceVersion), and check-state changes of ``updateACS`` apply the one check entry as
``kueue.x-k8s.io/multikueue``. So the field-manager pitfall of C43 reproduces exactly: when another
field manager owns ``nominatedClusterNames`` (by server-side apply or by a merge patch), the
admission write is refused with 422 ("clusterName and nominatedClusterNames are mutually
exclusive"), retried with backoff, and the Workload stays unadmitted. Refused writes are kept in
:attr:`WorkloadController.status_write_errors`.

Timing (C20): Kueue's work-queue behaviour is reproduced: manager events at once, remote and
MultiKueueConfig events after the 1 s batch period, failed reconciles retried with
controller-runtime's backoff (5 ms doubling to 1000 s), and every request to a worker rate-limited
as Kueue's worker clients are (v0.19: 5 QPS / burst 10 per kind; v0.20: ``clientConnection``,
1000/1000 per worker; ``KueueConfig.worker_client_qps``). Timers that Kueue runs on its clock
(``RequeueAfter``: Incremental rounds, ``workerLostTimeout``, the GC period) use the injected
clock; the batch period, retries, rate limits and reconnect backoff use wall-clock time.

Differences from Kueue v0.19, on purpose:

* Only the ``batch/v1`` Job adapter exists (C22): a Workload without an owner is rejected with
  "No multikueue adapter found", another owner kind with "No multikueue adapter found for owner
  kind ...", as upstream; Jobs must have ``spec.managedBy: kueue.x-k8s.io/multikueue`` (the
  sandbox's Job webhook defaults it, :mod:`..jobs.job_webhook`). The
  ``kueue.x-k8s.io/job-owner-gvk`` annotations of multi-owner integrations (LeaderWorkerSet) are
  not read.
* Remote copies are read from a per-cluster informer (label ``kueue.x-k8s.io/multikueue-origin``)
  instead of a GET per reconcile (the GET is still charged to the worker's rate limiter); creates
  and deletes tolerate 409/404 from a stale cache.
* Kueue's manager client is limited to ``clientConnection`` (300 QPS / burst 500 in v0.19); the
  emulation's manager client is not limited.
* Kueue re-sends the admission write (a no-op) and its "admitted" Event on every reconcile of an
  admitted Workload; the emulation writes and records the Event once.
* The emulated worker finishes a copy after its run time even before the copy's Job exists; such
  a finish is not taken before the admission is recorded (with Kueue a copy of a Job's Workload
  cannot finish before the Job that the admission creates, C33).
* ``locationType: Path`` kubeconfigs are refused (``BadKubeConfig``): the sandbox has no pod.
* Orchestrated preemption (C30) only in the v0.20 mode (``KueueConfig.version``), where the
  gate is on by default (``docs/kueue-versions.md``).
* Not modelled: LeaderWorkerSet followers and elastic
  workloads (C32), ClusterProfile sources (reported as ``MultiKueueClusterProfileFeatureDisabled``),
  the webhook of C18 (a fake API server hook, not this controller).
"""

from __future__ import annotations

import asyncio

from dispatcher_sandbox.kube_client import (
    ADMISSION_CHECKS,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    SECRETS,
    WORKLOADS,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.multikueue.admissioncheck import AdmissionCheckController
from dispatcher_sandbox.kueue_emulator.multikueue.controllers import RemoveRemoteJob, SyncRemoteJob
from dispatcher_sandbox.kueue_emulator.multikueue.multikueuecluster import (
    RECONNECT_BASE_SECONDS,
    ClusterController,
    KubeconfigError,
    RemoteCluster,
    validate_kubeconfig,
)
from dispatcher_sandbox.kueue_emulator.multikueue.workload import (
    ADMITTED_TOTAL,
    DISPATCHED_TOTAL,
    StatusWriteError,
    WorkloadController,
    _Group,
    clone_for_create,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    ORIGIN_LABEL,
    Clock,
    ClusterConnection,
    Counters,
    KueueConfig,
    Obj,
)


class MultiKueueManager:
    """The manager's MultiKueue controllers on one manager connection.

    Adds the informers it needs to ``conn`` (Workloads, AdmissionChecks, MultiKueueClusters,
    MultiKueueConfigs, Secrets) and subscribes to it; :meth:`run` runs the controllers and the
    GC but not ``conn.run`` (the composition root runs the connection once for every controller
    sharing it).
    """

    def __init__(
        self,
        conn: ClusterConnection,
        config: KueueConfig,
        clock: Clock,
        *,
        counters: Counters | None = None,
        sync_remote_job: SyncRemoteJob | None = None,
        remove_remote_job: RemoveRemoteJob | None = None,
        reconnect_base_seconds: float = RECONNECT_BASE_SECONDS,
    ) -> None:
        self.conn = conn
        self.config = config
        self.clock = clock
        self.counters = counters if counters is not None else Counters()
        for resource in (
            WORKLOADS,
            ADMISSION_CHECKS,
            MULTIKUEUE_CLUSTERS,
            MULTIKUEUE_CONFIGS,
            SECRETS,
        ):
            conn.add_resource(resource)
        self.clusters = ClusterController(
            conn,
            config,
            clock,
            self._remote_changed,
            reconnect_base_seconds=reconnect_base_seconds,
        )
        self.checks = AdmissionCheckController(conn, config, clock)
        self.workloads = WorkloadController(
            conn,
            config,
            clock,
            self.clusters,
            counters=self.counters,
            sync_remote_job=sync_remote_job,
            remove_remote_job=remove_remote_job,
        )
        conn.subscribe(self._manager_changed)

    def _manager_changed(self, resource: Resource, kind: str, obj: Obj) -> None:
        if resource in (MULTIKUEUE_CLUSTERS, SECRETS):
            self.clusters.mark_dirty()
        if resource in (ADMISSION_CHECKS, MULTIKUEUE_CONFIGS, MULTIKUEUE_CLUSTERS):
            self.checks.mark_dirty()
        self.workloads.on_manager_change(resource, kind, obj)

    def _remote_changed(self, cluster: str, kind: str, obj: Obj) -> None:
        self.workloads.on_remote_change(cluster, kind, obj)

    @property
    def sync_remote_job(self) -> SyncRemoteJob | None:
        """The Job hook called after admission detection (C28, C33)."""
        return self.workloads.sync_remote_job

    @sync_remote_job.setter
    def sync_remote_job(self, hook: SyncRemoteJob | None) -> None:
        self.workloads.sync_remote_job = hook

    async def run(self) -> None:
        """Run the three controllers and the GC until cancelled; then close every remote."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.clusters.run())
                group.create_task(self.checks.run())
                group.create_task(self.workloads.run())
                group.create_task(self.workloads.run_gc())
        finally:
            await self.clusters.close()


__all__ = [
    "ADMITTED_TOTAL",
    "DISPATCHED_TOTAL",
    "ORIGIN_LABEL",
    "RECONNECT_BASE_SECONDS",
    "AdmissionCheckController",
    "ClusterController",
    "KubeconfigError",
    "MultiKueueManager",
    "RemoteCluster",
    "RemoveRemoteJob",
    "StatusWriteError",
    "SyncRemoteJob",
    "WorkloadController",
    "_Group",
    "clone_for_create",
    "validate_kubeconfig",
]
