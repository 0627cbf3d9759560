"""Port connections over the link, in one process: the server's `LinkRuntime`
through the real gateway and agent (asyncssh both ways, over TCP on
127.0.0.1) to a port inside a container of the agent's engine (a
`FakeRuntime`, whose ports lead to a server this test runs; the netns e2e
test reaches one inside a real container)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.errors import RuntimeFailure
from gpudock.platform import Platform
from gpudock.runtime.base import ContainerSpec, Runtime, StaleGeneration
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.agents import hosts
from gpudock.services.agents.hosts import AgentHost
from tests.support.agents import LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: more than one channel window


@pytest.fixture
def platform(platform_factory: PlatformFactory) -> Platform:
    return platform_factory(agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=0.2)


@pytest.fixture
def linked(platform: Platform, tmp_path: Path) -> Iterator[tuple[FakeRuntime, AgentHost]]:
    rig = LinkRig(platform, tmp_path)
    engine = FakeRuntime()
    rig.start()
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    rig.join("a", url, token, runtime=engine)
    host = wait_for(
        lambda: (
            (h := hosts.get_host(platform.ctx, "box-1")).link_state.value == "up"
            and platform.ctx.hosts is not None
            and platform.ctx.hosts.linked(h.id)
            and h
        ),
        "box-1 linked",
    )
    yield engine, host
    rig.stop()


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    """A TCP server on 127.0.0.1 that sends back what it reads, then half-closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1 << 16):
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()
    server.close()


def _container(runtime: Runtime, name: str, labels: dict[str, str]) -> str:
    spec = ContainerSpec(
        name=name,
        hostname=name,
        image="gpudock/base:bookworm",
        labels={"gpudock.cluster": "k", **labels},
        env={},
        gpu_uuids=(),
        real_gpus=False,
        cpus=1.0,
        memory_mb=512,
        pids_limit=64,
        volume_name=f"v-{name}",
        network="tenant-net",
        network_labels={"gpudock.cluster": "k"},
    )
    return runtime.start_container(runtime.create_container(spec).id).id


def _exchange(sock: socket.socket, data: bytes) -> bytes:
    sock.settimeout(30)
    sender = threading.Thread(target=lambda: (sock.sendall(data), sock.shutdown(socket.SHUT_WR)))
    sender.start()
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    sender.join()
    return b"".join(chunks)


def test_a_port_inside_an_instances_container_is_reached_over_the_link(
    platform: Platform,
    linked: tuple[FakeRuntime, AgentHost],
    echo_server: tuple[str, int],
) -> None:
    engine, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    container = _container(runtime, "inst", {"gpudock.instance": "i1"})
    engine.serve_port(container, 8888, echo_server)
    made = runtime.port_socket(container, 8888)
    assert made.address is None  # connected already: one end of the relay
    with made.sock:
        assert _exchange(made.sock, PAYLOAD) == PAYLOAD
    scoped = platform.ctx.runtime_for(host.id, InstanceScope(instance="i1", generation=1))
    with scoped.port_socket(container, 8888).sock as sock:
        assert _exchange(sock, b"scoped") == b"scoped"


def test_the_agent_refuses_what_is_not_a_port_of_an_instance(
    platform: Platform,
    linked: tuple[FakeRuntime, AgentHost],
    echo_server: tuple[str, int],
) -> None:
    engine, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    bystander = _container(runtime, "not-an-instance", {})
    engine.serve_port(bystander, 8888, echo_server)
    with pytest.raises(RuntimeFailure, match="is not an instance's"):
        runtime.port_socket(bystander, 8888)
    with pytest.raises(RuntimeFailure, match="is not an instance's"):
        runtime.port_socket("no-such-container", 8888)
    # Another instance's container, asked for in this instance's scope.
    other = _container(runtime, "other", {"gpudock.instance": "i2"})
    engine.serve_port(other, 8888, echo_server)
    as_i1 = platform.ctx.runtime_for(host.id, InstanceScope(instance="i1", generation=1))
    with pytest.raises(RuntimeFailure, match="is not an instance's"):
        as_i1.port_socket(other, 8888)
    # A port nothing listens on inside the instance: refused, with the reason.
    with pytest.raises(RuntimeFailure, match="nothing answers on port 9999"):
        runtime.port_socket(other, 9999)
    # A generation older than the newest the agent has seen for the instance.
    newer = platform.ctx.runtime_for(host.id, InstanceScope(instance="i2", generation=5))
    newer.port_socket(other, 8888).sock.close()
    older = platform.ctx.runtime_for(host.id, InstanceScope(instance="i2", generation=4))
    with pytest.raises(StaleGeneration):
        older.port_socket(other, 8888)
