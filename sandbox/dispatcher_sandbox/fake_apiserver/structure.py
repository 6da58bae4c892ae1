"""The view of a CRD schema that server-side apply needs (docs/fake-apiserver.md F36).

Server-side apply merges objects field by field and lists either atomically or by key. Which one
depends on the schema's ``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys`` and
``x-kubernetes-map-type``. The schema module provides nodes that satisfy this protocol; kinds
without a schema pass ``None`` and every list is then atomic.
"""

from __future__ import annotations

from typing import Protocol


class StructureInfo(Protocol):
    """One node of a schema, as seen by the merge and ownership code."""

    @property
    def list_type(self) -> str | None:
        """``"atomic"``, ``"set"``, ``"map"`` or ``None`` (not a list, or unspecified)."""

    @property
    def list_map_keys(self) -> tuple[str, ...]:
        """The keys of a ``map`` list, in schema order; empty for other nodes."""

    @property
    def map_type(self) -> str | None:
        """``"atomic"`` or ``"granular"`` for objects that say so, else ``None``."""

    def child(self, name: str) -> StructureInfo | None:
        """The node of property ``name`` (or of ``additionalProperties``), if the schema has one."""

    def items(self) -> StructureInfo | None:
        """The node of a list's items, if the schema has one."""
