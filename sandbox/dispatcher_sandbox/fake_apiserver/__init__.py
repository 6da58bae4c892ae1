"""A fake Kubernetes API server for tests and the sandbox (``docs/fake-apiserver-spec.md``).

Start one cluster per emulated Kubernetes cluster::

    async with fake_cluster("worker-1", crd_paths=[crds_dir]) as cluster:
        kubeconfig = cluster.kubeconfig  # inline CA + token, HTTPS

Each cluster has its own store, resourceVersion counter, watch history, admission hooks
(:attr:`FakeCluster.admission`), faults (:attr:`FakeCluster.faults`) and request journal
(:attr:`FakeCluster.journal`). ``python -m dispatcher_sandbox.fake_apiserver`` runs one as a
process.
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
