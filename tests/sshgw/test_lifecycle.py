"""The endpoint follows the instance: stopped → a clear message, started → back in."""

from __future__ import annotations

import signal
import subprocess

import pytest

from gpudock.db.models import InstanceStatus, SshSessionModel
from gpudock.services.instances import actions as instances
from tests.support.sshgw import World, wait_for

pytestmark = pytest.mark.docker


def test_stopped_instance_says_so_and_the_endpoint_survives_stop_start(world: World) -> None:
    owner = world.users["alice"]
    instance = world.create_instance("alice", "notebook")
    assert world.ssh("notebook", "echo kept > /root/data/kept.txt").returncode == 0

    instances.stop_instance(world.platform.ctx, owner, instance.id)
    world.drain_until(instance.id, InstanceStatus.STOPPED)
    stopped = world.ssh("notebook", "true", timeout=20)
    assert stopped.returncode == 1
    assert stopped.stderr.decode().strip() == (
        "instance notebook is stopped: start it with Start on its page in the console, "
        "or run `gpudock instances start notebook`"
    )
    shell = world.ssh("notebook", options=("-tt",), input=b"", timeout=20)
    assert shell.returncode == 1
    assert b"gpudock instances start notebook" in shell.stdout + shell.stderr

    instances.start_instance(world.platform.ctx, owner, instance.id)
    world.drain_until(instance.id, InstanceStatus.RUNNING)
    again = world.ssh("notebook", "cat /root/data/kept.txt")
    assert again.returncode == 0, again.stderr
    assert again.stdout == b"kept\n"


def test_a_silent_client_is_dropped_by_keepalives(world: World) -> None:
    """The gateway probes every 0.5 s here and gives up after 3 unanswered probes."""
    since = world.platform.ctx.clock()
    admin = world.users["admin"].id
    client = subprocess.Popen(
        world.ssh_argv("-N", world.instance.id + "@127.0.0.1", key="admin"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def mine() -> SshSessionModel | None:
            rows = world.sessions(world.instance.id)
            return next(
                (
                    r
                    for r in rows
                    if r.user_id == admin and r.started_at >= since and r.outcome != "refused"
                ),
                None,
            )

        wait_for(lambda: (row := mine()) is not None and row.outcome == "open", "its open record")
        client.send_signal(signal.SIGSTOP)  # alive but silent, like a laptop gone to sleep
        wait_for(lambda: (row := mine()) is not None and row.outcome == "closed", "the drop")
    finally:
        client.kill()
        client.wait(timeout=10)
