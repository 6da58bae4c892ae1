"""The plugin host: a typed facade over pluggy's untyped hook relay.

The rest of the dispatcher never touches ``PluginManager.hook``; it asks a :class:`PluginHost`
for the available algorithms, builds a :class:`~dispatcher.algorithms.Pipeline` from settings,
and runs decisions through :meth:`PluginHost.decide`.

Loading order (as tox does): blocked names first, then third-party plugins from the
``multikueue_dispatcher`` entry-point group (unless autoload is disabled), then the built-ins,
then ``check_pending()`` so a misspelt hook name fails at start. Environment switches:

* ``DISPATCHER_DISABLE_PLUGIN_AUTOLOAD=1``: do not load entry points at all;
* ``DISPATCHER_DISABLED_PLUGINS=a,b``: block the plugins with these entry-point names.

Hung plugins: hooks run in a decision thread that the caller abandons after its deadline (the
nomination loop's ``decision_timeout_seconds``); Python cannot stop the thread. With
:meth:`PluginHost.guard_hung_calls`, a plugin whose latest call is still running after
``hung_after`` seconds is skipped like a raising one (:class:`PluginHungError` in
``Decision.errors``) instead of hanging every later decision too; every ``retry_after`` seconds
one decision calls it again, and a call that returns closes the guard.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pluggy
from pydantic import BaseModel

from dispatcher.algorithms import (
    DEFAULT_PIPELINE,
    TIER_PREFERENCE,
    AlgorithmSpec,
    ClusterSnapshot,
    Decision,
    DispatchRequest,
    Filter,
    Pipeline,
    Rejection,
    RejectionReason,
    Scorer,
    StageContext,
    StageError,
    compose,
)
from dispatcher.kueue.hints import DISPATCH_MODES
from dispatcher.plugins import builtin, spec
from dispatcher.plugins.markers import PROJECT

__all__ = [
    "BUILTIN_PLUGIN",
    "ENTRY_POINT_GROUP",
    "ENV_DISABLED_PLUGINS",
    "ENV_DISABLE_AUTOLOAD",
    "PluginError",
    "PluginHost",
    "PluginHungError",
    "PluginInfo",
    "RegisteredAlgorithm",
    "UnknownAlgorithmError",
    "decide_with",
    "pipeline_for",
]

ENTRY_POINT_GROUP = PROJECT
"""Entry-point group of third-party plugins (``[project.entry-points.multikueue_dispatcher]``)."""
ENV_DISABLE_AUTOLOAD = "DISPATCHER_DISABLE_PLUGIN_AUTOLOAD"
"""Set to ``1`` (or ``true``/``yes``) to skip loading entry points."""
ENV_DISABLED_PLUGINS = "DISPATCHER_DISABLED_PLUGINS"
"""Comma-separated entry-point names of plugins to block."""
BUILTIN_PLUGIN = "builtin"
DECISION_HOOKS = (
    "mkd_restrict_clusters",
    "mkd_filter_cluster",
    "mkd_score_cluster",
    "mkd_on_decision",
)
"""The hooks a decision calls, besides its algorithms' own stages."""
"""Name under which the built-in algorithms are registered."""

_TRUE = {"1", "true", "yes", "on"}


class PluginError(Exception):
    """A plugin could not be loaded or used as configured."""


class UnknownAlgorithmError(PluginError):
    """Settings name an algorithm no loaded plugin provides."""


class PluginHungError(PluginError):
    """A plugin's stage was skipped: an earlier call of the plugin has not returned."""


class _CallGuard:
    """The latest call of each plugin's hooks while it runs, to skip a plugin that hangs.

    Thread-safe: hooks run in decision threads, and an abandoned (timed-out) one keeps running.
    Off (``hung_after`` None) until :meth:`PluginHost.guard_hung_calls` is called.
    """

    def __init__(self) -> None:
        self.hung_after: float | None = None
        self.retry_after: float = 0.0
        self.clock: Callable[[], float] = time.monotonic
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[int, float]] = {}
        self._tokens = itertools.count()

    def call(self, impl: pluggy.HookImpl, **kwargs: Any) -> Any:
        """Call ``impl`` unless its plugin hangs (then raise :class:`PluginHungError`)."""
        if self.hung_after is None:
            return _call(impl, **kwargs)
        plugin = impl.plugin_name
        token = next(self._tokens)
        now = self.clock()
        with self._lock:
            latest = self._latest.get(plugin)
            if latest is not None:
                age = now - latest[1]
                if self.hung_after <= age < self.retry_after:
                    raise PluginHungError(
                        f"plugin {plugin!r} has had a call running for {age:.1f}s (hung); "
                        f"skipped, tried again {self.retry_after - age:.0f}s from now"
                    )
            # Free, running only briefly (a concurrent call), or due for a retry.
            self._latest[plugin] = (token, now)
        try:
            return _call(impl, **kwargs)
        finally:
            with self._lock:
                if self._latest.get(plugin, (None, 0.0))[0] == token:
                    del self._latest[plugin]


@dataclass(frozen=True, slots=True)
class RegisteredAlgorithm:
    """An algorithm and where it comes from."""

    spec: AlgorithmSpec[Any]
    plugin: str
    distribution: str | None = None
    """``project==version`` of the distribution that installed the plugin (``None``: built-in)."""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """A registered plugin."""

    name: str
    hooks: tuple[str, ...]
    distribution: str | None = None
    version: str | None = None


def _call(impl: pluggy.HookImpl, **kwargs: Any) -> Any:
    """Call one implementation with the (opt-in) arguments it names, as pluggy would."""
    return impl.function(*(kwargs[name] for name in impl.argnames))


@dataclass(frozen=True, slots=True)
class _HookFilter:
    impl: pluggy.HookImpl
    name: str
    guard: _CallGuard

    def filter(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> str | None:
        result = self.guard.call(self.impl, request=request, cluster=cluster, ctx=ctx)
        if result is None or isinstance(result, str):
            return result
        raise TypeError(f"mkd_filter_cluster returned {type(result).__name__}, not str or None")


@dataclass(frozen=True, slots=True)
class _HookRestrict:
    impl: pluggy.HookImpl
    name: str
    guard: _CallGuard

    def filter(
        self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext
    ) -> Rejection | None:
        key = f"restrict:{self.name}"
        if key not in ctx.memo:
            result = self.guard.call(
                self.impl, request=request, clusters=tuple(ctx.snapshots.values())
            )
            if result is not None:
                if isinstance(result, str):
                    raise TypeError("mkd_restrict_clusters returned a str, not a collection")
                result = frozenset(str(n) for n in result)
                unknown = sorted(result - set(ctx.snapshots))
                if unknown:
                    raise ValueError(f"restricted to unknown clusters: {', '.join(unknown)}")
            ctx.memo[key] = result
        allowed: frozenset[str] | None = ctx.memo[key]
        if allowed is None or cluster.name in allowed:
            return None
        return Rejection(f"excluded by plugin {self.impl.plugin_name}", RejectionReason.RESTRICTED)


@dataclass(frozen=True, slots=True)
class _HookScorer:
    impl: pluggy.HookImpl
    name: str
    guard: _CallGuard
    weight: float = 1.0
    tier: int = TIER_PREFERENCE

    def score(self, request: DispatchRequest, cluster: ClusterSnapshot, ctx: StageContext) -> float:
        result = self.guard.call(self.impl, request=request, cluster=cluster, ctx=ctx)
        if result is None:
            return 0.0
        if isinstance(result, bool) or not isinstance(result, int | float):
            raise TypeError(f"mkd_score_cluster returned {type(result).__name__}, not a number")
        return float(result)


class PluginHost:
    """Typed facade over a :class:`pluggy.PluginManager` for the dispatcher's hooks."""

    def __init__(self, manager: pluggy.PluginManager | None = None) -> None:
        """Wrap ``manager`` (a fresh one with our hookspecs by default). Prefer :meth:`load`."""
        self.manager = manager or pluggy.PluginManager(PROJECT)
        self.manager.add_hookspecs(spec)
        self.load_errors: list[StageError] = []
        """Plugins whose algorithm registration failed (they are skipped)."""
        self._guard = _CallGuard()

    def guard_hung_calls(
        self,
        hung_after: float,
        retry_after: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Skip a plugin whose latest call has been running for ``hung_after`` seconds (it
        hangs: the decision that made it was abandoned) until it returns; every
        ``retry_after`` seconds one call goes through again. Set it below the caller's decision
        deadline, so the decision after an abandoned one already skips the plugin. ``clock``
        (seconds, monotonic) is replaceable for tests."""
        if not 0 < hung_after < retry_after:
            raise ValueError(f"need 0 < hung_after < retry_after, got {hung_after}, {retry_after}")
        self._guard.hung_after = hung_after
        self._guard.retry_after = retry_after
        self._guard.clock = clock

    @classmethod
    def load(
        cls,
        *,
        environ: Mapping[str, str] | None = None,
        autoload: bool | None = None,
        blocked: Iterable[str] = (),
        plugins: Iterable[tuple[str, object]] = (),
    ) -> PluginHost:
        """Create a host with entry-point plugins, extra ``plugins`` and the built-ins loaded.

        ``environ`` defaults to ``os.environ``; ``autoload`` and ``blocked`` add to what the
        environment switches say.
        """
        env = os.environ if environ is None else environ
        host = cls()
        names = set(blocked)
        names.update(n.strip() for n in env.get(ENV_DISABLED_PLUGINS, "").split(",") if n.strip())
        for name in sorted(names):
            host.manager.set_blocked(name)
        if autoload is None:
            autoload = env.get(ENV_DISABLE_AUTOLOAD, "").strip().lower() not in _TRUE
        if autoload:
            host._load_entry_points()
        for name, plugin in plugins:
            if not host.manager.is_blocked(name):
                host.manager.register(plugin, name=name)
        if not host.manager.is_blocked(BUILTIN_PLUGIN):
            host.manager.register(builtin, name=BUILTIN_PLUGIN)
        try:
            host.manager.check_pending()
        except pluggy.PluginValidationError as error:
            raise PluginError(" ".join(str(error).split())) from error
        return host

    def _load_entry_points(self) -> None:
        """pluggy's entry-point loading, one name at a time (in pluggy's order) so that a
        plugin that cannot be imported or registered is named in a :class:`PluginError`."""
        names = dict.fromkeys(
            entry.name
            for dist in importlib.metadata.distributions()
            for entry in dist.entry_points
            if entry.group == ENTRY_POINT_GROUP
        )
        for name in names:
            try:
                self.manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=name)
            except Exception as error:
                raise PluginError(
                    f"plugin {name} (entry point of {ENTRY_POINT_GROUP}) cannot be loaded: "
                    f"{type(error).__name__}: {' '.join(str(error).split())}; "
                    f"{ENV_DISABLED_PLUGINS}={name} skips it"
                ) from error

    def register(self, plugin: object, name: str) -> None:
        """Register a plugin object (a module or an instance with ``@hookimpl`` methods)."""
        self.manager.register(plugin, name=name)
        self.manager.check_pending()

    def unregister(self, name: str) -> None:
        """Remove a registered plugin by name."""
        self.manager.unregister(name=name)

    def plugins(self) -> list[PluginInfo]:
        """Registered plugins with the hooks they implement and their distributions."""
        dists = {
            id(plugin): (dist.project_name, dist.version)
            for plugin, dist in self.manager.list_plugin_distinfo()
        }
        out = []
        for name, plugin in self.manager.list_name_plugin():
            if plugin is None:
                continue
            hooks = tuple(sorted(h.name for h in self.manager.get_hookcallers(plugin) or ()))
            dist, version = dists.get(id(plugin), (None, None))
            out.append(PluginInfo(name=name, hooks=hooks, distribution=dist, version=version))
        return sorted(out, key=lambda p: p.name)

    def _impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        caller: pluggy.HookCaller = getattr(self.manager.hook, hook_name)
        return list(reversed(caller.get_hookimpls()))  # call order: last registered first

    def algorithms(self) -> dict[str, RegisteredAlgorithm]:
        """Every algorithm registered through ``mkd_register_algorithms``, by name.

        A plugin whose hook raises or returns something else than algorithm specs is skipped and
        recorded in :attr:`load_errors`. Two plugins providing the same name raise
        :class:`PluginError`.
        """
        dists = {
            id(plugin): f"{dist.project_name}=={dist.version}"
            for plugin, dist in self.manager.list_plugin_distinfo()
        }
        found: dict[str, RegisteredAlgorithm] = {}
        self.load_errors = []
        for impl in self._impls("mkd_register_algorithms"):
            try:
                specs = list(_call(impl))
                for item in specs:
                    if not isinstance(item, AlgorithmSpec):
                        raise TypeError(f"returned {type(item).__name__}, not AlgorithmSpec")
            except Exception as exc:
                self.load_errors.append(
                    StageError("mkd_register_algorithms", impl.plugin_name, f"{exc}")
                )
                continue
            for item in specs:
                if item.name in found:
                    other = found[item.name].plugin
                    raise PluginError(
                        f"algorithm {item.name!r} is registered by both {other!r} and "
                        f"{impl.plugin_name!r}"
                    )
                found[item.name] = RegisteredAlgorithm(
                    spec=item, plugin=impl.plugin_name, distribution=dists.get(id(impl.plugin))
                )
        return found

    def algorithm(self, name: str) -> RegisteredAlgorithm:
        """The algorithm called ``name``; :class:`UnknownAlgorithmError` lists the choices."""
        available = self.algorithms()
        if name not in available:
            choices = ", ".join(
                f"{n} ({a.distribution or a.plugin})" for n, a in sorted(available.items())
            )
            raise UnknownAlgorithmError(f"unknown algorithm {name!r}; available: {choices}")
        return available[name]

    def pipeline(
        self,
        names: Sequence[str] = DEFAULT_PIPELINE,
        options: Mapping[str, Mapping[str, Any] | BaseModel] | None = None,
        *,
        plugin_weights: Mapping[str, float] | None = None,
        fail_closed: Sequence[str] = (),
    ) -> Pipeline:
        """Compose the named algorithms with the plugins' filter/score/restrict hooks.

        ``options`` maps algorithm names to their raw options (validated by each algorithm's
        pydantic model; a validation error propagates). ``plugin_weights`` maps plugin names to
        the weight of their ``mkd_score_cluster`` results (default 1). ``fail_closed`` names
        plugins whose failing filters withhold the decision instead of being skipped
        (:attr:`Pipeline.fail_closed`); a name that is not a loaded plugin is an error, since
        a misspelt name would silently leave the rule fail-open.
        """
        if not names:
            raise PluginError("no algorithm selected")
        loaded = {p.name for p in self.plugins()}
        unknown = sorted(set(fail_closed) - loaded)
        if unknown:
            raise PluginError(
                f"fail_closed_plugins: {', '.join(map(repr, unknown))} not loaded; loaded "
                f"plugins: {', '.join(sorted(loaded))}"
            )
        opts = options or {}
        unused = sorted(set(opts) - set(names))
        if unused:
            raise PluginError(f"options given for algorithms not in the pipeline: {unused}")
        parts = []
        for name in names:
            registered = self.algorithm(name)
            parts.append(registered.spec.stages(opts.get(name), source=registered.plugin))
        base = compose("+".join(names), parts)
        weights = plugin_weights or {}
        filters: list[tuple[Filter, str]] = list(base.filters)
        for impl in self._impls("mkd_restrict_clusters"):
            restrict = _HookRestrict(impl, f"{impl.plugin_name}:restrict", self._guard)
            filters.append((restrict, impl.plugin_name))
        for impl in self._impls("mkd_filter_cluster"):
            hook_filter = _HookFilter(impl, f"{impl.plugin_name}:filter", self._guard)
            filters.append((hook_filter, impl.plugin_name))
        scorers: list[tuple[Scorer, str]] = list(base.scorers)
        for impl in self._impls("mkd_score_cluster"):
            scorer = _HookScorer(
                impl,
                f"{impl.plugin_name}:score",
                self._guard,
                weight=weights.get(impl.plugin_name, 1.0),
            )
            scorers.append((scorer, impl.plugin_name))
        return dataclasses.replace(
            base,
            filters=tuple(filters),
            scorers=tuple(scorers),
            fail_closed=frozenset(fail_closed),
        )

    def mode_pipelines(
        self,
        options: Mapping[str, Mapping[str, Any] | BaseModel] | None = None,
        *,
        plugin_weights: Mapping[str, float] | None = None,
        fail_closed: Sequence[str] = (),
    ) -> dict[str, Pipeline]:
        """One pipeline per dispatch mode a workload may ask for with its ``dispatch-mode``
        hint (:data:`~dispatcher.kueue.hints.DISPATCH_MODES`): the built-in algorithm of that
        name with its ``options`` and the plugins' hooks, as :meth:`pipeline` composes them."""
        opts = options or {}
        return {
            mode: self.pipeline(
                (mode,),
                {mode: opts[mode]} if mode in opts else None,
                plugin_weights=plugin_weights,
                fail_closed=fail_closed,
            )
            for mode in sorted(set(DISPATCH_MODES.values()))
        }

    def builtin_only(self, names: Sequence[str]) -> bool:
        """Whether the pipeline of the algorithms ``names`` runs only this package's own code:
        every algorithm registered by the built-in plugin and no other plugin implementing a
        decision hook (filter, restrict, score, on-decision). Such a pipeline is pure and
        bounded, and the controller may run it without a thread and its deadline."""
        available = self.algorithms()
        if any(name not in available or available[name].plugin != BUILTIN_PLUGIN for name in names):
            return False
        return not any(
            impl.plugin_name != BUILTIN_PLUGIN
            for hook in DECISION_HOOKS
            for impl in self._impls(hook)
        )

    def decide(
        self,
        pipeline: Pipeline,
        request: DispatchRequest,
        snapshots: Sequence[ClusterSnapshot],
    ) -> Decision:
        """Run ``pipeline`` and notify ``mkd_on_decision`` observers (their errors are added)."""
        decision = pipeline.decide(request, snapshots)
        errors = self.notify_decision(request, decision)
        if errors:
            decision = dataclasses.replace(decision, errors=(*decision.errors, *errors))
        return decision

    def notify_decision(self, request: DispatchRequest, decision: Decision) -> list[StageError]:
        """Call every ``mkd_on_decision`` implementation; return the errors they raised."""
        errors = []
        for impl in self._impls("mkd_on_decision"):
            try:
                self._guard.call(impl, request=request, decision=decision)
            except Exception as exc:
                errors.append(StageError("mkd_on_decision", impl.plugin_name, f"{exc}"))
        return errors


def pipeline_for(
    request: DispatchRequest, default: Pipeline, modes: Mapping[str, Pipeline]
) -> Pipeline:
    """The pipeline that decides ``request``: the one of the dispatch mode its hints ask for
    (:meth:`PluginHost.mode_pipelines`), else ``default``."""
    mode = request.hints.dispatch_mode
    return modes.get(mode, default) if mode is not None else default


def decide_with(
    host: PluginHost,
    names: Sequence[str] = DEFAULT_PIPELINE,
    options: Mapping[str, Mapping[str, Any] | BaseModel] | None = None,
) -> Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]:
    """A ``decide(request, snapshots)`` function bound to a pipeline built once (and the
    dispatch-mode pipelines a workload's hint may ask for)."""
    pipeline = host.pipeline(names, options)
    modes = host.mode_pipelines()

    def decide(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
        return host.decide(pipeline_for(request, pipeline, modes), request, snapshots)

    return decide
