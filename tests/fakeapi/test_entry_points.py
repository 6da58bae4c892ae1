"""The in-test entry point (F22) and the fake server's dependencies (F24)."""

from __future__ import annotations

import ast
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client, config

from dispatcher_sandbox.fake_apiserver import FakeCluster, Faults, fake_cluster, merge_kubeconfigs

FAKEAPI = Path(__file__).resolve().parents[2] / "sandbox" / "dispatcher_sandbox" / "fake_apiserver"
# Third-party imports the fake server may use (F24): all installable from PyPI, no binaries.
ALLOWED_THIRD_PARTY = {"aiohttp", "yaml", "jsonpatch", "cryptography", "celpy"}
# The fake server's own libraries, which the product does not need.
SANDBOX_ONLY = {"jsonpatch", "cryptography", "cel-python"}


async def test_f22_context_manager_exposes_port_kubeconfig_and_controls() -> None:
    async with fake_cluster("named") as cluster:
        assert cluster.port > 0
        assert cluster.url == f"https://127.0.0.1:{cluster.port}"
        kubeconfig = cluster.kubeconfig
        assert kubeconfig["current-context"] == "named"
        assert isinstance(cluster.faults, Faults)
        assert cluster.admin_port is not None
        assert cluster.admin_port > 0
        assert yaml.safe_load(yaml.safe_dump(kubeconfig)) == kubeconfig
    assert not cluster.is_up


async def test_f22_one_kubeconfig_with_several_contexts() -> None:
    async with FakeCluster("c1") as one, FakeCluster("c2") as two:
        merged = merge_kubeconfigs([one.kubeconfig, two.kubeconfig])
        names = []
        for context in ("c1", "c2"):
            api = await config.new_client_from_config_dict(merged, context=context)
            async with api:
                await client.CoreV1Api(api).create_namespace(
                    {"metadata": {"name": f"only-in-{context}"}}
                )
                listed = await client.CoreV1Api(api).list_namespace()
                names.append(
                    sorted(n.metadata.name for n in listed.items if "only" in n.metadata.name)
                )
        assert names == [["only-in-c1"], ["only-in-c2"]]


def third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "dispatcher_sandbox"}


def runtime_requirements(distribution: str) -> set[str]:
    """The names of a distribution's requirements outside any extra, lower case."""
    return {
        r.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower()
        for r in metadata.requires(distribution) or []
        if "extra ==" not in r
    }


def test_f24_fake_server_modules_are_found() -> None:
    assert (FAKEAPI / "server.py").is_file()


@pytest.mark.parametrize("module", sorted(p.name for p in FAKEAPI.glob("*.py")))
def test_f24_fake_server_imports_only_pypi_libraries(module: str) -> None:
    assert third_party_imports(FAKEAPI / module) <= ALLOWED_THIRD_PARTY


def test_f24_sandbox_extra_declares_the_fake_servers_libraries() -> None:
    """The sandbox distribution (``sandbox/pyproject.toml``) requires the fake server's own
    libraries; the product requires aiohttp and PyYAML and none of those."""
    sandbox = runtime_requirements("multikueue-dispatcher-sandbox")
    product = runtime_requirements("multikueue-dispatcher")
    assert sandbox >= SANDBOX_ONLY
    assert {"aiohttp", "pyyaml"} <= product
    # None of the sandbox-only libraries is forced on the manager image.
    assert not (SANDBOX_ONLY & product)
