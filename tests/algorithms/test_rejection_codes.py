"""Every verdict of a dropped cluster carries a code of the fixed set (the ``reason`` label of
``multikueue_dispatcher_filtered_clusters_total``) beside its free text: one case per built-in
filter reason, plus plugin filters (free text: ``other``) and restrictions (``restricted``)."""

from __future__ import annotations

import dataclasses

import pytest

from dispatcher.algorithms import ClusterSnapshot, DispatchRequest, RejectionReason
from dispatcher.plugins import hookimpl
from dispatcher.testing import decide, make_cluster, make_pod_set, make_request

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def inactive_cq(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    assert snapshot.cluster_queue is not None
    return dataclasses.replace(
        snapshot, cluster_queue=dataclasses.replace(snapshot.cluster_queue, active=False)
    )


CASES = [
    pytest.param(
        make_request(cpu=1),
        make_cluster("w", cpu=8, active=False),
        "active",
        RejectionReason.INACTIVE,
        "MultiKueueCluster is not Active",
        id="inactive",
    ),
    pytest.param(
        make_request(cpu=1),
        make_cluster("w", cpu=8, has_queue=False),
        "queue",
        RejectionReason.NO_LOCAL_QUEUE,
        "no LocalQueue default/queue",
        id="no-local-queue",
    ),
    pytest.param(
        make_request(cpu=1),
        inactive_cq(make_cluster("w", cpu=8)),
        "queue",
        RejectionReason.CLUSTER_QUEUE_INACTIVE,
        "is not active",
        id="cluster-queue-inactive",
    ),
    pytest.param(
        make_request(cpu=64),
        make_cluster("w", cpu=8),
        "can-ever-fit",
        RejectionReason.NEVER_FITS,
        "never fits",
        id="never-fits",
    ),
    pytest.param(
        make_request(
            pod_sets=[
                make_pod_set("a", gpus=1, gpu_type=H100),
                make_pod_set("b", gpus=1, affinity_gpu_types=[A100]),
            ]
        ),
        make_cluster("w", gpus=8, gpu_type=H100),
        "gpu-type",
        RejectionReason.GPU_TYPES_CONFLICT,
        "contradict each other",
        id="gpu-types-conflict",
    ),
    pytest.param(
        make_request(gpus=1, gpu_type=H100),
        make_cluster("w", cpu=8),
        "gpu-type",
        RejectionReason.NO_GPU_TYPES,
        "cluster reports no GPU types",
        id="no-gpu-types",
    ),
    pytest.param(
        make_request(gpus=1, gpu_type=H100),
        make_cluster("w", gpus=8, gpu_type=A100),
        "gpu-type",
        RejectionReason.GPU_TYPE_MISMATCH,
        f"cluster offers {A100}",
        id="gpu-type-mismatch",
    ),
    pytest.param(
        dataclasses.replace(make_request(cpu=1), name_taken={"w": "Job default/wl is there"}),
        make_cluster("w", cpu=8),
        "same-name",
        RejectionReason.NAME_TAKEN,
        "Job default/wl is there",
        id="name-taken",
    ),
    pytest.param(
        dataclasses.replace(make_request(cpu=1), copy_lost={"w": "its admitted copy vanished"}),
        make_cluster("w", cpu=8),
        "copy-lost",
        RejectionReason.COPY_LOST,
        "its admitted copy vanished",
        id="copy-lost",
    ),
]


@pytest.mark.parametrize(("request_", "cluster", "dropped_by", "code", "text"), CASES)
def test_each_built_in_filter_reason_has_its_code(
    request_: DispatchRequest,
    cluster: ClusterSnapshot,
    dropped_by: str,
    code: RejectionReason,
    text: str,
) -> None:
    decision = decide(request_, [cluster])
    (verdict,) = decision.verdicts
    assert not verdict.kept
    assert (verdict.dropped_by, verdict.reason_code) == (dropped_by, code)
    assert text in verdict.reason  # the free text stays in the verdict (Events, explain)
    assert decision.nominate == ()


def test_a_kept_cluster_has_no_code() -> None:
    decision = decide(make_request(cpu=1), [make_cluster("w", cpu=8)])
    (verdict,) = decision.verdicts
    assert verdict.kept
    assert verdict.reason_code is None


class OnlyW1:
    """A plugin filter (free text) and a restriction, both keeping only ``w1``."""

    @hookimpl
    def mkd_filter_cluster(self, cluster: ClusterSnapshot) -> str | None:
        return None if cluster.name in ("w1", "w2") else f"tenant table forbids {cluster.name}"

    @hookimpl
    def mkd_restrict_clusters(self, request: DispatchRequest) -> list[str]:
        return ["w0", "w1"]


def test_plugin_filters_count_as_other_and_restrictions_as_restricted() -> None:
    fleet = [make_cluster(f"w{i}", cpu=8, order=i) for i in range(3)]
    decision = decide(make_request(cpu=1), fleet, plugins=[("tenancy", OnlyW1())])
    dropped = {
        v.cluster: (v.dropped_by, v.reason_code, v.reason) for v in decision.verdicts if not v.kept
    }
    assert dropped == {
        "w0": ("tenancy:filter", RejectionReason.OTHER, "tenant table forbids w0"),
        "w2": ("tenancy:restrict", RejectionReason.RESTRICTED, "excluded by plugin tenancy"),
    }
    assert decision.nominate == ("w1",)
