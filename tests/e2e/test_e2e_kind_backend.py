"""The kind backend's own code, run where it can be: its observing half against the sandbox's
clusters (their kubeconfig files have the names the kind script writes), its Job adaptation,
and its explicit skip reason."""

from __future__ import annotations

import pytest

from dispatcher.topology import HOLD_ANNOTATION, RUN_SECONDS_ANNOTATION, WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import NAMESPACE, admitted_on
from dispatcher_sandbox.harness.e2e.kind_backend import KindBackend, unavailable_reason
from dispatcher_sandbox.harness.e2e.sandbox_backend import SandboxBackend

pytestmark = [pytest.mark.slow, pytest.mark.crds]


def test_kind_backend_says_why_it_cannot_run_here() -> None:
    reason = unavailable_reason()
    if reason is not None:
        assert "docs/kind-e2e.md" in reason or "docker" in reason or "hack/kind-e2e.sh" in reason


def test_kind_jobs_finish_with_agnhost_instead_of_the_sandbox_annotation() -> None:
    line = WorkloadLine.model_validate(
        {"name": "done", "namespace": NAMESPACE, "count": 1, "runSeconds": 1}
    )
    body = KindBackend().job_body(line)
    assert RUN_SECONDS_ANNOTATION not in (body["metadata"].get("annotations") or {})
    assert body["spec"]["template"]["spec"]["containers"][0]["args"] == ["entrypoint-tester"]
    assert body["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"


def test_a_held_kind_job_waits_for_its_config_map_in_a_volume() -> None:
    line = WorkloadLine.model_validate(
        {
            "name": "held",
            "namespace": NAMESPACE,
            "count": 1,
            "runSeconds": 1,
            "holdUntilConfigMap": "release-me",
        }
    )
    body = KindBackend().job_body(line)
    assert HOLD_ANNOTATION not in (body["metadata"].get("annotations") or {})
    pod = body["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "args" not in container
    assert container["command"][-1] == "until [ -e /hold/released ]; do sleep 1; done"
    assert container["volumeMounts"] == [{"name": "hold", "mountPath": "/hold"}]
    # Optional: the pod starts before the ConfigMap exists, and the kubelet adds it later.
    assert pod["volumes"] == [
        {"name": "hold", "configMap": {"name": "release-me", "optional": True}}
    ]


async def test_kind_backend_observes_clusters_through_kubeconfig_files(
    backend: SandboxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not isinstance(backend, SandboxBackend):
        pytest.skip("this checks the kind backend against the sandbox's clusters")
    assert backend.env is not None
    monkeypatch.setenv("E2E_KIND_KUBECONFIG_DIR", str(backend.env.sandbox.directory))
    async with KindBackend() as kind:
        await kind.reset()
        await kind.submit(
            WorkloadLine.model_validate(
                {"name": "via-files", "namespace": NAMESPACE, "count": 1, "gpuType": None}
            )
        )
        admitted = await kind.wait_workload(
            "via-files",
            lambda w: admitted_on("worker1")(w) or admitted_on("worker2")(w),
            "admitted",
        )
        where = admitted["status"]["clusterName"]
        assert kind.copies_ever("via-files") == {where}
        assert kind.cluster_active("worker1") is True
