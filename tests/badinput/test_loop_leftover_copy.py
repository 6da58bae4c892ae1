"""The nomination loop and a copy left on a worker by an earlier attempt (contract C24, C25,
C26, C31, C32), on the loop harness of the bad-input catalogue: the real registry and Nominator
on fake API servers without Kueue's schema, a stand-in decision function, no Kueue.

After a worker evicts a copy (C26) the manager is evicted and requeued; Kueue removes the old
copy only at a later reconcile, and only from a worker that is not nominated (C31/C32). Were the
dispatcher to nominate that worker again first, the old copy, and the worker Job created at its
first admission, would stay: once the worker admits the copy again the Job runs at once and a
short one can finish before Kueue records the admission, leaving the manager Workload
``Finished`` without ``clusterName`` (C25; seen on real Kueue v0.19.2 in the seeded mix). The
loop waits until the copy is gone, for at most ``leftover_wait_seconds``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.resources import WORKLOADS
from dispatcher_sandbox.harness.badinput import (
    SchemaLess,
    pod_set,
    schema_less_dispatcher,
    workload,
)

ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"


def always_w2(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
    """A pipeline stand-in that always prefers ``w2``."""
    return Decision("always-w2", ("w2",), "w2 is preferred")


def mirrored(env: SchemaLess, worker: str, name: str) -> bool:
    """Whether the dispatcher's mirror of ``worker`` holds the Workload ``name``."""
    mirror = env.registry.workers[worker].mirror
    return mirror is not None and mirror.cache("workloads").get(name, "default") is not None


def old_copy(name: str) -> dict[str, object]:
    """Kueue's copy of the manager Workload ``name`` (origin label, C32), evicted back to
    pending on its worker: no ``Admitted`` or ``QuotaReserved`` condition is True."""
    body = workload(name, [pod_set({"cpu": "1"})])
    body["metadata"]["labels"] = {ORIGIN_LABEL: "multikueue"}
    return body


async def test_no_nomination_until_the_old_copy_is_removed() -> None:
    """C26/C32: a workload nominated nowhere while ``w2`` still holds its old copy gets no
    nomination (an Event says why, and the loop looks again only when the copy changes or the
    wait is over); once Kueue removes the copy, ``w2`` is nominated."""
    async with schema_less_dispatcher(always_w2, workers=("w1", "w2")) as env:
        async with await KubeApi.from_kubeconfig(env.workers["w2"].kubeconfig, name="w2") as w2:
            await w2.create(WORKLOADS, old_copy("job"), "default")
            await env.wait(lambda: mirrored(env, "w2", "job"))
            await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
            await env.wait(lambda: any(r == "WaitingForCopyRemoval" for r, _ in env.recorded))
            assert env.nominated("job") == ()
            [(_, message)] = env.recorded
            assert "a copy from an earlier attempt is still on w2" in message
            await w2.request("DELETE", WORKLOADS.path("default", "job"))
        await env.wait(lambda: env.nominated("job") == ("w2",))
        assert env.nominations() == {("w2", "always-w2"): 1.0}


async def test_the_wait_for_an_old_copy_is_bounded() -> None:
    """A copy that is never removed (Kueue cannot reach that worker) delays the nomination by
    ``leftover_wait_seconds`` only."""
    async with schema_less_dispatcher(always_w2, workers=("w1", "w2")) as env:
        env.nominator.config = dataclasses.replace(env.nominator.config, leftover_wait_seconds=1)
        async with await KubeApi.from_kubeconfig(env.workers["w2"].kubeconfig, name="w2") as w2:
            await w2.create(WORKLOADS, old_copy("job"), "default")
        await env.wait(lambda: mirrored(env, "w2", "job"))
        await env.add_workload(workload("job", [pod_set({"cpu": "1"})]))
        await env.wait(lambda: env.nominated("job") == ("w2",))
