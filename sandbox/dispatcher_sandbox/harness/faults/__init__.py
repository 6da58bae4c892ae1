"""Kits of the fault-injection suite: API faults, watch faults, process faults."""
