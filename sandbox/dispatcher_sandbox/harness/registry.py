"""Builders the worker-registry tests share: a kubeconfig Secret, a MultiKueueCluster, fast
watch settings."""

from __future__ import annotations

import base64
from typing import Any

import yaml

from dispatcher.k8s.watching import BackoffPolicy, WatchSettings

NS = "kueue-system"


KUEUE = "kueue.x-k8s.io"


V = "v1beta2"


FAST = WatchSettings(
    server_timeout=30, inactivity_timeout=None, backoff=BackoffPolicy(0.05, 2, 0.2)
)


def secret(name: str, kubeconfig: dict[str, Any] | str) -> dict[str, Any]:
    text = kubeconfig if isinstance(kubeconfig, str) else yaml.safe_dump(kubeconfig)
    return {
        "metadata": {"name": name, "namespace": NS},
        "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
    }


def mkc(name: str, secret_name: str, location_type: str = "Secret") -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/{V}",
        "kind": "MultiKueueCluster",
        "metadata": {"name": name, "labels": {"team": "ml"}},
        "spec": {
            "clusterSource": {
                "kubeConfig": {"location": secret_name, "locationType": location_type}
            }
        },
    }
