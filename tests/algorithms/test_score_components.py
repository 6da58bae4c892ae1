"""Issue 15: a decision shares one immutable :class:`ScoreComponent` among the clusters a scorer
gives the same value and detail, instead of building one frozen object per cluster and scorer;
the table of shared components is bounded."""

from __future__ import annotations

import pytest

from dispatcher.algorithms import ScoreComponent, stages
from dispatcher.testing import decide, make_cluster, make_request


def test_equal_scores_share_one_component_and_the_decision_is_unchanged() -> None:
    clusters = [make_cluster(f"w{i}", cpu=8, order=i) for i in range(50)]
    request = make_request(cpu=1)
    first = decide(request, clusters)
    again = decide(request, clusters)
    assert first == again
    scores = [v.scores for v in first.verdicts if v.kept]
    assert len(scores) == 50
    # Identical clusters: every scorer gave each the same value, so each scorer's component is
    # one object, shared by all 50 verdicts.
    for position in range(len(scores[0])):
        assert len({id(s[position]) for s in scores}) == 1
    assert all(isinstance(c, ScoreComponent) for s in scores for c in s)


def test_the_table_of_shared_components_is_emptied_when_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stages, "_COMPONENTS", {})
    monkeypatch.setattr(stages, "_COMPONENTS_MAX", 10)
    made = [stages._component("s", 0, float(i), 1.0, "") for i in range(25)]
    assert len(stages._COMPONENTS) <= 10
    assert [c.value for c in made] == [float(i) for i in range(25)]
    assert stages._component("s", 0, 24.0, 1.0, "") is made[24]  # still in the table
