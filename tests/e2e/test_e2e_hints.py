"""Issue 18 item 3, placement hints, end to end on every backend (sandbox, real Kueue).

Each scenario submits a Job, as a user does, with its hints on the pod template (the Job's own
annotations never reach its Workload; ``dispatcher.kueue.hints``), and labels or taints the
MultiKueueClusters on the manager as an admin does. Without hints the dispatcher's default
pipeline places a small CPU Job on worker2 (capacity-first: the most quota left after placing
it, worker2's 32Gi of memory against worker1's 8Gi; ``tests/e2e/topology.yaml``), so each hint
is shown moving the Job off that choice, or onto a cluster it would otherwise be kept from. The
Nominated Event names the hint.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from dispatcher.kueue.hints import (
    CLUSTER_AFFINITY,
    CLUSTER_NAMES,
    CLUSTER_SELECTOR,
    CLUSTER_TAINTS,
    CLUSTER_TOLERATIONS,
    DISPATCH_MODE,
)
from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import (
    NAMESPACE,
    ApiBackend,
    admitted_on,
    manager_events,
    patch_multikueue_cluster,
)

pytestmark = [pytest.mark.slow, pytest.mark.crds]

REGION = "kueue.x-k8s.io/region"
TAINT = "dedicated=ml:NoSchedule"


@pytest.fixture(autouse=True)
async def regions(backend: ApiBackend) -> AsyncIterator[None]:
    """Every test starts with no Jobs and no Workloads, worker1 in region eu and worker2 in us;
    the labels and any taint are removed afterwards."""
    await backend.reset()
    await patch_multikueue_cluster(backend, "worker1", {"labels": {REGION: "eu"}})
    await patch_multikueue_cluster(backend, "worker2", {"labels": {REGION: "us"}})
    try:
        yield
    finally:
        for worker in ("worker1", "worker2"):
            await patch_multikueue_cluster(
                backend,
                worker,
                {"labels": {REGION: None}, "annotations": {CLUSTER_TAINTS.key: None}},
            )


def job(name: str, hints: Mapping[str, str] | None = None) -> WorkloadLine:
    data: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "count": 1,
        "requests": {"cpu": "1", "memory": "1Gi"},
        "podAnnotations": dict(hints or {}),
    }
    return WorkloadLine.model_validate(data)


async def admitted_with_event(backend: ApiBackend, name: str, worker: str) -> str:
    """Wait for the Job's Workload to be admitted on ``worker``; its Nominated Event's message."""
    admitted = await backend.wait_workload(
        name, admitted_on(worker), f"admitted on {worker}", backend.timeouts.long
    )
    events = await manager_events(
        backend, str(admitted["metadata"]["name"]), "Nominated", backend.timeouts.short
    )
    return str(events[0]["message"])


async def test_item3_without_hints_the_default_choice_is_worker2(backend: ApiBackend) -> None:
    """The baseline every other scenario moves away from (labels alone change nothing)."""
    await backend.submit(job("hint-none"))
    message = await admitted_with_event(backend, "hint-none", "worker2")
    assert message.startswith("nominated [worker2] by ")
    assert "hints" not in message


@pytest.mark.parametrize(
    ("hints", "worker", "named"),
    [
        pytest.param(
            {CLUSTER_SELECTOR.key: f"{REGION}=eu"},
            "worker1",
            f"worker2: hints: labels do not match hint cluster-selector ({REGION}=eu)",
            id="required-selector-excludes",
        ),
        pytest.param(
            {CLUSTER_AFFINITY.key: json.dumps({"required": [f"{REGION} in (eu)"]})},
            "worker1",
            "worker2: hints: labels match no required term of hint cluster-affinity: "
            f"({REGION}=eu)",
            id="required-affinity-excludes",
        ),
        pytest.param(
            {CLUSTER_NAMES.key: "worker1"},
            "worker1",
            "worker2: hints: not in hint cluster-names (worker1)",
            id="cluster-names-excludes",
        ),
        pytest.param(
            {
                CLUSTER_AFFINITY.key: json.dumps(
                    {"preferred": [{"weight": 50, "preference": f"{REGION}=eu"}]}
                )
            },
            "worker1",
            f"worker1: rank 0 (fits now; preferred ({REGION}=eu) +50)",
            id="preferred-ranks",
        ),
    ],
)
async def test_item3_a_hint_moves_the_job_and_the_event_names_it(
    backend: ApiBackend, hints: dict[str, str], worker: str, named: str
) -> None:
    await backend.submit(job("hinted", hints))
    message = await admitted_with_event(backend, "hinted", worker)
    assert message.startswith(f"nominated [{worker}] by ")
    assert named in message


async def test_item3_a_taint_keeps_jobs_off_unless_they_tolerate_it(backend: ApiBackend) -> None:
    """worker2 is tainted ``dedicated=ml:NoSchedule``: a Job without a toleration goes to
    worker1, one that tolerates the taint goes to worker2 (the default choice again)."""
    taints = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    await patch_multikueue_cluster(
        backend, "worker2", {"annotations": {CLUSTER_TAINTS.key: json.dumps(taints)}}
    )
    await backend.submit(job("untolerated"))
    message = await admitted_with_event(backend, "untolerated", "worker1")
    assert f"worker2: hints: taint {TAINT} is not tolerated (hint cluster-tolerations)" in message
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "ml"}]
    await backend.submit(job("tolerated", {CLUSTER_TOLERATIONS.key: json.dumps(tolerations)}))
    message = await admitted_with_event(backend, "tolerated", "worker2")
    assert f"worker2: rank 0 (fits now; tolerates taint {TAINT})" in message


async def test_item3_the_dispatch_mode_hint_hands_the_job_to_all_at_once(
    backend: ApiBackend,
) -> None:
    """A Job asking for ``all-at-once`` is nominated to both workers by that algorithm (the
    configured pipeline would name worker2 alone), and Kueue admits it on one of them."""
    await backend.submit(job("hint-mode", {DISPATCH_MODE.key: "all-at-once"}))
    admitted = await backend.wait_workload(
        "hint-mode",
        lambda w: admitted_on("worker1")(w) or admitted_on("worker2")(w),
        "admitted on a worker",
        backend.timeouts.long,
    )
    events = await manager_events(
        backend, str(admitted["metadata"]["name"]), "Nominated", backend.timeouts.short
    )
    messages = [str(e["message"]) for e in events]
    assert any(m.startswith("nominated [worker1, worker2] by all-at-once") for m in messages)
    assert ("worker1", "worker2") in backend.nominations("hint-mode")


async def test_item3_a_bad_hint_is_a_warning_naming_the_annotation(backend: ApiBackend) -> None:
    """A hint that cannot be read is not guessed at: no nomination, and a Warning
    ``InvalidWorkload`` names the pod template's annotation and what is wrong."""
    await backend.submit(job("bad-hint", {CLUSTER_SELECTOR.key: "region=eu,,zone=a"}))
    workload = await backend.wait_for(
        lambda: backend.workload("bad-hint"), "the Workload of bad-hint", backend.timeouts.long
    )
    [event] = await manager_events(
        backend, str(workload["metadata"]["name"]), "InvalidWorkload", backend.timeouts.long
    )
    assert event["type"] == "Warning"
    assert event["message"] == (
        "cannot dispatch: spec.podSets[0].template.metadata.annotations"
        f"[{CLUSTER_SELECTOR.key}]: empty requirement in selector 'region=eu,,zone=a'"
    )
    assert not (backend.workload("bad-hint") or {}).get("status", {}).get("nominatedClusterNames")
