"""The MultiKueue AdmissionCheck reconciler (its ``Active`` condition).

Mirrors Kueue v0.19.2 ``pkg/controller/admissionchecks/multikueue/admissioncheck.go``.
"""

from __future__ import annotations

import logging

from dispatcher_sandbox.kube_client import (
    ADMISSION_CHECKS,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
)
from dispatcher_sandbox.kueue_emulator.multikueue.controllers import (
    _RetryingLoop,
    _write_condition,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    MULTIKUEUE_CONTROLLER,
    Clock,
    ClusterConnection,
    KueueConfig,
    Obj,
    is_true,
)

log = logging.getLogger(__name__)

KUEUE_GROUP = "kueue.x-k8s.io"


class AdmissionCheckController(_RetryingLoop):
    """The ``Active`` condition of MultiKueue AdmissionChecks (C8)."""

    name = "multikueue_admissioncheck"

    def __init__(self, conn: ClusterConnection, config: KueueConfig, clock: Clock) -> None:
        super().__init__(config, clock)
        self.conn = conn

    def _wanted(self, ac: Obj) -> tuple[bool, str, str]:
        params = (ac.get("spec") or {}).get("parameters")
        if not params:
            return False, "BadConfig", "Cannot load the AdmissionChecks parameters: missing"
        if params.get("apiGroup") != KUEUE_GROUP or params.get("kind") != "MultiKueueConfig":
            return (
                False,
                "BadConfig",
                "Cannot load the AdmissionChecks parameters: unsupported parameters "
                f"{params.get('apiGroup')}/{params.get('kind')}",
            )
        cfg = self.conn.cache(MULTIKUEUE_CONFIGS).get(params.get("name", ""))
        if cfg is None:
            return (
                False,
                "BadConfig",
                "Cannot load the AdmissionChecks parameters: multikueueconfigs."
                f'{KUEUE_GROUP} "{params.get("name", "")}" not found',
            )
        names = list((cfg.get("spec") or {}).get("clusters") or [])
        missing: list[str] = []
        inactive: list[str] = []
        for name in names:
            mkc = self.conn.cache(MULTIKUEUE_CLUSTERS).get(name)
            if mkc is None:
                missing.append(name)
            elif not is_true(mkc, "Active"):
                inactive.append(name)
        unusable = len(missing) + len(inactive)
        if not unusable:
            return True, "Active", "The admission check is active"
        parts = []
        if missing:
            parts.append(f"Missing clusters: [{' '.join(missing)}]")
        if inactive:
            parts.append(f"Inactive clusters: [{' '.join(inactive)}]")
        if unusable < len(names):
            return True, "SomeActiveClusters", ", ".join(parts)
        return False, "NoUsableClusters", ", ".join(parts)

    async def _reconcile(self) -> float | None:
        """One pass: write every MultiKueue check's ``Active`` condition when it changed."""
        for ac in self.conn.cache(ADMISSION_CHECKS).items():
            if (ac.get("spec") or {}).get("controllerName") != MULTIKUEUE_CONTROLLER:
                continue
            value, reason, message = self._wanted(ac)
            await _write_condition(
                self.conn.client, ADMISSION_CHECKS, ac, "Active", value, reason, message, self.clock
            )
        return None
