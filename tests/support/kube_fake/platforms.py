"""Driving a platform on the fake cluster to a state (tests)."""

from __future__ import annotations

from gpudock.db.models import HostModel, InstanceModel, InstanceStatus
from gpudock.platform import Platform
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
