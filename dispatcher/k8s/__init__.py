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
:class:`~dispatcher.k8s.client.KubeApi` wraps); errors are
:class:`~dispatcher.k8s.errors.ApiError`. Import from the modules: the package itself re-exports
nothing, so that ``import dispatcher.k8s.errors`` (the command line's error boundary) does not
load kubernetes_asyncio.

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
