#!/usr/bin/env python3
"""Set Kueue's MultiKueue dispatcher in the ``kueue-manager-config`` ConfigMap (contract C5).

Reads the ConfigMap as JSON on stdin (``kubectl get configmap -n kueue-system
kueue-manager-config -o json``), merges the settings into its ``controller_manager_config.yaml``
(everything else Kueue's release put there is kept) and writes the ConfigMap as JSON on stdout,
ready for ``kubectl apply -f -``. Then restart ``deploy/kueue-controller-manager``.

    kueue_config.py --dispatcher-name multikueue-dispatcher.io/dispatcher [--merge-patch-gate]
    kueue_config.py --dispatcher-name incremental --incremental-step-size 1
    kueue_config.py --dispatcher-name all-at-once

Only the standard library and PyYAML; the kind e2e backend imports :func:`patch_configmap`.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from typing import Any

import yaml

CONFIG_KEY = "controller_manager_config.yaml"
BUILTIN = {
    "all-at-once": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
    "incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
}


def patch_config(
    text: str,
    dispatcher_name: str,
    *,
    merge_patch_gate: bool = False,
    incremental_step_size: int | None = None,
) -> str:
    """The Kueue configuration file ``text`` with ``multiKueue.dispatcherName`` set."""
    config: dict[str, Any] = yaml.safe_load(text) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{CONFIG_KEY} is not a mapping")
    name = BUILTIN.get(dispatcher_name, dispatcher_name)
    multikueue = config.setdefault("multiKueue", {})
    multikueue["dispatcherName"] = name
    # stepSize is only valid with the incremental dispatcher (contract C4).
    multikueue.pop("incrementalDispatcherConfig", None)
    if incremental_step_size is not None:
        if name != BUILTIN["incremental"]:
            raise ValueError("--incremental-step-size needs --dispatcher-name incremental")
        multikueue["incrementalDispatcherConfig"] = {"stepSize": incremental_step_size}
    if merge_patch_gate:
        config.setdefault("featureGates", {})["WorkloadRequestUseMergePatch"] = True
    return yaml.safe_dump(config, sort_keys=False)


def patch_configmap(
    configmap: dict[str, Any], dispatcher_name: str, **options: Any
) -> dict[str, Any]:
    """The ConfigMap with its configuration file patched; server-set metadata removed."""
    data = (configmap.get("data") or {}).get(CONFIG_KEY)
    if data is None:
        raise ValueError(f"the ConfigMap has no {CONFIG_KEY!r} key")
    meta = configmap.get("metadata") or {}
    out = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": meta.get("name", "kueue-manager-config"),
            "namespace": meta.get("namespace", "kueue-system"),
        },
        "data": copy.deepcopy(configmap["data"]),
    }
    out["data"][CONFIG_KEY] = patch_config(data, dispatcher_name, **options)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dispatcher-name", required=True)
    parser.add_argument("--merge-patch-gate", action="store_true")
    parser.add_argument("--incremental-step-size", type=int)
    args = parser.parse_args(argv)
    try:
        patched = patch_configmap(
            json.load(sys.stdin),
            args.dispatcher_name,
            merge_patch_gate=args.merge_patch_gate,
            incremental_step_size=args.incremental_step_size,
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    json.dump(patched, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
