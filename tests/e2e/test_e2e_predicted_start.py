"""Issue 18 item 2, predicted start, end to end on every backend (sandbox, real Kueue).

worker1 has two A100s (``tests/e2e/topology.yaml``). A first A100 Job runs 20 s there and
finishes: the dispatcher's mirror of worker1 sees how long Jobs of that ClusterQueue run. A second
one then takes both GPUs for 20 s, and a third, which requires A100s (so worker1 alone can take
it), has to wait: its Nominated Event gives the predicted start, which is when the second ends
(about 20 s after it started, whatever time the dispatcher's decision came), and it is admitted
on worker1 once that one finished.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from dispatcher.app.settings import ENV_PREFIX
from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import (
    A100,
    NAMESPACE,
    ApiBackend,
    admitted_on,
    cluster_of,
    is_true,
    manager_events,
)

pytestmark = [pytest.mark.slow, pytest.mark.crds]

RUN = 20.0
SLACK = 10.0


def a100_job(name: str) -> WorkloadLine:
    return WorkloadLine.model_validate(
        {
            "name": name,
            "namespace": NAMESPACE,
            "count": 1,
            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 2},
            "gpuType": A100,
            "runSeconds": RUN,
        }
    )


@pytest.fixture(autouse=True)
async def clean(backend: ApiBackend) -> AsyncIterator[None]:
    """The e2e settings file turns the predicted start off (manifests/overlays/kind/config.yaml);
    this scenario runs the dispatcher with it on, as the product's default is."""
    await backend.reset()
    on = json.dumps({"capacity-first": {"predicted_start": True}})
    await backend.set_dispatcher_env({f"{ENV_PREFIX}ALGORITHM_OPTIONS": on})
    try:
        yield
    finally:
        await backend.reset()
        await backend.set_dispatcher_env({})


def finished(workload: dict[str, object] | None) -> bool:
    return is_true(workload, "Finished")


async def test_a_waiting_job_is_nominated_with_its_predicted_start(backend: ApiBackend) -> None:
    await backend.submit(a100_job("ps-teacher"))
    await backend.wait_workload(
        "ps-teacher", finished, "finished after its run", backend.timeouts.long
    )
    await backend.submit(a100_job("ps-holder"))
    await backend.wait_workload("ps-holder", admitted_on("worker1"), "admitted on worker1")
    await backend.submit(a100_job("ps-waiter"))
    waiting = await backend.wait_workload(
        "ps-waiter",
        lambda w: "worker1" in (w.get("status") or {}).get("nominatedClusterNames", []),
        "nominated to worker1",
        backend.timeouts.short,
    )
    events = await manager_events(
        backend, str(waiting["metadata"]["name"]), "Nominated", backend.timeouts.short
    )
    message = str(events[0]["message"])
    predicted = re.search(r"predicted start in (\d+)s", message)
    assert predicted is not None, message
    # The holder runs RUN seconds from its admission, which was before this decision; the run
    # time the mirror saw of the first Job is RUN plus the delays of the cluster's Job runner
    # and of Kueue's status updates (a second or two on real Kueue), hence the slack.
    assert 1 <= int(predicted[1]) <= RUN + SLACK, message
    await backend.wait_workload(
        "ps-waiter",
        lambda w: cluster_of(w) == "worker1" and is_true(w, "Admitted"),
        "admitted on worker1 once the holder finished",
        backend.timeouts.long,
    )
    assert finished(backend.workload("ps-holder"))
