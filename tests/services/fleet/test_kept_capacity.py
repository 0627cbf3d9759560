"""What the placement pass keeps between passes: values derived once per fleet
shape, and the capacity rows of hosts whose inputs did not move, reused as the
very same objects; every snapshot still equals a whole read."""

from __future__ import annotations

from sqlalchemy import select, update

from gpudock.db.models import GpuDeviceModel, GpuState, HostModel
from gpudock.platform import Platform
from gpudock.scheduler.placement import HostCapacity
from gpudock.services.accounts import users
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import inventory
from gpudock.services.fleet.gpu_health import switch_gpu_state
from gpudock.services.fleet.shape import FleetShape, fleet_shape
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest


def _shape(ctx: ServiceContext) -> FleetShape:
    with ctx.reader() as session:
        return fleet_shape(ctx, session)


def _kept_and_whole(
    ctx: ServiceContext, kept: inventory.KeptCapacity
) -> tuple[dict[str, HostCapacity], dict[str, HostCapacity]]:
    with ctx.reader() as session:
        shape = fleet_shape(ctx, session)
        reused = inventory.capacity_snapshot(session, shape, kept)
        whole = inventory.capacity_snapshot(session)
    return {h.host_id: h for h in reused}, {h.host_id: h for h in whole}


def test_a_derived_value_is_computed_once_per_shape_and_afresh_after_a_change(
    platform: Platform,
) -> None:
    ctx = platform.ctx
    computed: list[FleetShape] = []

    def count_hosts(shape: FleetShape) -> int:
        computed.append(shape)
        return len(shape.hosts)

    first = _shape(ctx)
    assert first.derived("hosts", count_hosts) == first.derived("hosts", count_hosts) == 2
    assert computed == [first]
    host_id = first.hosts[0].id
    with ctx.sessions.begin() as session:
        session.execute(update(HostModel).where(HostModel.id == host_id).values(name="renamed"))
    second = _shape(ctx)
    assert second is not first and second.host_names[host_id] == "renamed"
    assert first.host_names[host_id] != "renamed"  # the old shape keeps its own
    assert second.derived("hosts", count_hosts) == 2 and computed == [first, second]


def test_unchanged_hosts_keep_their_rows_and_changed_ones_are_read_anew(
    platform: Platform,
) -> None:
    ctx = platform.ctx
    kept = inventory.KeptCapacity()
    first, whole = _kept_and_whole(ctx, kept)
    assert first == whole
    again, _ = _kept_and_whole(ctx, kept)
    assert all(again[host] is first[host] for host in first)

    alice = users.create_user(ctx, "alice").user
    made = instances.create_instance(
        ctx, alice, InstanceRequest(gpu_model="RTX4090-24GB", gpu_count=1)
    )
    platform.reconciler.drain()
    placed_on = instances.get_instance(ctx, alice, made.id).host_id
    after, whole = _kept_and_whole(ctx, kept)
    assert after == whole
    assert after[placed_on] is not again[placed_on]
    assert len(after[placed_on].free_gpus) == len(again[placed_on].free_gpus) - 1
    assert all(after[host] is again[host] for host in after if host != placed_on)

    with ctx.sessions.begin() as session:  # a health change moves the generation
        gpu = session.scalars(
            select(GpuDeviceModel).where(GpuDeviceModel.host_id != placed_on)
        ).first()
        assert gpu is not None
        switch_gpu_state(session, gpu, GpuState.DRAINING, "test", ctx.clock())
    drained, whole = _kept_and_whole(ctx, kept)
    assert drained == whole
    assert all(drained[host] is not after[host] for host in drained)
    assert gpu.id not in {g.uuid for g in drained[gpu.host_id].free_gpus}
