"""The only package that imports kubernetes_asyncio (README, *A tour of the rooms*).

- :mod:`~dispatcher.k8s.kubeconfig`: kubeconfig validation as Kueue does it (C62), Secrets;
- :mod:`~dispatcher.k8s.client`: clients and :class:`~dispatcher.k8s.client.KubeApi`;
- :mod:`~dispatcher.k8s.loading`: the dispatcher's own manager connection, found as kubectl
  finds it (``--kubeconfig``, ``$KUBECONFIG`` merged, in-cluster, ``~/.kube/config``);
- :mod:`~dispatcher.k8s.patching`: status writes with an explicit content type (C47, C48);
- :mod:`~dispatcher.k8s.watching`: the list-then-watch loop and an object cache;
- :mod:`~dispatcher.k8s.leases`: Leases with optimistic concurrency;
- :mod:`~dispatcher.k8s.errors`, :mod:`~dispatcher.k8s.clock`, :mod:`~dispatcher.k8s.resources`.

Nothing here exposes kubernetes_asyncio types except ``ApiClient`` (the client a
:class:`~dispatcher.k8s.client.KubeApi` wraps); errors are :class:`ApiError`.

Typical use by a per-cluster supervisor::

    valid = kubeconfig_from_secret(secret)            # KubeconfigError(reason, message)
    async with await KubeApi.from_kubeconfig(valid.config, name="worker-1") as api:
        send, receive = anyio.create_memory_object_stream[WatchItem](1000)
        async with anyio.create_task_group() as tg:
            await tg.start(functools.partial(list_watch, api, CLUSTER_QUEUES, send))
            async with receive:
                async for item in receive:
                    cache.apply(item)                 # ObjectCache, or the mirror's own

and by the controller's writer::

    result = await apply_status(api, KUEUE_GROUP, KUEUE_VERSION, ns, "workloads", name,
                                body, field_manager="multikueue-dispatcher")
    if isinstance(result, AdmittedMeanwhile):
        ...                                           # re-read and decide again
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatcher.k8s.client import KubeApi, ObjectList, client_from_kubeconfig
    from dispatcher.k8s.clock import SYSTEM_CLOCK, Clock, SystemClock
    from dispatcher.k8s.errors import ApiError, ApiUnreachable
    from dispatcher.k8s.kubeconfig import (
        KubeconfigError,
        ValidKubeconfig,
        kubeconfig_from_secret,
        validate_kubeconfig,
    )
    from dispatcher.k8s.patching import (
        AdmittedMeanwhile,
        Patched,
        PatchResult,
        apply_status,
        merge_patch_status,
    )
    from dispatcher.k8s.resources import ResourceRef
    from dispatcher.k8s.watching import (
        Disconnected,
        Listed,
        ObjectCache,
        ObjectEvent,
        Watching,
        WatchItem,
        WatchSettings,
        list_watch,
    )

# Loaded on first use, so that ``import dispatcher.k8s.errors`` (and the command line's error
# boundary) does not load kubernetes_asyncio.
_LAZY = {
    "AdmittedMeanwhile": "dispatcher.k8s.patching",
    "ApiError": "dispatcher.k8s.errors",
    "ApiUnreachable": "dispatcher.k8s.errors",
    "Clock": "dispatcher.k8s.clock",
    "Disconnected": "dispatcher.k8s.watching",
    "KubeApi": "dispatcher.k8s.client",
    "KubeconfigError": "dispatcher.k8s.kubeconfig",
    "Listed": "dispatcher.k8s.watching",
    "ObjectCache": "dispatcher.k8s.watching",
    "ObjectEvent": "dispatcher.k8s.watching",
    "ObjectList": "dispatcher.k8s.client",
    "PatchResult": "dispatcher.k8s.patching",
    "Patched": "dispatcher.k8s.patching",
    "ResourceRef": "dispatcher.k8s.resources",
    "SYSTEM_CLOCK": "dispatcher.k8s.clock",
    "SystemClock": "dispatcher.k8s.clock",
    "ValidKubeconfig": "dispatcher.k8s.kubeconfig",
    "WatchItem": "dispatcher.k8s.watching",
    "WatchSettings": "dispatcher.k8s.watching",
    "Watching": "dispatcher.k8s.watching",
    "apply_status": "dispatcher.k8s.patching",
    "client_from_kubeconfig": "dispatcher.k8s.client",
    "kubeconfig_from_secret": "dispatcher.k8s.kubeconfig",
    "list_watch": "dispatcher.k8s.watching",
    "merge_patch_status": "dispatcher.k8s.patching",
    "validate_kubeconfig": "dispatcher.k8s.kubeconfig",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "SYSTEM_CLOCK",
    "AdmittedMeanwhile",
    "ApiError",
    "ApiUnreachable",
    "Clock",
    "Disconnected",
    "KubeApi",
    "KubeconfigError",
    "Listed",
    "ObjectCache",
    "ObjectEvent",
    "ObjectList",
    "PatchResult",
    "Patched",
    "ResourceRef",
    "SystemClock",
    "ValidKubeconfig",
    "WatchItem",
    "WatchSettings",
    "Watching",
    "apply_status",
    "client_from_kubeconfig",
    "kubeconfig_from_secret",
    "list_watch",
    "merge_patch_status",
    "validate_kubeconfig",
]
