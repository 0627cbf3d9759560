"""Hypothesis properties: random request streams never over-allocate, whatever
the policy, and releasing everything returns the snapshot to empty."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.registry import POLICY_NAMES, PolicyContext, make_policy
from gpudock.scheduler.snapshot import Assignment, Snapshot
from tests.scheduler.fleet import A100, H100, T4, node

MODELS = (A100, H100, T4)

node_specs = st.builds(
    lambda i, gpus, model, cpu, mem: node(f"n{i}", gpus, model, cpu=cpu, memory=mem),
    st.integers(0, 10**6),
    st.integers(0, 8),
    st.sampled_from(MODELS),
    st.integers(0, 64).map(lambda c: c * 1000),
    st.integers(0, 64).map(lambda g: g * 1024),
)


@st.composite
def demands(draw: st.DrawFn) -> Demand:
    models = draw(st.one_of(st.none(), st.frozensets(st.sampled_from(MODELS), min_size=1)))
    cpu = draw(st.integers(0, 16)) * 1000
    memory = draw(st.integers(0, 32)) * 1024
    kind = draw(st.sampled_from(("cpu", "share", "whole")))
    if kind == "cpu":
        return Demand(0, 0, cpu, memory)
    if kind == "share":
        return Demand(1, draw(st.integers(1, MILLI_PER_GPU - 1)), cpu, memory, models)
    return Demand(draw(st.integers(1, 8)), MILLI_PER_GPU, cpu, memory, models)


def check_within_capacity(snap: Snapshot) -> None:
    assert (snap.cpu_free >= 0).all() and (snap.mem_free >= 0).all()
    assert (snap.gpu_free >= 0).all() and (snap.gpu_free <= MILLI_PER_GPU).all()
    assert (snap.gpu_free[~snap.gpu_exists] == 0).all()
    used = int((np.where(snap.gpu_exists, MILLI_PER_GPU, 0) - snap.gpu_free).sum())
    assert used == snap.used_milli


@settings(max_examples=60, deadline=None)
@given(
    st.lists(node_specs, min_size=1, max_size=6, unique_by=lambda n: n.name),
    st.lists(st.tuples(demands(), st.booleans()), min_size=1, max_size=40),
    st.sampled_from(POLICY_NAMES),
    st.integers(0, 2**16),
)
def test_random_streams_never_over_allocate_and_release_to_empty(
    nodes: list, stream: list[tuple[Demand, bool]], policy_name: str, seed: int
) -> None:
    snap = Snapshot(nodes)
    policy = make_policy(policy_name, snap, PolicyContext(seed=seed))
    running: list[Assignment] = []
    for demand, leave_one in stream:
        policy.observe(demand)
        choice = policy.choose(demand)
        feasible = snap.feasible(demand).any()
        if choice is None:
            # A policy may hold back a share, or a CPU-only request (that
            # would take the CPU free GPUs need), but nothing else that fits.
            assert not feasible or demand.is_share or not demand.gpus
        else:
            assert snap.can_take(choice.node, choice.gpus, demand)
            snap.allocate(choice)
            running.append(choice)
        if leave_one and running:
            snap.release(running.pop(seed % len(running)))
        check_within_capacity(snap)
    for assignment in running:
        snap.release(assignment)
    assert snap.is_empty()
