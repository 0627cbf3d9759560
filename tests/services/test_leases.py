"""Leases owned by a process: a server restarted clears what its previous run
left, and never a live lease of another server on the same database."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import select

from gpudock.db.models import InstanceModel
from gpudock.platform import server_id
from gpudock.services import leases
from gpudock.services.accounts import users
from gpudock.services.context import ServiceContext
from gpudock.services.instances.actions import InstanceRequest, create_instance
from tests.support.clocks import FakeClock
from tests.support.platforms import PlatformFactory


def _tokens(ctx: ServiceContext) -> dict[str, str | None]:
    with ctx.sessions() as session:
        return dict(session.execute(select(InstanceModel.id, InstanceModel.lock_token)).all())


def _instances(ctx: ServiceContext, count: int) -> list[str]:
    user = users.create_user(ctx, "frank").user
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1)
    return [create_instance(ctx, user, request).id for _ in range(count)]


def test_a_lease_names_its_owner_and_another_owner_cannot_take_it(
    platform_factory: PlatformFactory,
) -> None:
    ctx = platform_factory().ctx
    [instance_id] = _instances(ctx, 1)
    token = leases.try_lease(ctx, instance_id)
    assert token is not None and token.startswith(ctx.lease_owner + ".")
    other = replace(ctx, lease_owner="0123456789ab")
    assert leases.try_lease(other, instance_id) is None


def test_startup_clears_its_own_and_expired_leases_only(
    platform_factory: PlatformFactory,
) -> None:
    clock = FakeClock()
    ctx = replace(platform_factory().ctx, clock=clock)
    mine, theirs_live, theirs_dead = _instances(ctx, 3)
    other = replace(ctx, lease_owner="0123456789ab")
    assert leases.try_lease(ctx, mine) is not None
    assert leases.try_lease(other, theirs_dead) is not None
    clock.advance(ctx.settings.lease_s + 1)  # the other server stopped beating on this one
    live = leases.try_lease(other, theirs_live)
    assert live is not None

    released = leases.release_at_startup(ctx)

    assert released == leases.Released(own=1, expired=1)
    assert _tokens(ctx) == {mine: None, theirs_dead: None, theirs_live: live}


def test_an_expired_lease_of_a_dead_server_is_taken_over(
    platform_factory: PlatformFactory,
) -> None:
    clock = FakeClock()
    ctx = replace(platform_factory().ctx, clock=clock)
    [instance_id] = _instances(ctx, 1)
    dead = replace(ctx, lease_owner="0123456789ab")
    assert leases.try_lease(dead, instance_id) is not None
    clock.advance(ctx.settings.lease_s + 0.5)
    token = leases.try_lease(ctx, instance_id)
    assert token is not None and token.startswith(ctx.lease_owner + ".")


def test_the_server_id_lasts_across_restarts_and_differs_per_data_dir(
    platform_factory: PlatformFactory,
) -> None:
    first, second = platform_factory().ctx, platform_factory().ctx
    assert first.lease_owner != second.lease_owner
    assert server_id(first.settings.data_dir) == first.lease_owner
    (first.settings.data_dir / "server.id").write_text("not an id\n")
    remade = server_id(first.settings.data_dir)
    assert remade != first.lease_owner and server_id(first.settings.data_dir) == remade
