"""The sample Kueue objects (what the kind run installs) are the e2e topology the sandbox
backend runs, and Kueue's configuration is patched as documented (hack/kueue_config.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.topology import load_topology, topology_objects
from dispatcher_sandbox.harness.deploy import MANIFESTS, build

pytestmark = pytest.mark.kubectl

ROOT = Path(__file__).resolve().parents[2]
KUEUE_KINDS = {
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "WorkloadPriorityClass",
    "MultiKueueCluster",
    "MultiKueueConfig",
    "AdmissionCheck",
}


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def _normal(obj: dict[str, Any]) -> Any:
    return yaml.safe_load(json.dumps(obj))


@pytest.mark.parametrize("cluster", ["manager", "worker1", "worker2"])
def test_samples_equal_the_e2e_topology(cluster: str) -> None:
    topology = load_topology(ROOT / "tests" / "e2e" / "topology.yaml")
    wanted = {
        _key(body): _normal(body)
        for _, body in topology_objects(topology)[cluster]
        if body["kind"] in KUEUE_KINDS | {"Namespace"}
        and body["metadata"]["name"] != "kueue-system"
    }
    built = {_key(o): _normal(o) for o in build(MANIFESTS / "samples" / cluster)}
    assert built == wanted


def _kueue_config() -> Any:
    spec = importlib.util.spec_from_file_location("kueue_config", ROOT / "hack" / "kueue_config.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RELEASED = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system", "uid": "x"},
    "data": {
        "controller_manager_config.yaml": yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "health": {"healthProbeBindAddress": ":8081"},
                "integrations": {"frameworks": ["batch/job"]},
                "multiKueue": {"gcInterval": "1m"},
            }
        )
    },
}


def test_kueue_config_sets_our_dispatcher_name_and_keeps_the_rest() -> None:
    module = _kueue_config()
    fragment = yaml.safe_load((MANIFESTS / "kueue" / "dispatcher-name.yaml").read_text())
    name = fragment["multiKueue"]["dispatcherName"]
    ours = yaml.safe_load((MANIFESTS / "base" / "config.yaml").read_text())["dispatcher_name"]
    assert name == ours
    patched = module.patch_configmap(RELEASED, name)
    config = yaml.safe_load(patched["data"]["controller_manager_config.yaml"])
    assert config["multiKueue"] == {"gcInterval": "1m", "dispatcherName": name}
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert "uid" not in patched["metadata"]
    gate = yaml.safe_load((MANIFESTS / "kueue" / "merge-patch-gate.yaml").read_text())
    gated = module.patch_configmap(RELEASED, name, merge_patch_gate=True)
    config = yaml.safe_load(gated["data"]["controller_manager_config.yaml"])
    assert config["featureGates"] == gate["featureGates"]


def test_kueue_config_builtin_modes_and_step_size() -> None:
    module = _kueue_config()
    patched = module.patch_configmap(RELEASED, "incremental", incremental_step_size=1)
    config = yaml.safe_load(patched["data"]["controller_manager_config.yaml"])
    assert config["multiKueue"]["dispatcherName"] == (
        "kueue.x-k8s.io/multikueue-dispatcher-incremental"
    )
    assert config["multiKueue"]["incrementalDispatcherConfig"] == {"stepSize": 1}
    with pytest.raises(ValueError, match="incremental"):
        module.patch_configmap(RELEASED, "all-at-once", incremental_step_size=1)


def test_kueue_config_as_a_command() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "kueue_config.py"), "--dispatcher-name", "x.io/d"],
        input=json.dumps(RELEASED),
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(result.stdout)
    assert "dispatcherName: x.io/d" in out["data"]["controller_manager_config.yaml"]
    bad = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "kueue_config.py"), "--dispatcher-name", "x"],
        input=json.dumps({"data": {}}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "controller_manager_config.yaml" in bad.stderr
