"""Small builders for the objects the fake API server tests write."""

from __future__ import annotations

from typing import Any

KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"


def workload(
    name: str = "wl",
    namespace: str = "default",
    *,
    queue: str = "user-queue",
    count: int = 1,
    cpu: str = "1",
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A valid v1beta2 Workload with one pod set."""
    obj: dict[str, Any] = {
        "apiVersion": f"{KUEUE}/{V1BETA2}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": cpu}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }
    if labels:
        obj["metadata"]["labels"] = labels
    if status is not None:
        obj["status"] = status
    return obj


def widget(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """An object of the schema-less test kind ``example.com/v1`` Widget."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


def apply_status(name: str, namespace: str, status: dict[str, Any]) -> dict[str, Any]:
    """A minimal Workload apply body that only carries ``status``."""
    return {
        "apiVersion": f"{KUEUE}/{V1BETA2}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    }


def condition(kind: str, status: str = "True", reason: str = "Test") -> dict[str, Any]:
    """A status condition with the fields the Kueue schema requires."""
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": f"{kind} is {status}",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
