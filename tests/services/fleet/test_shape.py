"""The server's copy of the fleet's shape: reused while nothing changes, reread
after any write to hosts or GPUs — made here, by another server on the same
database or by plain SQL — and the capacity built on it is the one read whole."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select, update

from gpudock.db.models import GpuDeviceModel, GpuState, HostModel
from gpudock.gpu.simulated import SimulatedGpuSource
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import inventory
from gpudock.services.fleet.gpu_health import switch_gpu_state
from gpudock.services.fleet.shape import FleetShape, FleetShapeCache, fleet_shape
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from tests.support.platforms import PlatformFactory


def _read(ctx: ServiceContext) -> FleetShape:
    with ctx.reader() as session:
        return fleet_shape(ctx, session)


def _loads(ctx: ServiceContext) -> int:
    return ctx.memo.get(FleetShapeCache).loads


def _assert_capacity_matches_a_whole_read(ctx: ServiceContext) -> None:
    with ctx.reader() as session:
        assert inventory.current_capacity(ctx, session) == inventory.capacity_snapshot(session)


def test_the_shape_is_read_once_while_nothing_changes(platform: Platform) -> None:
    ctx = platform.ctx
    first = _read(ctx)
    loads = _loads(ctx)
    assert _read(ctx) is first and _read(ctx) is first
    assert _loads(ctx) == loads
    alice = users.create_user(ctx, "alice").user
    instances.create_instance(ctx, alice, InstanceRequest(gpu_model="A100-80GB", gpu_count=2))
    platform.reconciler.drain()  # allocations and instances change: the shape does not
    assert _read(ctx) is first
    _assert_capacity_matches_a_whole_read(ctx)
    with ctx.reader() as session:
        free = {h.host_id: len(h.free_gpus) for h in inventory.current_capacity(ctx, session)}
    assert sorted(free.values()) == [2, 2]  # the 4-GPU host lost two to the instance


def test_a_gpu_health_change_is_seen_at_the_next_read(platform: Platform) -> None:
    ctx = platform.ctx
    before = _read(ctx)
    with ctx.sessions.begin() as session:
        gpu = session.scalars(select(GpuDeviceModel).order_by(GpuDeviceModel.id)).first()
        assert gpu is not None
        switch_gpu_state(session, gpu, GpuState.DRAINING, "test", ctx.clock())
        drained = gpu.id
    after = _read(ctx)
    assert after is not before and after.generation != before.generation
    states = {g.slot.uuid: g.state for h in after.hosts for g in h.gpus}
    assert states[drained] == GpuState.DRAINING
    _assert_capacity_matches_a_whole_read(ctx)
    with ctx.reader() as session:
        free = {g.uuid for h in inventory.current_capacity(ctx, session) for g in h.free_gpus}
    assert drained not in free


def test_plain_sql_and_another_server_move_the_generation(
    platform_factory: PlatformFactory, database_url: str | None, tmp_path: Path
) -> None:
    first = platform_factory(database_url=database_url)
    shared_url = database_url or f"sqlite:///{tmp_path / 'data0' / 'gpudock.db'}"
    second = platform_factory(database_url=shared_url)
    ctx = first.ctx
    before = _read(ctx)
    with second.ctx.sessions.begin() as session:  # another server's write
        session.execute(update(HostModel).values(driver_version="525.60.13"))
    after = _read(ctx)
    assert after.generation != before.generation
    assert {h.driver_version for h in after.hosts} == {"525.60.13"}

    grown = SimulatedGpuSource("1x4xA100-80GB,1x2xRTX4090-24GB,1x8xH100-80GB").discover()
    inventory.sync_inventory(second.ctx, grown)  # the other server finds a new host
    shape = _read(ctx)
    assert len(shape.hosts) == 3 and "H100-80GB" in shape.models
    _assert_capacity_matches_a_whole_read(ctx)

    loads = _loads(ctx)
    inventory.sync_inventory(second.ctx, grown)  # the same inventory again: nothing written
    assert _read(ctx) is shape and _loads(ctx) == loads


def test_an_instance_on_a_host_gone_from_the_fleet_still_names_it(platform: Platform) -> None:
    ctx = platform.ctx
    ada = users.create_user(ctx, "ada").user
    made = instances.create_instance(
        ctx, ada, InstanceRequest(gpu_model="RTX4090-24GB", gpu_count=1)
    )
    platform.reconciler.drain()
    placed = instances.view(ctx, instances.get_instance(ctx, ada, made.id))
    assert placed.host_name is not None
    inventory.sync_inventory(ctx, SimulatedGpuSource("1x4xA100-80GB").discover())
    assert placed.host_name not in {h.name for h in _read(ctx).hosts}
    assert instances.show_view(ctx, ada, made.id).host_name == placed.host_name


def test_the_shape_is_read_at_start_up_not_by_the_first_request(platform: Platform) -> None:
    ctx = platform.ctx
    assert _loads(ctx) == 1  # open_platform read it
    _read(ctx)
    assert _loads(ctx) == 1
