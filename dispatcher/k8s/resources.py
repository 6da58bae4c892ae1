"""Where the kinds the dispatcher reads and writes live in the API."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class ResourceRef:
    """A resource collection: API group (``""`` for core), version, plural, scope."""

    group: str
    version: str
    plural: str
    kind: str = ""
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The URL path of the collection (all namespaces when ``namespace`` is None) or of one
        object and optionally its subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"

WORKLOADS = ResourceRef(KUEUE_GROUP, KUEUE_VERSION, "workloads", "Workload")
LOCAL_QUEUES = ResourceRef(KUEUE_GROUP, KUEUE_VERSION, "localqueues", "LocalQueue")
CLUSTER_QUEUES = ResourceRef(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "ClusterQueue", False)
RESOURCE_FLAVORS = ResourceRef(
    KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", "ResourceFlavor", False
)
ADMISSION_CHECKS = ResourceRef(
    KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", "AdmissionCheck", False
)
MULTIKUEUE_CLUSTERS = ResourceRef(
    KUEUE_GROUP, KUEUE_VERSION, "multikueueclusters", "MultiKueueCluster", False
)
MULTIKUEUE_CONFIGS = ResourceRef(
    KUEUE_GROUP, KUEUE_VERSION, "multikueueconfigs", "MultiKueueConfig", False
)
JOBS = ResourceRef("batch", "v1", "jobs", "Job")
SECRETS = ResourceRef("", "v1", "secrets", "Secret")
EVENTS = ResourceRef("", "v1", "events", "Event")
NODES = ResourceRef("", "v1", "nodes", "Node", False)
NAMESPACES = ResourceRef("", "v1", "namespaces", "Namespace", False)
LEASES = ResourceRef("coordination.k8s.io", "v1", "leases", "Lease")
