"""A fake clock for leader-election tests (notes 2.4: inject the clock)."""

from __future__ import annotations

from dispatcher_sandbox.harness.scenario import VirtualClock

NS = "default"

FakeClock = VirtualClock
