"""Driving a platform on the fake cluster to a state (tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudock.db.models import HostModel, InstanceModel, InstanceStatus, UserModel
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from tests.support.kube_fake.cluster import TEST_IMAGE
from tests.support.sshgw import wait_for

DEADLINE_S = 90.0  # a pod start is a container start on a loaded machine


def drain_until(platform: Platform, instance_id: str, status: InstanceStatus) -> InstanceModel:
    def reached() -> InstanceModel | None:
        platform.reconciler.drain()
        with platform.ctx.sessions() as session:
            found = session.get(InstanceModel, instance_id)
            assert found is None or found.status != InstanceStatus.FAILED, found.status_reason
            return found if found is not None and found.status == status else None

    return wait_for(reached, f"instance {instance_id} to be {status.value}", DEADLINE_S)


def running_on(platform: Platform, instance_id: str, node: str) -> InstanceModel | None:
    """The instance, once it runs on `node` (after draining the reconciler)."""
    platform.reconciler.drain()
    with platform.ctx.sessions() as session:
        row = session.get(InstanceModel, instance_id)
        assert row is not None and row.status != InstanceStatus.FAILED, row.status_reason
        if row.status != InstanceStatus.RUNNING or row.host_id is None:
            return None
        host = session.get(HostModel, row.host_id)
        return row if host is not None and host.name == node else None


@dataclass(frozen=True)
class Running:
    """An instance running on the fake cluster: its row and its pod's coordinates."""

    row: InstanceModel
    user: UserModel
    namespace: str
    pod: str


def run_instance(platform: Platform, user_name: str, name: str, **request: Any) -> Running:
    """A new user's instance (one A100-80GB of the test image unless `request`
    says otherwise), driven until it runs."""
    ctx = platform.ctx
    user = users.create_user(ctx, user_name).user
    wanted = {"gpu_model": "A100-80GB", "gpu_count": 1, "image": TEST_IMAGE, **request}
    created = instances.create_instance(ctx, user, InstanceRequest(name=name, **wanted))
    row = drain_until(platform, created.id, InstanceStatus.RUNNING)
    namespace = f"gpudock-{ctx.cluster_id}-u-{user.id}"
    return Running(row, user, namespace, containers.container_name(ctx.cluster_id, created.id))
