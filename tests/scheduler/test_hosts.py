"""The server's adapter (`scheduler.hosts.HostPlacer`): the registry's policies
over `HostCapacity` rows, checked against a ledger of its own."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.scheduler.demand import whole_gpus
from gpudock.scheduler.hosts import HostBuild, HostPlacer
from gpudock.scheduler.names import POLICY_NAMES
from gpudock.scheduler.placement import (
    WHOLE_MILLI,
    GpuSlot,
    HostCapacity,
    Placement,
    PlacementRequest,
    SharedGpu,
)
from gpudock.scheduler.registry import _FACTORIES, make_policy
from gpudock.scheduler.snapshot import NodeSpec, Snapshot

A100, H100, T4 = "A100-80GB", "H100-80GB", "T4"


def build(host_id: str, models: list[str], *, cpus: float = 32.0, memory_gb: float = 64.0,
          nvlink: bool = False, numa_split: bool = False) -> HostBuild:  # fmt: skip
    uuids = [f"{host_id}-g{i}" for i in range(len(models))]
    half = len(models) // 2
    return HostBuild(
        host_id,
        cpus,
        memory_gb,
        tuple(
            GpuSlot(
                uuid,
                model,
                i,
                (0 if i < half else 1) if numa_split else None,
                frozenset(u for u in uuids if u != uuid) if nvlink else frozenset(),
            )
            for i, (uuid, model) in enumerate(zip(uuids, models, strict=True))
        ),
    )


@dataclass
class Ledger:
    """What is held on each host, kept apart from the placer: the truth its
    choices are checked against."""

    builds: dict[str, HostBuild]
    whole: dict[str, str] = field(default_factory=dict)  # GPU -> holder
    shares: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    cpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    memory: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    held: dict[str, tuple[Placement, PlacementRequest]] = field(default_factory=dict)

    def capacity(self) -> list[HostCapacity]:
        hosts = []
        for b in self.builds.values():
            shared = [
                SharedGpu(g, WHOLE_MILLI - sum(self.shares[g.uuid].values()))
                for g in b.gpus
                if self.shares[g.uuid]
            ]
            hosts.append(
                HostCapacity(
                    b.host_id,
                    b.cpus - self.cpu[b.host_id],
                    b.memory_gb - self.memory[b.host_id],
                    tuple(
                        g for g in b.gpus if g.uuid not in self.whole and not self.shares[g.uuid]
                    ),
                    frozenset(g.model for g in b.gpus),
                    tuple(s for s in shared if s.free_milli > 0),
                )
            )
        return hosts

    def take(self, holder: str, placement: Placement, request: PlacementRequest) -> None:
        """Record the placement; fail if it over-allocates anything or breaks a constraint."""
        b = self.builds[placement.host_id]
        by_uuid = {g.uuid: g for g in b.gpus}
        assert set(placement.gpu_uuids) <= set(by_uuid), "GPUs of one host, the chosen one"
        assert len(set(placement.gpu_uuids)) == len(placement.gpu_uuids)
        if request.required_host is not None:
            assert placement.host_id == request.required_host
        if request.allowed_hosts is not None:
            assert placement.host_id in request.allowed_hosts
        for uuid in placement.gpu_uuids:
            assert by_uuid[uuid].model in request.models
            assert uuid not in self.whole, "a GPU held whole is given again"
        if request.share_milli is not None:
            (uuid,) = placement.gpu_uuids
            assert sum(self.shares[uuid].values()) + request.share_milli <= WHOLE_MILLI
            self.shares[uuid][holder] = request.share_milli
        else:
            assert len(placement.gpu_uuids) == request.gpu_count
            for uuid in placement.gpu_uuids:
                assert not self.shares[uuid], "a GPU with shares is given whole"
                self.whole[uuid] = holder
        self.cpu[b.host_id] += request.cpus
        self.memory[b.host_id] += request.memory_gb
        assert self.cpu[b.host_id] <= b.cpus + 1e-9
        assert self.memory[b.host_id] <= b.memory_gb + 1e-9
        self.held[holder] = (placement, request)

    def release(self, holder: str) -> None:
        placement, request = self.held.pop(holder)
        for uuid in placement.gpu_uuids:
            self.whole.pop(uuid, None)
            self.shares[uuid].pop(holder, None)
        self.cpu[placement.host_id] -= request.cpus
        self.memory[placement.host_id] -= request.memory_gb


MODELS = st.sampled_from([A100, H100, T4])


@st.composite
def fleets(draw: st.DrawFn) -> list[HostBuild]:
    count = draw(st.integers(1, 5))
    return [
        build(
            f"h{i}",
            draw(st.lists(MODELS, max_size=8)),
            cpus=draw(st.sampled_from([4.0, 16.0, 48.0])),
            memory_gb=draw(st.sampled_from([8.0, 24.0, 96.0])),
            nvlink=draw(st.booleans()),
        )
        for i in range(count)
    ]


@st.composite
def requests(draw: st.DrawFn, host_ids: list[str]) -> PlacementRequest:
    kind = draw(st.sampled_from(["whole", "share", "cpu"]))
    models = draw(st.frozensets(MODELS, min_size=1, max_size=2))
    first = sorted(models)[0]
    hosts = st.none() | st.frozensets(st.sampled_from(host_ids))
    return PlacementRequest(
        gpu_model=first if kind != "cpu" else None,
        gpu_count={"whole": draw(st.integers(1, 4)), "share": 1, "cpu": 0}[kind],
        cpus=draw(st.sampled_from([0.5, 1.0, 3.0, 8.0])),
        memory_gb=draw(st.sampled_from([1.0, 4.0, 16.0])),
        share_milli=draw(st.integers(1, 999)) if kind == "share" else None,
        other_models=models - {first} if kind != "cpu" else frozenset(),
        allowed_hosts=draw(hosts),
        required_host=draw(st.none() | st.sampled_from(host_ids)),
    )


@settings(max_examples=150, deadline=None)
@given(data=st.data(), fleet=fleets(), policy=st.sampled_from(POLICY_NAMES))
def test_random_request_streams_never_over_allocate(
    data: st.DataObject, fleet: list[HostBuild], policy: str
) -> None:
    """Whatever the policy, requests, releases and re-syncs: no GPU given twice,
    shares never over a card, CPU and memory never over the host, constraints
    kept; and releasing everything leaves the policy's snapshot empty."""
    ledger = Ledger({b.host_id: b for b in fleet})
    placer = HostPlacer(policy, seed=data.draw(st.integers(0, 3)))
    placer.sync(fleet, ledger.capacity())
    host_ids = [b.host_id for b in fleet]
    for step in range(data.draw(st.integers(1, 30))):
        if ledger.held and data.draw(st.booleans()):
            ledger.release(data.draw(st.sampled_from(sorted(ledger.held))))
            placer.sync(fleet, ledger.capacity())  # as the next pass reads the database
            continue
        request = data.draw(requests(host_ids))
        placement = placer.place(
            request, arrival=data.draw(st.booleans()), may_defer=data.draw(st.booleans())
        )
        if placement is not None:
            ledger.take(f"i{step}", placement, request)
            placer.placed(placement, request)
    for holder in list(ledger.held):
        ledger.release(holder)
    placer.sync(fleet, ledger.capacity())
    assert placer.snapshot.is_empty()


def test_the_gpus_of_a_multi_gpu_request_share_nvlink_and_numa() -> None:
    """Eight GPUs on two NUMA nodes, NVLink within each half only: two GPUs come
    from one half, linked, as `placement.place` chose them before."""
    b = build("h0", [A100] * 8, numa_split=True)
    halves = [{g.uuid for g in b.gpus[:4]}, {g.uuid for g in b.gpus[4:]}]
    linked = tuple(
        GpuSlot(g.uuid, g.model, g.index, g.numa_node, frozenset(halves[g.index // 4] - {g.uuid}))
        for g in b.gpus
    )
    b = HostBuild("h0", 64.0, 256.0, linked)
    free = HostCapacity("h0", 64.0, 256.0, linked[1:3] + linked[4:], frozenset({A100}))
    placer = HostPlacer("gpudock")
    placer.sync([b], [free])
    request = PlacementRequest(A100, 2, 2.0, 4.0)
    placement = placer.place(request, arrival=True)
    assert placement is not None
    assert placement.gpu_uuids in {("h0-g1", "h0-g2"), ("h0-g4", "h0-g5")}


def test_an_instance_gets_its_previous_gpus_back_when_they_are_free() -> None:
    fleet = [build("h0", [A100] * 4), build("h1", [A100] * 4)]
    ledger = Ledger({b.host_id: b for b in fleet})
    placer = HostPlacer("gpudock")
    placer.sync(fleet, ledger.capacity())
    request = PlacementRequest(
        A100, 2, 1.0, 1.0, preferred_gpus=frozenset({"h1-g3", "h1-g1"}), preferred_host="h1"
    )
    placement = placer.place(request, arrival=True)
    assert placement == Placement("h1", ("h1-g1", "h1-g3"))


def test_the_minority_model_of_a_mixed_host_is_placed_when_the_policy_sees_none() -> None:
    fleet = [build("h0", [A100, A100, A100, T4])]
    ledger = Ledger({b.host_id: b for b in fleet})
    placer = HostPlacer("gpudock")
    placer.sync(fleet, ledger.capacity())
    assert placer.snapshot.specs[0].gpus == 3  # the policy sees the A100s
    request = PlacementRequest(T4, 1, 1.0, 1.0)
    placement = placer.place(request, arrival=True)
    assert placement is not None and placement.gpu_uuids == ("h0-g3",)
    ledger.take("t4", placement, request)
    placer.placed(placement, request)
    assert placer.place(request, arrival=True) is None  # the only T4 is taken


def test_a_sync_without_change_keeps_the_snapshot_and_touches_no_node() -> None:
    fleet = [build("h0", [A100] * 4), build("h1", [A100] * 4)]
    ledger = Ledger({b.host_id: b for b in fleet})
    placer = HostPlacer("gpudock")
    placer.sync(fleet, ledger.capacity())
    snapshot, clock = placer.snapshot, placer.snapshot.clock
    placer.sync(list(reversed(fleet)), ledger.capacity())
    assert placer.snapshot is snapshot and snapshot.clock == clock
    request = PlacementRequest(A100, 1, 1.0, 1.0)
    placement = placer.place(request, arrival=True)
    assert placement is not None
    ledger.take("one", placement, request)
    placer.placed(placement, request)
    clock = snapshot.clock
    placer.sync(fleet, placer.hosts)  # the rows it holds, reused: nothing to mirror
    assert snapshot.clock == clock
    placer.sync(fleet, ledger.capacity())  # the same state read afresh: nothing moved
    assert snapshot.clock == clock
    grown = [*fleet, build("h2", [A100] * 2)]
    placer.sync(grown, Ledger({b.host_id: b for b in grown}).capacity())
    assert placer.snapshot is not snapshot and placer.snapshot.size == 3


def test_every_policy_chooses_only_among_the_allowed_nodes() -> None:
    for name in POLICY_NAMES:
        snapshot = Snapshot([NodeSpec(f"n{i}", A100, 4, 32_000, 65_536) for i in range(3)])
        policy = make_policy(name, snapshot)
        demand = whole_gpus(1, None, cpu_milli=1000, memory_mib=1024)
        only_last = np.array([False, False, True])
        policy.observe(demand)
        choice = policy.choose(demand, allowed=only_last)
        assert choice is not None and choice.node == 2, name
        assert policy.choose(demand, allowed=np.zeros(3, bool)) is None, name


def test_the_names_settings_check_are_the_registry_s_policies() -> None:
    assert tuple(_FACTORIES) == POLICY_NAMES
