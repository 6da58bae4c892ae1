"""A fake clock for leader-election tests (the clock is injected:
``docs/fake-apiserver.md#9-client-facts``)."""

from __future__ import annotations

from dispatcher_sandbox.harness.scenario import VirtualClock

NS = "default"

FakeClock = VirtualClock
