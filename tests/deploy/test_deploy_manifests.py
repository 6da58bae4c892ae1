"""Every kustomization under manifests/ builds with ``kubectl kustomize`` and every object it
renders is valid: Kubernetes kinds against the Kubernetes 1.36 OpenAPI schemas (strict: unknown
fields are errors), Kueue kinds against the real Kueue v0.19.2 CRDs (schemas, CEL rules, unknown
fields). The deliberately broken fixtures are caught."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatcher_sandbox.harness.deploy import (
    FIXTURES,
    MANIFESTS,
    build,
    kustomizations,
    object_id,
    validate,
)

pytestmark = [pytest.mark.kubectl, pytest.mark.crds]

KUSTOMIZATIONS = kustomizations()


def test_the_expected_kustomizations_exist() -> None:
    names = {str(p.relative_to(MANIFESTS)) for p in KUSTOMIZATIONS}
    assert {
        "base",
        "overlays/kind",
        "worker",
        "samples/manager",
        "samples/worker1",
        "samples/worker2",
    } <= names


@pytest.mark.parametrize(
    "directory", KUSTOMIZATIONS, ids=[str(p.relative_to(MANIFESTS)) for p in KUSTOMIZATIONS]
)
def test_kustomization_builds_and_every_object_validates(directory: Path, crds_dir: Path) -> None:
    objects = build(directory)
    assert objects, f"{directory} renders nothing"
    problems = [p for obj in objects for p in validate(obj, crds_dir)]
    assert not problems, "\n".join(problems)


def _deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    return deployment


def test_deployment_is_hardened_and_probed() -> None:
    objects = build(MANIFESTS / "base")
    deployment = _deployment(objects)
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    assert spec["replicas"] == 2  # with leader election (config.yaml)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    config = volumes[mounts["/etc/multikueue-dispatcher"]]["configMap"]["name"]
    assert config in {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["DISPATCHER_CONFIG_FILE"]["value"] == "/etc/multikueue-dispatcher/config.yaml"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8081, "metrics": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]
    [service] = [o for o in objects if o["kind"] == "Service"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_base_config_matches_the_dispatcher_settings_and_probe_ports() -> None:
    from dispatcher.app.settings import load_settings

    for config in (MANIFESTS / "base" / "config.yaml", MANIFESTS / "overlays/kind/config.yaml"):
        settings = load_settings({}, config)
        assert settings.health_address == ":8081"
        assert settings.metrics_address == ":8080"
        assert settings.leader_election.enabled


def test_kind_overlay_uses_the_loaded_image_without_pulling() -> None:
    container = _deployment(build(MANIFESTS / "overlays" / "kind"))["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["image"] == "multikueue-dispatcher:e2e"
    assert container["imagePullPolicy"] == "Never"


def test_broken_deployment_fixture_is_caught(crds_dir: Path) -> None:
    problems = [p for o in build(FIXTURES / "broken-deployment") for p in validate(o, crds_dir)]
    assert any("Deployment" in p and "spec.replicas" in p and "'two'" in p for p in problems), (
        problems
    )


def test_broken_kueue_fixture_is_caught(crds_dir: Path) -> None:
    objects = build(FIXTURES / "broken-kueue")
    problems = {object_id(o): validate(o, crds_dir) for o in objects}
    assert any("nominalQuota" in p for p in problems["ClusterQueue broken-queue"])
    assert any(
        "unknown field .spec.kubeconfigSecret" in p
        for p in problems["MultiKueueCluster broken-worker"]
    )
