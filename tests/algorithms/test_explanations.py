"""Every decision explains itself: verdicts per cluster, score components, readable text."""

from __future__ import annotations

from dispatcher.algorithms import describe_decision
from dispatcher.testing import decide, make_cluster, make_request

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def test_verdicts_name_the_filter_the_reason_and_the_score_components() -> None:
    clusters = [
        make_cluster("a100", gpus=8, gpu_type=A100, order=0),
        make_cluster("h100-full", gpus=4, used_gpus=4, gpu_type=H100, order=1),
        make_cluster("h100-free", gpus=4, used_gpus=1, gpu_type=H100, order=2),
        make_cluster("offline", gpus=4, gpu_type=H100, active=False, order=3),
    ]
    decision = decide(make_request(gpus=2, gpu_type=H100), clusters)
    assert decision.nominate == ("h100-free",)

    a100 = decision.verdict("a100")
    assert (a100.kept, a100.dropped_by) == (False, "gpu-type")
    assert a100.reason == f"pod sets' node selector requires {H100}; cluster offers {A100}"
    assert decision.verdict("offline").dropped_by == "active"

    best, full = decision.verdict("h100-free"), decision.verdict("h100-full")
    assert (best.rank, full.rank) == (0, 1)
    assert {s.scorer: s.value for s in best.scores} == {
        "gpu-preference": 0.0,
        "fits-now": 1.0,
        "backlog": 1.0,
        "most-free": 0.25,
        "queue-ahead": 1.0,
        "spare-gpu-clusters": 0.0,
    }
    assert full.fits_now is False
    assert "requested 2, available 0" in full.reason
    # Full, and h100-free fits now: what admitting it on h100-full would preempt, or when it
    # would start there, is not worked out (it ranks below h100-free either way).
    assert {s.scorer for s in full.scores}.isdisjoint({"least-disruption", "predicted-start"})

    text = describe_decision(decision)
    assert text.splitlines()[0].startswith("gpu-type-affinity+capacity-first: nominate h100-free")
    assert (
        "#0 h100-free: kept; gpu-preference=0 (no preference), "
        "spare-gpu-clusters=0 (asks for GPUs), fits-now=1 (fits now)"
    ) in text
    assert f"-- a100: dropped by gpu-type: pod sets' node selector requires {H100}" in text
    assert "look again in 300s" in text
