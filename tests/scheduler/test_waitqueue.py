"""The wait queue: FIFO order, the anti-starvation reservation, refusals."""

from __future__ import annotations

from gpudock.scheduler.registry import PolicyContext, make_policy
from gpudock.scheduler.snapshot import Assignment, Snapshot
from gpudock.scheduler.waitqueue import (
    Waiting,
    largest_that_fits,
    placement_pass,
    queue_order,
)
from tests.scheduler.fleet import H100, node, share, whole

LIMIT = 100.0


def test_queue_is_fifo_until_someone_starves() -> None:
    a, b, c = (
        Waiting("a", whole(1), 10.0),
        Waiting("b", whole(8), 20.0),
        Waiting("c", share(0.5), 5.0),
    )
    assert [w.request_id for w in queue_order([a, b, c], now=50.0, overtake_limit_s=LIMIT)] == [
        "c",
        "a",
        "b",
    ]
    # At t=115 only c (since 5) and a (since 10) have waited 100 s or more.
    order = queue_order([b, a, c], now=115.0, overtake_limit_s=LIMIT)
    assert [w.request_id for w in order] == ["c", "a", "b"]
    order = queue_order([b, Waiting("d", whole(1), 110.0)], now=125.0, overtake_limit_s=LIMIT)
    assert [w.request_id for w in order] == ["b", "d"]


def test_small_requests_overtake_a_big_one_only_until_it_starves() -> None:
    snap = Snapshot([node("n0", 8), node("n1", 8)])
    policy = make_policy("gpudock", snap, PolicyContext(seed=3))
    for host in (0, 1):
        snap.allocate(Assignment(host, (0,), whole(1)))  # no host is whole: the 8 waits
    big = Waiting("big", whole(8), 0.0)
    small = [Waiting(f"s{i}", whole(1), 1.0 + i) for i in range(3)]
    placed = placement_pass([big, *small], policy, snap, now=10.0, overtake_limit_s=LIMIT)
    assert {w.request_id for w, _ in placed} == {"s0", "s1", "s2"}  # they overtake
    # Once "big" starves, the host nearest to fitting it is reserved: nothing
    # more lands there, so it drains to whole while the other host takes the rest.
    later = [Waiting(f"t{i}", whole(1), 150.0 + i) for i in range(4)]
    placed = placement_pass([big, *later], policy, snap, now=200.0, overtake_limit_s=LIMIT)
    hosts = {a.node for _, a in placed}
    reserved_host = ({0, 1} - hosts).pop()
    for w, a in placed:
        assert a.node != reserved_host, w


def test_a_request_no_host_could_ever_hold_is_told_the_largest_that_fits() -> None:
    snap = Snapshot([node("n0", 8), node("h", 4, H100, cpu=32_000)])
    assert largest_that_fits(snap, whole(8)) is None  # fits when n0 is empty: it waits
    bigger = largest_that_fits(snap, whole(16))
    assert bigger is not None and bigger.gpus == 8
    h100 = largest_that_fits(snap, whole(8, H100, cpu=64_000))
    assert h100 is not None and (h100.gpus, h100.cpu_milli) == (4, 32_000)
