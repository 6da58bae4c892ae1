"""Hook specifications: the complete plugin interface of multikueue-dispatcher.

Every hook is synchronous and called with keyword arguments. An implementation may accept fewer
arguments than the specification lists (pluggy passes only those it names), so hooks can gain
arguments later without breaking plugins. ``docs/plugins.md`` documents each hook with exactly
the signature below; a test keeps the two in step.

Hooks that take part in a decision (:func:`mkd_filter_cluster`, :func:`mkd_score_cluster`,
:func:`mkd_restrict_clusters`) become pipeline stages of **every** algorithm, one stage per
implementing plugin; a plugin whose stage raises, or returns something invalid, is skipped for
that decision and the error is recorded in ``Decision.errors``. A plugin whose call hangs
past the decision timeout is skipped the same way while that call runs on (retried every ten
timeouts). A plugin named in the ``fail_closed_plugins`` setting is not skipped when its filter
or restriction fails: the decision is withheld instead (``Decision.withheld``), for plugins
whose filters enforce hard rules.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from dispatcher.algorithms import (
    AlgorithmSpec,
    ClusterSnapshot,
    Decision,
    DispatchRequest,
    StageContext,
)
from dispatcher.plugins.markers import hookspec

__all__ = [
    "mkd_filter_cluster",
    "mkd_on_decision",
    "mkd_register_algorithms",
    "mkd_restrict_clusters",
    "mkd_score_cluster",
]


@hookspec
def mkd_register_algorithms() -> Sequence[AlgorithmSpec[Any]]:
    """Return the dispatch algorithms this plugin provides.

    Each :class:`~dispatcher.algorithms.AlgorithmSpec` has a unique ``name`` (the value users
    put in the ``algorithms`` setting), a one-line ``summary``, a pydantic ``options`` model
    (validated from the ``algorithm_options.<name>`` setting) and a ``build(options)`` function
    returning the :class:`~dispatcher.algorithms.Stages` (filters, scorers, optional selector) it
    contributes. The built-in algorithms are registered through this same hook. Two plugins
    registering the same name is a startup error.
    """
    raise NotImplementedError  # a specification; pluggy never calls it


@hookspec
def mkd_filter_cluster(
    request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
) -> str | None:
    """Drop ``cluster`` for ``request`` by returning the reason, or return ``None`` to keep it.

    Runs after the algorithm's own filters, for every algorithm. ``ctx.fit(cluster)`` gives the
    shared fit computation (fits now / ever, queue ahead) without recomputing it. The text is
    shown in verdicts and Events; the drop is counted in
    ``multikueue_dispatcher_filtered_clusters_total{plugin="<plugin>:filter", reason="other"}``
    (free text never becomes a label value).
    """


@hookspec
def mkd_score_cluster(
    request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
) -> float | None:
    """Return a score for ``cluster`` (higher is better), or ``None`` for no opinion (0).

    Scores land in the *preference* tier (below "fits now", above capacity policies and queue
    length), multiplied by the weight the settings give this plugin (default 1).
    """


@hookspec
def mkd_restrict_clusters(
    request: DispatchRequest, clusters: Sequence[ClusterSnapshot]
) -> Collection[str] | None:
    """Return the names of the only clusters ``request`` may use, or ``None`` for no restriction.

    Called once per decision with all candidates (for example: data locality, tenancy). Naming a
    cluster that is not a candidate is an error: the restriction is skipped for that decision.
    """


@hookspec
def mkd_on_decision(request: DispatchRequest, decision: Decision) -> None:
    """Observe a finished decision (audit, metrics). Exceptions are reported and ignored."""
