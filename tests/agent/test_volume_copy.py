"""A data volume from one agent host to another over both links, relayed by the
server's gateway: real Docker volumes, real tar, real SSH channels."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from gpudock.agent.volume_copy import TAR
from gpudock.agentgw import volume_copy as relay
from gpudock.db.models import LinkState
from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.images.base_image import BASE_IMAGE
from gpudock.platform import Platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.link import LinkRuntime
from gpudock.runtime.transfer import (
    CHUNK,
    FRAME,
    ImageMove,
    StreamDigest,
    image_spool_name,
    stream_digest,
)
from gpudock.services.agents import hosts
from gpudock.services.agents.hosts import AgentHost
from tests.support.agents import LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

pytestmark = pytest.mark.docker
MIB = 1 << 20


@pytest.fixture
def platform(platform_factory: PlatformFactory) -> Platform:
    return platform_factory(agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=0.2)


class _Pair:
    def __init__(self, rig: LinkRig, engine: DockerRuntime, tag: str) -> None:
        self.rig, self.engine = rig, engine
        self.source, self.target = f"{tag}-from", f"{tag}-to"

    def runtime(self, name: str) -> LinkRuntime:
        ctx = self.rig.platform.ctx
        assert ctx.hosts is not None
        host = hosts.get_host(ctx, name)
        found = ctx.hosts.for_host(host.id)
        assert isinstance(found, LinkRuntime)
        return found

    def spool(self) -> Path:
        return self.rig.state_dir("b") / "transfers" / f"{self.target}.tar.part"


def _linked(platform: Platform, name: str) -> AgentHost:
    def up() -> AgentHost | None:
        host = hosts.get_host(platform.ctx, name)
        ok = host.link_state is LinkState.UP and platform.ctx.hosts is not None
        return host if ok and platform.ctx.hosts.linked(host.id) else None  # type: ignore[union-attr]

    return wait_for(up, f"{name} linked")


@pytest.fixture
def pair(platform: Platform, tmp_path: Path) -> Iterator[_Pair]:
    """Agents a (host box-a) and b (box-b), both on this machine's engine, and a
    volume on each: a's with sparse and plain files, b's empty."""
    rig = LinkRig(platform, tmp_path)
    engine = DockerRuntime(host_firewall=False)
    rig.start()
    for agent, host in (("a", "box-a"), ("b", "box-b")):
        url, token = join_parts(hosts.add_host(platform.ctx, host).join_command)
        rig.join(agent, url, token, runtime=engine)
        _linked(platform, host)
    made = _Pair(rig, engine, f"gpudock-test-{tmp_path.name[-12:]}")
    for volume in (made.source, made.target):
        engine.ensure_volume(volume, {"gpudock.test": "volume-copy"})
    yield made
    rig.stop()
    for volume in (made.source, made.target):
        engine.remove_volume(volume)


def _fill(directory: Path, random_mib: int = 0) -> None:
    with (directory / "sparse.bin").open("wb") as handle:
        handle.truncate(64 * MIB)  # 64 MiB long, 3 MiB of it written
        handle.write(os.urandom(2 * MIB))
        handle.seek(40 * MIB)
        handle.write(os.urandom(MIB))
    (directory / "notes").mkdir()
    (directory / "notes" / "a.txt").write_text("hello\n")
    (directory / "notes" / "link").symlink_to("a.txt")
    if random_mib:
        (directory / "random.bin").write_bytes(os.urandom(random_mib * MIB))


def _digests(directory: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        key = str(path.relative_to(directory))
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_a_volume_moves_with_its_holes_and_its_digest(pair: _Pair) -> None:
    source_dir = pair.engine.volume_directory(pair.source)
    _fill(source_dir)
    (pair.engine.volume_directory(pair.target) / "stale.txt").write_text("an earlier try's\n")
    progress: list[int] = []
    copied = pair.runtime("box-a").copy_volume_to(
        pair.runtime("box-b"), pair.source, pair.target, progress.append
    )
    target_dir = pair.engine.volume_directory(pair.target)
    assert _digests(target_dir) == _digests(source_dir)
    assert (target_dir / "sparse.bin").stat().st_size == 64 * MIB
    assert (target_dir / "sparse.bin").stat().st_blocks * 512 < 8 * MIB  # the holes stayed holes
    assert copied.bytes_total < 4 * MIB  # only the allocated extents crossed
    assert copied.bytes_sent == copied.bytes_total + _frames(copied.bytes_total)
    assert copied.resumed_at == [0] and progress[-1] == copied.bytes_total
    assert not pair.spool().exists()


def _frames(payload: int) -> int:
    """The frame headers a stream of `payload` bytes carries (an end frame included)."""
    return (-(-payload // (1 << 20)) + 1) * FRAME.size


def test_a_copy_resumes_from_what_the_destination_kept(pair: _Pair) -> None:
    source_dir = pair.engine.volume_directory(pair.source)
    _fill(source_dir, random_mib=2)
    stream = subprocess.run(
        [*TAR, "-C", str(source_dir), "-cf", "-", "."], capture_output=True, check=True
    ).stdout
    kept = len(stream) // 2
    pair.spool().parent.mkdir(parents=True, exist_ok=True)
    pair.spool().write_bytes(stream[:kept])  # what a cut copy left
    copied = pair.runtime("box-a").copy_volume_to(
        pair.runtime("box-b"), pair.source, pair.target, lambda _: None
    )
    assert copied.resumed_at == [kept]
    assert len(stream) - kept < copied.bytes_sent < len(stream) - kept + _frames(len(stream))
    assert copied.sha256 == stream_digest(stream).hex()
    assert _digests(pair.engine.volume_directory(pair.target)) == _digests(source_dir)


def test_kept_bytes_that_do_not_add_up_are_sent_again_from_the_start(pair: _Pair) -> None:
    source_dir = pair.engine.volume_directory(pair.source)
    _fill(source_dir)
    pair.spool().parent.mkdir(parents=True, exist_ok=True)
    pair.spool().write_bytes(b"\0" * 4096)  # not the stream's first bytes
    copied = pair.runtime("box-a").copy_volume_to(
        pair.runtime("box-b"), pair.source, pair.target, lambda _: None
    )
    assert copied.resumed_at == [4096, 0]
    assert _digests(pair.engine.volume_directory(pair.target)) == _digests(source_dir)


def test_a_source_agent_stopped_mid_copy_is_resumed_after_it_returns(
    pair: _Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A source that went away is seen at once (the destination says where to resume),
    # not after a stall: with no stall timer to speak of, the copy still gives up.
    monkeypatch.setattr(relay, "STALL_S", 3600.0)
    source_dir = pair.engine.volume_directory(pair.source)
    _fill(source_dir, random_mib=48)
    spool = pair.spool()
    cut = threading.Event()

    def stop_the_source_once_data_lands() -> None:
        wait_for(lambda: spool.exists() and spool.stat().st_size >= 2 * MIB, "data landing")
        pair.rig.halt("a")
        cut.set()

    watcher = threading.Thread(target=stop_the_source_once_data_lands)
    watcher.start()
    failed: list[BaseException] = []

    def copy_until_it_fails() -> None:
        try:
            pair.runtime("box-a").copy_volume_to(
                pair.runtime("box-b"), pair.source, pair.target, lambda _: None
            )
        except BaseException as exc:
            failed.append(exc)

    copying = threading.Thread(target=copy_until_it_fails, daemon=True)
    copying.start()
    copying.join(60)
    assert not copying.is_alive(), "the relay waited out a stall after the source went"
    assert [type(exc) for exc in failed] == [RuntimeUnavailable]
    watcher.join()
    assert cut.is_set()
    kept = spool.stat().st_size
    assert kept >= 2 * MIB
    pair.rig.rerun("a")
    _linked(pair.rig.platform, "box-a")
    copied = pair.runtime("box-a").copy_volume_to(
        pair.runtime("box-b"), pair.source, pair.target, lambda _: None
    )
    assert copied.resumed_at[0] == kept  # resumed, not restarted
    assert copied.bytes_sent < copied.bytes_total - kept + _frames(copied.bytes_total)
    assert _digests(pair.engine.volume_directory(pair.target)) == _digests(source_dir)


def test_an_image_goes_from_one_host_to_the_other_as_a_save_and_load(pair: _Pair) -> None:
    moved = pair.runtime("box-a").copy_image_to(pair.runtime("box-b"), "gpudock/base:bookworm")
    assert moved > 10 * MIB  # the whole `docker save` of the image crossed both links
    assert pair.engine.image_present("gpudock/base:bookworm")
    with pytest.raises(RuntimeFailure, match="gpudock-test/no-such:image"):
        pair.runtime("box-a").copy_image_to(pair.runtime("box-b"), "gpudock-test/no-such:image")


@pytest.fixture
def small_image(tmp_path: Path) -> Iterator[str]:
    """An image of one 3 MiB layer (a stream of a few frames), removed afterwards."""
    ref = f"gpudock-sys/test-image-{tmp_path.name[-12:]}:v1"
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "payload.bin").write_bytes(os.urandom(3 * MIB))
    layer = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(layer), "."], check=True)
    repository, _, tag = ref.rpartition(":")
    engine = docker.from_env()
    engine.api.import_image_from_data(layer.read_bytes(), repository=repository, tag=tag)
    yield ref
    with contextlib.suppress(docker.errors.ImageNotFound):
        engine.images.remove(ref, force=True)


def test_an_image_move_cut_short_resumes_where_the_destinations_spool_ends(
    pair: _Pair, small_image: str
) -> None:
    ref = small_image
    whole = b"".join(pair.engine.save_image(ref))  # `docker save` comes out the same each time
    kept = len(whole) // 2
    spool = pair.rig.state_dir("b") / "transfers" / image_spool_name(ImageMove(ref=ref))
    spool.parent.mkdir(parents=True, exist_ok=True)
    spool.write_bytes(whole[:kept])  # what a move cut short left at the destination
    progress: list[int] = []
    sent = pair.runtime("box-a").copy_image_to(pair.runtime("box-b"), ref, None, progress.append)
    assert len(whole) - kept < sent < len(whole) - kept + _frames(len(whole))  # the rest only
    assert progress and progress[-1] == len(whole)  # the destination holds all of it
    assert pair.engine.image_present(ref) and not spool.exists()


def test_kept_image_bytes_that_are_not_the_stream_are_sent_again(
    pair: _Pair, small_image: str
) -> None:
    ref = small_image
    whole = b"".join(pair.engine.save_image(ref))
    spool = pair.rig.state_dir("b") / "transfers" / image_spool_name(ImageMove(ref=ref))
    spool.parent.mkdir(parents=True, exist_ok=True)
    spool.write_bytes(b"\0" * 4096)  # not the save's first bytes: the load of them fails
    sent = pair.runtime("box-a").copy_image_to(pair.runtime("box-b"), ref, None, lambda _: None)
    assert sent > len(whole) and not spool.exists()  # all of it again, after the 4096


class _ServersEngine:
    """The server's own engine, holding one image the agent host lacks (here one
    engine plays every part, so what it held is kept as its `docker save`)."""

    def __init__(self, saved: bytes) -> None:
        self.saved, self.saves = saved, 0

    def save_image(self, ref: str) -> Iterator[bytes]:
        self.saves += 1
        return (self.saved[i : i + 65536] for i in range(0, len(self.saved), 65536))

    def load_image(self, chunks: Iterator[bytes]) -> None:
        raise AssertionError("the server's engine only sends here")


def test_an_image_only_the_server_holds_is_sent_to_an_agent_host(
    pair: _Pair, small_image: str
) -> None:
    ref = small_image
    saved = b"".join(pair.engine.save_image(ref))
    pair.engine.remove_image(ref)  # the agent host's engine lacks it now
    assert not pair.engine.image_present(ref)
    servers = _ServersEngine(saved)
    progress: list[int] = []
    sent = pair.runtime("box-b").receive_image(servers, ref, None, progress.append)
    assert pair.engine.image_present(ref)
    assert len(saved) <= sent <= len(saved) + _frames(len(saved))
    assert servers.saves == 1 and progress[-1] == len(saved)


def test_an_image_on_a_base_the_host_holds_is_sent_without_the_bases_layers(
    pair: _Pair, tmp_path: Path
) -> None:
    ref = f"gpudock-sys/test-delta-{tmp_path.name[-12:]}:v1"
    engine = docker.from_env()
    made = engine.containers.run(BASE_IMAGE, ["sh", "-c", "echo mine > /etc/mine"], detach=True)
    made.wait()
    repository, _, tag = ref.rpartition(":")
    made.commit(repository=repository, tag=tag)
    made.remove()
    info = pair.engine.image_info(ref)
    assert info is not None
    saved = b"".join(pair.engine.save_image(ref))
    pair.engine.remove_image(ref)  # the host keeps the base image, not this one
    held = pair.runtime("box-b").held_bottom(info.layers)
    assert held == list(info.layers[:-1])  # every layer but the commit's own
    try:
        sent = pair.runtime("box-b").receive_image(
            _ServersEngine(saved), ref, (held, tmp_path / "spool"), None
        )
        assert pair.engine.image_info(ref) is not None
    finally:
        pair.engine.remove_image(ref)
    assert sent < MIB < len(saved) // 10  # the commit's layer, not the base image's


def test_the_stream_digest_is_the_same_however_the_bytes_are_fed() -> None:
    data = os.urandom(3 * CHUNK + 12345)
    expected = hashlib.sha256(
        b"".join(hashlib.sha256(data[i : i + CHUNK]).digest() for i in range(0, len(data), CHUNK))
    ).digest()
    as_frames, resumed = StreamDigest(), StreamDigest()
    for i in range(0, len(data), CHUNK):
        piece = data[i : i + CHUNK]
        as_frames.add(piece, hashlib.sha256(piece).digest())
    cut = CHUNK + 777  # a resume point inside a piece, then frames from there
    resumed.add(data[:cut])
    resumed.add(data[cut : 2 * CHUNK])
    resumed.add(data[2 * CHUNK :])
    assert as_frames.digest() == resumed.digest() == stream_digest(data) == expected
    assert stream_digest(data[:-1]) != expected
