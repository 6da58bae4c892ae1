"""Fail-closed plugins (settings ``fail_closed_plugins``): a filter that enforces a hard rule
(tenancy, compliance) must not be skipped when it fails, or the decision could nominate a
cluster the rule forbids. Its failure (raising, a wrong return type, or hanging: skipped as
``PluginHungError`` while an abandoned call runs) withholds the decision instead; failures of
other plugins stay fail-open (tests/algorithms/test_plugin_host.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dispatcher.algorithms import ClusterSnapshot, DispatchRequest, describe_decision
from dispatcher.plugins import PluginError, hookimpl
from dispatcher.testing import make_cluster, make_host, make_request


def fleet() -> list[ClusterSnapshot]:
    return [make_cluster(f"w{i}", cpu=8, order=i) for i in range(3)]


class TenancyRaises:
    """Allows only w2 for team-b, but has a bug."""

    @hookimpl
    def mkd_filter_cluster(self, request: DispatchRequest, cluster: ClusterSnapshot) -> str | None:
        raise KeyError("tenant table")


class TenancyGarbage:
    @hookimpl
    def mkd_filter_cluster(self, cluster: ClusterSnapshot) -> Any:
        return 42


class TenancyRestrictRaises:
    @hookimpl
    def mkd_restrict_clusters(self, request: DispatchRequest) -> Any:
        raise RuntimeError("policy service unreachable")


class OtherRaises:
    @hookimpl
    def mkd_filter_cluster(self, cluster: ClusterSnapshot) -> str | None:
        raise RuntimeError("cosmetic plugin bug")


CASES = {
    "raising-filter": TenancyRaises(),
    "garbage-filter": TenancyGarbage(),
    "raising-restriction": TenancyRestrictRaises(),
}


@pytest.mark.parametrize("plugin", CASES.values(), ids=list(CASES))
def test_a_failing_fail_closed_filter_withholds_the_decision(plugin: object) -> None:
    host = make_host([("tenancy", plugin)])
    pipeline = host.pipeline(fail_closed=["tenancy"])
    decision = host.decide(pipeline, make_request(cpu=1), fleet())
    assert decision.withheld.startswith("filter tenancy:")
    assert "of fail-closed plugin tenancy failed" in decision.withheld
    assert decision.nominate == ()
    assert [e.source for e in decision.errors] == ["tenancy"]
    assert describe_decision(decision).splitlines()[0].endswith(decision.withheld)


@pytest.mark.parametrize("plugin", CASES.values(), ids=list(CASES))
def test_the_same_failure_is_skipped_when_the_plugin_is_not_fail_closed(plugin: object) -> None:
    host = make_host([("tenancy", plugin)])
    decision = host.decide(host.pipeline(), make_request(cpu=1), fleet())
    assert decision.withheld == ""
    assert decision.nominate == ("w0",)
    assert [e.source for e in decision.errors] == ["tenancy"]


def test_only_the_listed_plugins_fail_closed() -> None:
    host = make_host([("cosmetic", OtherRaises()), ("tenancy", TenancyRaises())])
    decision = host.decide(host.pipeline(fail_closed=["cosmetic"]), make_request(cpu=1), fleet())
    assert decision.withheld.startswith("filter cosmetic:")
    decision = host.decide(host.pipeline(fail_closed=[]), make_request(cpu=1), fleet())
    assert decision.withheld == ""
    assert decision.nominate == ("w0",)


def test_a_misspelt_fail_closed_plugin_is_an_error() -> None:
    """A typo would leave the hard rule fail-open without a word: refused at start."""
    host = make_host([("tenancy", TenancyRaises())])
    with pytest.raises(PluginError, match=r"fail_closed_plugins: 'tenancyy' not loaded"):
        host.pipeline(fail_closed=["tenancyy"])


class Hangs:
    """A filter whose first call blocks until released (a hung policy lookup)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    @hookimpl
    def mkd_filter_cluster(self, cluster: ClusterSnapshot) -> str | None:
        self.entered.set()
        self.release.wait(timeout=30)
        return None


@pytest.fixture
def hangs() -> Iterator[Hangs]:
    plugin = Hangs()
    yield plugin
    plugin.release.set()


def test_a_hung_fail_closed_plugin_withholds_while_its_call_runs(hangs: Hangs) -> None:
    """The first call hangs (the nomination loop abandons that decision at its deadline);
    while it runs, later decisions are withheld instead of skipping the filter."""
    clock = [0.0]
    host = make_host([("tenancy", hangs)])
    host.guard_hung_calls(hung_after=1.0, retry_after=100.0, clock=lambda: clock[0])
    pipeline = host.pipeline(fail_closed=["tenancy"])
    stuck = threading.Thread(
        target=host.decide, args=(pipeline, make_request(cpu=1), fleet()), daemon=True
    )
    stuck.start()
    assert hangs.entered.wait(timeout=10)
    clock[0] = 5.0  # the abandoned call has run for 5 s
    decision = host.decide(pipeline, make_request(cpu=1), fleet())
    assert "PluginHungError" in decision.withheld
    hangs.release.set()
    stuck.join(timeout=10)
    assert not stuck.is_alive()
    assert host.decide(pipeline, make_request(cpu=1), fleet()).nominate == ("w0",)
