"""Kubeconfigs for fake clusters, in the only form Kueue accepts for workers (F27, contract C62).

Inline ``certificate-authority-data`` and a bearer ``token``; no file references, no
``insecure-skip-tls-verify``, no exec or auth-provider entries.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml


def build_kubeconfig(
    name: str,
    server: str,
    token: str,
    ca_pem: bytes | None,
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A one-context kubeconfig. ``ca_pem`` None only for the plain-HTTP debug mode (F29)."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
        "preferences": {},
    }


def merge_kubeconfigs(configs: list[dict[str, Any]], current: str | None = None) -> dict[str, Any]:
    """One kubeconfig with every context of ``configs`` (F22: one file with N contexts)."""
    merged: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [],
        "preferences": {},
    }
    for config in configs:
        for section in ("clusters", "users", "contexts"):
            merged[section].extend(config[section])
    if configs:
        merged["current-context"] = current or configs[0]["current-context"]
    return merged


def dump(config: dict[str, Any]) -> str:
    """YAML text of a kubeconfig."""
    return yaml.safe_dump(config, sort_keys=False)
