"""Unit and property tests for the pure placement core (gpudock.scheduler.placement)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.scheduler.placement import (
    GpuSlot,
    HostCapacity,
    Placement,
    PlacementRequest,
    place,
)

A100 = "A100-80GB"
H100 = "H100-80GB"
L40S = "L40S-48GB"
MODELS = (A100, H100, L40S)

T = TypeVar("T")

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)
# Narrower checks (input order, topology) need fewer examples; keeps the file fast.
NARROW_SETTINGS = settings(max_examples=100, deadline=None)


# -- builders ------------------------------------------------------------------------


def uuid_of(host_id: str, index: int) -> str:
    return f"{host_id}-gpu{index}"


def gpu(
    host_id: str,
    index: int,
    model: str = A100,
    *,
    numa: int | None = None,
    peers: Iterable[int] = (),
) -> GpuSlot:
    return GpuSlot(
        uuid=uuid_of(host_id, index),
        model=model,
        index=index,
        numa_node=numa,
        nvlink_peers=frozenset(uuid_of(host_id, p) for p in peers),
    )


def host(
    host_id: str,
    gpus: Sequence[GpuSlot] | int = 0,
    *,
    model: str = A100,
    taken: Iterable[int] = (),
    cpus: float = 64.0,
    memory_gb: float = 512.0,
) -> HostCapacity:
    """A host with `gpus` (slots, or a number of plain `model` GPUs); `taken`
    indices are installed (so in gpu_models) but not free."""
    slots = [gpu(host_id, i, model) for i in range(gpus)] if isinstance(gpus, int) else gpus
    taken_set = set(taken)
    return HostCapacity(
        host_id=host_id,
        free_cpus=cpus,
        free_memory_gb=memory_gb,
        free_gpus=tuple(g for g in slots if g.index not in taken_set),
        gpu_models=frozenset(g.model for g in slots),
    )


def request(
    gpu_count: int,
    gpu_model: str | None = A100,
    *,
    cpus: float = 1.0,
    memory_gb: float = 4.0,
    preferred_gpus: Iterable[str] = (),
    preferred_host: str | None = None,
    required_host: str | None = None,
    allowed_hosts: Iterable[str] | None = None,
) -> PlacementRequest:
    return PlacementRequest(
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        cpus=cpus,
        memory_gb=memory_gb,
        preferred_gpus=frozenset(preferred_gpus),
        preferred_host=preferred_host,
        required_host=required_host,
        allowed_hosts=None if allowed_hosts is None else frozenset(allowed_hosts),
    )


def uuids(host_id: str, *indices: int) -> set[str]:
    return {uuid_of(host_id, i) for i in indices}


def numa_split_host(host_id: str, *, taken: Iterable[int] = ()) -> HostCapacity:
    """8 GPUs: indices 0-3 on NUMA node 0, 4-7 on NUMA node 1, no NVLink."""
    slots = [gpu(host_id, i, numa=0 if i < 4 else 1) for i in range(8)]
    return host(host_id, slots, taken=taken)


def nvlink_host(
    host_id: str,
    n: int,
    pairs: Iterable[tuple[int, int]],
    *,
    taken: Iterable[int] = (),
    numa_split: int | None = None,
) -> HostCapacity:
    """`n` GPUs, NVLink only between the given (symmetric) pairs; one NUMA node,
    or indices below `numa_split` on node 0 and the rest on node 1."""
    peers: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in pairs:
        peers[a].add(b)
        peers[b].add(a)
    split = n if numa_split is None else numa_split
    slots = [gpu(host_id, i, numa=0 if i < split else 1, peers=peers[i]) for i in range(n)]
    return host(host_id, slots, taken=taken)


# DGX-1 "hybrid cube-mesh": two fully linked quads (one per NUMA node) plus i <-> i + 4.
DGX1_LINKS = [
    *itertools.combinations(range(4), 2),
    *itertools.combinations(range(4, 8), 2),
    *((i, i + 4) for i in range(4)),
]


def placed(hosts: Sequence[HostCapacity], req: PlacementRequest) -> Placement:
    result = place(hosts, req)
    assert result is not None, f"expected a placement for {req}"
    return result


# -- feasibility -----------------------------------------------------------------------


def test_model_constraint_never_gives_a_gpu_of_another_model() -> None:
    # Lower indices are A100s: a lowest-index choice that ignored the model would take them.
    slots = [gpu("h1", i, A100 if i < 4 else H100) for i in range(8)]
    result = placed([host("h1", slots)], request(2, H100))
    assert result.host_id == "h1"
    assert set(result.gpu_uuids) <= uuids("h1", 4, 5, 6, 7)
    assert len(result.gpu_uuids) == 2


def test_model_constraint_chooses_the_host_with_that_model() -> None:
    # The H100 host is the tighter fit by raw GPU count, but it has no A100.
    hosts = [host("big-a100", 8, model=A100), host("small-h100", 2, model=H100)]
    result = placed(hosts, request(2, A100))
    assert result.host_id == "big-a100"
    result = placed(hosts, request(2, H100))
    assert result == Placement("small-h100", tuple(sorted(uuids("small-h100", 0, 1))))


def test_no_host_with_the_model_gives_none() -> None:
    assert place([host("h1", 8, model=A100)], request(1, H100)) is None


def test_taken_gpus_of_the_model_do_not_count() -> None:
    hosts = [host("h1", 4, model=H100, taken=[0, 1, 2])]
    assert place(hosts, request(2, H100)) is None
    assert placed(hosts, request(1, H100)).gpu_uuids == (uuid_of("h1", 3),)


def test_gpus_of_other_models_do_not_make_up_the_count() -> None:
    slots = [gpu("h1", 0, H100), gpu("h1", 1, A100), gpu("h1", 2, A100), gpu("h1", 3, A100)]
    assert place([host("h1", slots)], request(2, H100)) is None


def test_count_is_never_split_across_hosts() -> None:
    hosts = [host("a", 3), host("b", 3)]
    assert place(hosts, request(4)) is None


def test_count_lands_on_the_one_host_that_has_enough() -> None:
    hosts = [host("a", 3), host("b", 4), host("c", 3)]
    result = placed(hosts, request(4))
    assert result.host_id == "b"
    assert set(result.gpu_uuids) == uuids("b", 0, 1, 2, 3)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 8])
def test_exactly_k_distinct_gpus_from_the_chosen_host(k: int) -> None:
    result = placed([host("h1", 8)], request(k))
    assert len(result.gpu_uuids) == k
    assert len(set(result.gpu_uuids)) == k
    assert set(result.gpu_uuids) <= uuids("h1", *range(8))


def test_host_with_enough_gpus_but_too_little_cpu_is_not_chosen() -> None:
    hosts = [host("tight", 2, cpus=4.0), host("roomy", 8, cpus=64.0)]
    result = placed(hosts, request(2, cpus=8.0))
    assert result.host_id == "roomy"


def test_host_with_enough_gpus_but_too_little_memory_is_not_chosen() -> None:
    hosts = [host("tight", 2, memory_gb=16.0), host("roomy", 8, memory_gb=512.0)]
    result = placed(hosts, request(2, memory_gb=32.0))
    assert result.host_id == "roomy"


@pytest.mark.parametrize(
    ("cpus", "memory_gb"), [(9.0, 64.0), (8.5, 32.5), (16.5, 1.0), (1.0, 64.5)]
)
def test_no_host_with_enough_cpu_and_memory_gives_none(cpus: float, memory_gb: float) -> None:
    hosts = [host("a", 8, cpus=8.0, memory_gb=64.0), host("b", 8, cpus=16.0, memory_gb=32.0)]
    assert place(hosts, request(1, cpus=cpus, memory_gb=memory_gb)) is None


def test_cpu_and_memory_may_be_used_up_exactly() -> None:
    hosts = [host("a", 1, cpus=8.0, memory_gb=32.0)]
    assert placed(hosts, request(1, cpus=8.0, memory_gb=32.0)).host_id == "a"


def test_no_gpu_request_without_model_fits_a_host_without_gpus() -> None:
    hosts = [host("cpu-only", 0, cpus=16.0), host("short", 4, cpus=1.0)]
    assert placed(hosts, request(0, None, cpus=8.0)) == Placement("cpu-only", ())


def test_no_gpu_request_without_model_still_respects_cpu_and_memory() -> None:
    hosts = [host("a", 0, cpus=4.0, memory_gb=512.0), host("b", 0, cpus=64.0, memory_gb=8.0)]
    assert place(hosts, request(0, None, cpus=8.0, memory_gb=16.0)) is None
    assert placed(hosts, request(0, None, cpus=8.0, memory_gb=8.0)).host_id == "b"
    assert placed(hosts, request(0, None, cpus=4.0, memory_gb=16.0)).host_id == "a"


def test_no_gpu_request_with_model_goes_only_to_a_host_that_has_that_model() -> None:
    # "h100-busy" has H100s installed but none free; it still counts as having the model.
    hosts = [
        host("cpu-only", 0, cpus=128.0),
        host("a100", 8, model=A100, cpus=128.0),
        host("h100-busy", 4, model=H100, taken=range(4), cpus=16.0),
    ]
    assert placed(hosts, request(0, H100, cpus=8.0)) == Placement("h100-busy", ())


def test_no_gpu_request_with_model_no_host_has_it_gives_none() -> None:
    hosts = [host("cpu-only", 0), host("a100", 8, model=A100)]
    assert place(hosts, request(0, H100)) is None


def test_no_gpu_request_with_model_host_without_cpu_gives_none() -> None:
    hosts = [host("h100", 4, model=H100, cpus=2.0), host("a100", 8, model=A100, cpus=64.0)]
    assert place(hosts, request(0, H100, cpus=4.0)) is None


def test_required_host_is_used_even_if_another_fits_better() -> None:
    hosts = [host("tight", 2), host("loose", 8)]
    result = placed(hosts, request(2, required_host="loose"))
    assert result.host_id == "loose"


def test_required_host_that_cannot_fit_gives_none() -> None:
    hosts = [host("full", 4, taken=[0, 1, 2]), host("free", 8)]
    assert place(hosts, request(2, required_host="full")) is None
    hosts = [host("poor", 8, cpus=1.0), host("free", 8)]
    assert place(hosts, request(2, cpus=2.0, required_host="poor")) is None


def test_unknown_required_host_gives_none() -> None:
    assert place([host("a", 8)], request(1, required_host="nope")) is None
    assert place([host("a", 8)], request(0, None, required_host="nope")) is None


def test_required_host_in_no_gpu_mode() -> None:
    hosts = [host("a", 0), host("b", 4), host("c", 0)]
    assert placed(hosts, request(0, None, required_host="b")) == Placement("b", ())


def test_allowed_hosts_exclude_a_better_fit() -> None:
    hosts = [host("tight", 2), host("loose", 8), host("looser", 8, cpus=128.0)]
    assert placed(hosts, request(2)).host_id == "tight"
    assert placed(hosts, request(2, allowed_hosts={"loose", "looser"})).host_id == "loose"
    assert placed(hosts, request(0, None, allowed_hosts={"looser"})).host_id == "looser"


def test_allowed_hosts_that_cannot_fit_give_none() -> None:
    hosts = [host("small", 2), host("big", 8)]
    assert place(hosts, request(4, allowed_hosts={"small"})) is None
    assert place(hosts, request(1, allowed_hosts=set())) is None
    assert place(hosts, request(0, None, allowed_hosts=set())) is None
    assert place(hosts, request(1, allowed_hosts={"elsewhere"})) is None


def test_allowed_hosts_and_required_host_must_agree() -> None:
    hosts = [host("a", 8), host("b", 8)]
    assert place(hosts, request(1, required_host="a", allowed_hosts={"b"})) is None
    assert placed(hosts, request(1, required_host="b", allowed_hosts={"a", "b"})).host_id == "b"


def test_empty_fleet_gives_none() -> None:
    assert place([], request(1)) is None
    assert place([], request(0, None)) is None


# -- stickiness ------------------------------------------------------------------------


def test_free_preferred_gpus_are_kept_exactly() -> None:
    # Best fit alone would pick "tight" (2 free) and the lowest indices on "big".
    hosts = [host("tight", 2), host("big", 8)]
    preferred = uuids("big", 5, 7)
    result = placed(hosts, request(2, preferred_gpus=preferred))
    assert result.host_id == "big"
    assert set(result.gpu_uuids) == preferred
    assert len(result.gpu_uuids) == 2


def test_preferred_gpus_partly_taken_give_another_placement() -> None:
    hosts = [host("tight", 2), host("big", 8, taken=[7])]
    preferred = uuids("big", 5, 7)
    result = placed(hosts, request(2, preferred_gpus=preferred))
    assert set(result.gpu_uuids) != preferred
    assert uuid_of("big", 7) not in result.gpu_uuids
    assert result == Placement("tight", tuple(sorted(uuids("tight", 0, 1))))


def test_preferred_gpus_on_a_host_without_enough_cpu_are_not_kept() -> None:
    hosts = [host("old", 8, cpus=2.0), host("new", 8, cpus=64.0)]
    result = placed(hosts, request(2, cpus=4.0, preferred_gpus=uuids("old", 0, 1)))
    assert result.host_id == "new"


def test_preferred_gpus_give_way_to_required_host() -> None:
    hosts = [host("old", 8), host("new", 8)]
    req = request(2, preferred_gpus=uuids("old", 0, 1), required_host="new")
    assert placed(hosts, req).host_id == "new"


def test_preferred_gpus_on_a_host_not_allowed_are_not_kept() -> None:
    hosts = [host("old", 8), host("new", 8)]
    req = request(2, preferred_gpus=uuids("old", 0, 1), allowed_hosts={"new"})
    assert placed(hosts, req).host_id == "new"


def test_preferred_host_not_allowed_is_left_in_no_gpu_mode() -> None:
    hosts = [host("home", 8), host("other", 8)]
    req = request(0, None, preferred_host="home", allowed_hosts={"other"})
    assert placed(hosts, req).host_id == "other"


def test_preferred_gpus_of_another_model_are_not_kept() -> None:
    slots = [gpu("h1", i, A100 if i < 4 else H100) for i in range(8)]
    hosts = [host("h1", slots)]
    result = placed(hosts, request(2, H100, preferred_gpus=uuids("h1", 0, 1)))
    assert set(result.gpu_uuids) <= uuids("h1", 4, 5, 6, 7)


@pytest.mark.parametrize(("gpu_count", "preferred"), [(4, (0, 1)), (1, (0, 1)), (0, (0,))])
def test_preferred_gpus_of_another_count_never_change_the_count(
    gpu_count: int, preferred: tuple[int, ...]
) -> None:
    # The instance was resized since it last held GPUs: the count asked for wins.
    hosts = [host("h1", 8)]
    model = A100 if gpu_count else None
    req = request(gpu_count, model, preferred_gpus=uuids("h1", *preferred), preferred_host="h1")
    result = placed(hosts, req)
    assert len(result.gpu_uuids) == gpu_count


def test_preferred_host_is_kept_in_no_gpu_mode() -> None:
    # Best fit alone would send a no-GPU request to "busy" (fewest free GPUs).
    hosts = [host("busy", 4, taken=range(4)), host("home", 8)]
    assert placed(hosts, request(0, None)).host_id == "busy"
    assert placed(hosts, request(0, None, preferred_host="home")) == Placement("home", ())


def test_preferred_host_with_model_constraint_in_no_gpu_mode() -> None:
    hosts = [host("busy", 4, model=H100, taken=range(4)), host("home", 8, model=H100)]
    req = request(0, H100, preferred_host="home")
    assert placed(hosts, req) == Placement("home", ())


def test_preferred_host_without_room_is_left_in_no_gpu_mode() -> None:
    hosts = [host("home", 8, cpus=2.0), host("other", 8, cpus=64.0)]
    assert placed(hosts, request(0, None, cpus=4.0, preferred_host="home")).host_id == "other"


def test_preferred_host_without_the_model_is_left_in_no_gpu_mode() -> None:
    hosts = [host("home", 8, model=A100), host("other", 8, model=H100)]
    assert placed(hosts, request(0, H100, preferred_host="home")).host_id == "other"


def test_unknown_preferred_host_falls_back_to_best_fit() -> None:
    hosts = [host("big", 8), host("busy", 4, taken=range(3))]
    assert placed(hosts, request(0, None, preferred_host="gone")).host_id == "busy"


# -- best fit --------------------------------------------------------------------------


@pytest.mark.parametrize("order", [("eight", "two"), ("two", "eight")])
def test_best_fit_prefers_the_host_with_fewest_gpus_left(order: tuple[str, str]) -> None:
    by_id = {"eight": host("eight", 8), "two": host("two", 2)}
    result = placed([by_id[h] for h in order], request(2))
    assert result.host_id == "two"
    assert set(result.gpu_uuids) == uuids("two", 0, 1)


def test_best_fit_counts_only_gpus_of_the_requested_model() -> None:
    # "mixed" has 8 free GPUs but only 2 A100s: it is the tighter fit for 2 × A100.
    mixed = [gpu("mixed", i, A100 if i < 2 else H100) for i in range(8)]
    hosts = [host("four", 4), host("mixed", mixed)]
    assert placed(hosts, request(2, A100)).host_id == "mixed"


def test_best_fit_then_least_spare_cpu() -> None:
    hosts = [host("a", 4, cpus=64.0), host("b", 4, cpus=16.0), host("c", 4, cpus=32.0)]
    assert placed(hosts, request(2, cpus=8.0)).host_id == "b"


@pytest.mark.parametrize("order", list(itertools.permutations(["h3", "h1", "h2"])))
def test_ties_are_broken_by_host_id_whatever_the_input_order(order: tuple[str, ...]) -> None:
    hosts = [host(h, 4, cpus=32.0) for h in order]
    assert placed(hosts, request(2)) == placed(hosts[::-1], request(2))
    assert placed(hosts, request(2)).host_id == "h1"
    assert placed(hosts, request(0, None)).host_id == "h1"


def test_no_gpu_request_goes_where_the_fewest_gpus_are_free() -> None:
    hosts = [host("all-free", 8), host("cpu-only", 0), host("some-free", 8, taken=range(6))]
    assert placed(hosts, request(0, None)).host_id == "cpu-only"
    assert placed(hosts[::2], request(0, None)).host_id == "some-free"


def test_gpu_choice_does_not_depend_on_the_order_of_free_gpus() -> None:
    slots = [gpu("h1", i, numa=i % 2) for i in range(8)]
    forward = host("h1", slots, taken=[3])
    backward = replace(forward, free_gpus=tuple(reversed(forward.free_gpus)))
    for k in range(1, 8):
        assert place([forward], request(k)) == place([backward], request(k))


# -- topology --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taken", "expected_node"),
    [((1,), 1), ((2,), 1), ((0, 3), 1), ((5,), 0), ((4, 7), 0), ((6,), 0)],
)
def test_four_gpus_land_on_one_numa_node_when_one_has_four_free(
    taken: tuple[int, ...], expected_node: int
) -> None:
    h = numa_split_host("h1", taken=taken)
    result = placed([h], request(4))
    expected = range(4) if expected_node == 0 else range(4, 8)
    assert set(result.gpu_uuids) == uuids("h1", *expected)


def test_numa_choice_does_not_depend_on_the_order_of_free_gpus() -> None:
    h = numa_split_host("h1", taken=[2])
    shuffled = replace(h, free_gpus=tuple(sorted(h.free_gpus, key=lambda g: (g.index * 5) % 8)))
    assert set(placed([shuffled], request(4)).gpu_uuids) == uuids("h1", 4, 5, 6, 7)


def test_two_gpus_land_on_one_numa_node_when_possible() -> None:
    # Free: 3 (node 0) and 4-7 (node 1); the two lowest free indices straddle the nodes.
    h = numa_split_host("h1", taken=[0, 1, 2])
    result = placed([h], request(2))
    assert set(result.gpu_uuids) <= uuids("h1", 4, 5, 6, 7)


def test_four_gpus_without_a_whole_numa_node_still_get_four() -> None:
    h = numa_split_host("h1", taken=[1, 6])
    result = placed([h], request(4))
    assert len(set(result.gpu_uuids)) == 4
    assert not {uuid_of("h1", 1), uuid_of("h1", 6)} & set(result.gpu_uuids)


@pytest.mark.parametrize(
    ("n", "pairs", "taken"),
    [
        (4, [(2, 3)], ()),
        (8, [(6, 7)], ()),
        (8, [(4, 5), (6, 7)], (4,)),
        (4, [(1, 3)], (2,)),  # adjacent once GPU 2 is taken
        (4, [(0, 2), (1, 3)], ()),  # NVLink bridges across, not between neighbours
        (4, [(1, 3)], ()),
        (8, [(0, 7)], ()),
        (8, [(2, 5)], (0,)),
    ],
)
def test_two_gpus_take_an_nvlink_connected_pair(
    n: int, pairs: list[tuple[int, int]], taken: tuple[int, ...]
) -> None:
    h = nvlink_host("h1", n, pairs, taken=taken)
    result = placed([h], request(2))
    connected = [uuids("h1", a, b) for a, b in pairs if a not in taken and b not in taken]
    assert set(result.gpu_uuids) in connected


@pytest.mark.parametrize(
    ("k", "taken", "expected"),
    [
        (4, (), [(0, 1, 2, 3), (4, 5, 6, 7)]),
        (4, (2,), [(4, 5, 6, 7)]),
        (4, (5, 6), [(0, 1, 2, 3)]),
        (3, (0, 5), [(1, 2, 3), (4, 6, 7)]),
        (2, (0, 1, 2, 4, 5, 6), [(3, 7)]),  # the only free pair, across NUMA, is NVLinked
    ],
)
def test_dgx1_topology_keeps_groups_fully_linked(
    k: int, taken: tuple[int, ...], expected: list[tuple[int, ...]]
) -> None:
    h = nvlink_host("dgx", 8, DGX1_LINKS, taken=taken, numa_split=4)
    result = placed([h], request(k))
    assert set(result.gpu_uuids) in [uuids("dgx", *group) for group in expected]


def test_nvlink_pair_beats_a_same_numa_pair_without_nvlink() -> None:
    # Free: 0, 1 (node 0, no link) and 2 (node 0), 5 (node 1) linked across nodes.
    h = nvlink_host("h1", 8, [(2, 5)], taken=(3, 4, 6, 7), numa_split=4)
    assert set(placed([h], request(2)).gpu_uuids) == uuids("h1", 2, 5)


# -- property tests --------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    hosts: tuple[HostCapacity, ...]
    installed: dict[str, tuple[GpuSlot, ...]]  # every GPU of a host, free or taken
    models: tuple[str, ...]

    @property
    def host_ids(self) -> tuple[str, ...]:
        return tuple(h.host_id for h in self.hosts)


def digits(value: int, base: int, n: int) -> list[int]:
    """`value` as `n` digits in `base`, least significant first: one integer
    draw shrinks to all zeros and is much cheaper than `n` draws."""
    out = []
    for _ in range(n):
        value, digit = divmod(value, base)
        out.append(digit)
    return out


def shuffle(items: Sequence[T], order: Sequence[int]) -> list[T]:
    """`items` in the order given by a permutation of range(MAX_GPUS)."""
    return [items[i] for i in order if i < len(items)]


MAX_GPUS = 8
MAX_PAIRS = MAX_GPUS * (MAX_GPUS - 1) // 2
# Built once: fresh strategy objects per draw cost more than the tests themselves.
HOST_SHAPES = st.tuples(
    st.integers(1, MAX_GPUS),  # number of GPUs
    st.integers(1, 2 ** len(MODELS) - 1),  # which of the fleet's models the host has
    st.integers(0, len(MODELS) ** MAX_GPUS - 1),  # the model of each GPU
    st.sampled_from(("unknown", "halves", "random")),  # NUMA layout
    st.integers(0, 2**MAX_GPUS - 1),  # NUMA node of each GPU for "random"
    st.integers(0, 2**MAX_PAIRS - 1),  # which pairs are NVLink peers
    st.integers(0, 2**MAX_GPUS - 1),  # which GPUs are taken
    st.integers(0, 128),  # free CPUs, in halves
    st.integers(0, 64),  # free memory, in 8 GB
)
PERMUTATION = st.permutations(tuple(range(MAX_GPUS)))


def build_host(
    host_id: str,
    shape: tuple[int, int, int, str, int, int, int, int, int],
    models: Sequence[str],
    *,
    nvlink: bool,
) -> tuple[HostCapacity, tuple[GpuSlot, ...]]:
    n, model_mask, model_digits, numa_layout, numa_bits, link_bits, taken_bits, cpus, memory = shape
    host_models = [m for i, m in enumerate(models) if model_mask >> i & 1] or [models[0]]
    gpu_models = digits(model_digits, len(host_models), n)
    random_numa = digits(numa_bits, 2, n)
    peers: dict[int, set[int]] = {i: set() for i in range(n)}
    links = digits(link_bits, 2, MAX_PAIRS) if nvlink else [0] * MAX_PAIRS
    for (a, b), bit in zip(itertools.combinations(range(MAX_GPUS), 2), links, strict=True):
        if bit and b < n:
            peers[a].add(b)
            peers[b].add(a)
    slots: list[GpuSlot] = []
    for i in range(n):
        numa: int | None = None
        if numa_layout == "halves":
            numa = 0 if i < (n + 1) // 2 else 1
        elif numa_layout == "random":
            numa = random_numa[i]
        slots.append(gpu(host_id, i, host_models[gpu_models[i]], numa=numa, peers=peers[i]))
    taken = [i for i, bit in enumerate(digits(taken_bits, 2, n)) if bit]
    capacity = host(host_id, slots, taken=taken, cpus=cpus / 2, memory_gb=float(memory * 8))
    return capacity, tuple(slots)


@st.composite
def fleets(draw: st.DrawFn, *, nvlink: bool = True) -> Fleet:
    models = MODELS[: draw(st.integers(1, len(MODELS)))]
    shapes = draw(st.lists(HOST_SHAPES, min_size=1, max_size=6))
    built = [
        build_host(f"host-{h}", shape, models, nvlink=nvlink) for h, shape in enumerate(shapes)
    ]
    return Fleet(
        tuple(capacity for capacity, _ in built),
        {capacity.host_id: slots for capacity, slots in built},
        models,
    )


@st.composite
def requests(
    draw: st.DrawFn, fleet: Fleet, *, preferences: bool = True, gpu_count: int | None = None
) -> PlacementRequest:
    k = draw(st.integers(0, MAX_GPUS)) if gpu_count is None else gpu_count
    model: str | None
    if k > 0:
        model = draw(st.sampled_from(fleet.models))
    else:
        model = draw(st.sampled_from((None, *fleet.models)))
    known = (*fleet.host_ids, "host-unknown")
    host_choices = (None, *known)
    preferred: frozenset[str] = frozenset()
    preferred_host: str | None = None
    required_host: str | None = None
    allowed_hosts: frozenset[str] | None = None
    if preferences:
        if k > 0 and draw(st.booleans()):
            # The GPUs the instance held before: k GPUs of one host, free now or not.
            home = fleet.installed[draw(st.sampled_from(fleet.host_ids))]
            if len(home) >= k:
                preferred = frozenset(g.uuid for g in shuffle(home, draw(PERMUTATION))[:k])
        preferred_host = draw(st.sampled_from(host_choices))
        if draw(st.booleans()):
            required_host = draw(st.sampled_from(host_choices))
    if draw(st.booleans()):
        # Hosts where the image can run: any subset, unknown ids included.
        mask = draw(st.integers(0, 2 ** len(known) - 1))
        allowed_hosts = frozenset(h for i, h in enumerate(known) if mask >> i & 1)
    return PlacementRequest(
        gpu_model=model,
        gpu_count=k,
        cpus=draw(st.integers(0, 32)) / 2,
        memory_gb=float(draw(st.integers(0, 16)) * 8),
        preferred_gpus=preferred,
        preferred_host=preferred_host,
        required_host=required_host,
        allowed_hosts=allowed_hosts,
    )


def matching(h: HostCapacity, model: str | None) -> list[GpuSlot]:
    return [g for g in h.free_gpus if g.model == model]


def oracle_fits(h: HostCapacity, req: PlacementRequest) -> bool:
    """Brute force: can this one host take the whole request now?"""
    if req.required_host is not None and h.host_id != req.required_host:
        return False
    if req.allowed_hosts is not None and h.host_id not in req.allowed_hosts:
        return False
    if h.free_cpus < req.cpus or h.free_memory_gb < req.memory_gb:
        return False
    if req.gpu_count == 0:
        return req.gpu_model is None or req.gpu_model in h.gpu_models
    return len(matching(h, req.gpu_model)) >= req.gpu_count


def check_placement(
    hosts: Sequence[HostCapacity], req: PlacementRequest, result: Placement | None
) -> None:
    feasible = [h for h in hosts if oracle_fits(h, req)]
    if result is None:
        assert not feasible, f"None although {[h.host_id for h in feasible]} could take {req}"
        return
    chosen = {h.host_id: h for h in hosts}.get(result.host_id)
    assert chosen is not None, f"placed on unknown host {result.host_id}"
    assert oracle_fits(chosen, req), f"{result.host_id} cannot take {req}"
    assert len(result.gpu_uuids) == req.gpu_count
    assert len(set(result.gpu_uuids)) == len(result.gpu_uuids), "a GPU given twice"
    free = {g.uuid: g for g in chosen.free_gpus}
    for uuid in result.gpu_uuids:
        assert uuid in free, f"{uuid} is not free on {chosen.host_id}"
        assert free[uuid].model == req.gpu_model, f"{uuid} is a {free[uuid].model}"


def apply(
    hosts: Sequence[HostCapacity], req: PlacementRequest, result: Placement
) -> list[HostCapacity]:
    taken = set(result.gpu_uuids)
    return [
        replace(
            h,
            free_cpus=h.free_cpus - req.cpus,
            free_memory_gb=h.free_memory_gb - req.memory_gb,
            free_gpus=tuple(g for g in h.free_gpus if g.uuid not in taken),
        )
        if h.host_id == result.host_id
        else h
        for h in hosts
    ]


@PROPERTY_SETTINGS
@given(st.data())
def test_sequences_of_placements_never_overcommit(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    hosts = list(fleet.hosts)
    given_out: set[str] = set()
    for _ in range(data.draw(st.integers(1, 10))):
        req = data.draw(requests(fleet))
        result = place(hosts, req)
        check_placement(hosts, req, result)
        if result is None:
            continue
        assert given_out.isdisjoint(result.gpu_uuids), "a GPU given out twice"
        given_out.update(result.gpu_uuids)
        hosts = apply(hosts, req, result)
        for h in hosts:
            assert h.free_cpus >= 0
            assert h.free_memory_gb >= 0


@PROPERTY_SETTINGS
@given(st.data())
def test_free_preferred_gpus_are_returned_exactly(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    home = data.draw(st.sampled_from(fleet.hosts))
    models = sorted({g.model for g in home.free_gpus})
    if not models:
        return
    model = data.draw(st.sampled_from(models))
    free = [g.uuid for g in matching(home, model)]
    k = data.draw(st.integers(1, len(free)))
    preferred = frozenset(
        data.draw(st.lists(st.sampled_from(free), min_size=k, max_size=k, unique=True))
    )
    req = PlacementRequest(
        gpu_model=model,
        gpu_count=k,
        cpus=data.draw(st.integers(0, int(home.free_cpus * 2))) / 2,
        memory_gb=float(data.draw(st.integers(0, int(home.free_memory_gb)))),
        preferred_gpus=preferred,
        preferred_host=data.draw(st.one_of(st.none(), st.sampled_from(fleet.host_ids))),
        required_host=data.draw(st.sampled_from([None, home.host_id])),
        allowed_hosts=data.draw(st.sampled_from([None, frozenset(fleet.host_ids)])),
    )
    result = placed(fleet.hosts, req)
    assert result.host_id == home.host_id
    assert len(result.gpu_uuids) == k
    assert set(result.gpu_uuids) == preferred


@PROPERTY_SETTINGS
@given(st.data())
def test_without_preferences_the_tightest_host_is_chosen(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    req = data.draw(requests(fleet, preferences=False))
    result = place(fleet.hosts, req)
    check_placement(fleet.hosts, req, result)
    if result is None:
        return

    def tightness(h: HostCapacity) -> tuple[float, float, str]:
        if req.gpu_count == 0:
            leftover = len(h.free_gpus)
        else:
            leftover = len(matching(h, req.gpu_model)) - req.gpu_count
        return (leftover, h.free_cpus - req.cpus, h.host_id)

    feasible = [h for h in fleet.hosts if oracle_fits(h, req)]
    assert result.host_id == min(feasible, key=tightness).host_id


@NARROW_SETTINGS
@given(st.data())
def test_placement_does_not_depend_on_input_order(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    req = data.draw(requests(fleet))
    shuffled = [
        replace(h, free_gpus=tuple(shuffle(h.free_gpus, data.draw(PERMUTATION))))
        for h in shuffle(fleet.hosts, data.draw(PERMUTATION))
    ]
    assert place(shuffled, req) == place(fleet.hosts, req)


@NARROW_SETTINGS
@given(st.data())
def test_gpus_share_a_numa_node_when_one_node_has_enough(data: st.DataObject) -> None:
    fleet = data.draw(fleets(nvlink=False))
    req = data.draw(requests(fleet, preferences=False))
    result = place(fleet.hosts, req)
    check_placement(fleet.hosts, req, result)
    if result is None or req.gpu_count < 2:
        return
    chosen = next(h for h in fleet.hosts if h.host_id == result.host_id)
    per_node: dict[int | None, int] = {}
    for g in matching(chosen, req.gpu_model):
        per_node[g.numa_node] = per_node.get(g.numa_node, 0) + 1
    if max(per_node.values()) < req.gpu_count:
        return
    nodes = {g.numa_node for g in chosen.free_gpus if g.uuid in result.gpu_uuids}
    assert len(nodes) == 1, f"{result.gpu_uuids} span NUMA nodes {nodes}"


@NARROW_SETTINGS
@given(st.data())
def test_two_gpus_are_an_nvlink_pair_when_the_host_has_one(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    req = data.draw(requests(fleet, preferences=False, gpu_count=2))
    result = place(fleet.hosts, req)
    check_placement(fleet.hosts, req, result)
    if result is None:
        return
    chosen = next(h for h in fleet.hosts if h.host_id == result.host_id)
    free = {g.uuid: g for g in matching(chosen, req.gpu_model)}
    has_pair = any(free[u].nvlink_peers & (free.keys() - {u}) for u in free)
    if not has_pair:
        return
    first, second = result.gpu_uuids
    assert second in free[first].nvlink_peers, (
        f"{result.gpu_uuids} are not NVLink peers though {chosen.host_id} has a free pair"
    )
