"""Node states: equal states share an id, one node per state is scored, and the
house policy's kept scores never change a decision."""

from __future__ import annotations

import copy
import random

import numpy as np

from gpudock.scheduler.demand import cpu_only
from gpudock.scheduler.house import HousePolicy
from gpudock.scheduler.nodestates import NodeStates
from gpudock.scheduler.snapshot import Assignment, Snapshot
from gpudock.scheduler.workload import WorkloadEstimate
from tests.scheduler.fleet import A100, T4, node, share, whole


def test_equal_states_share_an_id_and_the_lowest_rank_represents_them() -> None:
    snap = Snapshot([node(f"n{i}", 4) for i in range(5)] + [node("t", 2, T4)])
    states = NodeStates(snap)
    assert len(set(states.ids[:5].tolist())) == 1
    assert states.ids[5] != states.ids[0]
    rank = np.array([3, 1, 4, 0, 2, 5])
    assert states.representatives(np.arange(6), rank).tolist() == [3, 5]

    snap.allocate(Assignment(3, (0,), whole(1)))
    states.refresh()
    assert states.representatives(np.arange(6), rank).tolist() == [1, 3, 5]


def test_the_order_of_gpus_within_a_node_does_not_make_another_state() -> None:
    snap = Snapshot([node("a", 4), node("b", 4)])
    snap.allocate(Assignment(0, (0,), share(0.3)))
    snap.allocate(Assignment(1, (3,), share(0.3)))
    states = NodeStates(snap)
    assert states.ids[0] == states.ids[1]


def test_node_builds_are_never_merged() -> None:
    snap = Snapshot([node("a", 4, A100, cpu=64_000), node("b", 4, A100, cpu=96_000)])
    snap.allocate(Assignment(1, (), cpu_only(cpu_milli=32_000, memory_mib=0)))
    states = NodeStates(snap)
    assert states.ids[0] != states.ids[1]


def test_kept_scores_decide_as_scoring_afresh() -> None:
    # Admission is off: it depends on what was refused before, which a fresh
    # policy has not seen; what is compared here is the scoring.
    rng = random.Random(5)
    nodes = [node(f"a{i}", 8, cpu=96_000) for i in range(6)] + [
        node(f"t{i}", 2, T4, cpu=104_000) for i in range(6)
    ]
    snap = Snapshot(nodes)
    workload = WorkloadEstimate(rerank_every=16)
    kept = HousePolicy(snap, seed=3, workload=workload, admission=False)
    kinds = [whole(1, cpu=8000), whole(2, cpu=16_000), share(0.47, cpu=12_000), share(0.81)]
    for _ in range(120):
        demand = rng.choice(kinds)
        kept.observe(demand)
        afresh = HousePolicy(copy.deepcopy(snap), seed=3, workload=workload, admission=False)
        choice = kept.choose(demand)
        assert choice == afresh.choose(demand)
        if choice is not None:
            snap.allocate(choice)
