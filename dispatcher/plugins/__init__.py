"""The plugin host of multikueue-dispatcher (pluggy project ``multikueue_dispatcher``).

Plugin authors need two things from here: :data:`hookimpl` to mark their hook implementations,
and the hook specifications in :mod:`dispatcher.plugins.spec` (documented in
``docs/plugins.md``). A plugin is installed as a distribution declaring::

    [project.entry-points.multikueue_dispatcher]
    my-plugin = "my_package.plugin"

The dispatcher loads it at start through :meth:`PluginHost.load`; set
``DISPATCHER_DISABLED_PLUGINS=my-plugin`` to block it or ``DISPATCHER_DISABLE_PLUGIN_AUTOLOAD=1``
to load no third-party plugin at all.
"""

from __future__ import annotations

from dispatcher.plugins.host import (
    BUILTIN_PLUGIN,
    ENTRY_POINT_GROUP,
    ENV_DISABLE_AUTOLOAD,
    ENV_DISABLED_PLUGINS,
    PluginError,
    PluginHost,
    PluginHungError,
    PluginInfo,
    RegisteredAlgorithm,
    UnknownAlgorithmError,
    decide_with,
)
from dispatcher.plugins.markers import PROJECT, hookimpl

__all__ = [
    "BUILTIN_PLUGIN",
    "ENTRY_POINT_GROUP",
    "ENV_DISABLED_PLUGINS",
    "ENV_DISABLE_AUTOLOAD",
    "PROJECT",
    "PluginError",
    "PluginHost",
    "PluginHungError",
    "PluginInfo",
    "RegisteredAlgorithm",
    "UnknownAlgorithmError",
    "decide_with",
    "hookimpl",
]
