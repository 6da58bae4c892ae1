"""Where the real Kueue CRDs come from, and what to register when they are absent.

The real Kueue v0.19.2 CRD files are never copied into this repository. They are found through
the environment variable ``KUEUE_CRDS_DIR``; when it is unset, the folder
``../shared/kueue-v0.19.2/crds`` beside the project checkout (where CI keeps it) is tried.
Without CRD files, the Kueue kinds are registered without a schema (not validated).

Kueue v0.20 ships the same kinds with ``kueue.x-k8s.io/v1beta1`` left in the CRDs but unserved
(``served: false``; v1beta2 stays the storage version). No v0.20 CRD files are kept here: the
sandbox serves the v0.19.2 files and, in the emulation's v0.20 mode, turns v1beta1 off on every
fake cluster (:data:`UNSERVED_API_VERSIONS`, ``docs/kueue-versions.md``).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "KUEUE_CRDS_DIR"
KUEUE_GROUP = "kueue.x-k8s.io"

# group/version/plural=Kind[:cluster][+status] for every Kueue v0.19 kind (storage version v1beta2).
KUEUE_SHORT_FORMS = (
    "kueue.x-k8s.io/v1beta2/workloads=Workload+status",
    "kueue.x-k8s.io/v1beta2/localqueues=LocalQueue+status",
    "kueue.x-k8s.io/v1beta2/clusterqueues=ClusterQueue:cluster+status",
    "kueue.x-k8s.io/v1beta2/resourceflavors=ResourceFlavor:cluster",
    "kueue.x-k8s.io/v1beta2/admissionchecks=AdmissionCheck:cluster+status",
    "kueue.x-k8s.io/v1beta2/multikueueclusters=MultiKueueCluster:cluster+status",
    "kueue.x-k8s.io/v1beta2/multikueueconfigs=MultiKueueConfig:cluster",
    "kueue.x-k8s.io/v1beta2/cohorts=Cohort:cluster+status",
    "kueue.x-k8s.io/v1beta2/topologies=Topology:cluster",
    "kueue.x-k8s.io/v1beta2/workloadpriorityclasses=WorkloadPriorityClass:cluster",
)


# Kueue minor version -> the kueue.x-k8s.io API versions its CRDs carry but do not serve.
UNSERVED_API_VERSIONS: dict[str, tuple[str, ...]] = {
    "v0.19": (),
    "v0.20": ("v1beta1",),
}


def default_crds_dir() -> Path:
    """``../shared/kueue-v0.19.2/crds`` relative to the project checkout."""
    return Path(__file__).resolve().parents[3] / "shared" / "kueue-v0.19.2" / "crds"


def kueue_crds_dir() -> Path | None:
    """The folder of real Kueue CRD files, or None when there is none."""
    configured = os.environ.get(ENV_VAR)
    path = Path(configured) if configured else default_crds_dir()
    if path.is_dir() and any(path.glob("*.yaml")):
        return path
    return None
