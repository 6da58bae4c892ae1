"""The kind half, checked statically: kind cluster configs against kind's v1alpha4 config API,
the e2e script with shellcheck, and its dry run (the full plan, without docker or kind)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
KIND_CONFIGS = sorted((ROOT / "kind-config").glob("*.kind.yaml"))
SCRIPT = ROOT / "hack" / "kind-e2e.sh"

# kind's config API v1alpha4 (sigs.k8s.io/kind/pkg/apis/config/v1alpha4/types.go): every field
# a kind config may have, by type. Anything else makes `kind create cluster` fail.
CLUSTER_FIELDS = {
    "kind",
    "apiVersion",
    "name",
    "nodes",
    "networking",
    "featureGates",
    "runtimeConfig",
    "kubeadmConfigPatches",
    "kubeadmConfigPatchesJSON6902",
    "containerdConfigPatches",
    "containerdConfigPatchesJSON6902",
}
NODE_FIELDS = {
    "role",
    "image",
    "labels",
    "extraMounts",
    "extraPortMappings",
    "gpus",
    "kubeadmConfigPatches",
    "kubeadmConfigPatchesJSON6902",
}
NETWORKING_FIELDS = {
    "ipFamily",
    "apiServerPort",
    "apiServerAddress",
    "podSubnet",
    "serviceSubnet",
    "disableDefaultCNI",
    "kubeProxyMode",
    "dnsSearch",
}
MOUNT_FIELDS = {"containerPath", "hostPath", "readOnly", "selinuxRelabel", "propagation"}
PORT_MAPPING_FIELDS = {"containerPort", "hostPort", "listenAddress", "protocol"}
PATCH_JSON6902_FIELDS = {"group", "version", "kind", "patch"}
ROLES = {"control-plane", "worker"}


def kind_config_problems(config: Any) -> list[str]:
    """What kind would reject in a config (unknown fields, wrong types, bad roles)."""
    if not isinstance(config, dict):
        return ["the config is not a mapping"]
    problems = [f"unknown field {k}" for k in set(config) - CLUSTER_FIELDS]
    if config.get("kind") != "Cluster" or config.get("apiVersion") != "kind.x-k8s.io/v1alpha4":
        problems.append("kind must be Cluster and apiVersion kind.x-k8s.io/v1alpha4")
    problems += [
        f"networking: unknown field {k}"
        for k in set(config.get("networking") or {}) - NETWORKING_FIELDS
    ]
    for key in ("featureGates",):
        if not all(isinstance(v, bool) for v in (config.get(key) or {}).values()):
            problems.append(f"{key}: values must be booleans")
    nodes = config.get("nodes") or []
    if not isinstance(nodes, list):
        return [*problems, "nodes must be a list"]
    for index, node in enumerate(nodes):
        where = f"nodes[{index}]"
        problems += [f"{where}: unknown field {k}" for k in set(node) - NODE_FIELDS]
        if node.get("role", "control-plane") not in ROLES:
            problems.append(f"{where}.role: {node.get('role')!r} is not one of {sorted(ROLES)}")
        labels = node.get("labels") or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            problems.append(f"{where}.labels: keys and values must be strings")
        for mount in node.get("extraMounts") or []:
            problems += [f"{where}.extraMounts: unknown {k}" for k in set(mount) - MOUNT_FIELDS]
        for port in node.get("extraPortMappings") or []:
            problems += [
                f"{where}.extraPortMappings: unknown {k}" for k in set(port) - PORT_MAPPING_FIELDS
            ]
        for patch in node.get("kubeadmConfigPatchesJSON6902") or []:
            problems += [f"{where}: unknown {k}" for k in set(patch) - PATCH_JSON6902_FIELDS]
        for text in [
            *(config.get("kubeadmConfigPatches") or []),
            *node.get("kubeadmConfigPatches", []),
        ]:
            patch = yaml.safe_load(text)
            if not isinstance(patch, dict) or "kind" not in patch:
                problems.append(f"{where}: a kubeadmConfigPatch must be a mapping with a kind")
    if not any(n.get("role", "control-plane") == "control-plane" for n in nodes or [{}]):
        problems.append("no control-plane node")
    return problems


def test_three_kind_configs() -> None:
    assert [p.name for p in KIND_CONFIGS] == [
        "manager.kind.yaml",
        "worker1.kind.yaml",
        "worker2.kind.yaml",
    ]


@pytest.mark.parametrize("path", KIND_CONFIGS, ids=[p.name for p in KIND_CONFIGS])
def test_kind_config_matches_kinds_v1alpha4_fields(path: Path) -> None:
    assert kind_config_problems(yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize("path", KIND_CONFIGS, ids=[p.name for p in KIND_CONFIGS])
def test_kind_config_apiserver_settings_as_kueues_e2e(path: Path) -> None:
    config = yaml.safe_load(path.read_text())
    [control_plane] = [n for n in config["nodes"] if n["role"] == "control-plane"]
    [patch] = [yaml.safe_load(p) for p in control_plane["kubeadmConfigPatches"]]
    assert patch["kind"] == "ClusterConfiguration"
    args = {a["name"]: a["value"] for a in patch["apiServer"]["extraArgs"]}
    assert args["enable-aggregator-routing"] == "true"
    if path.name.startswith("worker"):
        assert args["service-account-max-token-expiration"] == "168h"


def test_worker_nodes_carry_the_gpu_product_of_their_flavor() -> None:
    topology = load_topology(ROOT / "tests" / "e2e" / "topology.yaml")
    for worker in topology.workers:
        config = yaml.safe_load((ROOT / "kind-config" / f"{worker.name}.kind.yaml").read_text())
        [node] = [n for n in config["nodes"] if n["role"] == "worker"]
        [flavor] = worker.resource_flavors
        for key, value in flavor.node_labels.items():
            assert node["labels"][key] == value, (worker.name, key)


def test_a_broken_kind_config_is_caught() -> None:
    broken = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "nodes": [{"role": "master", "taints": []}],
        "network": {},
    }
    problems = kind_config_problems(broken)
    assert "unknown field network" in problems
    assert "nodes[0]: unknown field taints" in problems
    assert any("nodes[0].role" in p for p in problems)


# --- the script ----------------------------------------------------------------------------------


def _shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is missing in CI (.ci/run installs the Debian package)")
        pytest.skip("shellcheck is not installed (Debian package `shellcheck`); CI runs it")
    return found


@pytest.mark.parametrize("script", [SCRIPT, ROOT / ".ci" / "run"], ids=["kind-e2e.sh", "ci-run"])
def test_shell_scripts_pass_shellcheck(script: Path) -> None:
    result = subprocess.run(
        [_shellcheck(), "--shell=bash", "--severity=style", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _dry_run(*args: str) -> str:
    """The script's dry run with a PATH that has neither docker nor kind."""
    bare = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    result = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *args],
        capture_output=True,
        text=True,
        check=False,
        env=bare,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_dry_run_prints_the_whole_plan_without_docker_or_kind() -> None:
    out = _dry_run()
    commands = [line[2:] for line in out.splitlines() if line.startswith("+ ")]
    plan = "\n".join(commands)
    version = re.search(r'KUEUE_VERSION="\$\{KUEUE_VERSION:-(v[\d.]+)\}"', SCRIPT.read_text())
    assert version is not None
    assert version.group(1) == "v0.19.2"
    release = "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2"
    expected = [
        # three clusters on the pinned node image (Kubernetes >= 1.36)
        "kind create cluster --name mkd-manager --image kindest/node:v1.36.1",
        "kind create cluster --name mkd-worker1 --image kindest/node:v1.36.1",
        "kind create cluster --name mkd-worker2 --image kindest/node:v1.36.1",
        # Kueue from the release on each, the admission policy and our dispatcherName
        f"kubectl --context kind-mkd-manager apply --server-side -f {release}/manifests.yaml",
        f"kubectl --context kind-mkd-worker1 apply --server-side -f {release}/manifests.yaml",
        f"kubectl --context kind-mkd-worker2 apply --server-side -f {release}/manifests.yaml",
        f"apply --server-side -f {release}/workload-map.yaml",
        "kueue_config.py --dispatcher-name multikueue-dispatcher.io/dispatcher",
        "rollout restart deploy/kueue-controller-manager",
        # our image, built and loaded
        "docker build -t multikueue-dispatcher:e2e",
        "kind load docker-image multikueue-dispatcher:e2e --name mkd-manager",
        # worker identities, fake GPUs, queues, kubeconfig Secrets with the in-network server
        "kubectl --context kind-mkd-worker1 apply -k",
        "patch node mkd-worker1-worker --subresource=status",
        "nvidia.com~1gpu",
        "(server https://mkd-worker2-control-plane:6443)",
        "-n kueue-system create secret generic worker1-kubeconfig",
        "-n kueue-system create secret generic worker2-kubeconfig",
        "wait multikueuecluster --all --for=condition=Active",
        # the dispatcher, the suite, the teardown
        "apply -k " + str(ROOT / "manifests" / "overlays" / "kind"),
        "rollout status deploy/multikueue-dispatcher",
        "-m pytest " + str(ROOT / "tests" / "e2e") + " --backend kind",
        "kind delete clusters mkd-manager mkd-worker1 mkd-worker2",
    ]
    missing = [step for step in expected if step not in plan]
    assert not missing, f"missing from the plan: {missing}\n{out}"
    assert plan.index("kind create cluster") < plan.index("docker build") < plan.index("pytest")


def test_dry_run_with_keep_keeps_the_clusters_and_honours_the_prefix() -> None:
    out = _dry_run("--keep", "--prefix", "demo")
    assert "kind delete clusters" in out  # printed as the command to run later
    assert not any(line.startswith("+ kind delete") for line in out.splitlines())
    assert "kind create cluster --name demo-worker2" in out


def test_script_names_no_package_registry_host() -> None:
    text = SCRIPT.read_text().lower()
    for host in ("pypi", "files.pythonhosted", "npmjs", "deb.debian", "proxy.golang"):
        assert host not in text


def test_the_kind_path_is_documented_step_by_step() -> None:
    guide = (ROOT / "docs" / "kind-e2e.md").read_text()
    prerequisites = guide.split("## Prerequisites", 1)[1].split("\n## ", 1)[0]
    for tool in ("**docker**", "**kind**", "**kubectl**"):
        assert tool in prerequisites
    assert "hack/kind-e2e.sh\n" in guide
    assert "hack/kind-e2e.sh --dry-run" in guide
    assert "--keep" in guide
    readme = (ROOT / "README.md").read_text()
    deployment = readme.split("\n## Deployment\n", 1)[1].split("\n## ", 1)[0]
    assert "docs/deployment.md" in deployment
    assert "docs/kind-e2e.md" in deployment
    assert "hack/kind-e2e.sh --dry-run" in deployment
