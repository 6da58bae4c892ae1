"""Leader-election settings (embedded in the application's settings)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class LeaderElectionSettings(BaseModel):
    """Lease-based leader election, with controller-runtime's defaults (docs/configuration.md,
    ``leader_election``).

    ``namespace`` empty means the pod's namespace (``POD_NAMESPACE``, else the service account's
    namespace file, else ``default``). ``renew_deadline_seconds`` must be shorter than
    ``lease_duration_seconds`` (the leader steps down before others may take over) and longer
    than ``retry_period_seconds``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    lease_name: str = Field("multikueue-dispatcher", min_length=1, max_length=253)
    namespace: str = ""
    lease_duration_seconds: int = Field(15, ge=1)
    renew_deadline_seconds: float = Field(10.0, gt=0)
    retry_period_seconds: float = Field(2.0, gt=0)

    @model_validator(mode="after")
    def _check_durations(self) -> LeaderElectionSettings:
        if self.renew_deadline_seconds >= self.lease_duration_seconds:
            raise ValueError(
                "renew_deadline_seconds must be shorter than lease_duration_seconds "
                f"({self.renew_deadline_seconds} >= {self.lease_duration_seconds})"
            )
        if self.retry_period_seconds >= self.renew_deadline_seconds:
            raise ValueError(
                "retry_period_seconds must be shorter than renew_deadline_seconds "
                f"({self.retry_period_seconds} >= {self.renew_deadline_seconds})"
            )
        return self

    def resolved_namespace(self) -> str:
        """``namespace``, or the pod's namespace, or ``default``."""
        if self.namespace:
            return self.namespace
        from_env = os.environ.get("POD_NAMESPACE", "")
        if from_env:
            return from_env
        try:
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
        except OSError:
            return "default"
