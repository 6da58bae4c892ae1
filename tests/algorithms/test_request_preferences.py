"""Where a workload's preferred GPU types come from (issue 4 scope 4)."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.algorithms.building import request_from_workload

KEY = "multikueue-dispatcher.io/preferred-gpu-types"


def workload(annotations: dict[str, str], template_annotations: dict[str, str]) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
    if template_annotations:
        template["metadata"] = {"annotations": template_annotations}
    return {
        "metadata": {"name": "w", "namespace": "ns", "annotations": annotations},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": template}]},
    }


@pytest.mark.parametrize(
    ("annotations", "template", "expected"),
    [
        pytest.param({KEY: "H100,A100"}, {}, ("H100", "A100"), id="workload-annotation"),
        pytest.param({}, {KEY: "A100"}, ("A100",), id="pod-template-annotation-from-a-job"),
        pytest.param({KEY: "H100"}, {KEY: "A100"}, ("H100",), id="workload-wins"),
        pytest.param({}, {}, (), id="none"),
    ],
)
def test_preferred_gpu_types_sources(
    annotations: dict[str, str], template: dict[str, str], expected: tuple[str, ...]
) -> None:
    request = request_from_workload(workload(annotations, template), now=0.0)
    assert request.preferred_gpu_types == expected
