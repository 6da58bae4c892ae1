"""Sandbox topologies and workload files (issue 3, scope 7).

Contract points: C9 (MultiKueueConfig, at most 20 clusters, order), C10 and C77 (MultiKueueCluster
→ kubeconfig Secret in ``kueue-system``), C8 (the MultiKueue AdmissionCheck on the manager
ClusterQueue), C68 (same namespaces and LocalQueue names on every cluster), C69 (ClusterQueue
quotas, cohorts, borrowingLimit, preemption), C71 (GPU type as the flavor node label
``nvidia.com/gpu.product``), C12 (Workload spec fields), C78 (per-cluster quotas, priority
classes high/low); README, *The sandbox*, for the default topology.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config

from dispatcher.topology import (
    GPU_PRODUCT_LABEL,
    HOLD_ANNOTATION,
    PREFERRED_GPU_TYPES_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
    TopologyError,
    WorkloadFileError,
    check_manager_lines,
    default_topology,
    demo_workloads,
    generic_topology,
    load_topology,
    load_workloads,
    parse_topology,
    parse_workload_lines,
    topology_objects,
    workload_object,
)
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kube_client import KubeClient
from dispatcher_sandbox.seeding import apply_topology, submit_workloads

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"

Obj = dict[str, Any]


def minimal() -> Obj:
    """A small valid topology as plain data (one worker)."""
    return {
        "namespaces": ["team-a"],
        "localQueues": [{"name": "lq", "namespace": "team-a", "clusterQueue": "cq"}],
        "manager": {
            "resourceFlavors": [{"name": "default-flavor"}],
            "clusterQueue": {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [{"name": "cpu", "nominalQuota": 4}],
                            }
                        ],
                    }
                ],
            },
        },
        "workers": [
            {
                "name": "w1",
                "resourceFlavors": [{"name": "f", "nodeLabels": {GPU_PRODUCT_LABEL: H100}}],
                "clusterQueues": [
                    {
                        "name": "cq",
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [
                                    {
                                        "name": "f",
                                        "resources": [{"name": "cpu", "nominalQuota": "4"}],
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
    }


def objects_of(topology_objects_list: list[tuple[Any, Obj]], kind: str) -> list[Obj]:
    return [body for _, body in topology_objects_list if body["kind"] == kind]


# --- the default topology (README, *The sandbox*) ----------------------------------------------


def test_c71_default_topology_is_the_designs_a100_h100_cpu_setup() -> None:
    topology = default_topology()
    assert topology.cluster_names == ["manager", "worker-a100", "worker-h100", "worker-cpu"]
    gpus = {
        w.name: sum(int(n.capacity.get("nvidia.com/gpu", "0")) for n in w.nodes)
        for w in topology.workers
    }
    assert gpus == {"worker-a100": 8, "worker-h100": 4, "worker-cpu": 0}
    flavors = {w.name: [f.node_labels for f in w.resource_flavors] for w in topology.workers}
    assert flavors["worker-a100"] == [{GPU_PRODUCT_LABEL: A100}]
    assert flavors["worker-h100"] == [{GPU_PRODUCT_LABEL: H100}]
    assert GPU_PRODUCT_LABEL not in flavors["worker-cpu"][0]
    for worker in topology.workers:
        for node in worker.nodes:
            if "nvidia.com/gpu" in node.capacity:  # node labels agree with the flavor (C71)
                assert (
                    node.labels[GPU_PRODUCT_LABEL]
                    == worker.resource_flavors[0].node_labels[GPU_PRODUCT_LABEL]
                )
    assert topology.multikueue_order() == ["worker-a100", "worker-h100", "worker-cpu"]
    assert load_topology("default") == topology


def test_c68_c10_c8_default_topology_objects_per_cluster() -> None:
    topology = default_topology()
    kubeconfigs = {name: {"fake": name} for name in topology.cluster_names[1:]}
    per_cluster = topology_objects(topology, kubeconfigs)
    assert list(per_cluster) == topology.cluster_names
    # C68: the same namespaces and LocalQueue names everywhere.
    queues = {
        name: sorted(
            (q["metadata"]["namespace"], q["metadata"]["name"], q["spec"]["clusterQueue"])
            for q in objects_of(objs, "LocalQueue")
        )
        for name, objs in per_cluster.items()
    }
    assert len({tuple(q) for q in queues.values()}) == 1
    assert [ns for ns, _, _ in queues["manager"]] == ["default", "team-a", "team-b"]
    # C78: the same WorkloadPriorityClasses everywhere.
    for objs in per_cluster.values():
        assert {
            p["metadata"]["name"]: p["value"] for p in objects_of(objs, "WorkloadPriorityClass")
        } == {
            "high": 300,
            "low": 100,
        }
    manager = per_cluster["manager"]
    # C10, C77: one Secret and one MultiKueueCluster per worker.
    secrets = {s["metadata"]["name"]: s for s in objects_of(manager, "Secret")}
    assert set(secrets) == {f"{w}-kubeconfig" for w in kubeconfigs}
    decoded = yaml.safe_load(
        base64.b64decode(secrets["worker-h100-kubeconfig"]["data"]["kubeconfig"])
    )
    assert decoded == {"fake": "worker-h100"}
    assert {s["metadata"]["namespace"] for s in secrets.values()} == {"kueue-system"}
    clusters = {c["metadata"]["name"]: c["spec"] for c in objects_of(manager, "MultiKueueCluster")}
    assert clusters["worker-a100"] == {
        "clusterSource": {
            "kubeConfig": {"location": "worker-a100-kubeconfig", "locationType": "Secret"}
        }
    }
    [mk_config] = objects_of(manager, "MultiKueueConfig")
    assert mk_config["spec"]["clusters"] == ["worker-a100", "worker-h100", "worker-cpu"]  # C59
    [check] = objects_of(manager, "AdmissionCheck")
    assert check["spec"] == {
        "controllerName": "kueue.x-k8s.io/multikueue",
        "parameters": {"apiGroup": KUEUE, "kind": "MultiKueueConfig", "name": "multikueue"},
    }
    [manager_cq] = objects_of(manager, "ClusterQueue")
    assert manager_cq["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "multikueue"}]
    }
    # Workers: no MultiKueue objects.
    for name in kubeconfigs:
        kinds = {body["kind"] for _, body in per_cluster[name]}
        assert kinds.isdisjoint(
            {"Secret", "MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck"}
        )


def test_c69_generic_topology_for_workers_n() -> None:
    topology = generic_topology(["worker-1", "worker-2"])
    assert topology.cluster_names == ["manager", "worker-1", "worker-2"]
    assert all(not w.nodes for w in topology.workers)
    cq = topology.manager.cluster_queue.resource_groups[0].flavors[0].resources
    assert {r.name: r.nominal_quota for r in cq} == {"cpu": "16", "memory": "64Gi"}
    none = generic_topology([])
    assert not any(
        body["kind"] == "MultiKueueConfig" for _, body in topology_objects(none)["manager"]
    )


# --- validation errors name the field ------------------------------------------------------------


def _set(data: Obj, path: str, value: Any) -> Obj:
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


QUEUE = "workers.0.clusterQueues.0"
RESOURCE = f"{QUEUE}.resourceGroups.0.flavors.0.resources.0"


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("workers.0.nodez", [], "workers.0.nodez: unknown field"),
        (
            f"{RESOURCE}.nominalQuota",
            "lots",
            f"{RESOURCE}.nominalQuota: 'lots' is not a Kubernetes quantity",
        ),
        (
            f"{RESOURCE}.borrowingLimit",
            "2",
            f"{RESOURCE}.borrowingLimit: borrowingLimit of f/cpu needs a cohortName",
        ),
        (
            f"{QUEUE}.resourceGroups.0.flavors.0.name",
            "missing",
            f"{QUEUE}.resourceGroups.0.flavors.0.name: clusterQueue 'cq' names flavor 'missing'",
        ),
        (
            f"{QUEUE}.resourceGroups.0.coveredResources",
            ["cpu", "memory"],
            f"{QUEUE}.resourceGroups.0.flavors.0.resources: flavor 'f' lists resources ['cpu']",
        ),
        (
            f"{QUEUE}.preemption",
            {"withinClusterQueue": "Sometimes"},
            f"{QUEUE}.preemption.withinClusterQueue: Input should be",
        ),
        (
            "localQueues.0.clusterQueue",
            "other",
            "localQueues.0.clusterQueue: worker 'w1' has no clusterQueue 'other'",
        ),
        ("localQueues.0.namespace", "team-z", "localQueues.0.namespace: 'team-z' is not in"),
        ("workers.0.name", "Worker_1", "workers.0.name: 'Worker_1' is not a DNS-1123 label"),
        ("workers.0.name", "manager", "workers.0.name: the manager already has this name"),
        (
            "manager.multiKueue",
            {"clusters": ["w2"]},
            "manager.multiKueue.clusters: ['w2'] must list every worker exactly once",
        ),
        (
            "manager.resourceFlavors.0.nodeTaints",
            [{"key": "k", "effect": "Never"}],
            "manager.resourceFlavors.0.nodeTaints.0.effect: Input should be",
        ),
        ("namespaces", ["team-a", "team-a"], "namespaces.1: namespace 'team-a' appears twice"),
    ],
)
def test_c68_c69_topology_errors_name_the_field(path: str, value: Any, expected: str) -> None:
    data = _set(minimal(), path, value)
    with pytest.raises(TopologyError) as raised:
        parse_topology(data, source="t.yaml")
    assert f"t.yaml: {expected}" in str(raised.value)


def test_c9_at_most_twenty_workers() -> None:
    data = minimal()
    data["workers"] = [dict(copy.deepcopy(data["workers"][0]), name=f"w{i}") for i in range(21)]
    with pytest.raises(TopologyError, match=r"workers: List should have at most 20 items"):
        parse_topology(data)


def test_c69_topology_file_errors_name_the_file(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("manager: [unclosed\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        load_topology(bad_yaml)
    not_a_map = tmp_path / "list.yaml"
    not_a_map.write_text("- a\n")
    with pytest.raises(TopologyError, match="must be a mapping"):
        load_topology(not_a_map)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(minimal()))
    assert load_topology(good).cluster_names == ["manager", "w1"]


# --- applying a topology through the API, against the real CRDs --------------------------------


@contextlib.asynccontextmanager
async def clusters_for(names: list[str], crds_dir: Path) -> AsyncIterator[dict[str, FakeCluster]]:
    async with contextlib.AsyncExitStack() as stack:
        yield {
            name: await stack.enter_async_context(FakeCluster(name, crd_paths=[crds_dir]))
            for name in names
        }


async def test_c68_c77_apply_default_topology_accepted_by_the_real_crds(crds_dir: Path) -> None:
    topology = default_topology()
    async with (
        clusters_for(topology.cluster_names, crds_dir) as fakes,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = {
            name: await stack.enter_async_context(KubeClient(fake.kubeconfig))
            for name, fake in fakes.items()
        }
        kubeconfigs = {w.name: fakes[w.name].kubeconfig for w in topology.workers}
        written = await apply_topology(topology, clients, kubeconfigs)
        assert written == sum(
            len(objs) for objs in topology_objects(topology, kubeconfigs).values()
        )
        again = await apply_topology(topology, clients, kubeconfigs)  # idempotent
        assert again == written

        manager = await stack.enter_async_context(
            await config.new_client_from_config_dict(fakes["manager"].kubeconfig)
        )
        custom = client.CustomObjectsApi(manager)
        mkc = await custom.list_cluster_custom_object(KUEUE, V1BETA2, "multikueueclusters")
        assert sorted(i["metadata"]["name"] for i in mkc["items"]) == [
            "worker-a100",
            "worker-cpu",
            "worker-h100",
        ]
        secret = await client.CoreV1Api(manager).read_namespaced_secret(
            "worker-h100-kubeconfig", "kueue-system"
        )
        stored = yaml.safe_load(base64.b64decode(secret.data["kubeconfig"]))
        assert stored == fakes["worker-h100"].kubeconfig
        cq = await custom.get_cluster_custom_object(
            KUEUE, V1BETA2, "clusterqueues", "cluster-queue"
        )
        assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": "multikueue"}]

        worker = await stack.enter_async_context(
            await config.new_client_from_config_dict(fakes["worker-h100"].kubeconfig)
        )
        wcustom = client.CustomObjectsApi(worker)
        flavor = await wcustom.get_cluster_custom_object(KUEUE, V1BETA2, "resourceflavors", "h100")
        assert flavor["spec"]["nodeLabels"] == {GPU_PRODUCT_LABEL: H100}
        lqs = await wcustom.list_cluster_custom_object(KUEUE, V1BETA2, "localqueues")
        assert sorted(i["metadata"]["namespace"] for i in lqs["items"]) == [
            "default",
            "team-a",
            "team-b",
        ]
        node = await client.CoreV1Api(worker).read_node("h100-node-1")
        assert node.status.capacity["nvidia.com/gpu"] == "4"
        assert node.metadata.labels[GPU_PRODUCT_LABEL] == H100

        # Workload-file objects are valid for the real API too (C12).
        wl_line = {
            "kind": "Workload",
            "name": "wl-a",
            "namespace": "team-a",
            "priorityClass": "high",
            "podSets": [{"count": 2, "requests": {"cpu": "500m", "nvidia.com/gpu": 1}}],
            "gpuType": H100,
        }
        job_line = {"name": "job-a", "namespace": "team-a", "count": 2, "requests": {"cpu": 2}}
        lines = parse_workload_lines([json.dumps(wl_line), json.dumps(job_line)])
        body = workload_object(lines[0], topology)
        created = await wcustom.create_namespaced_custom_object(
            KUEUE, V1BETA2, "team-a", "workloads", body
        )
        assert created["spec"]["priority"] == 300
        await client.BatchV1Api(manager).create_namespaced_job("team-a", workload_object(lines[1]))


# --- workload files ------------------------------------------------------------------------------


def test_c12_c71_workload_lines_become_jobs_and_workloads() -> None:
    [job_line, wl_line] = parse_workload_lines(
        [
            "# a comment, then a blank line",
            "",
            '{"name": "train", "namespace": "team-a", "queue": "user-queue", "count": 4,'
            ' "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 1},'
            ' "preferredGpuTypes": ["' + H100 + '", "' + A100 + '"], "priorityClass": "low",'
            ' "runSeconds": 90, "holdUntilConfigMap": "go", "serviceAccountName": "none"}',
            '{"kind": "Workload", "name": "infer", "gpuType": "' + A100 + '", "priority": 7,'
            ' "podSets": [{"name": "a", "count": 1}, {"name": "b", "count": 3}]}',
        ]
    )
    job = workload_object(job_line)
    assert job["kind"] == "Job"
    assert job["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "user-queue",
        "kueue.x-k8s.io/priority-class": "low",
    }
    assert job["metadata"]["annotations"] == {
        RUN_SECONDS_ANNOTATION: "90",
        HOLD_ANNOTATION: "go",
        PREFERRED_GPU_TYPES_ANNOTATION: f"{H100},{A100}",
    }
    assert job["spec"]["suspend"] is True
    assert job["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (4, 4)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {
        "cpu": "8",
        "memory": "64Gi",
        "nvidia.com/gpu": "1",
    }
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "nodeSelector" not in job["spec"]["template"]["spec"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "none"

    wl = workload_object(wl_line)
    assert wl["kind"] == "Workload"
    assert wl["metadata"]["namespace"] == "default"
    assert wl["spec"]["queueName"] == "user-queue"
    assert wl["spec"]["priority"] == 7
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("a", 1), ("b", 3)]
    for pod_set in wl["spec"]["podSets"]:
        assert pod_set["template"]["spec"]["nodeSelector"] == {GPU_PRODUCT_LABEL: A100}
        assert "serviceAccountName" not in pod_set["template"]["spec"]


def test_c12_workload_file_errors_report_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "mix.jsonl"
    path.write_text(
        "\n".join(
            [
                '{"name": "ok"}',
                "{not json",
                '{"name": "a", "gpuTyp": "x"}',
                '{"name": "ok"}',
                '{"name": "b", "requests": {"cpu": "many"}}',
                '{"name": "c", "podSets": [{"count": 1}, {"count": 2}]}',
                "[1, 2]",
                '{"name": "Bad_Name"}',
            ]
        )
    )
    with pytest.raises(WorkloadFileError) as raised:
        load_workloads(path)
    lines = str(raised.value).splitlines()
    assert lines[0].startswith(f"{path}:2: not valid JSON")
    assert lines[1] == f"{path}:3: gpuTyp: unknown field"
    assert lines[2] == f"{path}:4: name: default/ok already defined on line 1"
    assert lines[3].startswith(f"{path}:5: requests.cpu: 'many' is not a Kubernetes quantity")
    assert lines[4] == f"{path}:6: podSets: a Job has exactly one pod set"
    assert lines[5] == f"{path}:7: each line must be a JSON object"
    assert lines[6].startswith(f"{path}:8: name: 'Bad_Name' is not a DNS-1123 subdomain")
    assert len(lines) == 7


def test_c17_workload_priority_class_needs_a_priority_value() -> None:
    """C17: ``priority`` is required when ``priorityClassRef`` is set."""
    [line] = parse_workload_lines(['{"kind": "Workload", "name": "w", "priorityClass": "nope"}'])
    with pytest.raises(WorkloadFileError, match="priorityClass 'nope' has no value"):
        workload_object(line, default_topology())


def test_c68_workload_lines_checked_against_the_topology() -> None:
    """C68: a workload names a LocalQueue that exists (same names on every cluster)."""
    lines = [
        json.dumps({"name": "a", "namespace": "team-a"}),
        json.dumps({"name": "b", "namespace": "nowhere"}),
        json.dumps({"name": "c", "queue": "other"}),
        json.dumps({"name": "d", "priorityClass": "urgent"}),
        json.dumps({"name": "e", "priority": 5}),
    ]
    with pytest.raises(WorkloadFileError) as raised:
        parse_workload_lines(lines, source="w.jsonl", topology=default_topology())
    errors = str(raised.value).splitlines()
    assert errors[0].startswith("w.jsonl:2: queue: no LocalQueue nowhere/user-queue")
    assert errors[1].startswith("w.jsonl:3: queue: no LocalQueue default/other")
    assert errors[2].startswith("w.jsonl:4: priorityClass: 'urgent' is not a priority class")
    assert errors[3] == (
        "w.jsonl:5: priority: a Job takes its priority from priorityClass (a Workload label)"
    )
    assert len(errors) == 4


def test_c71_demo_workload_mix_fits_the_default_topology() -> None:
    lines = demo_workloads()
    assert len(lines) >= 8
    required = {line.gpu_type for line in lines if line.gpu_type}
    assert required == {A100, H100}
    assert any(line.preferred_gpu_types for line in lines)
    assert any(line.gpu_type is None and not line.preferred_gpu_types for line in lines)
    assert {line.priority_class for line in lines} >= {"high", "low", None}
    assert all(workload_object(line)["kind"] == "Job" for line in lines)


async def test_s18_submit_workloads_creates_jobs_and_workloads(crds_dir: Path) -> None:
    """A workload file for the manager holds Jobs; ``submit_workloads`` also creates the
    prebuilt Workload of a ``kind: Workload`` line (for a worker's own Kueue, which admits
    prebuilt Workloads: no MultiKueue there)."""
    topology = generic_topology([])
    async with (
        clusters_for(["manager"], crds_dir) as fakes,
        KubeClient(fakes["manager"].kubeconfig) as kube,
    ):
        await apply_topology(topology, {"manager": kube})
        [job_line] = parse_workload_lines(
            [json.dumps({"name": "j", "priorityClass": "high", "runSeconds": 1})],
            topology=topology,
        )
        [workload_line] = parse_workload_lines(
            [json.dumps({"kind": "Workload", "name": "w", "priorityClass": "low"})]
        )
        created = await submit_workloads(kube, [job_line, workload_line], topology)
        assert [(o["kind"], o["metadata"]["name"]) for o in created] == [
            ("Job", "j"),
            ("Workload", "w"),
        ]
        assert created[1]["spec"]["priority"] == 100
        assert (
            fakes["manager"].journal.entries()[-1].field_manager == "multikueue-dispatcher-sandbox"
        )


def test_c22_workload_lines_refused_for_the_manager(tmp_path: Path) -> None:
    """C22 (issue 14 item 1): Kueue's MultiKueue rejects a Workload no Job owns, so a workload
    file checked against a topology (lines for its manager) refuses ``kind: Workload`` lines,
    naming the line and the field; lines built in code get the same from
    ``check_manager_lines`` (``Environment.submit`` calls it)."""
    path = tmp_path / "mix.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"name": "job"}),
                json.dumps({"kind": "Workload", "name": "bare", "namespace": "team-a"}),
                json.dumps({"kind": "Job", "name": "explicit"}),
            ]
        )
    )
    expected = (
        'kind: "Workload" cannot be submitted to the MultiKueue manager: Kueue rejects a '
        'Workload that no Job owns ("No multikueue adapter found", C22); remove "kind" to '
        "submit a Job"
    )
    with pytest.raises(WorkloadFileError) as raised:
        load_workloads(path, default_topology())
    assert str(raised.value).splitlines() == [f"{path}:2: {expected}"]

    lines = load_workloads(path)  # without a topology (a worker, a model): accepted
    assert [line.kind for line in lines] == ["Job", "Workload", "Job"]
    with pytest.raises(WorkloadFileError) as raised:
        check_manager_lines(lines)
    assert str(raised.value).splitlines() == [f"team-a/bare: {expected}"]
    check_manager_lines([lines[0], lines[2]])  # Jobs pass
