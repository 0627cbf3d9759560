"""Shares of one GPU on the fake runtime: two halves on one card, a third waits
for one to stop, each pays half the GPU-hour price; acceptable model sets."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import GpuShareModel, InstanceStatus
from gpudock.errors import InvalidRequest
from gpudock.platform import Platform, open_platform
from gpudock.reconcile import charging
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.billing import balances, statements
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings
from tests.support.billing import price, topup
from tests.support.clocks import FakeClock

FLEET = "1x1xA100-80GB,1x1xH100-80GB"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Platform, FakeRuntime, FakeClock]]:
    clock = FakeClock()
    runtime = FakeRuntime(clock=clock)
    settings = Settings(data_dir=tmp_path / "d", simulate=FLEET, runtime="fake", image_pull="never")
    platform = open_platform(settings, runtime=runtime, clock=clock)
    try:
        yield platform, runtime, clock
    finally:
        platform.close()


def half(name: str, **extra: object) -> InstanceRequest:
    return InstanceRequest(
        gpu_model="A100-80GB", gpu_count=1, name=name, gpu_share=Decimal("0.5"), **extra
    )


def status(platform: Platform, user: object, name: str) -> InstanceStatus:
    return actions.get_instance(platform.ctx, user, name).status  # type: ignore[arg-type]


def test_two_halves_share_a_card_and_a_third_waits(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, runtime, clock = world
    user = users.create_user(platform.ctx, "sam").user
    for name in ("a", "b", "c"):
        actions.create_instance(platform.ctx, user, half(name))
        clock.advance(1)  # the queue is first come, first served
    platform.reconciler.drain()
    assert [status(platform, user, n) for n in "abc"] == [
        InstanceStatus.RUNNING,
        InstanceStatus.RUNNING,
        InstanceStatus.PENDING,
    ]
    c = actions.get_instance(platform.ctx, user, "c")
    assert "a 0.500 share of one A100-80GB" in c.status_reason
    with platform.ctx.sessions() as session:
        shares = session.scalars(select(GpuShareModel)).all()
    assert {s.milli for s in shares} == {500} and len({s.gpu_id for s in shares}) == 1
    containers = [c for c in runtime.containers.values()]
    assert all(c.spec.env["GPUDOCK_GPU_SHARE"] == "0.500" for c in containers)
    assert all(c.spec.env["GPUDOCK_GPU_MEMORY_LIMIT"] == "40960m" for c in containers)
    assert all(c.spec.gpu_uuids == (shares[0].gpu_id,) for c in containers)
    actions.stop_instance(platform.ctx, user, "a")
    platform.reconciler.drain()
    assert status(platform, user, "c") == InstanceStatus.RUNNING
    assert status(platform, user, "a") == InstanceStatus.STOPPED


def test_each_share_pays_its_fraction(world: tuple[Platform, FakeRuntime, FakeClock]) -> None:
    platform, _runtime, clock = world
    user = users.create_user(platform.ctx, "pay").user
    price(platform, "A100-80GB", "3.6")
    topup(platform, user, "100")
    actions.create_instance(platform.ctx, user, half("h"))
    platform.reconciler.drain()
    clock.advance(120)
    charging.charge_pass(platform.ctx)
    lines = statements.ledger_page(platform.ctx, user, None, None, 100, None).lines
    charged = -sum(line.signed_amount for line in lines if line.signed_amount < 0)
    assert charged == 120 * 1_800_000 // 3600  # two minutes of half of 3.6 an hour
    compute = next(line for line in lines if line.posting.kind == "compute")
    assert compute.posting.description == "120 s × 0.5 × A100-80GB at 1.8/h"
    summary = balances.summary(platform.ctx, user)
    assert summary.burn_per_hour == 1_800_000  # half of 3.6 an hour


def test_a_request_names_the_models_it_accepts(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, _runtime, clock = world
    user = users.create_user(platform.ctx, "any").user
    whole = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="w1")
    actions.create_instance(platform.ctx, user, whole)
    clock.advance(1)
    either = InstanceRequest(
        gpu_model="A100-80GB", gpu_count=1, name="w2", gpu_models=("H100-80GB",)
    )
    actions.create_instance(platform.ctx, user, either)
    platform.reconciler.drain()
    second = actions.get_instance(platform.ctx, user, "w2")
    assert second.status == InstanceStatus.RUNNING and second.gpu_model == "H100-80GB"
    assert second.accepted_models == ("H100-80GB", "A100-80GB")  # the one it got first


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (
            InstanceRequest(gpu_model="A100-80GB", gpu_count=2, gpu_share=Decimal("0.5")),
            "gpu_count",
        ),
        (InstanceRequest(gpu_model="A100-80GB", gpu_count=1, gpu_share=Decimal("1")), "gpu_share"),
        (
            InstanceRequest(
                gpu_model="A100-80GB", gpu_count=1, gpu_share=Decimal("0.5"), gpu_memory_gb=10
            ),
            "gpu_share",
        ),
        (InstanceRequest(gpu_model="A100-80GB", gpu_count=1, gpu_memory_gb=80), "gpu_memory_gb"),
        (InstanceRequest(gpu_model="A100-80GB", gpu_count=1, gpu_models=("B9-1GB",)), "gpu_model"),
    ],
)
def test_bad_share_requests_say_what_is_wrong(
    world: tuple[Platform, FakeRuntime, FakeClock], request_: InstanceRequest, field: str
) -> None:
    platform, _runtime, _clock = world
    user = users.create_user(platform.ctx, "bad").user
    with pytest.raises(InvalidRequest) as refused:
        actions.create_instance(platform.ctx, user, request_)
    assert refused.value.field == field


def test_a_memory_share_rounds_up_to_what_it_asked(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, _runtime, _clock = world
    user = users.create_user(platform.ctx, "mem").user
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="m", gpu_memory_gb=20)
    created = actions.create_instance(platform.ctx, user, request)
    assert created.gpu_share_milli == 250  # 20 of the card's 80 GB
