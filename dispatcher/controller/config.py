"""The nomination loop's configuration and its defaults (the only place they are written)."""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.kueue.gputypes import DEFAULT_GPU_LABEL, DEFAULT_GPU_RESOURCE_PATTERN

__all__ = ["DEFAULTS", "ControllerConfig"]


@dataclass(frozen=True)
class ControllerConfig:
    """What the nomination loop needs from the settings, with the one set of defaults: the
    settings of ``multikueue-dispatcher run`` (:mod:`dispatcher.app.settings`) take theirs from
    here."""

    write_mode: str = "apply"
    """``apply``: server-side apply with ``field_manager`` (the only mode; ``merge-patch`` was
    removed because it admits nothing on real Kueue)."""
    field_manager: str = "multikueue-dispatcher"
    workers: int = 4
    resync_seconds: float = 300.0
    """Every eligible Workload is reconciled again at this interval even without a change."""
    capacity_coalesce_seconds: float = 0.1
    """How long a worker's capacity change (a quota, queue or copy event) waits before the
    workloads that can go there are re-queued: the events of a burst cost one re-queue each."""
    decision_timeout_seconds: float = 5.0
    """How long one decision (the plugin pipeline) may take before it is abandoned."""
    inline_decisions: bool = False
    """Run each decision on the event loop instead of in a worker thread with the
    ``decision_timeout_seconds`` deadline: for a pipeline of built-in stages only
    (:meth:`dispatcher.plugins.PluginHost.builtin_only`), which are pure, bounded and cannot
    hang; the thread hop costs more than such a decision at 20 clusters. A pipeline with a
    third-party stage or hook always runs in a thread."""
    stuck_after_seconds: float = 15.0
    """How long a copy may be Admitted on a worker without ``clusterName`` on the manager
    before the workload is reported stuck (the field-manager pitfall, C43); also how long an
    evicted Workload may hold its quota with no copy left before the eviction is reported
    stuck (C93)."""
    leftover_wait_seconds: float = 15.0
    """How long a workload without a nomination waits for Kueue to remove a copy left on a
    worker by an earlier attempt before it is nominated anyway (see ``Nominator._leftover``)."""
    lost_copy_cooldown_seconds: float = 60.0
    """How long a worker where a workload's admitted copy vanished (Kueue sets its check
    ``Retry``, "Admitting remote no longer exists") is left out of that workload's decisions
    (stage ``copy-lost``; 0 turns it off). A worker back from an outage may delete every new
    copy until its Kueue has seen the old Job deleted, which client-go's watch backoff can put
    off for up to a minute (contract C91)."""
    sync_grace_seconds: float = 10.0
    """After a start, how long decisions wait for every candidate worker's first connection
    attempt to have an outcome (synced, failed or unusable)."""
    gpu_label_key: str = DEFAULT_GPU_LABEL
    gpu_resource_pattern: str = DEFAULT_GPU_RESOURCE_PATTERN
    algorithm: str = "default"
    """Name of the pipeline, for metrics and Events."""
    origin: str = "multikueue"
    """Kueue's ``multiKueue.origin``: the ``kueue.x-k8s.io/multikueue-origin`` value of the
    copies and Jobs Kueue creates on workers (only those count as this manager's copies)."""
    unplaceable_release: bool = False
    """Release the manager quota of unplaceable workloads (deactivate them) after
    ``unplaceable_patience_seconds``, and restore them when an eligible worker is back
    (:mod:`dispatcher.controller.outage`, ``docs/outage.md``). Off by default."""
    stuck_eviction_release: bool = False
    """Release a stuck eviction (C93) once reported: set the manager Job's ``status.active``
    and ``status.ready`` to 0, as MultiKueue would copy them from a worker whose Job has no
    pods, when no Job of the workload on a worker of its config still has active pods
    (:meth:`dispatcher.controller.stuck.StuckDetector.check_eviction`). Off by default."""
    unplaceable_patience_seconds: float = 60.0
    """How long a workload stays unplaceable before its first release (later releases of the
    same workload wait twice as long each time)."""


DEFAULTS = ControllerConfig()
"""The defaults, for the settings that expose them."""
