"""A disabled user: keys refused at the gateway, instance stopped with its data kept
(real containers and volumes), and everything back but the instance on enable."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpudock.db.models import GpuAllocationModel, InstanceModel, InstanceStatus, SshSessionModel
from gpudock.services.accounts import states as user_states
from gpudock.services.accounts import tokens, users
from gpudock.services.accounts.states import AccountDisabled
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from tests.support.key_proof import add_with_proof
from tests.support.sshgw import World, make_key, wait_for

pytestmark = pytest.mark.docker
DENIED = b"Permission denied (publickey)"


def _refusals(world: World, text: str) -> list[SshSessionModel]:
    with world.platform.ctx.sessions() as session:
        rows = session.scalars(select(SshSessionModel).where(SshSessionModel.outcome == "refused"))
        return [r for r in rows if text in r.reason]


def test_disabling_a_user_refuses_their_key_and_stops_their_instance_keeping_data(
    world: World,
) -> None:
    ctx, admin = world.platform.ctx, world.users["admin"]
    carol = users.create_user(ctx, "carol")
    key = make_key(world.tmp, "carol")
    world.keys["carol"] = key
    add_with_proof(ctx, carol.user, key)
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="thesis")
    instance = instances.create_instance(ctx, carol.user, request)
    world.drain_until(instance.id, InstanceStatus.RUNNING)
    wrote = world.ssh("thesis", "echo kept > /root/data/kept.txt", key="carol")
    assert wrote.returncode == 0, wrote.stderr

    change = user_states.disable_user(ctx, admin, "carol", "end of term")
    assert change.instances == [instance.id]
    refused = world.ssh("thesis", "true", key="carol")
    assert refused.returncode == 255 and DENIED in refused.stderr
    wait_for(lambda: _refusals(world, "carol, whose account is disabled"), "the audited refusal")
    with pytest.raises(AccountDisabled):
        tokens.authenticate(ctx, carol.token)

    world.drain_until(instance.id, InstanceStatus.STOPPED)
    with ctx.sessions() as session:
        stopped = session.get(InstanceModel, instance.id)
        assert stopped is not None and stopped.container_id and stopped.data_volume
        held = session.scalars(
            select(GpuAllocationModel).where(GpuAllocationModel.instance_id == instance.id)
        ).all()
    assert held == []
    assert world.engine.containers.get(stopped.container_id).status == "exited"
    assert world.engine.volumes.get(stopped.data_volume).name == stopped.data_volume

    user_states.enable_user(ctx, admin, "carol")
    assert tokens.authenticate(ctx, carol.token).user.name == "carol"
    still = world.ssh("thesis", "true", key="carol", timeout=20)
    assert still.returncode == 1 and b"is stopped" in still.stderr  # in again, not started
    instances.start_instance(ctx, carol.user, instance.id)
    world.drain_until(instance.id, InstanceStatus.RUNNING)
    again = world.ssh("thesis", "cat /root/data/kept.txt", key="carol")
    assert again.returncode == 0, again.stderr
    assert again.stdout == b"kept\n"
