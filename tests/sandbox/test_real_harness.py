"""The real control plane's pure parts: the build's generated modules, Kueue's configuration
and webhook rewriting, and the Job controller stand-in (no process is started here)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from dispatcher.topology.runs import (
    HOLD_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
    hold_of,
    pods_refused,
)
from dispatcher_sandbox.real_kueue.build import (
    COMPONENTS,
    BuildError,
    _version_ldflags,
    binary_path,
    load_versions,
    staging_modules,
)
from dispatcher_sandbox.real_kueue.finisher import next_status
from dispatcher_sandbox.real_kueue.mix import kueue_counts
from dispatcher_sandbox.real_kueue.plane import (
    PORTS_ENV,
    ControlPlaneError,
    KueueManifests,
    KueueOptions,
    free_port,
    kueue_configuration,
    port_range,
)

NOW = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


def test_versions_are_pinned_in_one_file_and_binaries_named_by_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    versions = load_versions()
    assert (versions.kubernetes, versions.staging) == ("v1.36.3", "v0.36.3")
    assert (versions.etcd, versions.kueue) == ("v3.6.14", "v0.19.2")
    monkeypatch.setenv("MKD_REAL_CACHE", str(tmp_path))
    assert [binary_path(c, versions).name for c in COMPONENTS] == [
        "etcd-v3.6.14",
        "kube-apiserver-v1.36.3",
        "kube-controller-manager-v1.36.3",
        "kueue-v0.19.2",
    ]


def test_staging_modules_are_the_replaced_ones_without_the_samples(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text(
        "module k8s.io/kubernetes\n\nreplace (\n"
        "\tk8s.io/api => ./staging/src/k8s.io/api\n"
        "\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n"
        "\tk8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin\n"
        "\tgithub.com/other/module => github.com/other/module v1.0.0\n"
        ")\n"
    )
    assert staging_modules(tmp_path) == ["k8s.io/api", "k8s.io/client-go"]


def test_version_ldflags_set_what_kueue_parses_from_version() -> None:
    flags = _version_ldflags("v1.36.3")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.36.3" in flags
        assert f"-X {package}.gitMajor=1" in flags
        assert f"-X {package}.gitMinor=36" in flags
    with pytest.raises(BuildError, match=r"not vMAJOR\.MINOR\.PATCH"):
        _version_ldflags("1.36")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param(
            KueueOptions(), {"multiKueue": None, "gate": None, "metrics": "0"}, id="worker"
        ),
        pytest.param(
            KueueOptions(metrics=True),
            {"multiKueue": None, "gate": None, "metrics": "127.0.0.1:9443"},
            id="metrics-served-on-loopback",
        ),
        pytest.param(
            KueueOptions(dispatcher_name="example.com/d"),
            {"multiKueue": "example.com/d", "gate": None, "metrics": "0"},
            id="manager-external",
        ),
        pytest.param(
            KueueOptions(dispatcher_name="example.com/d", merge_patch_gate=True),
            {"multiKueue": "example.com/d", "gate": True, "metrics": "0"},
            id="manager-with-merge-patch-gate",
        ),
    ],
)
def test_kueue_configuration(options: KueueOptions, expected: dict[str, Any]) -> None:
    config = kueue_configuration(
        options, webhook_port=1234, health_port=5678, cert_dir=Path("/certs"), metrics_port=9443
    )
    assert config["metrics"] == {"bindAddress": expected["metrics"]}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1234, "certDir": "/certs"}
    assert config["featureGates"]["VisibilityOnDemand"] is False
    assert config["featureGates"].get("WorkloadRequestUseMergePatch") is expected["gate"]
    assert (config.get("multiKueue") or {}).get("dispatcherName") == expected["multiKueue"]


def _hook(name: str, group: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": {
            "service": {"name": "webhook-service", "namespace": "system", "path": path}
        },
        "rules": [{"apiGroups": [group], "resources": ["x"]}],
    }


def test_webhooks_are_pointed_at_kueue_by_url_and_only_those_that_can_be_served() -> None:
    config = {
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            _hook("mjob.kb.io", "batch", "/mutate-batch-v1-job"),
            _hook("mworkload.kb.io", "kueue.x-k8s.io", "/mutate-kueue-x-k8s-io-v1beta2-workload"),
            _hook("mpod.kb.io", "", "/mutate--v1-pod"),
            _hook("mrayjob.kb.io", "ray.io", "/mutate-ray-io-v1-rayjob"),
        ],
    }
    manifests = KueueManifests(crds=[], mutating=config, validating=config, policy=[])
    [(_, mutating), _] = manifests.webhooks_for("https://127.0.0.1:9443", "Q0E=")
    assert mutating["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [(h["name"], h["clientConfig"]) for h in mutating["webhooks"]] == [
        ("mjob.kb.io", {"url": "https://127.0.0.1:9443/mutate-batch-v1-job", "caBundle": "Q0E="}),
        (
            "mworkload.kb.io",
            {
                "url": "https://127.0.0.1:9443/mutate-kueue-x-k8s-io-v1beta2-workload",
                "caBundle": "Q0E=",
            },
        ),
    ]


def _job(
    *,
    suspend: bool,
    status: dict[str, Any] | None = None,
    run_seconds: str | None = None,
    managed_by: str | None = None,
) -> dict[str, Any]:
    annotations = {RUN_SECONDS_ANNOTATION: run_seconds} if run_seconds is not None else {}
    spec: dict[str, Any] = {"suspend": suspend, "parallelism": 2, "completions": 2}
    if managed_by:
        spec["managedBy"] = managed_by
    return {
        "metadata": {"name": "j", "namespace": "ns", "annotations": annotations},
        "spec": spec,
        "status": status or {},
    }


RUNNING = {"startTime": "2026-12-01T11:59:50Z", "active": 2, "ready": 2}


def _refused(job: dict[str, Any]) -> dict[str, Any]:
    job["spec"]["template"] = {"spec": {"serviceAccountName": "sandbox-no-such-account"}}
    return job


STARTED_NO_PODS = {"startTime": "2026-12-01T11:59:50Z", "active": 0, "ready": 0}


@pytest.mark.parametrize(
    ("job", "patched", "again"),
    [
        pytest.param(_job(suspend=True), None, None, id="suspended-and-never-started"),
        pytest.param(
            _job(suspend=False, managed_by="kueue.x-k8s.io/multikueue"),
            None,
            None,
            id="managed-by-multikueue-never-runs-here",
        ),
        pytest.param(
            _job(suspend=False, run_seconds="30"), {"active": 2, "ready": 2}, 30.0, id="starts"
        ),
        pytest.param(_job(suspend=False), {"active": 2, "ready": 2}, None, id="starts-forever"),
        pytest.param(
            _job(suspend=False, status=RUNNING, run_seconds="30"), None, 20.0, id="still-running"
        ),
        pytest.param(
            _job(suspend=False, status=RUNNING, run_seconds="5"),
            {"succeeded": 2, "active": 0},
            None,
            id="completes",
        ),
        pytest.param(
            _job(suspend=True, status=RUNNING, run_seconds="30"),
            {"active": 0, "ready": 0, "startTime": None},
            None,
            id="suspended-again-pods-gone",
        ),
        pytest.param(
            _refused(_job(suspend=False, run_seconds="30")),
            {"active": 0, "ready": 0},
            None,
            id="pods-refused-starts-with-none-and-no-run-time",
        ),
        pytest.param(
            _refused(_job(suspend=False, status=STARTED_NO_PODS, run_seconds="5")),
            None,
            None,
            id="pods-refused-never-completes",
        ),
        pytest.param(
            _refused(_job(suspend=True, status=STARTED_NO_PODS)),
            {"active": 0, "ready": 0, "startTime": None},
            None,
            id="pods-refused-suspended-again",
        ),
    ],
)
def test_job_controller_stand_in(
    job: dict[str, Any], patched: dict[str, Any] | None, again: float | None
) -> None:
    patch, wait = next_status(job, NOW, time_scale=1.0)
    if patched is None:
        assert patch is None
    else:
        assert patch is not None
        assert {k: patch[k] for k in patched} == patched
    assert wait == again


@pytest.mark.parametrize(
    ("job", "released", "patched", "again"),
    [
        pytest.param(
            _job(suspend=False, run_seconds="30"),
            False,
            {"active": 2, "ready": 2},
            30.0,
            id="held-still-starts",
        ),
        pytest.param(
            _job(suspend=False, status=RUNNING, run_seconds="5"),
            False,
            None,
            None,
            id="held-past-its-run-time-does-not-finish",
        ),
        pytest.param(
            _job(suspend=False, status=RUNNING, run_seconds="5"),
            True,
            {"succeeded": 2, "active": 0},
            None,
            id="released-finishes-on-its-run-time",
        ),
        pytest.param(
            _job(suspend=False, status=RUNNING, run_seconds="30"),
            True,
            None,
            20.0,
            id="released-before-its-run-time-runs-on",
        ),
    ],
)
def test_a_held_job_finishes_only_once_released(
    job: dict[str, Any], released: bool, patched: dict[str, Any] | None, again: float | None
) -> None:
    job["metadata"]["annotations"][HOLD_ANNOTATION] = "release-me"
    assert hold_of(job) == "release-me"
    patch, wait = next_status(job, NOW, time_scale=1.0, released=released)
    if patched is None:
        assert patch is None
    else:
        assert patch is not None
        assert {k: patch[k] for k in patched} == patched
    assert wait == again


@pytest.mark.parametrize(
    ("template", "refused"),
    [
        pytest.param({}, False, id="no-template-spec"),
        pytest.param({"spec": {}}, False, id="no-account"),
        pytest.param({"spec": {"serviceAccountName": "default"}}, False, id="default-account"),
        pytest.param({"spec": {"serviceAccountName": "x"}}, True, id="named-account"),
        pytest.param({"spec": "not a mapping"}, False, id="unreadable-spec"),
    ],
)
def test_pods_refused_reads_a_job_and_a_workload_alike(
    template: dict[str, Any], refused: bool
) -> None:
    assert pods_refused({"spec": {"template": template}}) is refused
    workload = {"spec": {"podSets": [{"name": "main", "template": template}]}}
    assert pods_refused(workload) is refused


def test_a_completed_job_meets_its_success_criteria_before_complete() -> None:
    patch, _ = next_status(_job(suspend=False, status=RUNNING, run_seconds="1"), NOW, 1.0)
    assert patch is not None
    kinds = [c["type"] for c in patch["conditions"]]
    assert kinds == ["SuccessCriteriaMet", "Complete"]  # the API server refuses Complete alone
    assert patch["completionTime"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", (20000, 32000), id="unset-default"),
        pytest.param("26000-31999", (26000, 32000), id="inclusive-bounds"),
        pytest.param(" 20000-20000 ", (20000, 20001), id="one-port"),
        pytest.param("26000", None, id="no-dash"),
        pytest.param("a-b", None, id="not-numbers"),
        pytest.param("30000-20000", None, id="reversed"),
        pytest.param("80-90", None, id="privileged"),
    ],
)
def test_real_port_range_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple[int, int] | None
) -> None:
    """Two processes starting control planes at once pick from disjoint ranges."""
    monkeypatch.setenv(PORTS_ENV, value)
    if expected is None:
        with pytest.raises(ControlPlaneError, match=PORTS_ENV):
            port_range()
        return
    assert port_range() == expected
    low, high = expected
    if high - low > 1:  # a one-port range may be taken by a control plane of another test
        assert low <= free_port() < high


KUEUE_METRICS = """\
# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="multikueue_workload",result="success"} 20
controller_runtime_reconcile_total{controller="multikueue_workload",result="error"} 1
controller_runtime_reconcile_total{controller="workload",result="success"} 9
"""
APISERVER_METRICS = """\
# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="workloads",subresource="",verb="GET"} 40
apiserver_request_total{code="404",resource="workloads",subresource="",verb="GET"} 2
apiserver_request_total{code="201",resource="workloads",subresource="",verb="POST"} 5
apiserver_request_total{code="200",resource="workloads",subresource="status",verb="PATCH"} 6
apiserver_request_total{code="200",resource="workloads",subresource="",verb="LIST"} 3
apiserver_request_total{code="200",resource="workloads",subresource="",verb="WATCH"} 3
apiserver_request_total{code="200",resource="pods",subresource="",verb="GET"} 7
"""


def test_kueue_counts_per_worker_and_request_and_since_a_baseline() -> None:
    counts = kueue_counts(KUEUE_METRICS, {"worker1": APISERVER_METRICS})
    # codes summed; informer reads (LIST, WATCH) and other resources left out
    assert counts.requests == {
        "worker1": {"GET workloads": 42, "POST workloads": 5, "PATCH workloads/status": 6}
    }
    assert counts.reconciles == {"multikueue_workload": 21, "workload": 9}
    before = kueue_counts(
        KUEUE_METRICS.replace("} 20", "} 5"),
        {"worker1": APISERVER_METRICS.replace("} 40", "} 10")},
    )
    since = counts.minus(before)
    assert since.requests["worker1"] == {
        "GET workloads": 30,
        "POST workloads": 0,
        "PATCH workloads/status": 0,
    }
    assert since.reconciles == {"multikueue_workload": 15, "workload": 0}
