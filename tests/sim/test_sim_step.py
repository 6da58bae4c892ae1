"""Issue 15: the simulator decides through the controller's own step (dispatcher.controller.step),
not a copy of it: every decision it takes goes through ``outcome`` and ``account``."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.controller import step
from dispatcher.sim import engine
from dispatcher_sandbox.harness.sim import run, trace, workload

H100 = "NVIDIA-H100-80GB-HBM3"


def test_every_simulated_decision_takes_the_controllers_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = {"outcome": 0, "account": 0}

    def counted(name: str) -> Any:
        original = getattr(step, name)

        def call(*args: Any) -> Any:
            calls[name] += 1
            return original(*args)

        return call

    monkeypatch.setattr(engine, "outcome", counted("outcome"))
    monkeypatch.setattr(engine, "account", counted("account"))
    items = [workload(f"h-{i}", 10.0 * i, gpu_type=H100) for i in range(5)]
    result, metrics = run("gpu-type-affinity+capacity-first", trace(*items))[
        "gpu-type-affinity+capacity-first"
    ]
    assert result.decisions > 0
    assert calls == {"outcome": result.decisions, "account": result.decisions}
    assert metrics["copies_per_admitted"] == 1.0
