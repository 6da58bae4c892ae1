"""A fake Kubernetes API server for tests and the sandbox (``docs/fake-apiserver.md``).

Start one cluster per emulated Kubernetes cluster::

    async with fake_cluster("worker-1", crd_paths=[crds_dir]) as cluster:
        kubeconfig = cluster.kubeconfig  # inline CA + token, HTTPS

Each cluster has its own store, resourceVersion counter, watch history, admission hooks
(:attr:`FakeCluster.admission`), faults (:attr:`FakeCluster.faults`) and request journal
(:attr:`FakeCluster.journal`). ``python -m dispatcher_sandbox.fake_apiserver`` runs one as a
process.

Modules, by concern:

- ``server``: :class:`FakeCluster`, the facade composing the parts; lifecycle, test controls
- ``state``: ``ClusterState``, the Protocol through which the parts read their cluster
- ``app``: the aiohttp application of the API port and its journal, auth and fault middleware
- ``routing``: request path to answer: health, discovery or a resource verb; 422s noted
- ``discovery``: ``/version``, ``/api``, ``/apis`` and the resource lists
- ``handlers``: get, list, create, update, patch and delete of stored objects
- ``watch``: watch streams: initial events, replay, bookmarks, timeouts
- ``apply``: server-side apply glue from an apply request to ``managed``
- ``managed``: the server-side apply merge and managedFields ownership
- ``patch``: JSON merge patch and JSON patch
- ``admission``: admission hooks, the admission step of a write, Kueue's policy and webhook rule
- ``namespaces``: default namespaces, the namespace of a new object, deletion's cascade
- ``crds``: CRD files, CRD status, unserving a version
- ``objects``: ``Target``, time stamps, rendering, selection, built-in defaulting
- ``registry``: the served resources (built-in kinds and CRDs)
- ``store``: objects, resourceVersions, watch history and fan-out
- ``schema``, ``cel``, ``structure``: OpenAPI schema validation, defaulting and CEL rules
- ``selectors``: label and field selectors
- ``errors``: ``Status`` error bodies
- ``faults``: injected faults and the request journal
- ``admin``: the admin endpoint (faults, down and up, watches, journal over HTTP)
- ``records``: process-wide records of 422 answers and issued credentials
- ``tls``, ``kubeconfig``: certificates and kubeconfigs
- ``__main__``: one cluster as a process
"""

from __future__ import annotations

from dispatcher_sandbox.fake_apiserver.admission import (
    AdmissionChain,
    AdmissionRequest,
    Denied,
    Match,
    MutatingHook,
    ValidatingHook,
    kueue_clear_nominated_cluster_names_hook,
    kueue_cluster_name_webhook,
)
from dispatcher_sandbox.fake_apiserver.faults import Fault, Faults, Journal, JournalEntry
from dispatcher_sandbox.fake_apiserver.kubeconfig import build_kubeconfig, merge_kubeconfigs
from dispatcher_sandbox.fake_apiserver.server import FakeCluster, fake_cluster, load_crd_documents

__all__ = [
    "AdmissionChain",
    "AdmissionRequest",
    "Denied",
    "FakeCluster",
    "Fault",
    "Faults",
    "Journal",
    "JournalEntry",
    "Match",
    "MutatingHook",
    "ValidatingHook",
    "build_kubeconfig",
    "fake_cluster",
    "kueue_clear_nominated_cluster_names_hook",
    "kueue_cluster_name_webhook",
    "load_crd_documents",
    "merge_kubeconfigs",
]
