"""The real gateway on 127.0.0.1 (port 0), real containers, the real OpenSSH client.

One platform, gateway and running instance ("train", owned by alice) serve the
whole package: starting a container costs seconds, and every test here either
only reads that instance or works in paths of its own. Tests that change an
instance's state create their own instance."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import docker
import pytest

from gpudock.db.models import InstanceModel, InstanceStatus, SshSessionModel, UserModel
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.sshgw.gateway import SshGateway
from tests.support.key_proof import add_with_proof
from tests.support.ssh_options import SSH_OPTIONS as BASE_SSH_OPTIONS

if TYPE_CHECKING:
    from gpudock.api.app import Sidecar

T = TypeVar("T")
G = TypeVar("G", bound="Sidecar")


FLEET = "1x4xA100-80GB"


DEADLINE_S = 30.0


SSH_OPTIONS = [*BASE_SSH_OPTIONS, "-o", "ConnectTimeout=20"]


class GatewayThread(Generic[G]):
    """A gateway (any sidecar: the SSH gateway, the agent link's) on its own event
    loop in a thread (in production: uvicorn's loop)."""

    def __init__(self, gateway: G, name: str = "ssh-gateway") -> None:
        self.gateway = gateway
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=DEADLINE_S)

    def start(self) -> None:
        self._thread.start()
        self.run(self.gateway.start())

    def stop(self) -> None:
        try:
            self.run(self.gateway.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=DEADLINE_S)
            self.loop.close()


@dataclass
class World:
    platform: Platform
    gateway: GatewayThread[SshGateway]
    keys: dict[str, Path]  # user name → private key path ("stranger": registered to nobody)
    users: dict[str, UserModel]
    instance: InstanceModel  # alice's running "train"
    engine: docker.DockerClient
    tmp: Path

    @property
    def port(self) -> int:
        return self.gateway.gateway.port

    def ssh_argv(self, *args: str, key: str = "alice", options: tuple[str, ...] = ()) -> list[str]:
        """OPTIONS win over the defaults (ssh takes the first value it is given)."""
        key_path = str(self.keys[key])
        return ["ssh", "-p", str(self.port), "-i", key_path, *options, *SSH_OPTIONS, *args]

    def ssh(
        self,
        login: str,
        *command: str,
        key: str = "alice",
        options: tuple[str, ...] = (),
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        timeout: float = DEADLINE_S,
    ) -> subprocess.CompletedProcess[bytes]:
        argv = self.ssh_argv(f"{login}@127.0.0.1", *command, key=key, options=options)
        return subprocess.run(
            argv, input=input, capture_output=True, timeout=timeout, env=env, check=False
        )

    def container_exec(self, instance_id: str, command: str) -> str:
        """Run COMMAND in the instance's container directly (not through the gateway)."""
        with self.platform.ctx.sessions() as session:
            found = session.get(InstanceModel, instance_id)
            assert found is not None and found.container_id
            container_id = found.container_id
        result = self.engine.containers.get(container_id).exec_run(["sh", "-c", command])
        return str(result.output.decode())

    def create_instance(self, owner: str, name: str) -> InstanceModel:
        user = self.users[owner]
        request = InstanceRequest(gpu_model=None, gpu_count=0, name=name)
        created = instances.create_instance(self.platform.ctx, user, request)
        self.drain_until(created.id, InstanceStatus.RUNNING)
        return instances.get_instance(self.platform.ctx, user, created.id)

    def drain_until(self, instance_id: str, status: InstanceStatus) -> None:
        def reached() -> bool:
            self.platform.reconciler.drain()
            with self.platform.ctx.sessions() as session:
                found = session.get(InstanceModel, instance_id)
                return found is not None and found.status == status

        wait_for(reached, f"instance {instance_id} to be {status.value}")

    def sessions(self, instance_id: str) -> list[SshSessionModel]:
        admin = self.users["admin"]
        from gpudock.services.ssh import sessions as ssh_sessions

        return ssh_sessions.list_sessions(self.platform.ctx, admin, instance_id)


def wait_for(condition: Callable[[], T | None], what: str, deadline_s: float = DEADLINE_S) -> T:
    """Poll CONDITION until it returns something truthy; fail after the deadline."""
    deadline = time.monotonic() + deadline_s
    delay = 0.02
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def make_key(directory: Path, name: str, kind: str = "ed25519") -> Path:
    path = directory / f"id_{name}"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"{name}@test", "-f", str(path)],
        check=True,
    )
    return path


def populate_world(
    platform: Platform, gateway: GatewayThread[SshGateway], engine: docker.DockerClient, tmp: Path
) -> World:
    ctx = platform.ctx
    people = {
        "alice": users.create_user(ctx, "alice").user,
        "bob": users.create_user(ctx, "bob").user,
        "admin": users.create_user(ctx, "root", is_admin=True).user,
    }
    keys = {name: make_key(tmp, name) for name in (*people, "stranger")}
    for name, user in people.items():
        add_with_proof(ctx, user, keys[name])
    world = World(platform, gateway, keys, people, None, engine, tmp)  # type: ignore[arg-type]
    world.instance = world.create_instance("alice", "train")
    return world
