"""The house policy's own rules: admission of shares that leave poor holes, and
which nodes the workload's CPU-hungry requests are meant for."""

from __future__ import annotations

import numpy as np

from gpudock.scheduler.demand import MILLI_PER_GPU, cpu_only
from gpudock.scheduler.house import HousePolicy
from gpudock.scheduler.nodestates import NodeStates
from gpudock.scheduler.snapshot import Snapshot
from gpudock.scheduler.usable import UsableCapacity
from gpudock.scheduler.workload import WorkloadEstimate
from tests.scheduler.fleet import node, share, whole

LARGE_SHARE = 0.81  # leaves 190 milli, which no request of the workload below fits


def poor_hole_milli(snap: Snapshot) -> int:
    free = snap.gpu_free
    return int(free[(free > 0) & (free < MILLI_PER_GPU)].sum())


def large_share_fleet() -> tuple[Snapshot, HousePolicy]:
    snap = Snapshot([node(f"n{i}", 8) for i in range(4)])
    workload = WorkloadEstimate.fixed([(share(LARGE_SHARE), 0.5), (whole(1), 0.5)])
    return snap, HousePolicy(snap, seed=1, workload=workload)


def test_poor_hole_shares_are_held_back_only_while_refused_stays_below_lost() -> None:
    snap, policy = large_share_fleet()
    refused = 0
    for _ in range(24):
        demand = share(LARGE_SHARE)
        policy.observe(demand)
        choice = policy.choose(demand)
        if choice is None:
            refused += demand.total_milli
        else:
            snap.allocate(choice)
        assert refused <= poor_hole_milli(snap)
    assert refused > 0  # some were held back ...
    assert snap.used_milli > 3 * refused  # ... but most were placed


def test_a_held_back_share_is_placed_when_it_may_not_wait_or_is_retried() -> None:
    snap, policy = large_share_fleet()
    held = None
    for _ in range(24):
        demand = share(LARGE_SHARE)
        policy.observe(demand)
        choice = policy.choose(demand)
        if choice is None:
            held = demand
            break
        snap.allocate(choice)
    assert held is not None
    # A queue's retry of the same request is not an arrival: it is not held again.
    assert policy.choose(held) is not None
    policy.observe(held)
    assert policy.choose(held, may_defer=False) is not None


def test_without_admission_every_share_that_fits_is_placed() -> None:
    snap = Snapshot([node(f"n{i}", 8) for i in range(4)])
    workload = WorkloadEstimate.fixed([(share(LARGE_SHARE), 0.5), (whole(1), 0.5)])
    policy = HousePolicy(snap, seed=1, workload=workload, admission=False)
    for _ in range(32):
        demand = share(LARGE_SHARE)
        policy.observe(demand)
        choice = policy.choose(demand)
        assert choice is not None
        snap.allocate(choice)


def test_cpu_hungry_requests_are_meant_for_the_cpu_rich_nodes() -> None:
    snap = Snapshot([node("lean", 8, cpu=16_000), node("rich", 8, cpu=128_000)])
    workload = WorkloadEstimate.fixed([(whole(1, cpu=2000), 0.5), (whole(1, cpu=12_000), 0.5)])
    usable = UsableCapacity(snap, workload, NodeStates(snap))
    lean, rich = usable.cpu_meant
    assert lean == 2000 / MILLI_PER_GPU
    assert rich == 12_000 / MILLI_PER_GPU
    # A hungry request on the lean node leaves GPUs that its own requests lack CPU for.
    nodes = np.array([0, 1])
    gpu = np.array([8000, 8000])
    before = usable.balanced(nodes, gpu, snap.cpu_free, snap.mem_free)
    after = usable.balanced(nodes, gpu - 1000, snap.cpu_free - 12_000, snap.mem_free - 1024)
    stranded = before - after - 1000
    assert stranded[0] > 0
    assert stranded[1] == 0


def test_the_cpu_hungry_request_goes_to_the_cpu_rich_node() -> None:
    snap = Snapshot([node("lean", 8, cpu=16_000), node("rich", 8, cpu=128_000)])
    workload = WorkloadEstimate.fixed([(whole(1, cpu=2000), 0.5), (whole(1, cpu=12_000), 0.5)])
    policy = HousePolicy(snap, seed=1, workload=workload)
    choice = policy.choose(whole(1, cpu=12_000))
    assert choice is not None
    assert snap.specs[choice.node].name == "rich"


def test_a_cpu_only_request_waits_rather_than_take_the_cpu_free_gpus_need() -> None:
    snap = Snapshot([node("a", 2, cpu=4000)])
    workload = WorkloadEstimate.fixed([(whole(1, cpu=2000), 1.0)])
    policy = HousePolicy(snap, seed=1, workload=workload)
    cpu_hungry = cpu_only(cpu_milli=3000, memory_mib=1024)
    policy.observe(cpu_hungry)
    assert policy.choose(cpu_hungry) is None  # it would leave one free GPU 1 core of 2
    assert policy.choose(cpu_hungry, may_defer=False) is not None
    for _ in range(2):
        gpu_pod = whole(1, cpu=1000)
        policy.observe(gpu_pod)
        choice = policy.choose(gpu_pod)
        assert choice is not None
        snap.allocate(choice)
    small = cpu_only(cpu_milli=2000, memory_mib=1024)
    policy.observe(small)
    assert policy.choose(small) is not None  # no free GPU is left to need the CPU
