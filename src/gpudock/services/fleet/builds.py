"""The fleet as built, for the placement policies: every present host's CPUs
and memory and every present GPU with its topology.

Made from the server's kept copy of the fleet's shape (`shape.fleet_shape`,
reread only when the fleet's generation moves), so a pass reads nothing for
it; `inventory.capacity_snapshot` says what of it is free now. The placement
pass rebuilds the policy's snapshot only when this changes.
"""

from __future__ import annotations

from gpudock.scheduler.hosts import HostBuild
from gpudock.services.fleet.shape import FleetShape


def host_builds(shape: FleetShape) -> tuple[HostBuild, ...]:
    """The hosts as built, for the placement policies (once per shape)."""
    return shape.derived("host builds", _builds)


def _builds(shape: FleetShape) -> tuple[HostBuild, ...]:
    return tuple(
        HostBuild(
            host.id, float(host.cpus), float(host.memory_gb), tuple(g.slot for g in host.gpus)
        )
        for host in shape.hosts
    )
