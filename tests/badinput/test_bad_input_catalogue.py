# ruff: noqa: E501 - the catalogue holds exact messages, one string each
"""The bad-input catalogue (issue 8, scope 2): every bad input a user can give the dispatcher,
where they see the error, and the exact text they see.

One table, ``CASES``, drives the tests and ``docs/bad-inputs.md`` (the test fails when the doc's
table differs from the one rendered here; ``python tests/badinput/test_bad_input_catalogue.py``
rewrites it). Every case checks the issue's three promises: nothing crashes, nothing else is
affected (a good worker or workload is dispatched in the same run), and the error names the
object and the field.

Groups, each run once per module and then checked case by case:

- ``worker``: bad kubeconfig Secrets and MultiKueueClusters, all at once on the sandbox (fake API
  servers with the real CRDs, the emulated Kueue, the real manager process), listed in the
  MultiKueueConfig beside the three good workers; the error is the worker's state, seen in the
  log, in ``explain`` and in ``check-config``.
- ``workload``: Workloads no cluster can take, on the sandbox: the decision's Warning Event.
- ``api``: objects the real Kueue CRDs refuse: the API server's 422 text.
- ``loop``: the same objects when they reach the dispatcher anyway (a manager served without
  the CRD schema): a Warning Event on the Workload and a log line, once; the loop goes on.
- ``cli``: settings and algorithm names: ``check-config`` and ``run`` exit 2 with the text on
  stderr.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.resources import MULTIKUEUE_CONFIGS, WORKLOADS
from dispatcher.kueue.hints import CLUSTER_SELECTOR
from dispatcher.topology import KUEUE_NAMESPACE, default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.fake_apiserver.server import load_crd_documents
from dispatcher_sandbox.harness.badinput import (
    LogCapture,
    RegistryChanges,
    kubeconfig_data,
    kubeconfig_secret,
    multikueue_cluster,
    multikueue_config,
    mutate_kubeconfig,
    pod_set,
    run_cli,
    schema_less_dispatcher,
    workload,
)
from dispatcher_sandbox.harness.scenario import (
    EventWatch,
    by_job,
    cpu_jobs,
    decoded_kubeconfig,
    gpu_job,
    placed_all,
    run_cli_process,
    worker_secret,
)
from dispatcher_sandbox.kube_client import MULTIKUEUE_CLUSTERS as SANDBOX_MKCS
from dispatcher_sandbox.kube_client import MULTIKUEUE_CONFIGS as SANDBOX_MKCONFIGS
from dispatcher_sandbox.kube_client import SECRETS as SANDBOX_SECRETS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "bad-inputs.md"


@dataclass(frozen=True)
class Case:
    """One bad input: ``subject`` is the object (or file) the test gives it in."""

    id: str
    group: str
    subject: str
    input: str
    where: str
    message: str


WORKER_STATE = "worker state: log, `explain`, `check-config` (exit 1)"
LOOP = "Warning Event `InvalidWorkload` on the Workload, log `workload NS/NAME: …`, `explain`"
API = "API server: 422 on create (`kubectl` prints it)"
CLI = "`check-config` and `run`: exit 2, stderr"


def _kc(case_id: str, subject: str, what: str, message: str) -> Case:
    return Case(case_id, "worker", subject, what, WORKER_STATE, message)


CASES: list[Case] = [
    # --- worker kubeconfigs (C10, C62) ---------------------------------------------------------
    _kc(
        "kubeconfig-secret-deleted",
        "kc-deleted",
        "the kubeconfig Secret of a connected worker is deleted",
        'BadKubeConfig: spec.clusterSource.kubeConfig.location: secret "kueue-system/kc-deleted-kubeconfig" not found (MultiKueueCluster kc-deleted)',
    ),
    _kc(
        "multikueuecluster-secret-missing",
        "kc-no-secret",
        "MultiKueueCluster `spec.clusterSource.kubeConfig.location` names no Secret",
        'BadKubeConfig: spec.clusterSource.kubeConfig.location: secret "kueue-system/kc-no-secret-kubeconfig" not found (MultiKueueCluster kc-no-secret)',
    ),
    _kc(
        "kubeconfig-key-missing",
        "kc-no-key",
        "Secret without the `kubeconfig` key",
        'BadKubeConfig: data.kubeconfig: key "kubeconfig" not found in secret "kueue-system/kc-no-key-kubeconfig"',
    ),
    _kc(
        "kubeconfig-not-yaml",
        "kc-not-yaml",
        "`data.kubeconfig` is not YAML",
        'BadKubeConfig: secret "kueue-system/kc-not-yaml-kubeconfig": data.kubeconfig: not valid YAML (line 3, column 5)',
    ),
    _kc(
        "kubeconfig-no-current-context",
        "kc-contexts",
        "two contexts, no `current-context`",
        'BadKubeConfig: secret "kueue-system/kc-contexts-kubeconfig": data.kubeconfig: current-context: not set, and the kubeconfig has 2 contexts',
    ),
    _kc(
        "kubeconfig-exec-plugin",
        "kc-exec",
        "user with an `exec` plugin",
        'InsecureKubeConfig: secret "kueue-system/kc-exec-kubeconfig": data.kubeconfig: users[0].user.exec: exec plugins are not allowed',
    ),
    _kc(
        "kubeconfig-auth-provider",
        "kc-auth-provider",
        "user with an `auth-provider`",
        'InsecureKubeConfig: secret "kueue-system/kc-auth-provider-kubeconfig": data.kubeconfig: users[0].user.auth-provider: auth providers are not allowed',
    ),
    _kc(
        "kubeconfig-token-file",
        "kc-token-file",
        "user with a `tokenFile`",
        'InsecureKubeConfig: secret "kueue-system/kc-token-file-kubeconfig": data.kubeconfig: users[0].user.tokenFile: token files are not allowed',
    ),
    _kc(
        "kubeconfig-insecure-tls",
        "kc-insecure-tls",
        "cluster with `insecure-skip-tls-verify`",
        'InsecureKubeConfig: secret "kueue-system/kc-insecure-tls-kubeconfig": data.kubeconfig: clusters[0].cluster.insecure-skip-tls-verify: insecure TLS verification is not allowed',
    ),
    _kc(
        "kubeconfig-ca-file",
        "kc-ca-file",
        "cluster with a `certificate-authority` file",
        'InsecureKubeConfig: secret "kueue-system/kc-ca-file-kubeconfig": data.kubeconfig: clusters[0].cluster.certificate-authority: certificate authority files are not allowed, use certificate-authority-data',
    ),
    _kc(
        "kubeconfig-basic-auth",
        "kc-basic-auth",
        "user with `username`/`password`",
        'InsecureKubeConfig: secret "kueue-system/kc-basic-auth-kubeconfig": data.kubeconfig: users[0].user.username: basic auth is not allowed',
    ),
    _kc(
        "kubeconfig-server-not-https",
        "kc-http",
        "cluster `server: http://…`",
        'InsecureKubeConfig: secret "kueue-system/kc-http-kubeconfig": data.kubeconfig: clusters[0].cluster.server: the server must use https',
    ),
    _kc(
        "multikueuecluster-path-location",
        "kc-path",
        "MultiKueueCluster with `locationType: Path`",
        "BadKubeConfig: spec.clusterSource.kubeConfig.locationType: Path is not supported: the dispatcher reads worker kubeconfigs from Secrets only (MultiKueueCluster kc-path)",
    ),
    # --- MultiKueueConfig ----------------------------------------------------------------------
    Case(
        "multikueueconfig-unknown-cluster",
        "worker",
        "worker-gone",
        "MultiKueueConfig `spec.clusters` names a MultiKueueCluster that does not exist",
        "the decision's Event on each Workload (`Nominated`/`NotNominated`), `explain`",
        'worker-gone: active: MultiKueueCluster "worker-gone" not found (MultiKueueConfig multikueue spec.clusters[3])',
    ),
    Case(
        "multikueueconfig-too-many-clusters-api",
        "api",
        "big",
        "MultiKueueConfig with 21 `spec.clusters`",
        API,
        'MultiKueueConfig.kueue.x-k8s.io "big" is invalid: spec.clusters: Too many: 21: must have at most 20 items',
    ),
    Case(
        "multikueueconfig-too-many-clusters-dispatcher",
        "loop",
        "multikueue",
        "the same, served without the CRD schema",
        "log `workload NS/NAME: …` (once per workload); all 21 stay candidates",
        "MultiKueueConfig multikueue spec.clusters: 21 clusters, Kueue allows at most 20; all are used as candidates",
    ),
    # --- Workloads -----------------------------------------------------------------------------
    Case(
        "workload-malformed-quantity-api",
        "api",
        "bad-quantity",
        "Workload requesting `cpu: 2 cores`",
        API,
        'Workload.kueue.x-k8s.io "bad-quantity" is invalid: spec.podSets[0].template.spec.containers[0].resources.requests.cpu: Invalid value: "2 cores": spec.podSets[0].template.spec.containers[0].resources.requests.cpu in body should match \'^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$\'',
    ),
    Case(
        "workload-malformed-quantity-dispatcher",
        "loop",
        "bad-quantity",
        "the same, served without the CRD schema, quota reserved",
        LOOP,
        "cannot dispatch: spec.podSets[0].template.spec.containers[0].resources.requests.cpu: not a quantity: '2 cores'",
    ),
    Case(
        "workload-zero-pod-sets-api",
        "api",
        "no-pod-sets",
        "Workload with `spec.podSets: []`",
        API,
        'Workload.kueue.x-k8s.io "no-pod-sets" is invalid: spec.podSets: Invalid value: 0: spec.podSets in body should have at least 1 items',
    ),
    Case(
        "workload-zero-pod-sets-dispatcher",
        "loop",
        "no-pod-sets",
        "the same, served without the CRD schema, quota reserved",
        LOOP,
        "cannot dispatch: spec.podSets: no pod sets (Kueue's Workload CRD requires 1 to 18)",
    ),
    Case(
        "workload-unknown-gpu-type",
        "workload",
        "unknown-gpu",
        "Job requiring GPU type `NVIDIA-B200` (no worker has it)",
        "Warning Event `NotNominated` on the Workload, `explain`",
        "nominated [none] by gpu-type-affinity+capacity-first: no candidate cluster left (worker-a100: pod sets' node selector requires NVIDIA-B200; cluster offers NVIDIA-A100-SXM4-80GB; worker-cpu: pod sets' node selector requires NVIDIA-B200; cluster reports no GPU types; worker-h100: pod sets' node selector requires NVIDIA-B200; cluster offers NVIDIA-H100-80GB-HBM3)",
    ),
    Case(
        "workload-bigger-than-any-cluster",
        "workload",
        "huge-0",
        "Job requesting 200 CPUs (the largest worker has 128)",
        "Warning Event `NotNominated` on the Workload, `explain`",
        "nominated [none] by gpu-type-affinity+capacity-first: no candidate cluster left (worker-a100: never fits: pod set main: insufficient quota in flavor a100: cpu (requested 200, available 128); worker-cpu: never fits: pod set main: insufficient quota in flavor cpu: cpu (requested 200, available 128); worker-h100: never fits: pod set main: insufficient quota in flavor h100: cpu (requested 200, available 96))",
    ),
    Case(
        "workload-bad-placement-hint",
        "workload",
        "bad-hint-0",
        "Job whose pod template carries the placement hint "
        "`multikueue-dispatcher.io/cluster-selector: region=eu,,zone=a`",
        "Warning Event `InvalidWorkload` on the Workload, `explain`; not nominated",
        "cannot dispatch: spec.podSets[0].template.metadata.annotations"
        "[multikueue-dispatcher.io/cluster-selector]: empty requirement in selector "
        "'region=eu,,zone=a'",
    ),
    # --- settings and algorithms ---------------------------------------------------------------
    Case(
        "settings-wrong-type",
        "cli",
        "workers: many",
        "settings file `config.yaml`: `workers: many`",
        CLI + " after `invalid settings: `",
        "workers: Input should be a valid integer, unable to parse string as an integer (got 'many') [from config.yaml]",
    ),
    Case(
        "settings-unknown-key",
        "cli",
        "worker: 4",
        "settings file `config.yaml`: `worker: 4`",
        CLI + " after `invalid settings: `",
        "worker: unknown setting (did you mean 'workers'?) [from config.yaml]",
    ),
    Case(
        "settings-unknown-nested-key",
        "cli",
        "leader_election:\n  lease_nam: dispatcher",
        "settings file `config.yaml`: `leader_election: {lease_nam: dispatcher}`",
        CLI + " after `invalid settings: `",
        "leader_election.lease_nam: unknown setting (did you mean 'leader_election.lease_name'?) [from config.yaml]",
    ),
    Case(
        "algorithm-unknown",
        "cli",
        "gpu-type-affinity,capcity-first",
        "`--algorithms gpu-type-affinity,capcity-first`",
        CLI,
        "algorithms: unknown algorithm 'capcity-first'; available: all-at-once (builtin), capacity-first (builtin), gpu-type-affinity (builtin), incremental (builtin)",
    ),
    Case(
        "pipeline-fail-closed-unknown",
        "cli",
        "fail_closed_plugins: [tenancyy]",
        "settings file `config.yaml`: `fail_closed_plugins: [tenancyy]` (a misspelt plugin)",
        CLI,
        "algorithms: fail_closed_plugins: 'tenancyy' not loaded; loaded plugins: builtin",
    ),
]


def cases(group: str) -> list[Any]:
    return [pytest.param(c, id=c.id) for c in CASES if c.group == group]


def by_id(case_id: str) -> Case:
    return next(c for c in CASES if c.id == case_id)


# --- the doc -------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table() -> str:
    """The catalogue as the Markdown table of docs/bad-inputs.md."""
    lines = [
        "| case | bad input | where it is reported | exact message |",
        "|---|---|---|---|",
    ]
    for case in CASES:
        message = f"`{_cell(case.message)}`" if case.message else "—"
        lines.append(f"| `{case.id}` | {_cell(case.input)} | {_cell(case.where)} | {message} |")
    return "\n".join(lines)


def doc_table(markdown: str) -> str:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end])


def test_doc_table_is_the_catalogue() -> None:
    """docs/bad-inputs.md shows exactly this catalogue (one source of truth: ``CASES``)."""
    assert doc_table(DOC.read_text()) == render_table(), (
        "docs/bad-inputs.md is stale: run python tests/badinput/test_bad_input_catalogue.py"
    )


def test_catalogue_covers_the_issue() -> None:
    """Issue 8 scope 2 lists these inputs; each has at least one case, ids are unique."""
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    for needed in (
        "secret-deleted",
        "secret-missing",
        "key-missing",
        "not-yaml",
        "no-current-context",
        "exec-plugin",
        "auth-provider",
        "token-file",
        "insecure-tls",
        "ca-file",
        "basic-auth",
        "server-not-https",
        "path-location",
        "too-many-clusters-api",
        "too-many-clusters-dispatcher",
        "unknown-cluster",
        "malformed-quantity-api",
        "malformed-quantity-dispatcher",
        "zero-pod-sets-api",
        "zero-pod-sets-dispatcher",
        "unknown-gpu-type",
        "bigger-than-any-cluster",
        "settings-wrong-type",
        "settings-unknown-key",
        "algorithm-unknown",
    ):
        assert any(needed in i for i in ids), needed


# --- worker: bad kubeconfigs and MultiKueueClusters on the sandbox ------------------------------

KUBECONFIG_KINDS = {
    "kc-no-secret": "missing",
    "kc-no-key": "key-missing",
    "kc-not-yaml": "not-yaml",
    "kc-contexts": "contexts",
    "kc-exec": "exec",
    "kc-auth-provider": "auth-provider",
    "kc-token-file": "token-file",
    "kc-insecure-tls": "insecure-tls",
    "kc-ca-file": "ca-file",
    "kc-basic-auth": "basic-auth",
    "kc-http": "http",
}
GOOD_WORKERS = ("worker-a100", "worker-h100", "worker-cpu")


@dataclass
class WorkersSeen:
    """What the user sees after one sandbox run with every bad worker at once."""

    states: dict[str, tuple[str, str, str]]
    logs: list[str]
    explain: tuple[int, str, str]
    check_config: tuple[int, str, str]
    events: list[str]
    placed_on: str | None
    tokens: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
async def workers_seen(
    tmp_path_factory: pytest.TempPathFactory, crds_dir: Path
) -> AsyncIterator[WorkersSeen]:
    """One sandbox run: a connected worker loses its Secret, 12 broken MultiKueueClusters and
    an unknown name join the MultiKueueConfig, a good Job is dispatched; then ``explain`` and
    ``check-config`` run as processes."""
    directory = tmp_path_factory.mktemp("bad-workers")
    capture = LogCapture()
    changes = RegistryChanges()
    with capture.installed(), changes.installed():
        async with environment(directory, default_topology(), crds=crds_dir) as env:
            assert env.dispatcher is not None
            manager = env.dispatcher

            def workers() -> dict[str, Any]:
                return manager.registry.workers if manager.registry is not None else {}

            client = env.manager_client
            base = decoded_kubeconfig(await worker_secret(env, "worker-cpu"))
            # A worker whose Secret is deleted once it is connected (not in the config).
            await client.create(
                SANDBOX_SECRETS, kubeconfig_secret("kc-deleted-kubeconfig", kubeconfig_data(base))
            )
            await client.create(
                SANDBOX_MKCS, multikueue_cluster("kc-deleted", "kc-deleted-kubeconfig")
            )
            await changes.wait(
                lambda: "kc-deleted" in workers() and workers()["kc-deleted"].connected
            )
            await client.delete(SANDBOX_SECRETS, "kc-deleted-kubeconfig", KUEUE_NAMESPACE)
            for name, kind in KUBECONFIG_KINDS.items():
                data = mutate_kubeconfig(kind, base)
                if data is not None:
                    await client.create(
                        SANDBOX_SECRETS, kubeconfig_secret(f"{name}-kubeconfig", data)
                    )
                await client.create(SANDBOX_MKCS, multikueue_cluster(name, f"{name}-kubeconfig"))
            await client.create(
                SANDBOX_MKCS, multikueue_cluster("kc-path", "/etc/kueue/kc-path.kubeconfig", "Path")
            )
            bad = [*KUBECONFIG_KINDS, "kc-path"]
            await client.merge_patch(
                SANDBOX_MKCONFIGS,
                "multikueue",
                {"spec": {"clusters": [*GOOD_WORKERS, "worker-gone", *bad]}},
                field_manager="test",
            )
            await changes.wait(
                lambda: all(
                    n in workers() and workers()[n].state.phase == "Unusable"
                    for n in [*bad, "kc-deleted"]
                )
            )
            watch = EventWatch()
            watch.install(env.sandbox.manager)
            [good] = cpu_jobs("good", 1)
            await env.submit([good])
            placed = by_job(await env.wait_for_manager(placed_all({good.name}), within=60))
            await watch.wait_for("Nominated", 1, within=30)
            meta = placed[good.name]["metadata"]
            kubeconfig = str(env.sandbox.kubeconfig_path(env.sandbox.manager))
            explain = await run_cli_process(
                [
                    "explain",
                    f"{meta['namespace']}/{meta['name']}",
                    "--kubeconfig",
                    kubeconfig,
                    "--sync-timeout",
                    "20",
                ],
            )
            check = await run_cli_process(["check-config", "--kubeconfig", kubeconfig])
            assert manager.registry is not None
            states = {
                n: (s.phase, s.reason, s.message) for n, s in manager.registry.states().items()
            }
            tokens = [c.token for c in (env.sandbox.manager, *env.sandbox.workers)]
            yield WorkersSeen(
                states=states,
                logs=list(capture.lines),
                explain=explain,
                check_config=check,
                events=[e["message"] for e in watch.seen],
                placed_on=(placed[good.name].get("status") or {}).get("clusterName"),
                tokens=tokens,
            )


# --- workload: nothing fits, on the sandbox --------------------------------------------------

BAD_SELECTOR = "region=eu,,zone=a"


@dataclass
class WorkloadsSeen:
    events: dict[str, list[dict[str, Any]]]
    placed: dict[str, str | None]
    explain: dict[str, tuple[int, str, str]]


@pytest.fixture(scope="module")
async def workloads_seen(
    tmp_path_factory: pytest.TempPathFactory, crds_dir: Path
) -> AsyncIterator[WorkloadsSeen]:
    """One sandbox run: two Jobs no worker can take, one with a bad placement hint and a good
    one; ``explain`` on the three."""
    directory = tmp_path_factory.mktemp("bad-workloads")
    async with environment(directory, default_topology(), crds=crds_dir) as env:
        watch = EventWatch()
        watch.install(env.sandbox.manager)
        lines = [
            gpu_job("unknown-gpu", required="NVIDIA-B200"),
            *cpu_jobs("huge", 1, cpu="200"),
            *(
                line.model_copy(update={"pod_annotations": {CLUSTER_SELECTOR.key: BAD_SELECTOR}})
                for line in cpu_jobs("bad-hint", 1)
            ),
            *cpu_jobs("good", 1),
        ]
        await env.submit(lines)
        await env.wait_for_manager(placed_all({"good-0"}), within=60)
        await watch.wait_for("NotNominated", 2, within=60)
        await watch.wait_for("InvalidWorkload", 1, within=60)
        workloads = by_job(await env.workloads())
        job_of = {w["metadata"]["name"]: job for job, w in workloads.items()}
        events: dict[str, list[dict[str, Any]]] = {}
        for event in watch.seen:
            events.setdefault(job_of[event["involvedObject"]["name"]], []).append(event)
        kubeconfig = str(env.sandbox.kubeconfig_path(env.sandbox.manager))
        explain = {}
        for job in ("unknown-gpu", "huge-0", "bad-hint-0"):
            meta = workloads[job]["metadata"]
            explain[job] = await run_cli_process(
                [
                    "explain",
                    f"{meta['namespace']}/{meta['name']}",
                    "--kubeconfig",
                    kubeconfig,
                    "--sync-timeout",
                    "20",
                ],
            )
        placed = {job: (w.get("status") or {}).get("clusterName") for job, w in workloads.items()}
        yield WorkloadsSeen(events, placed, explain)


# --- loop: objects the CRDs refuse, reaching the dispatcher anyway ------------------------------


@dataclass
class LoopSeen:
    events: dict[str, list[dict[str, Any]]]
    logs: list[str]
    nominated: dict[str, tuple[str, ...]]
    reconciles: dict[str, int]
    explain: dict[str, tuple[int, str, str]]


LOOP_WORKLOADS = {
    "bad-quantity": [pod_set({"cpu": "2 cores"})],
    "no-pod-sets": [],
    "good": [pod_set({"cpu": "1"})],
}


@pytest.fixture(scope="module")
async def loop_seen(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LoopSeen]:
    """The real registry and nomination loop on a manager served without the CRD schema: a
    21-cluster MultiKueueConfig, two invalid Workloads with quota reserved and a good one;
    ``explain`` on the invalid ones as a process."""
    directory = tmp_path_factory.mktemp("bad-loop")
    capture = LogCapture()
    with capture.installed():
        async with schema_less_dispatcher() as env:
            # 21 clusters (the CRD allows 20): 20 unknown names first, the one worker last.
            clusters = [*(f"gone-{i:02d}" for i in range(20)), "w1"]
            await env.api.request(
                "PATCH",
                MULTIKUEUE_CONFIGS.path(None, "multikueue"),
                body={"spec": {"clusters": clusters}},
                content_type="application/merge-patch+json",
            )
            await env.wait(lambda: len(env.registry.config_of("multikueue")[1]) == len(clusters))
            for name, pod_sets in LOOP_WORKLOADS.items():
                await env.add_workload(workload(name, pod_sets))
            invalid = [n for n in LOOP_WORKLOADS if n != "good"]

            def reported() -> bool:
                return all(
                    env.nominator.records.get(f"default/{n}") is not None
                    and env.nominator.records[f"default/{n}"].event_message
                    for n in invalid
                )

            await env.wait(lambda: env.nominated("good") == ("w1",) and reported())
            # No retry storm: the good one is reconciled again and again (resync 0.5 s) while
            # the bad ones are left alone.
            settled = env.reconciles["default/good"] + 4
            await env.wait(lambda: env.reconciles["default/good"] >= settled)
            kubeconfig = directory / "manager.kubeconfig"
            kubeconfig.write_text(yaml.safe_dump(env.manager.kubeconfig))
            explain = {}
            for name in invalid:
                explain[name] = await run_cli_process(
                    [
                        "explain",
                        f"default/{name}",
                        "--kubeconfig",
                        str(kubeconfig),
                        "--sync-timeout",
                        "20",
                    ],
                )
            yield LoopSeen(
                events={n: await env.events(n) for n in LOOP_WORKLOADS},
                logs=list(capture.lines),
                nominated={n: env.nominated(n) for n in LOOP_WORKLOADS},
                reconciles=dict(env.reconciles),
                explain=explain,
            )


# --- api: what the real CRDs refuse ------------------------------------------------------------


@functools.cache
def _crds(path: Path) -> list[dict[str, Any]]:
    return load_crd_documents(path)


API_OBJECTS: dict[str, tuple[Any, dict[str, Any], dict[str, Any]]] = {
    # case id: (resource, the bad object, a good object of the same kind)
    "multikueueconfig-too-many-clusters-api": (
        MULTIKUEUE_CONFIGS,
        multikueue_config("big", [f"worker-{i}" for i in range(21)]),
        multikueue_config("twenty", [f"worker-{i}" for i in range(20)]),
    ),
    "workload-malformed-quantity-api": (
        WORKLOADS,
        workload("bad-quantity", [pod_set({"cpu": "2 cores"})]),
        workload("good-quantity", [pod_set({"cpu": "2"})]),
    ),
    "workload-zero-pod-sets-api": (
        WORKLOADS,
        workload("no-pod-sets", []),
        workload("one-pod-set", [pod_set({"cpu": "1"})]),
    ),
}


@pytest.mark.parametrize("case", cases("api"))
async def test_api_refuses(case: Case, crds_dir: Path) -> None:
    """Kueue's CRD schema refuses the object with a 422 naming the object and the field; the
    same API server accepts a good object of the same kind right after."""
    resource, bad, good = API_OBJECTS[case.id]
    namespace = bad["metadata"].get("namespace")
    async with (
        FakeCluster("manager", crds=_crds(crds_dir)) as cluster,
        await KubeApi.from_kubeconfig(cluster.kubeconfig, name="manager") as api,
    ):
        cluster.rejections_expected = True
        with pytest.raises(ApiError) as refused:
            await api.create(resource, bad, namespace=namespace)
        assert (refused.value.status, refused.value.message) == (422, case.message)
        assert f'"{case.subject}"' in case.message  # the object ...
        assert refused.value.body["details"]["causes"][0]["field"] in case.message  # the field
        created = await api.create(resource, good, namespace=namespace)
        assert created["metadata"]["name"] == good["metadata"]["name"]


# --- the checks, case by case --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", cases("worker"))
async def test_worker_case(case: Case, workers_seen: WorkersSeen) -> None:
    """C62/C10: a bad kubeconfig Secret or MultiKueueCluster makes that one worker Unusable;
    the log, ``explain`` and ``check-config`` show the same text, naming the Secret or the
    MultiKueueCluster and the field."""
    seen = workers_seen
    name = case.subject
    if case.id == "multikueueconfig-unknown-cluster":
        # Every decision lists it as a dropped candidate; nothing else reports it.
        [event] = seen.events
        assert f"; {case.message};" in event
        last_decision = next(
            line for line in seen.explain[1].splitlines() if line.startswith("  nominated [")
        )
        assert f"; {case.message};" in last_decision
        assert name not in seen.states
        return
    phase, reason, message = seen.states[name]
    assert (phase, f"{reason}: {message}") == ("Unusable", case.message)
    assert f"worker {name} is unusable: {case.message}" in seen.logs
    assert f"  worker {name}: Unusable: {case.message}" in seen.explain[1].splitlines()
    assert f"  {name}: unusable: {case.message}" in seen.check_config[1].splitlines()
    # The object: the Secret, or the MultiKueueCluster itself.
    assert f"{name}-kubeconfig" in case.message or f"MultiKueueCluster {name}" in case.message


@pytest.mark.slow
async def test_bad_workers_leave_the_rest_working(workers_seen: WorkersSeen) -> None:
    """Nothing else is affected: with 12 broken MultiKueueClusters and an unknown name listed in
    the MultiKueueConfig beside them (and one more broken outside it), the good workers stay
    Connected and a workload is dispatched and admitted; the commands exit as
    documented (explain 0, check-config 1); no token ever reaches a log line."""
    seen = workers_seen
    assert {n: seen.states[n][0] for n in GOOD_WORKERS} == dict.fromkeys(GOOD_WORKERS, "Connected")
    assert seen.placed_on in GOOD_WORKERS
    assert seen.explain[0] == 0, seen.explain
    assert seen.check_config[0] == 1, seen.check_config
    for good in GOOD_WORKERS:
        assert any(line.startswith(f"  {good}: ok (") for line in seen.check_config[1].splitlines())
    assert not [t for t in seen.tokens for line in seen.logs if t in line]


@pytest.mark.slow
@pytest.mark.parametrize("case", cases("workload"))
async def test_workload_case(case: Case, workloads_seen: WorkloadsSeen) -> None:
    """C49/C50: a Workload no worker can take gets one Warning ``NotNominated`` Event naming,
    per cluster, the pod set and resource or the GPU type that does not fit; ``explain`` shows
    it as the last decision."""
    events = workloads_seen.events[case.subject]
    # A Workload the dispatcher cannot read (a bad placement hint) is reported, not decided.
    invalid = "InvalidWorkload" in case.where
    reason = "InvalidWorkload" if invalid else "NotNominated"
    assert [(e["reason"], e["type"], e["message"]) for e in events] == [
        (reason, "Warning", case.message)
    ]
    code, out, _ = workloads_seen.explain[case.subject]
    assert code == 0
    line = f"fresh evaluation: {case.message}" if invalid else f"  {case.message}"
    assert line in out.splitlines()
    assert workloads_seen.placed[case.subject] is None


@pytest.mark.slow
async def test_unplaceable_workloads_leave_the_rest_working(workloads_seen: WorkloadsSeen) -> None:
    """Nothing else is affected: a good workload submitted with them is admitted."""
    assert workloads_seen.placed["good-0"] in GOOD_WORKERS


@pytest.mark.parametrize("case", cases("loop"))
async def test_loop_case(case: Case, loop_seen: LoopSeen) -> None:
    """Objects the CRD schema would refuse, reaching the nomination loop anyway (a manager
    without the schema): the Workload gets one Warning Event and one log line naming the
    field, ``explain`` shows it; no retry storm; the loop goes on."""
    seen = loop_seen
    if case.id == "multikueueconfig-too-many-clusters-dispatcher":
        assert seen.logs.count(f"workload default/good: {case.message}") == 1
        assert seen.nominated["good"] == ("w1",)  # w1 is spec.clusters[20]
        return
    name = case.subject
    events = seen.events[name]
    assert [(e["reason"], e["type"], e["message"]) for e in events] == [
        ("InvalidWorkload", "Warning", case.message)
    ]
    assert seen.logs.count(f"workload default/{name}: {case.message}") == 1
    code, out, _ = seen.explain[name]
    assert code == 0
    assert f"fresh evaluation: {case.message}" in out.splitlines()
    assert seen.nominated[name] == ()
    # Reconciled when it appeared (and at most once more for the worker's first sync), not
    # retried while the good workload was reconciled again and again.
    assert seen.reconciles[f"default/{name}"] <= 2 < seen.reconciles["default/good"]


async def test_invalid_workloads_leave_the_loop_running(loop_seen: LoopSeen) -> None:
    """The nomination loop survives them: the good workload is nominated, and nothing failed
    unexpectedly."""
    assert loop_seen.nominated["good"] == ("w1",)
    assert not [line for line in loop_seen.logs if "failed unexpectedly" in line]


@pytest.mark.parametrize("case", cases("cli"))
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_cli_case(
    case: Case, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad settings, an unknown algorithm or fail-closed plugin: ``check-config`` and ``run``
    exit 2 before connecting anywhere, stderr names the setting (and the file it came from)."""
    monkeypatch.chdir(tmp_path)
    for variable in [v for v in os.environ if v.startswith("DISPATCHER_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("DISPATCHER_DISABLE_PLUGIN_AUTOLOAD", "1")  # built-in algorithms only
    unreachable = ["--kubeconfig", str(tmp_path / "no-such.kubeconfig")]
    offline = ["--offline"] if command == "check-config" else []
    if case.id.startswith("settings-"):
        (tmp_path / "config.yaml").write_text(case.subject + "\n")
        argv = [command, *offline, "--config", "config.yaml", *unreachable]
        expected = f"invalid settings: {case.message}\n"
    elif case.id.startswith("pipeline-"):
        # Valid settings naming something the plugin host does not have.
        (tmp_path / "config.yaml").write_text(case.subject + "\n")
        argv = [command, *offline, "--config", "config.yaml", *unreachable]
        expected = f"{case.message}\n"
    else:
        argv = [command, *offline, "--algorithms", case.subject, *unreachable]
        expected = f"{case.message}\n"
    assert run_cli(argv) == (2, "", expected)


def test_cli_good_settings_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing else is affected: a good file and pipeline pass ``check-config --offline``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISPATCHER_DISABLE_PLUGIN_AUTOLOAD", "1")
    (tmp_path / "config.yaml").write_text("workers: 4\nleader_election:\n  lease_name: d\n")
    argv = ["check-config", "--offline", "--config", "config.yaml"]
    code, out, err = run_cli([*argv, "--algorithms", "gpu-type-affinity,capacity-first"])
    assert (code, err) == (0, "")
    assert out.startswith("settings: ok")


if __name__ == "__main__":
    text = DOC.read_text()
    DOC.write_text(text.replace(doc_table(text), render_table()))
    sys.exit(0)
