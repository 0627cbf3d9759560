"""Runtime calls over the link, in one process: the server's `LinkRuntime` through
the real gateway and agent (asyncssh both ways, over TCP on 127.0.0.1) onto the
agent's own engine (a `FakeRuntime` here; the netns e2e test uses a real one)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.agent.commands import Generations
from gpudock.db.models import HostModel, InstanceModel, InstanceStatus, LinkState
from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.platform import Platform
from gpudock.reconcile import garbage, liveness
from gpudock.runtime import calls
from gpudock.runtime.base import (
    LABEL_GPUS,
    STDOUT,
    ContainerSpec,
    ContainerState,
    EngineInfo,
    ExecResult,
    ImageInfo,
    ImageNotFound,
    RegistryUnreachable,
    Runtime,
    RuntimeTimeout,
    StaleGeneration,
    StreamPeer,
    VolumeState,
)
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.fake import FakeRuntime
from gpudock.runtime.link import LinkRuntime
from gpudock.services.accounts import users
from gpudock.services.agents import hosts
from gpudock.services.agents.hosts import AgentHost
from gpudock.services.instances import actions as instances
from gpudock.services.instances import container_spec as containers
from tests.support.agents import LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

BINARY = bytes(range(256)) * 3  # not text: must cross the JSON link intact


class _GatedRuntime(FakeRuntime):
    """A fake engine whose `inspect_container("slow")` waits for `gate`, whose
    `run_once` of image "slow-check" runs past its limit, and whose
    `image_size("untranslated")` raises what no runtime may raise."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def inspect_container(self, name_or_id: str) -> ContainerState | None:
        if name_or_id == "slow":
            self.entered.set()
            self.gate.wait(60)
        return super().inspect_container(name_or_id)

    def image_size(self, ref: str) -> int | None:
        if ref == "untranslated":
            raise OSError("an error the runtime did not translate")
        return super().image_size(ref)

    def run_once(
        self,
        image: str,
        command: list[str],
        files: dict[str, bytes],
        timeout_s: float,
        *,
        cluster_id: str,
    ) -> ExecResult:
        if image == "slow-check":
            raise RuntimeTimeout(f"check {command[0]} ran past {timeout_s:g} s")
        return ExecResult(exit_code=7, output=b"".join(files.values()))


@pytest.fixture
def platform(platform_factory: PlatformFactory) -> Platform:
    return platform_factory(agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=0.2)


class _Rig(LinkRig):
    engine: _GatedRuntime

    def gate_open(self) -> None:
        self.engine.gate.set()


@pytest.fixture
def linked(platform: Platform, tmp_path: Path) -> Iterator[tuple[_Rig, AgentHost]]:
    """One agent host, box-1, linked, on a `_GatedRuntime`."""
    rig = _Rig(platform, tmp_path)
    rig.engine = _GatedRuntime()
    rig.start()
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    rig.join("a", url, token, runtime=rig.engine)
    host = wait_for(
        lambda: (
            (h := hosts.get_host(platform.ctx, "box-1")).link_state is LinkState.UP
            and platform.ctx.hosts is not None
            and platform.ctx.hosts.linked(h.id)
            and h
        ),
        "box-1 linked",
    )
    yield rig, host
    rig.gate_open()
    rig.stop()


def _spec(name: str = "c1") -> ContainerSpec:
    return ContainerSpec(
        name=name,
        hostname=name,
        image="gpudock/base:bookworm",
        labels={"gpudock.cluster": "k", "gpudock.instance": "i1"},
        env={"A": "1"},
        gpu_uuids=("GPU-1",),
        real_gpus=False,
        cpus=1.5,
        memory_mb=512,
        pids_limit=64,
        volume_name="v1",
        network="tenant-net",
        network_labels={"gpudock.cluster": "k"},
    )


def test_each_method_round_trips_with_its_types(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    assert isinstance(runtime, LinkRuntime)
    assert runtime.engine_info() == EngineInfo(
        cpus=2, memory_bytes=24 * 2**30, server_version="fake"
    )
    runtime.ensure_volume("v1", {"gpudock.cluster": "k"}, size_gb=3)
    assert runtime.list_volumes({"gpudock.cluster": "k"}) == [
        VolumeState("v1", {"gpudock.cluster": "k"})
    ]
    assert rig.engine.volume_quotas_gb["v1"] == 3
    created = runtime.create_container(_spec())
    assert isinstance(created, ContainerState) and not created.running
    assert created.labels["gpudock.instance"] == "i1"
    assert rig.engine.spec_of("c1") == _spec()  # every field, the tuple and dicts included
    started = runtime.start_container(created.id)
    assert started.running and started.started_at is not None
    assert runtime.inspect_container("c1") == started
    assert runtime.list_containers({"gpudock.instance": "i1"}) == [started]
    runtime.put_file(created.id, "/usr/local/bin/x", BINARY, 0o700)
    assert rig.engine.files[(created.id, "/usr/local/bin/x")] == BINARY
    checked = runtime.run_once("img", ["check"], {"/a": BINARY}, 5.0, cluster_id="k")
    assert checked == ExecResult(exit_code=7, output=BINARY)
    assert runtime.exec_in_container(created.id, ["true"]) == ExecResult(0, b"")
    ref = runtime.commit_container(created.id, "repo", "t1", {"gpudock.user": "u"})
    assert ref == "repo:t1"
    info = runtime.image_info(ref)
    assert isinstance(info, ImageInfo) and info.labels == {"gpudock.user": "u"}
    assert runtime.image_info("nothing:here") is None
    assert runtime.image_size(ref) == 1_000_000 and runtime.image_present(ref)
    stats = runtime.container_stats(created.id)
    assert stats is not None and stats.cpu_limit == 1.5
    stopped = runtime.stop_container(created.id, 1)
    assert stopped is not None and not stopped.running and stopped.finished_at is not None
    assert [n.name for n in runtime.list_networks({"gpudock.cluster": "k"})] == ["tenant-net"]
    runtime.remove_container(created.id)
    runtime.remove_container(created.id)  # absent: silent, as the contract says
    runtime.remove_volume("v1")
    runtime.remove_volume("v1")
    assert runtime.inspect_container("c1") is None and runtime.stop_container("c1", 1) is None
    assert not rig.engine.containers and not rig.engine.volumes


def test_errors_arrive_as_their_own_classes(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    with pytest.raises(ImageNotFound, match="not found"):
        runtime.ensure_image("no/such:image")
    with pytest.raises(RuntimeTimeout, match="ran past 2 s"):
        runtime.run_once("slow-check", ["probe"], {}, 2.0, cluster_id="k")
    with pytest.raises(RuntimeFailure) as failed:
        runtime.start_container("no-such-container")
    assert type(failed.value) is RuntimeFailure
    with pytest.raises(RuntimeFailure, match="the agent failed running image_size"):
        runtime.image_size("untranslated")  # answered, not left to time out
    rig.engine.registry_reachable = False
    with pytest.raises(RegistryUnreachable):
        runtime.ensure_image("some/where:else")


def test_a_stale_generation_is_refused_and_remembered(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked
    assert platform.ctx.hosts is not None
    routed = platform.ctx.hosts
    newer = routed.for_host(host.id, InstanceScope(instance="i1", generation=2))
    newer.create_container(_spec())
    older = routed.for_host(host.id, InstanceScope(instance="i1", generation=1))
    with pytest.raises(StaleGeneration, match="generation 2 on this host") as refused:
        older.remove_container("c1")
    assert "generation 1 comes too late" in refused.value.message
    assert rig.engine.inspect_container("c1") is not None  # the late command did nothing
    other = routed.for_host(host.id, InstanceScope(instance="i2", generation=1))
    other.ensure_volume("v2", {})  # generations are per instance
    # Kept across a restart of the agent: its state dir holds them.
    with pytest.raises(StaleGeneration):
        Generations(rig.state_dir("a")).admit(InstanceScope(instance="i1", generation=1))


def test_a_call_while_the_link_is_down_fails_at_once_naming_the_host(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    rig.halt("a")
    wait_for(
        lambda: platform.ctx.hosts is not None and not platform.ctx.hosts.linked(host.id),
        "the link detached",
    )
    with pytest.raises(RuntimeUnavailable, match="host box-1: its agent is not connected"):
        runtime.list_containers({})
    # An agent host never falls back to this server's own engine.
    assert platform.ctx.runtime_for(host.id) is not platform.ctx.runtime
    rig.rerun("a")
    wait_for(
        lambda: platform.ctx.hosts is not None and platform.ctx.hosts.linked(host.id),
        "the link attached again",
    )
    assert runtime.list_containers({}) == []


def test_a_slow_call_does_not_hold_a_fast_one_and_a_drop_ends_it(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    runtime.create_container(_spec("fast"))
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(runtime.inspect_container, "slow")
        assert rig.engine.entered.wait(30), "the slow call reached the agent's engine"
        fast = runtime.inspect_container("fast")  # answered while the slow one is held
        assert fast is not None and fast.name == "fast"
        assert not slow.done()
        rig.halt("a")  # the link drops mid-call: the caller hears it now, not at its timeout
        with pytest.raises(RuntimeUnavailable, match="host box-1") as dropped:
            slow.result(timeout=30)
        assert "running it again is safe" in dropped.value.message


def test_simulated_hosts_keep_the_servers_engine(platform: Platform) -> None:
    with platform.ctx.sessions() as session:
        simulated = session.scalars(select(HostModel.id)).all()
    assert len(simulated) == 2
    for host_id in simulated:
        assert platform.ctx.runtime_for(host_id) is platform.ctx.runtime
    assert platform.ctx.runtime_for(None) is platform.ctx.runtime
    assert platform.ctx.every_engine() == [platform.ctx.runtime]


def test_an_instance_on_an_agent_host_runs_stops_and_is_deleted_there(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked  # its report made its `hosts` and `gpus` rows
    ctx = platform.ctx
    owner = users.create_user(ctx, "alice").user
    request = instances.InstanceRequest(gpu_model="H200-140GB", gpu_count=1, name="train")
    created = instances.create_instance(ctx, owner, request)
    running = _drain_until(platform, created.id, InstanceStatus.RUNNING)
    assert running.host_id == host.id and running.placement_generation == 1
    name = containers.container_name(ctx.cluster_id, created.id)
    on_host = rig.engine.inspect_container(name)
    assert on_host is not None and on_host.running
    assert on_host.labels[LABEL_GPUS] == host.gpus[0].uuid
    assert rig.engine.spec_of(name).gpu_uuids == (host.gpus[0].uuid,)
    assert isinstance(ctx.runtime, FakeRuntime) and ctx.runtime.inspect_container(name) is None
    assert Generations(rig.state_dir("a"))._seen == {created.id: 1}
    instances.stop_instance(ctx, owner, created.id)
    _drain_until(platform, created.id, InstanceStatus.STOPPED)
    stopped = rig.engine.inspect_container(name)
    assert stopped is not None and not stopped.running
    instances.delete_instance(ctx, owner, created.id)
    _drain_until(platform, created.id, InstanceStatus.DELETED)
    assert rig.engine.inspect_container(name) is None and not rig.engine.volumes


def _drain_until(platform: Platform, instance_id: str, status: InstanceStatus) -> InstanceModel:
    def reached() -> InstanceModel | None:
        platform.reconciler.drain()
        with platform.ctx.sessions() as session:
            found = session.get(InstanceModel, instance_id)
            return found if found is not None and found.status == status else None

    return wait_for(reached, f"instance {instance_id} {status.value}")


def test_liveness_and_garbage_collection_act_on_the_agent_hosts_engine(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, _ = linked
    ctx = platform.ctx
    owner = users.create_user(ctx, "alice").user
    request = instances.InstanceRequest(gpu_model="H200-140GB", gpu_count=1, name="train")
    created = instances.create_instance(ctx, owner, request)
    _drain_until(platform, created.id, InstanceStatus.RUNNING)
    name = containers.container_name(ctx.cluster_id, created.id)
    first = rig.engine.inspect_container(name)
    assert first is not None
    rig.engine.end_main_process(first.id, 1)  # it exited on its own, on its host
    liveness.check_running(ctx)
    _drain_until(platform, created.id, InstanceStatus.RUNNING)
    again = rig.engine.inspect_container(name)
    assert again is not None and again.running and again.id == first.id  # restarted there
    orphan = _spec("gpudock-left-behind")
    labels = {**containers.cluster_labels(ctx.cluster_id), "gpudock.instance": "gone"}
    rig.engine.create_container(replace(orphan, labels=labels))
    rig.engine.ensure_volume("orphan-volume", containers.cluster_labels(ctx.cluster_id))
    # Data a live instance left here when it moved (say, restarted elsewhere while
    # this host was lost): not in use, but the operator's to remove, not garbage.
    moved_away = {**containers.cluster_labels(ctx.cluster_id), "gpudock.instance": created.id}
    rig.engine.ensure_volume("data-before-the-move", moved_away)
    assert garbage.collect_garbage(ctx) == 2
    assert rig.engine.inspect_container("gpudock-left-behind") is None
    assert "orphan-volume" not in rig.engine.volumes
    assert "data-before-the-move" in rig.engine.volumes
    assert rig.engine.inspect_container(name) is not None  # a live instance's stays


def test_every_runtime_method_is_a_call_over_the_link_or_named_as_not_one() -> None:
    protocol = {name for name in vars(Runtime) if not name.startswith("_")}
    assert set(calls.METHODS) <= protocol
    # Exec streams and port sockets have channels of their own; builds and host
    # PIDs do not cross the link, nor where volumes attach (an agent's are its own).
    not_calls = protocol - set(calls.METHODS)
    assert not_calls == {
        "build_image",
        "open_exec_stream",
        "resize_exec",
        "exec_exit_code",
        "port_socket",
        "container_of_pid",
        "volumes_reach_every_host",
    }
    for name in protocol:
        assert callable(getattr(LinkRuntime, name)), name


def _read_all(sock: socket.socket) -> bytes:
    sock.setblocking(True)
    sock.settimeout(30)
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def test_an_exec_stream_crosses_the_link_with_its_exit_code(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    _, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    container = runtime.start_container(runtime.create_container(_spec()).id)
    stream = runtime.open_exec_stream(container.id, ["cat"], tty=False, env={})
    assert stream.exec_id.startswith(f"link:{host.id}:")
    assert platform.ctx.runtime_for_exec(stream.exec_id) is runtime
    assert platform.ctx.runtime_for_exec("fakeexec00000001") is platform.ctx.runtime
    stream.sock.setblocking(True)
    stream.sock.sendall(BINARY)
    stream.sock.shutdown(socket.SHUT_WR)  # the process's stdin ends: `cat` ends
    assert _read_all(stream.sock) == BINARY  # the fake engine's exec echoes, as `cat`
    assert stream.err_sock is not None and _read_all(stream.err_sock) == b""
    assert wait_for(lambda: runtime.exec_exit_code(stream.exec_id) == 0, "the exit code")
    runtime.stop_container(container.id, 1)
    with pytest.raises(RuntimeFailure, match="is not running") as refused:
        runtime.open_exec_stream(container.id, ["cat"], tty=True, env={})
    assert type(refused.value) is RuntimeFailure


def _unread(sock: socket.socket) -> bytes:
    try:
        return sock.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


class _Sink:
    """Records what an attached exec stream hands over (a `StreamSink`)."""

    def __init__(self) -> None:
        self.output_seen: list[tuple[int, bytes]] = []
        self.ended = threading.Event()

    def output(self, stream: int, data: bytes) -> None:
        self.output_seen.append((stream, data))

    def output_ended(self) -> None:
        self.ended.set()

    def pause_input(self) -> None:
        pass

    def resume_input(self) -> None:
        pass


def test_a_caller_on_the_links_loop_attaches_to_the_channel_itself(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    container = runtime.start_container(runtime.create_container(_spec()).id)
    stream = runtime.open_exec_stream(container.id, ["cat"], tty=False, env={})
    direct = stream.direct
    assert direct is not None
    sink = _Sink()

    async def attach() -> StreamPeer | None:
        assert direct is not None
        return direct.attach(sink)

    assert asyncio.run(attach()) is None  # another loop: the sockets stay the way in
    # What reached the socket pair before the caller attached comes first.
    stream.sock.sendall(b"early ")
    wait_for(lambda: _unread(stream.sock) == b"early ", "the echo, unread")
    peer = rig.run(attach())
    assert peer is not None
    assert stream.sock.fileno() == -1 and stream.err_sock is not None
    assert stream.err_sock.fileno() == -1  # both handed over, closed
    rig.loop.call_soon_threadsafe(peer.write, BINARY)
    rig.loop.call_soon_threadsafe(peer.write_eof)  # `cat` ends
    assert sink.ended.wait(30)
    assert {stream for stream, _ in sink.output_seen} == {STDOUT}
    assert b"".join(data for _, data in sink.output_seen) == b"early " + BINARY
    assert wait_for(lambda: runtime.exec_exit_code(stream.exec_id) == 0, "the exit code")


def test_a_terminal_exec_is_sized_and_resized_over_the_link(
    platform: Platform, linked: tuple[_Rig, AgentHost]
) -> None:
    rig, host = linked
    runtime = platform.ctx.runtime_for(host.id)
    container = runtime.start_container(runtime.create_container(_spec()).id)
    stream = runtime.open_exec_stream(container.id, ["sh"], tty=True, env={"TERM": "xterm"})
    agent_exec_id = stream.exec_id.rsplit(":", 1)[1]
    assert stream.err_sock is None  # a terminal: one stream
    wait_for(lambda: rig.engine.resizes == [(agent_exec_id, 80, 24)], "the pty request's size")
    platform.ctx.runtime_for_exec(stream.exec_id).resize_exec(stream.exec_id, 132, 43)
    wait_for(lambda: rig.engine.resizes[-1] == (agent_exec_id, 132, 43), "the window change")
    stream.sock.setblocking(True)
    stream.sock.sendall(b"typed\n")
    stream.sock.shutdown(socket.SHUT_WR)
    assert _read_all(stream.sock) == b"typed\n"
    code = wait_for(
        lambda: (c := runtime.exec_exit_code(stream.exec_id)) is not None and [c], "the exit code"
    )
    assert code == [0] and runtime.exec_exit_code(stream.exec_id) == 0  # asked twice: kept
