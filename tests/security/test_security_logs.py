"""Issue 8, security: "never log or expose Secret data or tokens" and "metrics/health endpoints
expose no cluster credentials".

One recorded run of the real manager on the sandbox, at log level ``debug`` (the most talkative
level: every library's debug records reach the handlers), with bad worker Secrets and faults:

- worker-h100's kubeconfig keeps its valid token but adds an exec plugin (refused: insecure);
- worker-a100's kubeconfig carries a wrong token (the worker answers 401);
- the manager API fails the first Secret lists with 500/503;
- once a job is placed on worker-cpu, worker-cpu's Secret becomes text that is not YAML and has
  worker-cpu's token inside (a parser echoing its input would leak it).

Every log line of that run, as the production handler writes it (the session capture of
tests/conftest.py), is then searched for every credential involved, plain or base64-encoded:
the clusters' tokens, the wrong token, the CA and serving private keys, each Secret's data; and
``/metrics``, ``/healthz`` and ``/readyz`` are scraped while the workers are broken.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml

from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.fake_apiserver.server import ISSUED_CREDENTIALS
from dispatcher_sandbox.fake_apiserver.tls import process_ca
from dispatcher_sandbox.harness.scenario import (
    b64,
    by_job,
    cluster_of,
    cpu_jobs,
    decoded_kubeconfig,
    placed_all,
    replace_secret_data,
    start_replica,
    worker_secret,
)

pytestmark = [pytest.mark.crds, pytest.mark.slow]


@dataclass
class Scenario:
    """What the run logged and what the endpoints answered, and the secrets to look for."""

    lines: list[tuple[str, str]] = field(default_factory=list)  # (logger, written line)
    endpoints: dict[str, tuple[int, str]] = field(default_factory=dict)  # path -> answer
    secrets: dict[str, str] = field(default_factory=dict)  # label -> value
    states: dict[str, tuple[str, str]] = field(default_factory=dict)  # worker -> phase, reason
    production_handler_seen: bool = False
    capture_attached: bool = False


async def _wait_states(replica: Any, wanted: dict[str, str], within: float) -> dict[str, Any]:
    """Poll the registry's worker states (a state change has no event to wait on) until each
    worker in ``wanted`` is in that phase."""
    with anyio.fail_after(within):
        while True:
            registry = replica.manager.registry
            states = registry.states() if registry is not None else {}
            if all(n in states and states[n].phase == p for n, p in wanted.items()):
                return states
            await anyio.sleep(0.1)


async def _answers(replica: Any) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    bound = replica.manager.bound
    async with aiohttp.ClientSession() as session:
        for path, (host, port) in (
            ("/healthz", bound.health),
            ("/readyz", bound.health),
            ("/metrics", bound.metrics),
        ):
            async with session.get(f"http://{host or '127.0.0.1'}:{port}{path}") as response:
                out[path] = (response.status, await response.text())
    return out


@pytest.fixture(scope="module")
async def scenario(
    tmp_path_factory: pytest.TempPathFactory, crds_dir: Path, token_scan: Any
) -> Scenario:
    result = Scenario()
    wrong_token = secrets.token_urlsafe(32)
    level = logging.getLogger().level
    with token_scan.collect() as lines:
        async with (
            environment(
                tmp_path_factory.mktemp("leaks"),
                default_topology(),
                crds=crds_dir,
                run_dispatcher=False,
            ) as env,
            anyio.create_task_group() as group,
        ):
            sandbox = env.sandbox
            for cluster in sandbox.clusters:
                result.secrets[f"token of {cluster.name}"] = cluster.token
            result.secrets["wrong token"] = wrong_token
            result.secrets["CA private key"] = process_ca().key_pem.decode()
            names = {c.name for c in sandbox.clusters}
            for issued in ISSUED_CREDENTIALS:
                if issued.kind == "serving-key" and issued.cluster in names:
                    result.secrets[f"serving key of {issued.cluster}"] = issued.value

            h100 = await worker_secret(env, "worker-h100")
            result.secrets["Secret data of worker-h100"] = h100["data"]["kubeconfig"]
            config = decoded_kubeconfig(h100)
            config["users"][0]["user"]["exec"] = {"apiVersion": "v1", "command": "get-token"}
            exec_data = b64(yaml.safe_dump(config))
            result.secrets["Secret data of worker-h100 (exec)"] = exec_data
            await replace_secret_data(env, "worker-h100", {"kubeconfig": exec_data})

            a100 = await worker_secret(env, "worker-a100")
            result.secrets["Secret data of worker-a100"] = a100["data"]["kubeconfig"]
            config = decoded_kubeconfig(a100)
            config["users"][0]["user"]["token"] = wrong_token
            wrong_data = b64(yaml.safe_dump(config))
            result.secrets["Secret data of worker-a100 (wrong token)"] = wrong_data
            await replace_secret_data(env, "worker-a100", {"kubeconfig": wrong_data})

            sandbox.manager.faults.error(500, verbs=("list",), path="/secrets", count=1)
            sandbox.manager.faults.error(503, verbs=("list",), path="/secrets", count=1)

            replica = await start_replica(
                env, group, overrides={"log_level": "debug", "log_format": "json"}
            )
            jobs = cpu_jobs("leak-scan", 1)
            await env.submit(jobs)
            final = by_job(
                await env.wait_for_manager(placed_all({j.name for j in jobs}), within=60)
            )
            assert cluster_of(final[jobs[0].name]) == "worker-cpu"
            states = await _wait_states(
                replica, {"worker-h100": "Unusable", "worker-cpu": "Connected"}, within=30
            )
            assert states["worker-a100"].phase != "Connected", states["worker-a100"]
            result.endpoints = await _answers(replica)

            cpu = await worker_secret(env, "worker-cpu")
            result.secrets["Secret data of worker-cpu"] = cpu["data"]["kubeconfig"]
            token = sandbox.cluster("worker-cpu").token
            garbage = f"apiVersion: v1\nclusters: [unclosed {token}\n  - : :\n"
            result.secrets["Secret data of worker-cpu (not YAML)"] = b64(garbage)
            await replace_secret_data(env, "worker-cpu", {"kubeconfig": b64(garbage)})
            states = await _wait_states(replica, {"worker-cpu": "Unusable"}, within=30)
            result.states = {n: (s.phase, s.reason) for n, s in states.items()}

            root = logging.getLogger()
            result.production_handler_seen = any(
                getattr(h, "_multikueue_dispatcher_handler", False) for h in root.handlers
            )
            result.capture_attached = token_scan in root.handlers
            group.cancel_scope.cancel()
    # The run set the root level to debug: the rest of the session logs as before.
    logging.getLogger().setLevel(level)
    result.lines = list(lines)
    return result


async def test_the_capture_saw_this_runs_dispatcher_lines(scenario: Scenario) -> None:
    """Issue 8, security (the suite-wide scan): the session capture survives the manager's
    ``configure_logging`` and sees the dispatcher's own lines, in the production JSON form;
    without them the scan would pass by seeing nothing."""
    assert scenario.production_handler_seen, "run_manager installed its handler"
    assert scenario.capture_attached, "the session capture was still a root handler"
    ours = [
        json.loads(line)
        for name, line in scenario.lines
        if name.startswith("dispatcher.") and not name.startswith("dispatcher_sandbox")
    ]
    print(f"{len(scenario.lines)} lines captured, {len(ours)} from the dispatcher")
    messages = [entry["message"] for entry in ours]
    assert any(re.match(r"worker worker-h100 is unusable: .*exec", m) for m in messages), messages
    levels = {json.loads(line)["level"] for _, line in scenario.lines}
    assert "debug" in levels, "the run logged at debug level"


async def test_the_run_with_bad_secrets_logged_no_credential(
    scenario: Scenario, token_scan: Any
) -> None:
    """Issue 8, security: "never log or expose Secret data or tokens": no token (right or
    wrong), no private key, no Secret data in any line the run wrote, even at debug level."""
    assert scenario.states["worker-h100"] == ("Unusable", "InsecureKubeConfig")
    assert scenario.states["worker-cpu"] == ("Unusable", "BadKubeConfig")
    found = token_scan.search([line for _, line in scenario.lines], scenario.secrets)
    assert not found, f"credentials in the logs: {found}"
    assert len(scenario.secrets) >= 12, sorted(scenario.secrets)


async def test_metrics_and_health_endpoints_expose_no_credential(
    scenario: Scenario, token_scan: Any
) -> None:
    """Issue 8, security: "metrics/health endpoints expose no cluster credentials": ``/metrics``,
    ``/healthz`` and ``/readyz``, scraped while two workers are broken, carry no token, no
    Secret data, no key, no CA data and no server URL with credentials in it."""
    assert set(scenario.endpoints) == {"/healthz", "/readyz", "/metrics"}
    assert scenario.endpoints["/healthz"][0] == 200
    assert scenario.endpoints["/readyz"][0] == 200
    metrics = scenario.endpoints["/metrics"][1]
    assert 'cluster="worker-h100"' in metrics, "the broken workers show in the metrics"
    bodies = [body for _, body in scenario.endpoints.values()]
    assert not token_scan.search(bodies, scenario.secrets)
    ca = process_ca().cert_pem.decode()
    ca_body = "".join(ca.splitlines()[1:-1])
    for body in bodies:
        assert "-----BEGIN" not in body
        assert ca_body[:64] not in body
        assert b64(ca)[:64] not in body
        assert not re.search(r"\w+://[^/\s\"]*@", body), "a URL with user information"
        assert "certificate-authority" not in body
        assert "Bearer" not in body
