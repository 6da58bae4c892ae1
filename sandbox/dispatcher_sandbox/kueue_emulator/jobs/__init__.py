"""Kueue's batch/Job integration, emulated (contract C22, C24–C28, C33).

The package follows Kueue v0.19.2's ``pkg/controller/jobs/job/``:

* :mod:`.job_controller` -- ``job_controller.go`` with the generic
  ``pkg/controller/jobframework/reconciler.go`` (:class:`JobReconciler`: the Workload of a Job,
  start/stop on admission and eviction, the Job controller's status);
* :mod:`.job_multikueue_adapter` -- ``job_multikueue_adapter.go`` (:class:`JobAdapter`: the
  reconciler plus the MultiKueue hooks ``sync_remote_job``/``remove_remote_job``;
  :func:`remote_job_for`, :func:`workload_key_for`);
* :mod:`.job_webhook` -- ``job_webhook.go`` (the defaulting webhook, as a fake API server hook).
"""

from __future__ import annotations

from dispatcher.topology.runs import RUN_SECONDS_ANNOTATION
from dispatcher_sandbox.kueue_emulator.jobs.job_controller import (
    JOB_CONTROLLER_NAME,
    JOB_UID_LABEL,
    MULTIKUEUE_MANAGED_BY,
    RESOURCE_IN_USE_FINALIZER,
    WORKLOAD_PRIORITY_CLASS_LABEL,
    JobReconciler,
    job_pod_sets,
    workload_for_job,
    workload_name_for_job,
    workload_name_for_owner,
)
from dispatcher_sandbox.kueue_emulator.jobs.job_multikueue_adapter import (
    JobAdapter,
    remote_job_for,
    workload_key_for,
)
from dispatcher_sandbox.kueue_emulator.jobs.job_webhook import (
    JOB_WEBHOOK_NAME,
    default_job,
    kueue_job_webhook,
    store_lookup,
)

__all__ = [
    "JOB_CONTROLLER_NAME",
    "JOB_UID_LABEL",
    "JOB_WEBHOOK_NAME",
    "MULTIKUEUE_MANAGED_BY",
    "RESOURCE_IN_USE_FINALIZER",
    "RUN_SECONDS_ANNOTATION",
    "WORKLOAD_PRIORITY_CLASS_LABEL",
    "JobAdapter",
    "JobReconciler",
    "default_job",
    "job_pod_sets",
    "kueue_job_webhook",
    "remote_job_for",
    "store_lookup",
    "workload_for_job",
    "workload_key_for",
    "workload_name_for_job",
    "workload_name_for_owner",
]
