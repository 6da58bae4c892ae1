"""The built-in algorithms, registered through the same hook third-party plugins use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dispatcher.algorithms import BUILTIN_ALGORITHMS, AlgorithmSpec
from dispatcher.plugins.markers import hookimpl

__all__ = ["mkd_register_algorithms"]


@hookimpl
def mkd_register_algorithms() -> Sequence[AlgorithmSpec[Any]]:
    """capacity-first, gpu-type-affinity, all-at-once and incremental."""
    return BUILTIN_ALGORITHMS
