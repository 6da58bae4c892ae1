"""Where each kind the topologies and the test world use lives in the Kubernetes API.

Pure data: the simulator builds API objects with it, and the test world's own REST client
(``dispatcher_sandbox.kube_client``) turns it into URLs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection or of one object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KUEUE = "kueue.x-k8s.io"
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads")
LOCAL_QUEUES = Resource(KUEUE, "v1beta2", "localqueues")
CLUSTER_QUEUES = Resource(KUEUE, "v1beta2", "clusterqueues", namespaced=False)
RESOURCE_FLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors", namespaced=False)
ADMISSION_CHECKS = Resource(KUEUE, "v1beta2", "admissionchecks", namespaced=False)
MULTIKUEUE_CLUSTERS = Resource(KUEUE, "v1beta2", "multikueueclusters", namespaced=False)
MULTIKUEUE_CONFIGS = Resource(KUEUE, "v1beta2", "multikueueconfigs", namespaced=False)
WORKLOAD_PRIORITY_CLASSES = Resource(KUEUE, "v1beta2", "workloadpriorityclasses", namespaced=False)
COHORTS = Resource(KUEUE, "v1beta2", "cohorts", namespaced=False)
JOBS = Resource("batch", "v1", "jobs")
SECRETS = Resource("", "v1", "secrets")
CONFIGMAPS = Resource("", "v1", "configmaps")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)
EVENTS = Resource("", "v1", "events")
