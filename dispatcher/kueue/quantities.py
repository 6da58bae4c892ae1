"""Kubernetes resource quantities as exact integers.

A quantity such as ``"500m"``, ``"2"``, ``"1.5Gi"`` or ``"3e3"`` is parsed into an integer number of
**milli-units** (``"1"`` is ``1000``, ``"500m"`` is ``500``). Every resource the dispatcher compares
(CPU, memory, GPUs, pods, extended resources) fits that scale exactly, arithmetic is plain ``int``
arithmetic, and comparisons are exact. Sub-milli quantities (``"1n"``, ``"1u"``) are rounded up, as
Kubernetes does when it reports ``MilliValue()`` for requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = [
    "MILLI",
    "QuantityError",
    "add_requests",
    "format_quantity",
    "parse_quantity",
    "scale_requests",
    "subtract_requests",
]

MILLI = 1000
"""Milli-units per whole unit: ``parse_quantity("1") == MILLI``."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


class QuantityError(ValueError):
    """A string is not a valid Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> int:
    """Parse a Kubernetes quantity into milli-units, rounding fractions of a milli-unit up.

    Integers and floats are taken as whole units (``2`` means ``"2"``). Raises
    :class:`QuantityError` for anything Kubernetes would reject.
    """
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value * MILLI
    if isinstance(value, float):
        number = Decimal(repr(value))
    else:
        match = _PATTERN.match(value.strip())
        if match is None:
            raise QuantityError(f"not a quantity: {value!r}")
        try:
            number = Decimal(match["num"])
        except InvalidOperation as exc:  # pragma: no cover - the pattern already excludes these
            raise QuantityError(f"not a quantity: {value!r}") from exc
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            number *= _DECIMAL[suffix]
        else:  # exponent form, e.g. "1e3"
            number *= Decimal(10) ** int(suffix[1:])
    milli = (number * MILLI).to_integral_value(rounding=ROUND_CEILING)
    return int(milli)


def format_quantity(milli: int) -> str:
    """Render milli-units as a short quantity (``1500`` → ``"1500m"``, ``2000`` → ``"2"``)."""
    if milli % MILLI == 0:
        return str(milli // MILLI)
    return f"{milli}m"


def add_requests(*requests: Mapping[str, int]) -> dict[str, int]:
    """Sum resource maps key by key (missing keys count as zero)."""
    total: dict[str, int] = {}
    for request in requests:
        for name, amount in request.items():
            total[name] = total.get(name, 0) + amount
    return total


def subtract_requests(left: Mapping[str, int], right: Mapping[str, int]) -> dict[str, int]:
    """``left - right`` key by key over the union of keys; results may be negative."""
    keys: Iterable[str] = sorted(set(left) | set(right))
    return {name: left.get(name, 0) - right.get(name, 0) for name in keys}


def scale_requests(request: Mapping[str, int], factor: int) -> dict[str, int]:
    """Multiply every amount by an integer factor (per-pod requests times a pod count)."""
    return {name: amount * factor for name, amount in request.items()}
