"""Requests that could go anywhere keep off the models that constrained demand
is short of, and constrained requests are never kept off their own models."""

from __future__ import annotations

from gpudock.scheduler.house import HousePolicy
from gpudock.scheduler.scarcity import ModelScarcity
from gpudock.scheduler.snapshot import Snapshot
from gpudock.scheduler.workload import WorkloadEstimate
from tests.scheduler.fleet import A100, T4, node, whole


def mixed_fleet() -> Snapshot:
    # The T4 host is the tighter fit for one GPU, so packing alone would pick it.
    return Snapshot([node("big", 8, A100), node("small", 2, T4)])


def test_a_set_is_short_when_its_only_demand_outgrows_its_free_capacity() -> None:
    snap = mixed_fleet()
    scarcity = ModelScarcity(snap, margin=2.0)
    for _ in range(3):
        scarcity.observe(whole(1, T4))
    for _ in range(7):
        scarcity.observe(whole(1))
    # T4-only demand is 30 % of requests: 3 of the 10 idle GPUs, over half the 2 T4s.
    protected = scarcity.protected_nodes(whole(1))
    assert protected is not None and protected.tolist() == [False, True]
    assert scarcity.protected_nodes(whole(1, T4)) is None


def test_no_set_is_short_while_its_demand_is_small() -> None:
    snap = mixed_fleet()
    scarcity = ModelScarcity(snap, margin=2.0)
    scarcity.observe(whole(1, T4))
    for _ in range(19):
        scarcity.observe(whole(1))
    assert scarcity.protected_nodes(whole(1)) is None


def test_unconstrained_requests_leave_the_scarce_model_to_the_demand_that_needs_it() -> None:
    snap = mixed_fleet()
    # A workload estimate that gives the T4-only class no weight, as a rare
    # class among many gets: the usable-capacity loss alone would not protect T4.
    workload = WorkloadEstimate.fixed([(whole(1), 1.0)])
    policy = HousePolicy(snap, seed=3, workload=workload)
    placed_on: list[str] = []
    for demand in [whole(1, T4), whole(1), whole(1), whole(1), whole(1, T4)]:
        policy.observe(demand)
        choice = policy.choose(demand)
        assert choice is not None
        snap.allocate(choice)
        placed_on.append(snap.specs[choice.node].model)
    assert placed_on == [T4, A100, A100, A100, T4]
