"""The emulated scheduler words a workload waiting for quota as Kueue v0.19.2 does
(``flavorassigner.go``: "insufficient unused quota for R in flavor F, N more needed"), which the
dispatcher reads to find workloads starved behind unplaceable ones (issue 17)."""

from __future__ import annotations

import pytest

from dispatcher.controller.outage import starved_on
from dispatcher_sandbox.kueue_emulator.core.scheduler import kueue_wait_message

PREFIX = "couldn't assign flavors to pod set main: "


@pytest.mark.parametrize(
    ("fit", "kueue"),
    [
        pytest.param(
            "insufficient quota in flavor default-flavor: nvidia.com/gpu (requested 4, "
            "available 0)",
            "insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 4 more needed",
            id="one-resource",
        ),
        pytest.param(
            "insufficient quota in flavor a: cpu (requested 2, available 500m); memory (requested "
            "4Gi, available 1Gi); insufficient quota in flavor b: cpu (requested 2, available 1)",
            "insufficient unused quota for cpu in flavor a, 1500m more needed; insufficient unused "
            "quota for memory in flavor a, 3Gi more needed; insufficient unused quota for cpu in "
            "flavor b, 1 more needed",
            id="two-flavors-two-resources",
        ),
        pytest.param(
            "flavor x not found", "flavor x not found", id="other-reasons-are-left-as-they-are"
        ),
    ],
)
def test_wait_message_is_kueues(fit: str, kueue: str) -> None:
    message = kueue_wait_message(PREFIX + fit)
    assert message == PREFIX + kueue
    status = {"conditions": [{"type": "QuotaReserved", "status": "False", "message": message}]}
    assert bool(starved_on({"status": status})) == ("unused" in kueue)
