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
