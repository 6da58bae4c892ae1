"""The pluggy markers of the ``multikueue_dispatcher`` project."""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "multikueue_dispatcher"
"""Project name of the markers, and the entry-point group plugins declare."""

hookspec = pluggy.HookspecMarker(PROJECT)
"""Marks a hook specification (used by :mod:`dispatcher.plugins.spec` only)."""

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's hook implementation: ``@hookimpl def mkd_register_algorithms(): ...``."""
