"""The what-if simulator: replay or generate a workload trace in virtual time (issue 6).

A discrete-event simulation of a MultiKueue setup: the manager's Kueue (quota reservation,
MultiKueue copies on nominated clusters, first admission wins, losers deleted, eviction clears
nominations), the workers' Kueue (quota admission and preemption), and a dispatcher that is either
one of Kueue's built-in dispatchers (``all-at-once``, ``incremental``, modelled as Kueue runs them,
contract C56–C61) or a pipeline of the **same algorithm plugins** the manager process runs,
third-party ones included. Admission uses the shared pure model :mod:`dispatcher.kueue.admission`.

Modules: :mod:`~dispatcher.sim.trace` (trace format, generator, JSONL loading),
:mod:`~dispatcher.sim.world` (topologies), :mod:`~dispatcher.sim.engine` (the simulation),
:mod:`~dispatcher.sim.report` (metrics, JSON, table, plot), :mod:`~dispatcher.sim.command`
(``multikueue-dispatcher simulate``). The simulation is deterministic: virtual time, a seeded
``random.Random`` for the trace, no wall clock except to report how long each run took.

This package sits beside the production code (README, *A tour of the rooms*); production code never
imports it. Importing it is cheap: nothing is loaded until a submodule is used.
"""
