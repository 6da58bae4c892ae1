"""``sandbox serve --topology``: the clusters of a topology as one process (issue 3, scope 7).

Contract points: C68 (the same LocalQueues on every cluster), C71 (GPU flavors), C10/C77
(MultiKueueClusters and their kubeconfig Secrets on the manager), C8 (the AdmissionCheck), C9/C59
(MultiKueueConfig order); the default topology (README, *The sandbox*). The process is started with
``sys.executable``, waited for through its ``READY`` line with a deadline, read through
kubernetes_asyncio with the kubeconfig files it wrote, and stopped with SIGTERM.
"""

from __future__ import annotations

import base64
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import yaml
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from kubernetes_asyncio import client, config

pytestmark = pytest.mark.anyio

READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"
GPU_LABEL = "nvidia.com/gpu.product"


@contextlib.asynccontextmanager
async def serving(args: list[str], stderr: Path) -> AsyncIterator[tuple[Process, list[str]]]:
    """``python -m dispatcher sandbox serve ARGS`` until READY; SIGTERM on the way out."""
    with stderr.open("wb") as err:
        process = await anyio.open_process(
            [sys.executable, "-m", "dispatcher", "sandbox", "serve", *args], stderr=err
        )
        lines: list[str] = []
        try:
            assert process.stdout is not None
            buffer = ""
            with anyio.fail_after(READY_TIMEOUT):
                async for chunk in TextReceiveStream(process.stdout):
                    buffer += chunk
                    *done, buffer = buffer.split("\n")
                    lines += done
                    if "READY" in done:
                        break
            if "READY" not in lines:
                raise AssertionError(await anyio.Path(stderr).read_text())
            yield process, lines
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(STOP_TIMEOUT):
                    await process.wait()
            await process.aclose()


async def test_c68_c71_c77_serve_default_topology(tmp_path: Path) -> None:
    directory = tmp_path / "sandbox"
    names = ["manager", "worker-a100", "worker-h100", "worker-cpu"]
    async with (
        serving(["--dir", str(directory), "--topology", "default"], tmp_path / "err") as (
            process,
            lines,
        ),
        contextlib.AsyncExitStack() as stack,
    ):
        assert sorted(p.name for p in directory.iterdir()) == sorted(
            f"{n}.kubeconfig" for n in names
        )
        for name in names:
            assert any(line.startswith(name) for line in lines), lines
        apis = {
            name: await stack.enter_async_context(
                await config.new_client_from_config(
                    config_file=str(directory / f"{name}.kubeconfig")
                )
            )
            for name in names
        }

        # Workers: one GPU flavor each (C71), the same ClusterQueue and LocalQueues (C68).
        expected_flavors = {
            "worker-a100": {"a100": "NVIDIA-A100-SXM4-80GB"},
            "worker-h100": {"h100": "NVIDIA-H100-80GB-HBM3"},
            "worker-cpu": {"cpu": None},
        }
        for worker, flavors in expected_flavors.items():
            custom = client.CustomObjectsApi(apis[worker])
            listed = await custom.list_cluster_custom_object(KUEUE, V1BETA2, "resourceflavors")
            found = {
                f["metadata"]["name"]: (f["spec"].get("nodeLabels") or {}).get(GPU_LABEL)
                for f in listed["items"]
            }
            assert found == flavors, worker
            queues = await custom.list_cluster_custom_object(KUEUE, V1BETA2, "clusterqueues")
            assert [q["metadata"]["name"] for q in queues["items"]] == ["cluster-queue"]
            lqs = await custom.list_cluster_custom_object(KUEUE, V1BETA2, "localqueues")
            assert sorted(
                (q["metadata"]["namespace"], q["metadata"]["name"]) for q in lqs["items"]
            ) == [("default", "user-queue"), ("team-a", "user-queue"), ("team-b", "user-queue")]
        gpu_nodes = await client.CoreV1Api(apis["worker-a100"]).list_node(
            label_selector=f"{GPU_LABEL}=NVIDIA-A100-SXM4-80GB"
        )
        assert [n.status.capacity["nvidia.com/gpu"] for n in gpu_nodes.items] == ["8"]

        # Manager: CQ with the MultiKueue check (C8), clusters in order (C59), Secrets (C77).
        custom = client.CustomObjectsApi(apis["manager"])
        cq = await custom.get_cluster_custom_object(
            KUEUE, V1BETA2, "clusterqueues", "cluster-queue"
        )
        assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": "multikueue"}]
        mk_config = await custom.get_cluster_custom_object(
            KUEUE, V1BETA2, "multikueueconfigs", "multikueue"
        )
        assert mk_config["spec"]["clusters"] == names[1:]
        mkcs = await custom.list_cluster_custom_object(KUEUE, V1BETA2, "multikueueclusters")
        locations = {
            m["metadata"]["name"]: m["spec"]["clusterSource"]["kubeConfig"]["location"]
            for m in mkcs["items"]
        }
        assert locations == {w: f"{w}-kubeconfig" for w in names[1:]}
        for worker in names[1:]:
            secret = await client.CoreV1Api(apis["manager"]).read_namespaced_secret(
                f"{worker}-kubeconfig", "kueue-system"
            )
            stored = yaml.safe_load(base64.b64decode(secret.data["kubeconfig"]))
            written = yaml.safe_load((directory / f"{worker}.kubeconfig").read_text())
            assert stored == written

        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(STOP_TIMEOUT):
            assert await process.wait() == 0


async def test_c68_serve_custom_topology_file(tmp_path: Path) -> None:
    topology = {
        "namespaces": ["ml"],
        "localQueues": [{"name": "q", "namespace": "ml", "clusterQueue": "cq"}],
        "manager": {
            "name": "hub",
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
                "name": "edge",
                "resourceFlavors": [{"name": "default-flavor"}],
                "clusterQueues": [
                    {
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
                    }
                ],
            }
        ],
    }
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(topology))
    directory = tmp_path / "d"
    async with serving(["--dir", str(directory), "--topology", str(path)], tmp_path / "err"):
        assert sorted(p.name for p in directory.iterdir()) == ["edge.kubeconfig", "hub.kubeconfig"]
        async with await config.new_client_from_config(
            config_file=str(directory / "edge.kubeconfig")
        ) as api:
            lqs = await client.CustomObjectsApi(api).list_namespaced_custom_object(
                KUEUE, V1BETA2, "ml", "localqueues"
            )
            assert [q["spec"]["clusterQueue"] for q in lqs["items"]] == ["cq"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--topology", "default", "--workers", "2"], "give --topology or --workers, not both"),
        (["--workers", "21"], "--workers must be between 0 and 20"),
        (["--topology", "BAD"], "workers.0.gpus: unknown field"),
    ],
)
def test_c9_serve_rejects_bad_arguments_before_starting(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "localQueues": [],
                "manager": {"clusterQueue": {}},
                "workers": [{"name": "w", "gpus": 1}],
            }
        )
    )
    args = [str(bad) if a == "BAD" else a for a in extra]
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "sandbox", "serve", "--dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "READY" not in done.stdout
