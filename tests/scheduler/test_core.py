"""Unit tests of the placement core: every policy, the snapshot's guarantees."""

from __future__ import annotations

import pytest

from gpudock.scheduler.demand import (
    MILLI_PER_GPU,
    Demand,
    cpu_only,
    gpu_share,
    share_milli_for_memory,
)
from gpudock.scheduler.registry import POLICY_NAMES, PolicyContext, make_policy
from gpudock.scheduler.snapshot import Assignment, OverCommitError, Snapshot
from tests.scheduler.fleet import A100, H100, T4, node, share, whole

ALL = pytest.mark.parametrize("policy_name", POLICY_NAMES)


def placed(snapshot: Snapshot, policy_name: str, demand: Demand) -> Assignment:
    policy = make_policy(policy_name, snapshot, PolicyContext(seed=1))
    policy.observe(demand)
    choice = policy.choose(demand)
    assert choice is not None, f"{policy_name} found no place for {demand}"
    snapshot.allocate(choice)
    return choice


@ALL
def test_whole_gpus_only_of_an_acceptable_model(policy_name: str) -> None:
    snap = Snapshot([node("a", 8, A100), node("h", 8, H100), node("t", 4, T4)])
    for _ in range(3):
        choice = placed(snap, policy_name, whole(2, H100, T4))
        assert snap.specs[choice.node].model in {H100, T4}


@ALL
def test_no_acceptable_model_means_no_place(policy_name: str) -> None:
    snap = Snapshot([node("a", 8, A100)])
    policy = make_policy(policy_name, snap, PolicyContext(seed=1))
    assert policy.choose(whole(1, H100)) is None


@ALL
def test_k_gpus_are_distinct_and_on_one_host(policy_name: str) -> None:
    snap = Snapshot([node("a", 3), node("b", 4), node("c", 3)])
    choice = placed(snap, policy_name, whole(4))
    assert snap.specs[choice.node].name == "b"
    assert sorted(choice.gpus) == [0, 1, 2, 3]
    policy = make_policy(policy_name, snap, PolicyContext(seed=1))
    assert policy.choose(whole(4)) is None  # 3 + 3 free elsewhere do not add up


@ALL
def test_cpu_and_memory_must_fit(policy_name: str) -> None:
    snap = Snapshot([node("poor", 8, cpu=4000), node("small", 8, memory=8 * 1024), node("ok", 2)])
    choice = placed(snap, policy_name, whole(1, cpu=8000, memory=16 * 1024))
    assert snap.specs[choice.node].name == "ok"


@ALL
def test_shares_never_exceed_a_gpu(policy_name: str) -> None:
    snap = Snapshot([node("a", 2)])
    policy = make_policy(policy_name, snap, PolicyContext(seed=1))
    demand = share(0.4)
    count = 0
    while (choice := policy.choose(demand, may_defer=False)) is not None:
        snap.allocate(choice)
        count += 1
    assert count == 4  # two per GPU: a third 0.4 would need 1.2 of a card
    assert (snap.gpu_free[0, :2] == MILLI_PER_GPU - 800).all()


def test_share_rounding_never_gives_less() -> None:
    assert gpu_share(0.25, None, cpu_milli=0, memory_mib=0).milli == 250
    assert gpu_share(0.0001, None, cpu_milli=0, memory_mib=0).milli == 1
    assert share_milli_for_memory(20, 80) == 250
    assert share_milli_for_memory(20, 24) == 834  # 833.3 rounded up
    with pytest.raises(ValueError):
        gpu_share(1.0, None, cpu_milli=0, memory_mib=0)


def test_snapshot_refuses_over_commit() -> None:
    snap = Snapshot([node("a", 1, cpu=2000)])
    snap.allocate(Assignment(0, (0,), share(0.6, cpu=1000)))
    with pytest.raises(OverCommitError):
        snap.allocate(Assignment(0, (0,), share(0.5, cpu=1000)))
    with pytest.raises(OverCommitError):
        snap.allocate(Assignment(0, (), cpu_only(cpu_milli=1500, memory_mib=0)))
    with pytest.raises(OverCommitError):
        snap.release(Assignment(0, (0,), share(0.7)))  # more than was ever taken


def test_multi_gpu_requests_keep_the_nvlink_and_numa_preference() -> None:
    # Free GPUs 0, 1 (NUMA 0, no link) and 2 (NUMA 0), 5 (NUMA 1), linked.
    links = [frozenset() for _ in range(8)]
    links[2], links[5] = frozenset({5}), frozenset({2})
    numa = (0, 0, 0, 0, 1, 1, 1, 1)
    snap = Snapshot([node("h", 8, numa=numa, nvlink=tuple(links))])
    for g in (3, 4, 6, 7):
        snap.allocate(Assignment(0, (g,), whole(1)))
    assert placed(snap, "gpudock", whole(2)).gpus == (2, 5)


def test_four_gpus_land_on_one_numa_node() -> None:
    numa = (0, 0, 0, 0, 1, 1, 1, 1)
    snap = Snapshot([node("h", 8, numa=numa)])
    snap.allocate(Assignment(0, (1,), whole(1)))
    assert placed(snap, "gpudock", whole(4)).gpus == (4, 5, 6, 7)


def test_house_policy_packs_and_keeps_whole_nodes_whole() -> None:
    snap = Snapshot([node(f"n{i}", 8) for i in range(4)])
    first = placed(snap, "gpudock", whole(1))
    for _ in range(6):
        assert placed(snap, "gpudock", whole(1)).node == first.node
    assert placed(snap, "gpudock", share(0.5)).node == first.node
    assert sum(int((snap.gpu_free[i] == MILLI_PER_GPU).all()) for i in range(4)) == 3


def test_house_policy_tie_rule_ignores_node_order() -> None:
    nodes = [node(f"n{i}", 4) for i in range(6)]
    demands = [whole(1), share(0.3), whole(2), share(0.7), whole(1)]
    names = []
    for order in (nodes, nodes[::-1]):
        snap = Snapshot(order)
        names.append([snap.specs[placed(snap, "gpudock", d).node].name for d in demands])
    assert names[0] == names[1]


def test_cpu_only_requests_go_where_cpu_strands_no_gpu() -> None:
    # A T4 host has CPU to spare; the A100 host's CPU is what its GPUs need.
    snap = Snapshot([node("a100", 8, A100, cpu=64_000), node("t4", 2, T4, cpu=104_000)])
    policy = make_policy("gpudock", snap, PolicyContext(seed=1))
    for _ in range(20):
        policy.observe(whole(1, cpu=8000))
    choice = policy.choose(cpu_only(cpu_milli=32_000, memory_mib=1024))
    assert choice is not None and snap.specs[choice.node].name == "t4"


def test_release_restores_the_snapshot() -> None:
    snap = Snapshot([node("a", 4), node("b", 2, H100)])
    demands = (whole(2, A100), share(0.3), share(0.3, H100))
    done = [placed(snap, "gpudock", d) for d in demands]
    assert not snap.is_empty()
    for a in reversed(done):
        snap.release(a)
    assert snap.is_empty()
