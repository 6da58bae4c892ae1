"""Table-driven tests of the pure admission model (``dispatcher.kueue.admission``).

ClusterQueues are written as raw v1beta2 dicts and parsed with the project's views, so the cases
read like the objects a cluster holds. Quantities are Kubernetes strings (``500m``, ``1Gi``,
``2``); the model works in integer milli-units. Contract points: C69 (quotas, cohort borrowing),
C71 (flavors, node labels, taints), C72 (priority, preemption, queueing strategies).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from dispatcher.kueue.admission import (
    PendingWorkload,
    QueuePolicy,
    QuotaSnapshot,
    ReservingWorkload,
    admission_usage,
    candidates_order,
    evaluate,
    format_resource_quantity,
    parse_queue_policy,
    plan_admissions,
    queue_order,
)
from dispatcher.kueue.flavorfit import quota_requests
from dispatcher.kueue.objects import (
    ClusterQueueView,
    ResourceFlavorView,
    parse_cluster_queue,
    parse_pod_set,
    parse_resource_flavor,
)
from dispatcher.kueue.quantities import parse_quantity
from dispatcher.testing import FlavorSpec, decide, dispatch_burst, make_cluster, make_request

GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def cq(
    name: str,
    flavors: Mapping[str, Mapping[str, str]],
    *,
    cohort: str | None = None,
    borrowing: Mapping[str, str] | None = None,
    lending: Mapping[str, str] | None = None,
) -> ClusterQueueView:
    """One resource group covering every resource named, flavors in the given order."""
    covered = sorted({r for quotas in flavors.values() for r in quotas})
    raw_flavors = []
    for flavor, quotas in flavors.items():
        resources = []
        for resource in covered:
            item: dict[str, Any] = {"name": resource, "nominalQuota": quotas.get(resource, "0")}
            if borrowing and resource in borrowing:
                item["borrowingLimit"] = borrowing[resource]
            if lending and resource in lending:
                item["lendingLimit"] = lending[resource]
            resources.append(item)
        raw_flavors.append({"name": flavor, "resources": resources})
    spec: dict[str, Any] = {
        "resourceGroups": [{"coveredResources": covered, "flavors": raw_flavors}]
    }
    if cohort:
        spec["cohortName"] = cohort
    return parse_cluster_queue({"metadata": {"name": name}, "spec": spec})


def flavor(name: str, labels: Mapping[str, str] | None = None, **spec: Any) -> ResourceFlavorView:
    return parse_resource_flavor(
        {"metadata": {"name": name}, "spec": {"nodeLabels": dict(labels or {}), **spec}}
    )


FLAVORS = {
    "default": flavor("default"),
    "a100": flavor("a100", {PRODUCT: A100}),
    "h100": flavor("h100", {PRODUCT: H100}),
    "tainted": flavor(
        "tainted", nodeTaints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    ),
}


def wl(
    name: str,
    queue: str = "cq",
    *,
    count: int = 1,
    priority: int = 0,
    created: int = 0,
    node_selector: Mapping[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    **requests: str,
) -> PendingWorkload:
    """A one-pod-set workload; requests as keyword arguments (``gpu`` means nvidia.com/gpu)."""
    reqs = {GPU if k == "gpu" else k: v for k, v in requests.items()}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": reqs}}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = tolerations
    pod_set = parse_pod_set({"name": "main", "count": count, "template": {"spec": spec}})
    return PendingWorkload(
        key=f"ns/{name}",
        cluster_queue=queue,
        pod_sets=(pod_set,),
        priority=priority,
        queued_at=at(created),
    )


def holding(
    name: str,
    queue: str = "cq",
    *,
    priority: int = 0,
    reserved: int = 0,
    evicting: bool = False,
    flavor_name: str = "default",
    **usage: str,
) -> ReservingWorkload:
    return ReservingWorkload(
        key=f"ns/{name}",
        cluster_queue=queue,
        usage={
            (flavor_name, GPU if k == "gpu" else k): parse_quantity(v) for k, v in usage.items()
        },
        priority=priority,
        reserved_at=at(reserved),
        queued_at=at(reserved),
        evicting=evicting,
    )


# --- fit, quantities, flavors (C69, C71) --------------------------------------------------------

FIT_CASES = [
    # (queue quotas, holders' usage, request, expected mode, expected flavor of first resource)
    pytest.param({"default": {"cpu": "1"}}, {}, {"cpu": "500m"}, "fit", id="500m-in-1-cpu"),
    pytest.param(
        {"default": {"cpu": "1"}}, {"cpu": "600m"}, {"cpu": "500m"}, "wait", id="500m-in-400m-free"
    ),
    pytest.param(
        {"default": {"cpu": "1"}}, {"cpu": "500m"}, {"cpu": "500m"}, "fit", id="500m-exactly-free"
    ),
    pytest.param({"default": {"memory": "1Gi"}}, {}, {"memory": "1Gi"}, "fit", id="1Gi-in-1Gi"),
    pytest.param(
        {"default": {"memory": "1Gi"}}, {}, {"memory": "1025Mi"}, "never", id="1025Mi-in-1Gi"
    ),
    pytest.param({"default": {GPU: "2"}}, {}, {"gpu": "2"}, "fit", id="2-gpus-in-2"),
    pytest.param({"default": {GPU: "2"}}, {"gpu": "1"}, {"gpu": "2"}, "wait", id="2-gpus-1-free"),
    pytest.param({"default": {GPU: "2"}}, {}, {"gpu": "3"}, "never", id="3-gpus-in-2"),
    pytest.param({"default": {"cpu": "4"}}, {}, {GPU: "1"}, "never", id="uncovered-resource"),
]


@pytest.mark.parametrize(("quotas", "used", "asked", "mode"), FIT_CASES)
def test_fit_by_quota(
    quotas: Mapping[str, Mapping[str, str]],
    used: Mapping[str, str],
    asked: Mapping[str, str],
    mode: str,
) -> None:
    queue = cq("cq", quotas)
    holders = [holding("busy", **used)] if used else []
    snapshot = QuotaSnapshot.build([queue], holders)
    result = evaluate(wl("w", **asked), snapshot, FLAVORS)
    assert result.mode == mode, result.reason
    if mode == "fit":
        assert result.usage == {
            ("default", GPU if k == "gpu" else k): parse_quantity(v) for k, v in asked.items()
        }
    else:
        assert result.reason


FLAVOR_CASES = [
    pytest.param({}, None, "a100", id="no-selector-takes-first-flavor"),
    pytest.param({PRODUCT: H100}, None, "h100", id="h100-selector-skips-a100"),
    pytest.param({PRODUCT: "NVIDIA-V100"}, None, None, id="unknown-gpu-type-never-fits"),
    pytest.param({"other/label": "x"}, None, "a100", id="selector-on-unknown-key-ignored"),
]


@pytest.mark.parametrize(("selector", "tolerations", "expected"), FLAVOR_CASES)
def test_c71_gpu_type_node_labels_select_flavor(
    selector: Mapping[str, str], tolerations: list[dict[str, str]] | None, expected: str | None
) -> None:
    queue = cq("cq", {"a100": {GPU: "8"}, "h100": {GPU: "4"}})
    snapshot = QuotaSnapshot.build([queue])
    result = evaluate(
        wl("w", gpu="2", node_selector=selector, tolerations=tolerations), snapshot, FLAVORS
    )
    if expected is None:
        assert result.mode == "never"
        assert "does not match flavor" in result.reason
    else:
        assert result.mode == "fit"
        assert result.flavors["main"] == {GPU: expected}


TAINT_CASES = [
    pytest.param(None, "default", id="untolerated-taint-skips-flavor"),
    pytest.param(
        [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "tainted",
        id="toleration-allows-tainted-flavor",
    ),
    pytest.param([{"operator": "Exists"}], "tainted", id="tolerate-everything"),
]


@pytest.mark.parametrize(("tolerations", "expected"), TAINT_CASES)
def test_c71_tolerations_vs_flavor_taints(
    tolerations: list[dict[str, str]] | None, expected: str
) -> None:
    queue = cq("cq", {"tainted": {"cpu": "4"}, "default": {"cpu": "4"}})
    result = evaluate(
        wl("w", cpu="1", tolerations=tolerations), QuotaSnapshot.build([queue]), FLAVORS
    )
    assert result.flavors["main"] == {"cpu": expected}


def test_c71_full_first_flavor_falls_to_the_next() -> None:
    queue = cq("cq", {"a100": {GPU: "2"}, "h100": {GPU: "4"}})
    snapshot = QuotaSnapshot.build([queue], [holding("busy", flavor_name="a100", gpu="2")])
    result = evaluate(wl("w", gpu="2"), snapshot, FLAVORS)
    assert (result.mode, result.flavors["main"]) == ("fit", {GPU: "h100"})


def test_pod_count_multiplies_requests() -> None:
    queue = cq("cq", {"default": {"cpu": "2"}})
    snapshot = QuotaSnapshot.build([queue])
    assert evaluate(wl("w", count=4, cpu="500m"), snapshot, FLAVORS).mode == "fit"
    assert evaluate(wl("w", count=5, cpu="500m"), snapshot, FLAVORS).mode == "never"


# --- cohort borrowing (C69) --------------------------------------------------------------------

BORROW_CASES = [
    # (borrowing limit of "a", peer usage, request on "a", mode, borrowed)
    pytest.param("2", "0", "4", "fit", 0, id="within-nominal-no-borrowing"),
    pytest.param("2", "0", "6", "fit", 2, id="borrowing-exactly-at-the-limit"),
    pytest.param("2", "0", "7", "never", 0, id="borrowing-one-over-the-limit"),
    pytest.param(None, "0", "8", "fit", 4, id="no-limit-borrows-all-idle-peer-quota"),
    pytest.param(None, "0", "9", "never", 0, id="bigger-than-the-whole-cohort"),
    pytest.param("2", "3", "5", "fit", 1, id="peer-busy-leaves-1-to-borrow"),
    pytest.param("2", "3", "6", "wait", 0, id="peer-busy-limit-not-reached-but-no-room"),
]


@pytest.mark.parametrize(("limit", "peer_used", "asked", "mode", "borrowed"), BORROW_CASES)
def test_c69_cohort_borrowing(
    limit: str | None, peer_used: str, asked: str, mode: str, borrowed: int
) -> None:
    a = cq(
        "a", {"default": {"cpu": "4"}}, cohort="team", borrowing={"cpu": limit} if limit else None
    )
    b = cq("b", {"default": {"cpu": "4"}}, cohort="team")
    snapshot = QuotaSnapshot.build([a, b], [holding("peer", "b", cpu=peer_used)])
    result = evaluate(wl("w", "a", cpu=asked), snapshot, FLAVORS)
    assert result.mode == mode, result.reason
    assert result.borrowing.get(("default", "cpu"), 0) == borrowed * 1000


def test_c69_lending_limit_caps_what_a_peer_lends() -> None:
    a = cq("a", {"default": {"cpu": "4"}}, cohort="team")
    b = cq("b", {"default": {"cpu": "4"}}, cohort="team", lending={"cpu": "1"})
    snapshot = QuotaSnapshot.build([a, b])
    assert evaluate(wl("w", "a", cpu="5"), snapshot, FLAVORS).mode == "fit"
    assert evaluate(wl("w", "a", cpu="6"), snapshot, FLAVORS).mode == "never"
    # b keeps its guaranteed 3 even when a borrows all it can
    busy = QuotaSnapshot.build([a, b], [holding("big", "a", cpu="5")])
    assert busy.available("b", ("default", "cpu")) == 3000
    assert busy.borrowed("a", ("default", "cpu")) == 1000


def test_c69_borrowed_quota_is_not_counted_twice() -> None:
    a = cq("a", {"default": {"cpu": "2"}}, cohort="team")
    b = cq("b", {"default": {"cpu": "2"}}, cohort="team")
    snapshot = QuotaSnapshot.build([a, b], [holding("x", "a", cpu="3")])
    assert snapshot.available("a", ("default", "cpu")) == 1000
    assert snapshot.available("b", ("default", "cpu")) == 1000


def test_c69_no_cohort_means_no_borrowing() -> None:
    snapshot = QuotaSnapshot.build([cq("a", {"default": {"cpu": "4"}})])
    assert evaluate(wl("w", "a", cpu="5"), snapshot, FLAVORS).mode == "never"


# --- preemption (C72) --------------------------------------------------------------------------

PREEMPT_CASES = [
    # (holders in a 6-cpu queue, preemptor request and priority, expected victims)
    pytest.param(
        [("p0", 0, 0, "2"), ("p1", 1, 0, "2"), ("p5", 5, 0, "2")],
        ("2", 3),
        ["p0"],
        id="lowest-priority-first",
    ),
    pytest.param(
        [("p0", 0, 0, "2"), ("p1", 1, 0, "2"), ("p5", 5, 0, "2")],
        ("4", 3),
        ["p0", "p1"],
        id="two-lowest-for-4-cpu",
    ),
    pytest.param(
        [("old", 0, 1, "2"), ("new", 0, 2, "2"), ("top", 9, 0, "2")],
        ("2", 3),
        ["new"],
        id="same-priority-most-recently-reserved-first",
    ),
    pytest.param(
        [("small", 0, 2, "1"), ("big", 1, 1, "3"), ("top", 9, 0, "2")],
        ("3", 5),
        ["big"],
        id="fill-back-drops-the-unneeded-small-victim",
    ),
    pytest.param(
        [("p5", 5, 0, "3"), ("p6", 6, 0, "3")],
        ("2", 5),
        None,
        id="equal-or-higher-priority-never-preempted",
    ),
]


@pytest.mark.parametrize(("holders", "preemptor", "victims"), PREEMPT_CASES)
def test_c72_lower_priority_preemption_picks_minimal_victims(
    holders: list[tuple[str, int, int, str]],
    preemptor: tuple[str, int],
    victims: list[str] | None,
) -> None:
    queue = cq("cq", {"default": {"cpu": "6"}})
    reserving = [
        holding(name, priority=prio, reserved=when, cpu=cpu) for name, prio, when, cpu in holders
    ]
    snapshot = QuotaSnapshot.build([queue], reserving)
    request, priority = preemptor
    policy = QueuePolicy(within_cluster_queue="LowerPriority")
    result = evaluate(
        wl("hi", cpu=request, priority=priority), snapshot, FLAVORS, policy, reserving
    )
    if victims is None:
        assert result.mode == "wait"
    else:
        assert result.mode == "preempt", result.reason
        assert [v.key for v in result.victims] == [f"ns/{v}" for v in victims]
        assert result.reason == f"Pending the preemption of {len(victims)} workload(s)"


def test_c72_already_evicting_workloads_are_preferred_victims() -> None:
    queue = cq("cq", {"default": {"cpu": "4"}})
    reserving = [
        holding("low", priority=0, cpu="2"),
        holding("leaving", priority=2, evicting=True, cpu="2"),
    ]
    snapshot = QuotaSnapshot.build([queue], reserving)
    policy = QueuePolicy(within_cluster_queue="LowerPriority")
    result = evaluate(wl("hi", cpu="2", priority=5), snapshot, FLAVORS, policy, reserving)
    assert [v.key for v in result.victims] == ["ns/leaving"]
    plan = plan_admissions(
        [wl("hi", cpu="2", priority=5)], reserving, [queue], FLAVORS, {"cq": policy}
    )
    assert plan.victims == ()  # nothing new to evict: wait for the release
    assert [e.key for e in plan.preempting] == ["ns/hi"]


def test_c72_policy_never_waits_instead_of_preempting() -> None:
    queue = cq("cq", {"default": {"cpu": "2"}})
    reserving = [holding("low", cpu="2")]
    snapshot = QuotaSnapshot.build([queue], reserving)
    result = evaluate(wl("hi", cpu="2", priority=9), snapshot, FLAVORS, QueuePolicy(), reserving)
    assert result.mode == "wait"


def test_c72_lower_or_newer_equal_priority() -> None:
    queue = cq("cq", {"default": {"cpu": "2"}})
    newer = [ReservingWorkload("ns/newer", "cq", {("default", "cpu"): 2000}, 1, at(5), at(5))]
    older = [ReservingWorkload("ns/older", "cq", {("default", "cpu"): 2000}, 1, at(5), at(-5))]
    policy = parse_queue_policy(
        {"spec": {"preemption": {"withinClusterQueue": "LowerOrNewerEqualPriority"}}}
    )
    me = wl("me", cpu="2", priority=1, created=0)
    assert evaluate(me, QuotaSnapshot.build([queue], newer), FLAVORS, policy, newer).mode == (
        "preempt"
    )
    assert evaluate(me, QuotaSnapshot.build([queue], older), FLAVORS, policy, older).mode == "wait"


def test_c72_candidates_order() -> None:
    order = candidates_order(
        [
            holding("b", priority=1, reserved=5),
            holding("a", priority=1, reserved=9),
            holding("c", priority=0, reserved=1),
            holding("d", priority=7, evicting=True),
        ]
    )
    assert [c.key for c in order] == ["ns/d", "ns/c", "ns/a", "ns/b"]


# --- queue order and strategies (C72) -------------------------------------------------------


def test_queue_order_priority_then_creation_then_name() -> None:
    pending = [
        wl("late-high", priority=5, created=9),
        wl("early-low", priority=0, created=1),
        wl("b-same", priority=0, created=1),
        wl("early-high", priority=5, created=2),
    ]
    assert [w.key for w in queue_order(pending)] == [
        "ns/early-high",
        "ns/late-high",
        "ns/b-same",
        "ns/early-low",
    ]


UID_TIE_CASES = [
    pytest.param("0a", "ff", ["ns/a", "ns/b"], id="lower-uid-of-a-first"),
    pytest.param("ff", "0a", ["ns/b", "ns/a"], id="lower-uid-of-b-first-whatever-the-names"),
]


@pytest.mark.parametrize(("uid_a", "uid_b", "order"), UID_TIE_CASES)
def test_c94_a_tie_in_priority_and_second_goes_by_uid_not_name(
    uid_a: str, uid_b: str, order: list[str]
) -> None:
    # Two Jobs of equal priority created within the same second: Kueue compares UIDs.
    pending = [
        replace(wl("b", created=1), uid=uid_b),
        replace(wl("a", created=1), uid=uid_a),
        replace(wl("later", created=2), uid="00"),
    ]
    assert [w.key for w in queue_order(pending)] == [*order, "ns/later"]


STRATEGY_CASES = [
    pytest.param("BestEffortFIFO", ["ns/small"], ["ns/big"], [], id="best-effort-skips-head"),
    pytest.param("StrictFIFO", [], ["ns/big"], ["ns/small"], id="strict-blocks-behind-head"),
]


@pytest.mark.parametrize(("strategy", "admitted", "pending", "blocked"), STRATEGY_CASES)
def test_c72_queueing_strategy(
    strategy: str, admitted: list[str], pending: list[str], blocked: list[str]
) -> None:
    queue = cq("cq", {"default": {"cpu": "4"}})
    reserving = [holding("running", cpu="2")]
    plan = plan_admissions(
        [wl("big", cpu="3", created=1), wl("small", cpu="1", created=2)],
        reserving,
        [queue],
        FLAVORS,
        {"cq": parse_queue_policy({"spec": {"queueingStrategy": strategy}})},
    )
    assert [e.key for e in plan.admitted] == admitted
    assert [e.key for e in plan.pending] == pending
    assert list(plan.blocked) == blocked


def test_c72_cycle_accounts_for_earlier_admissions() -> None:
    queue = cq("cq", {"default": {"cpu": "4"}})
    plan = plan_admissions(
        [wl(f"w{i}", cpu="1500m", created=i) for i in range(3)], [], [queue], FLAVORS
    )
    assert [e.key for e in plan.admitted] == ["ns/w0", "ns/w1"]
    assert [(e.key, e.mode) for e in plan.pending] == [("ns/w2", "wait")]


def test_c72_preemptor_keeps_its_room_from_lower_workloads() -> None:
    queue = cq("cq", {"default": {"cpu": "4"}})
    reserving = [holding("low", cpu="3", priority=0)]
    plan = plan_admissions(
        [wl("hi", cpu="4", priority=9), wl("tiny", cpu="1", priority=1)],
        reserving,
        [queue],
        FLAVORS,
        {"cq": QueuePolicy(within_cluster_queue="LowerPriority")},
    )
    assert [v.key for v in plan.victims] == ["ns/low"]
    assert [e.key for e in plan.admitted] == []  # tiny does not take the freed quota


def test_c72_two_preemptors_never_share_a_victim() -> None:
    queue = cq("cq", {"default": {"cpu": "2"}, "other": {"cpu": "0"}})
    reserving = [holding("low", cpu="2", priority=0)]
    plan = plan_admissions(
        [wl("first", cpu="2", priority=9), wl("second", cpu="2", priority=8)],
        reserving,
        [queue],
        {**FLAVORS, "other": flavor("other")},
        {"cq": QueuePolicy(within_cluster_queue="LowerPriority")},
    )
    assert [e.key for e in plan.preempting] == ["ns/first"]
    assert [(e.key, e.mode) for e in plan.pending] == [("ns/second", "wait")]


def test_higher_priority_is_admitted_first_across_queues_in_a_cohort() -> None:
    a = cq("a", {"default": {"cpu": "2"}}, cohort="team")
    b = cq("b", {"default": {"cpu": "2"}}, cohort="team")
    plan = plan_admissions(
        [wl("a-low", "a", cpu="3", priority=0, created=1), wl("b-high", "b", cpu="3", priority=5)],
        [],
        [a, b],
        FLAVORS,
    )
    assert [e.key for e in plan.admitted] == ["ns/b-high"]


# --- helpers ----------------------------------------------------------------------------------


def test_admission_usage_reads_pod_set_assignments() -> None:
    usage = admission_usage(
        {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "a", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1500m"}},
                {
                    "name": "b",
                    "flavors": {"cpu": "default", GPU: "h100"},
                    "resourceUsage": {"cpu": "500m", GPU: "2", "memory": "1Gi"},
                },
            ],
        }
    )
    assert usage == {("default", "cpu"): 2000, ("h100", GPU): 2000}


@pytest.mark.parametrize(
    ("resource", "milli", "text"),
    [
        pytest.param("cpu", 500, "500m", id="cpu-milli"),
        pytest.param("cpu", 2000, "2", id="cpu-whole"),
        pytest.param("memory", 2**30 * 1000, "1Gi", id="memory-Gi"),
        pytest.param("memory", 1536 * 2**20 * 1000, "1536Mi", id="memory-Mi"),
        pytest.param("memory", 1000 * 1000, "1000", id="memory-not-binary"),
        pytest.param("memory", 0, "0", id="zero"),
        pytest.param(GPU, 2000, "2", id="gpus"),
    ],
)
def test_format_resource_quantity(resource: str, milli: int, text: str) -> None:
    assert format_resource_quantity(resource, milli) == text
    assert parse_quantity(text) == milli


def test_c69_cohort_object_quota_is_shared_by_its_members() -> None:
    a = cq("a", {"default": {"cpu": "2"}}, cohort="team")
    shared = {"team": {("default", "cpu"): 3000}}
    snapshot = QuotaSnapshot.build([a], cohort_quotas=shared)
    assert evaluate(wl("w", "a", cpu="5"), snapshot, FLAVORS).mode == "fit"
    assert evaluate(wl("w", "a", cpu="6"), snapshot, FLAVORS).mode == "never"


# --- issue 14 item 8: `pods` quota (C69) --------------------------------------------------------

PODS_QUOTA = {"default": {"cpu": "8", "pods": "3"}}

PODS_CASES = [
    # (queue quotas, pods held by others, pod count, expected mode, pods charged)
    pytest.param(PODS_QUOTA, "0", 3, "fit", 3, id="issue14-8-three-pods-fill-a-quota-of-3"),
    pytest.param(PODS_QUOTA, "0", 4, "never", 0, id="issue14-8-four-pods-never-fit-3"),
    pytest.param(PODS_QUOTA, "2", 2, "wait", 0, id="issue14-8-pods-full-while-cpu-is-free"),
    pytest.param(PODS_QUOTA, "2", 1, "fit", 1, id="issue14-8-the-last-pod-fits"),
    pytest.param(
        {"default": {"cpu": "8"}}, "0", 20, "fit", 0, id="issue14-8-no-pods-quota-no-pod-limit"
    ),
]


@pytest.mark.parametrize(("quotas", "held", "count", "mode", "pods"), PODS_CASES)
def test_item8_pods_quota_counts_each_pod_of_a_pod_set(
    quotas: Mapping[str, Mapping[str, str]], held: str, count: int, mode: str, pods: int
) -> None:
    """Kueue's flavor assigner adds ``pods = count`` to a pod set's requests when its
    ClusterQueue covers ``pods`` (``pkg/scheduler/flavorassigner`` ``assignFlavors``)."""
    queue = cq("cq", quotas)
    holders = [holding("busy", pods=held, cpu="1")] if held != "0" else []
    snapshot = QuotaSnapshot.build([queue], holders)
    result = evaluate(wl("w", count=count, cpu="100m"), snapshot, FLAVORS)
    assert result.mode == mode, result.reason
    if mode == "fit":
        assert result.usage.get(("default", "pods"), 0) == pods * 1000
        assert result.usage[("default", "cpu")] == count * 100
        if pods:
            assert result.flavors["main"]["pods"] == "default"
    else:
        assert "pods" in result.reason


def test_item8_pods_request_in_the_template_is_replaced_by_the_pod_count() -> None:
    """Kueue overrides a ``pods`` request with the pod count (its webhook refuses the key)."""
    queue = cq("cq", PODS_QUOTA)
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "pods": "5"}}}]}
    pod_set = parse_pod_set({"name": "main", "count": 2, "template": {"spec": spec}})
    assert quota_requests(pod_set, queue) == {"cpu": 2000, "pods": 2000}
    without = cq("plain", {"default": {"cpu": "8"}})
    plain = parse_pod_set(
        {"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}
    )
    assert quota_requests(plain, without) == {}


def test_item8_a_cycle_accounts_pods_between_admissions() -> None:
    queue = cq("cq", PODS_QUOTA)
    plan = plan_admissions(
        [
            wl("two-pods", count=2, cpu="1", created=1),
            wl("two-more", count=2, cpu="1", created=2),
            wl("one-pod", count=1, cpu="1", created=3),
        ],
        [],
        [queue],
        FLAVORS,
    )
    assert [e.key for e in plan.admitted] == ["ns/two-pods", "ns/one-pod"]
    assert [(e.key, e.mode) for e in plan.pending] == [("ns/two-more", "wait")]


def test_item8_admission_usage_charges_pods() -> None:
    usage = admission_usage(
        {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "default", "pods": "default"},
                    "resourceUsage": {"cpu": "2", "pods": "2"},
                    "count": 2,
                }
            ],
        }
    )
    assert usage == {("default", "cpu"): 2000, ("default", "pods"): 2000}


def test_item8_dispatcher_predictions_honour_pods_quota() -> None:
    """The dispatcher's capacity prediction (``dispatcher.algorithms.stages``) uses the same
    flavor fit: a worker whose ``pods`` quota is used up does not fit now, however much cpu it
    has free, and in-flight nominations consume ``pods`` too."""
    full = make_cluster(
        "pods-full",
        flavors=[FlavorSpec("default", quota={"cpu": 64, "pods": 2}, used={"pods": 2})],
        order=0,
    )
    roomy = make_cluster(
        "pods-roomy",
        flavors=[FlavorSpec("default", quota={"cpu": 16, "pods": 10}, used={"cpu": 8})],
        order=1,
    )
    decision = decide(make_request("w", cpu=1), [full, roomy], names=["capacity-first"])
    assert decision.nominate == ("pods-roomy",)
    assert decision.verdict("pods-full").fits_now is False
    assert decision.verdict("pods-roomy").fits_now is True
    burst = dispatch_burst(
        [make_request(f"b{i}", cpu=1, count=4) for i in range(3)],
        [make_cluster("w", flavors=[FlavorSpec("default", quota={"cpu": 64, "pods": 10})])],
        names=["capacity-first"],
    )
    assert [d.verdict("w").fits_now for d in burst] == [True, True, False]


# --- issue 14 item 9: preemption only within nominal quota (C72) -------------------------------

BORROW_PREEMPT_CASES = [
    # (borrowWithinCohort policy, preemptor's cpu, expected mode, victims, borrowed cpu)
    pytest.param("Never", "4", "preempt", ["low"], 0, id="issue14-9-request-within-nominal"),
    pytest.param("Never", "5", "wait", [], 0, id="issue14-9-request-above-nominal-waits"),
    pytest.param(
        "LowerPriority", "5", "preempt", ["low"], 1, id="issue14-9-borrow-within-cohort-preempts"
    ),
    pytest.param("LowerPriority", "7", "wait", [], 0, id="issue14-9-not-even-by-preempting"),
    pytest.param("Never", "9", "never", [], 0, id="issue14-9-above-the-cohort"),
]


@pytest.mark.parametrize(("borrow", "asked", "mode", "victims", "borrowed"), BORROW_PREEMPT_CASES)
def test_item9_preemption_for_a_request_above_nominal_needs_borrow_within_cohort(
    borrow: str, asked: str, mode: str, victims: list[str], borrowed: int
) -> None:
    """Queue ``a``: 4 cpu nominal, all held by ``low``; its peer ``b`` (4 cpu) uses 2, so 2 can
    be borrowed. Kueue's ``fitsResourceQuota`` considers preemption for a request above nominal
    quota only with ``borrowWithinCohort`` (v0.19.2 ``pkg/scheduler/flavorassigner``)."""
    a = cq("a", {"default": {"cpu": "4"}}, cohort="team")
    b = cq("b", {"default": {"cpu": "4"}}, cohort="team")
    reserving = [holding("low", "a", cpu="4"), holding("peer", "b", priority=9, cpu="2")]
    snapshot = QuotaSnapshot.build([a, b], reserving)
    policy = parse_queue_policy(
        {
            "spec": {
                "preemption": {
                    "withinClusterQueue": "LowerPriority",
                    "reclaimWithinCohort": "Never" if borrow == "Never" else "LowerPriority",
                    "borrowWithinCohort": {"policy": borrow},
                }
            }
        }
    )
    assert policy.borrow_within_cohort == borrow
    result = evaluate(wl("hi", "a", cpu=asked, priority=5), snapshot, FLAVORS, policy, reserving)
    assert result.mode == mode, result.reason
    assert [v.key for v in result.victims] == [f"ns/{v}" for v in victims]
    assert result.borrowing.get(("default", "cpu"), 0) == borrowed * 1000


def test_item9_a_request_within_nominal_may_still_borrow_after_preempting() -> None:
    """Within nominal quota, preemption is considered, and the preemptor may borrow once its
    victims are gone (``workloadFits`` with borrowing allowed: no candidates in other queues)."""
    a = cq("a", {"default": {"cpu": "4"}}, cohort="team")
    b = cq("b", {"default": {"cpu": "4"}}, cohort="team")
    reserving = [
        holding("low", "a", priority=0, cpu="2"),
        holding("top", "a", priority=9, cpu="2"),
        holding("peer", "b", priority=9, cpu="2"),
    ]
    snapshot = QuotaSnapshot.build([a, b], reserving)
    policy = QueuePolicy(within_cluster_queue="LowerPriority")
    result = evaluate(wl("hi", "a", cpu="4", priority=5), snapshot, FLAVORS, policy, reserving)
    assert result.mode == "preempt", result.reason
    assert [v.key for v in result.victims] == ["ns/low"]
    assert result.borrowing == {("default", "cpu"): 2000}


def test_item9_without_a_cohort_nothing_changes() -> None:
    queue = cq("cq", {"default": {"cpu": "4"}})
    reserving = [holding("low", cpu="4")]
    snapshot = QuotaSnapshot.build([queue], reserving)
    policy = QueuePolicy(within_cluster_queue="LowerPriority")
    result = evaluate(wl("hi", cpu="4", priority=5), snapshot, FLAVORS, policy, reserving)
    assert (result.mode, [v.key for v in result.victims]) == ("preempt", ["ns/low"])
