"""The scheduler only considers hosts where the image can run (mixed drivers)."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from gpudock.db.models import HostModel, InstanceModel
from gpudock.errors import InvalidRequest
from gpudock.runtime.fake import FakeRuntime
from gpudock.scheduler.placement import GpuSlot, HostCapacity, PlacementRequest, place
from gpudock.services.accounts import tokens
from gpudock.services.images import catalog as images
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from tests.support.factories import make_tenant
from tests.support.platforms import PlatformFactory

CU128 = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"


def test_place_honours_allowed_hosts() -> None:
    slot = GpuSlot(uuid="g0", model="A100-80GB", index=0)
    hosts = [
        HostCapacity("h1", 8, 64, (slot,), frozenset({"A100-80GB"})),
        HostCapacity("h2", 8, 64, (GpuSlot("g1", "A100-80GB", 0),), frozenset({"A100-80GB"})),
    ]
    request = PlacementRequest("A100-80GB", 1, 1, 1, allowed_hosts=frozenset({"h2"}))
    placement = place(hosts, request)
    assert placement is not None and placement.host_id == "h2"
    none_allowed = PlacementRequest("A100-80GB", 1, 1, 1, allowed_hosts=frozenset())
    assert place(hosts, none_allowed) is None


def test_an_image_lands_only_on_a_host_whose_driver_runs_it(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory(
        runtime=FakeRuntime(images={"gpudock/base:bookworm", CU128}), simulate="3x1xA100-80GB"
    )
    ctx = platform.ctx
    with ctx.sessions.begin() as session:
        newest = session.scalars(select(HostModel).order_by(HostModel.name)).all()[-1]
        session.execute(
            update(HostModel).where(HostModel.id == newest.id).values(driver_version="570.26")
        )
        newest_id = newest.id
    assert images.runnable_hosts(ctx, CU128, "A100-80GB") == {newest_id}
    assert images.runnable_hosts(ctx, "gpudock/base:bookworm", "A100-80GB") is None
    owner = tokens.authenticate(ctx, make_tenant(platform, "erin").token).user
    created = instances.create_instance(
        ctx, owner, InstanceRequest(gpu_model="A100-80GB", gpu_count=1, image=CU128)
    )
    platform.reconciler.drain()
    with ctx.sessions() as session:
        placed = session.get(InstanceModel, created.id)
        assert placed is not None and placed.host_id == newest_id


def test_start_is_refused_when_the_fleet_can_no_longer_run_the_image(
    platform_factory: PlatformFactory,
) -> None:
    cu124 = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    platform = platform_factory(runtime=FakeRuntime(images={"gpudock/base:bookworm", cu124}))
    ctx = platform.ctx
    owner = tokens.authenticate(ctx, make_tenant(platform, "fred").token).user
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, image=cu124, name="job")
    created = instances.create_instance(ctx, owner, request)
    instances.stop_instance(ctx, owner, created.id)
    platform.reconciler.drain()
    with ctx.sessions.begin() as session:  # the hosts were downgraded meanwhile
        session.execute(update(HostModel).values(driver_version="525.60.13"))
    with pytest.raises(InvalidRequest, match=r"CUDA 12\.4 needs NVIDIA driver >= 550\.54\.14"):
        instances.start_instance(ctx, owner, "job")
