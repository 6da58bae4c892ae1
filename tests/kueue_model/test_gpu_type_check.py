"""The verified GPU type (issue 18 item 4): ``check_gpu_type`` compares the flavors a worker
assigned to an admitted workload's GPU resources (its copy's ``status.admission``) with the GPU
types the workload required or preferred, one case per outcome."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.kueue.gputypes import DEFAULT_GPU_LABEL, check_gpu_type
from dispatcher.kueue.objects import ResourceFlavorView, frozen_map

H100, A100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"
FLAVORS = {
    "h100": ResourceFlavorView("h100", frozen_map({DEFAULT_GPU_LABEL: H100})),
    "a100": ResourceFlavorView("a100", frozen_map({DEFAULT_GPU_LABEL: A100})),
    "plain": ResourceFlavorView("plain"),
}


def admission(*flavors: dict[str, str]) -> dict[str, Any]:
    """A copy's ``status.admission`` with one pod set assignment per mapping."""
    return {
        "clusterQueue": "cq",
        "podSetAssignments": [{"name": f"ps{i}", "flavors": f} for i, f in enumerate(flavors)],
    }


GPU_ON = {"cpu": "cpu-flavor", "nvidia.com/gpu": "h100"}


@pytest.mark.parametrize(
    ("assigned", "required", "preferred", "claimed", "mismatch", "message"),
    [
        pytest.param(
            admission(GPU_ON),
            frozenset({H100}),
            (),
            frozenset(),
            "",
            f"GPU type verified on w: flavor h100 ({H100}); the workload requires {H100}",
            id="required-verified",
        ),
        pytest.param(
            admission(GPU_ON),
            frozenset({A100}),
            (),
            frozenset(),
            "required",
            f"GPU type mismatch on w: the worker assigned flavor h100 ({H100}); the workload "
            f"requires {A100}",
            id="required-mismatch",
        ),
        pytest.param(
            admission(GPU_ON),
            None,
            (A100, L4),
            frozenset({A100}),
            "preferred",
            f"GPU type mismatch on w: the worker assigned flavor h100 ({H100}); the workload "
            f"prefers {A100}, {L4} (its MultiKueueCluster's labels say it offers {A100}: "
            "mislabelled?)",
            id="preferred-mismatch-mislabelled",
        ),
        pytest.param(
            admission(GPU_ON),
            None,
            (A100, H100),
            frozenset(),
            "",
            f"GPU type verified on w: flavor h100 ({H100}); the workload prefers {A100}, {H100}",
            id="second-preference-is-no-mismatch",
        ),
        pytest.param(
            admission({"nvidia.com/gpu": "plain"}),
            frozenset({H100}),
            (),
            frozenset(),
            "",
            f"GPU type not verified on w: flavor plain (no {DEFAULT_GPU_LABEL} node label); "
            f"the workload requires {H100}",
            id="unlabelled-flavor",
        ),
        pytest.param(
            admission({"example.com/gpu-l4": "plain"}),
            frozenset({"l4"}),
            (),
            frozenset(),
            "",
            "GPU type verified on w: flavor plain (l4); the workload requires l4",
            id="per-type-resource",
        ),
        pytest.param(
            admission(GPU_ON, {"nvidia.com/gpu": "a100"}),
            frozenset({H100}),
            (),
            frozenset(),
            "required",
            f"GPU type mismatch on w: the worker assigned flavor a100 ({A100}), h100 ({H100}); "
            f"the workload requires {H100}",
            id="one-pod-set-of-two-mismatched",
        ),
    ],
)
def test_each_outcome(
    assigned: dict[str, Any],
    required: frozenset[str] | None,
    preferred: tuple[str, ...],
    claimed: frozenset[str],
    mismatch: str,
    message: str,
) -> None:
    check = check_gpu_type(
        "w", assigned, FLAVORS, required=required, preferred=preferred, claimed=claimed
    )
    assert check is not None
    assert (check.mismatch, check.message) == (mismatch, message)
    assert check.verified == (not mismatch and "not verified" not in message)


@pytest.mark.parametrize(
    ("assigned", "required", "preferred"),
    [
        pytest.param(admission({"cpu": "cpu-flavor"}), frozenset({H100}), (), id="no-gpu-flavor"),
        pytest.param(admission(GPU_ON), None, (), id="nothing-asked-for"),
        pytest.param(None, frozenset({H100}), (), id="no-admission"),
    ],
)
def test_nothing_to_compare(
    assigned: dict[str, Any] | None, required: frozenset[str] | None, preferred: tuple[str, ...]
) -> None:
    assert check_gpu_type("w", assigned, FLAVORS, required=required, preferred=preferred) is None
