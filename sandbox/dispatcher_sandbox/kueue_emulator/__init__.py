"""An emulation of Kueue v0.19 on the fake clusters (``docs/kueue-contract.md``), with
a v0.20 mode (``KueueConfig.version``, ``docs/kueue-versions.md``).

Worker clusters run the core of Kueue (queues, quota reservation, admission, preemption); the
manager runs the core plus the MultiKueue controllers. Every controller talks to its cluster only
over HTTPS through the cluster's kubeconfig, as real Kueue would.

The files follow Kueue v0.19.2's layout (``sigs.k8s.io/kueue@v0.19.2``), so that an upgrade of
Kueue can be compared file by file:

========================================  =====================================================
emulation (``sandbox/dispatcher_sandbox/kueue_emulator/``)  Kueue v0.19.2
========================================  =====================================================
``core/__init__.py``                       the core's pass: ``cmd/kueue/main.go``'s core
                                          controllers run one after another
``core/cache.py``                         ``pkg/cache/``, ``pkg/queue/``
``core/workload.py``                      ``pkg/workload/`` (status writes, eviction)
``core/workload_controller.py``           ``pkg/controller/core/workload_controller.go``
``core/scheduler.py``                     ``pkg/scheduler/scheduler.go``
``core/queue_controllers.py``             ``pkg/controller/core/clusterqueue_controller.go``,
                                          ``localqueue_controller.go``
``core/constants.py``                     reasons of ``apis/kueue/v1beta1/workload_types.go``
``multikueue/__init__.py``                ``pkg/controller/admissionchecks/multikueue/
                                          controllers.go`` (``SetupControllers``)
``multikueue/controllers.py``             ``.../multikueue/controllers.go`` (shared defaults)
``multikueue/multikueuecluster.py``       ``.../multikueue/multikueuecluster.go``,
                                          ``remote_client.go``
``multikueue/admissioncheck.py``          ``.../multikueue/admissioncheck.go``
``multikueue/workload.py``                ``.../multikueue/workload.go``, with the GC of
                                          ``multikueuecluster.go`` (``runGC``)
``multikueue/dispatchers.py``             AllAtOnce (a branch of ``workload.go``) and
                                          ``pkg/controller/workloaddispatcher/``
``jobs/job_controller.py``                ``pkg/controller/jobs/job/job_controller.go``,
                                          ``pkg/controller/jobframework/reconciler.go``
``jobs/job_multikueue_adapter.py``        ``pkg/controller/jobs/job/job_multikueue_adapter.go``
``jobs/job_webhook.py``                   ``pkg/controller/jobs/job/job_webhook.go``
``runtime.py``                            shared plumbing: controller-runtime's work queue and
                                          rate limiters, ``pkg/workload/`` status writes
``emulator.py``                           ``cmd/kueue/main.go`` (which controllers run where)
========================================  =====================================================
"""
