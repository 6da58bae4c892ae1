"""What an algorithm is: a named preset of stages with a pydantic options model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from dispatcher.algorithms.stages import Stages

__all__ = ["AlgorithmSpec", "NoOptions"]

OptionsT = TypeVar("OptionsT", bound=BaseModel)


class NoOptions(BaseModel, extra="forbid", frozen=True):
    """Options model of an algorithm that has none."""


@dataclass(frozen=True)
class AlgorithmSpec(Generic[OptionsT]):
    """A dispatch algorithm as registered through the ``mkd_register_algorithms`` hook.

    ``build`` turns validated options into the :class:`Stages` the algorithm contributes; several
    algorithms can be composed into one pipeline (filters and scorers concatenate, the last
    selector wins).
    """

    name: str
    summary: str
    options: type[OptionsT]
    build: Callable[[OptionsT], Stages]

    def validate_options(self, raw: Mapping[str, Any] | BaseModel | None) -> OptionsT:
        """Validate raw settings (a mapping) into the algorithm's options model."""
        if isinstance(raw, self.options):
            return raw
        if isinstance(raw, BaseModel):
            raw = raw.model_dump()
        return self.options.model_validate(dict(raw or {}))

    def stages(self, raw: Mapping[str, Any] | BaseModel | None = None, source: str = "") -> Stages:
        """Validate ``raw`` and build this algorithm's stages, tagged with ``source``."""
        built = self.build(self.validate_options(raw))
        if source:
            built = Stages(built.filters, built.scorers, built.selector, source)
        return built
