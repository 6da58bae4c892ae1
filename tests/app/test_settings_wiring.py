"""Every documented client and timing setting reaches the code that uses it."""

from __future__ import annotations

from dispatcher.algorithms.model import DispatchRequest
from dispatcher.app.manager import build_decide, controller_config
from dispatcher.app.settings import load_settings
from dispatcher.plugins import PluginHost, hookimpl
from dispatcher.testing import make_cluster, make_request


def nominated_after(age: float, settings_flags: dict[str, object]) -> tuple[str, ...]:
    """Where capacity-first puts a workload whose nomination to a full cluster is ``age`` old."""
    settings = load_settings(settings_flags, None)
    decide = build_decide(settings, PluginHost.load(autoload=False))
    request: DispatchRequest = make_request(
        cpu=4, nominated=("busy",), nominated_at=1_000_000.0 - age, now=1_000_000.0
    )
    clusters = [
        make_cluster("busy", cpu=4, used_cpu=4, order=0),
        make_cluster("idle", cpu=8, order=1),
    ]
    return decide(request, clusters).nominate


def test_patience_seconds_applies_to_capacity_first() -> None:
    # Within patience the nomination stands; past it, capacity-first widens (its default).
    assert nominated_after(30, {"patience_seconds": 60}) == ("busy",)
    assert nominated_after(120, {"patience_seconds": 60}) == ("busy", "idle")
    assert nominated_after(120, {"patience_seconds": 600}) == ("busy",)


def test_algorithm_options_override_the_top_level_patience() -> None:
    flags: dict[str, object] = {
        "patience_seconds": 60,
        "algorithm_options": {"capacity-first": {"patience_seconds": 600}},
    }
    assert nominated_after(120, flags) == ("busy",)


def test_only_a_builtin_pipeline_decides_on_the_event_loop() -> None:
    """Issue 15: the manager runs the default pipeline's decisions without a thread hop, and
    any pipeline with a third-party part in a thread under the decision deadline."""

    class Observer:
        @hookimpl
        def mkd_on_decision(self) -> None:
            return None

    settings = load_settings({}, None)
    builtin = PluginHost.load(autoload=False)
    observed = PluginHost.load(autoload=False, plugins=[("observer", Observer())])
    assert controller_config(settings, builtin).inline_decisions is True
    assert controller_config(settings, observed).inline_decisions is False
    assert controller_config(settings).inline_decisions is False


def test_the_copy_lost_cooldown_reaches_the_nomination_loop() -> None:
    """C91: the guard's duration is a setting (0 turns it off); the default is the loop's own."""
    assert controller_config(load_settings({}, None)).lost_copy_cooldown_seconds == 60
    settings = load_settings({"lost_copy_cooldown_seconds": 0}, None)
    assert controller_config(settings).lost_copy_cooldown_seconds == 0
