"""How a test-world Job "runs": the two annotations every Job runner of the sandbox reads.

The clusters of the test world have no kubelet that runs pods. Three stand-ins play that part
and all read the annotations below from the Job (the emulated Kueue copies them onto the
Workload it creates,
:func:`dispatcher_sandbox.kueue_emulator.jobs.job_controller.workload_for_job`):

- the emulation's worker workload controller (``dispatcher_sandbox.kueue_emulator.core``), which
  finishes an admitted Workload;
- the real control plane's Job finisher (:mod:`dispatcher_sandbox.real_kueue.finisher`),
  which writes the Job status the Kubernetes Job controller would write;
- on kind, real pods (:mod:`dispatcher_sandbox.harness.e2e.kind_backend` picks their command).

:data:`RUN_SECONDS_ANNOTATION` says how long the Job runs once started (absent: until deleted).
:data:`HOLD_ANNOTATION` names a ConfigMap in the Job's namespace, on the cluster where it runs:
until that ConfigMap exists the Job does not finish, however long it has run; once it exists
the Job finishes as :data:`RUN_SECONDS_ANNOTATION` says, counted from when it started. A test
uses it to order "this Job is still running" before an event of its own choosing (the seeded
mix holds its low-priority Jobs until their preemption was seen) instead of racing a run time
against the control plane's delays.

A Job whose pod template names a ServiceAccount (``serviceAccountName`` other than
``default``) gets no pods at all (:func:`pods_refused`): the test world never creates a
ServiceAccount, and Kubernetes' ServiceAccount admission refuses every pod that names a
missing one ("error looking up service account", Kubernetes v1.36.3
``plugin/pkg/admission/serviceaccount``), so the Job controller's pods are never created.
Such a Job starts (``startTime``) with no active pods and never finishes. On kind that is
Kubernetes' own behaviour; the two stand-ins follow it. A test uses it for a Job admitted on a
worker whose pods never get counted (contract C93: its manager Job keeps ``status.active`` 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RUN_SECONDS_ANNOTATION = "sandbox.multikueue-dispatcher.io/run-seconds"
HOLD_ANNOTATION = "sandbox.multikueue-dispatcher.io/hold-until-configmap"
RUN_ANNOTATIONS = (RUN_SECONDS_ANNOTATION, HOLD_ANNOTATION)


def hold_of(obj: Mapping[str, Any]) -> str | None:
    """The ConfigMap a Job (or its Workload) waits for before it may finish (None: none)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(HOLD_ANNOTATION)
    return str(name) if name else None


def _refused(template: Any) -> bool:
    spec = template.get("spec") if isinstance(template, Mapping) else None
    account = spec.get("serviceAccountName") if isinstance(spec, Mapping) else None
    return bool(account) and account != "default"


def pods_refused(obj: Mapping[str, Any]) -> bool:
    """Whether the pods of a Job (or of a Workload's pod sets, which carry the Job's pod
    template) name a ServiceAccount other than ``default``, which the test world never creates:
    Kubernetes refuses such pods, so the Job gets none (see the module docstring)."""
    spec = obj.get("spec") or {}
    if "template" in spec:
        return _refused(spec.get("template"))
    return any(_refused(ps.get("template")) for ps in spec.get("podSets") or [])
