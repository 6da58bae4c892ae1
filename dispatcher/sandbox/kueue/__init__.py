"""An emulation of Kueue v0.19 on the fake clusters (``docs/kueue-contract.md``), with
a v0.20 mode (``KueueConfig.version``, ``docs/kueue-versions.md``).

Worker clusters run the core of Kueue (queues, quota reservation, admission, preemption); the
manager runs the core plus the MultiKueue controllers. Every controller talks to its cluster only
over HTTPS through the cluster's kubeconfig, as real Kueue would.
"""
