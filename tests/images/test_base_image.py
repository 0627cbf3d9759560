"""The debootstrap base image: parser and tar writer as pure functions, the build for real.

The engine tests need the local Docker Engine and fail (never skip) without it. The first
run on a fresh engine builds gpudock/base:bookworm (about two minutes); later runs reuse it.
The builder reaches the engine through `DockerRuntime`, as `gpudock images build-base` does.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from gpudock.errors import RuntimeFailure
from gpudock.images.base_image import BASE_IMAGE, BuildResult, build_base_image, import_rootfs
from gpudock.images.base_image.debootstrap import parse_debootstrap_output
from gpudock.images.base_image.progress import STAGES, ProgressUpdate
from gpudock.images.base_image.rootfs import clean_rootfs, tar_stream
from gpudock.runtime.docker import DockerRuntime

SAMPLE = Path(__file__).with_name("debootstrap_sample.log")
TEST_TAG = "gpudock/test-base-image:tmp"


def sample_updates() -> list[ProgressUpdate]:
    return list(parse_debootstrap_output(SAMPLE.read_text().splitlines()))


def assert_monotonic_per_stage(updates: list[ProgressUpdate]) -> None:
    last: dict[str, int] = defaultdict(int)
    for update in updates:
        assert update.stage in STAGES
        assert update.done >= last[update.stage], update
        assert update.total is None or update.total >= update.done, update
        last[update.stage] = update.done


def first_appearances(updates: list[ProgressUpdate]) -> list[str]:
    return list(dict.fromkeys(update.stage for update in updates))


# -- the debootstrap output parser ---------------------------------------------------------


def test_parser_walks_the_stages_in_order_with_monotonic_counts() -> None:
    updates = sample_updates()
    assert first_appearances(updates) == ["resolve", "download", "extract", "install", "configure"]
    assert_monotonic_per_stage(updates)


def test_parser_closes_every_stage_with_its_count() -> None:
    finals = {update.stage: update for update in sample_updates()}
    counts = {stage: (final.done, final.total) for stage, final in finals.items()}
    # The excerpt: 9 resolve lines, 8 validated packages, 8 extracted, 9 + 6 unpacked and
    # 8 + 7 configured (in two rounds each: the required packages, then the base system).
    assert counts == {
        "resolve": (9, 9),
        "download": (8, 8),
        "extract": (8, 8),
        "install": (15, 15),
        "configure": (15, 15),
    }
    assert finals["configure"].message == "Configured 15 packages"


def test_parser_estimates_install_totals_from_the_download_count() -> None:
    updates = sample_updates()
    download = [u for u in updates if u.stage == "download"]
    assert all(u.total is None for u in download[:-1])  # unknown until the downloads end
    later = [u for u in updates if u.stage in ("install", "configure")]
    assert later and all(u.total is not None and u.total >= 8 for u in later)


def test_parser_keeps_unknown_lines_in_the_current_stage() -> None:
    lines = [
        "",
        "I: Retrieving InRelease ",
        "W: Cannot check Release signature",
        "I: Retrieving x 1",
    ]
    updates = list(parse_debootstrap_output(lines))
    assert [(u.stage, u.done) for u in updates] == [
        ("resolve", 1),
        ("resolve", 1),
        ("resolve", 1),  # closed on moving on
        ("download", 0),
    ]
    assert updates[1].message == "W: Cannot check Release signature"


# -- the rootfs and its tar stream ------------------------------------------------------------


def make_tree(root: Path) -> None:
    (root / "etc").mkdir(parents=True)
    secret = root / "etc" / "secret"
    secret.write_bytes(b"x" * 3_000_001)  # several read chunks and tar padding
    os.chown(secret, 1234, 5678)
    secret.chmod(0o4750)
    os.link(secret, root / "etc" / "secret-link")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "private").mkdir(mode=0o700)
    os.mkfifo(root / "fifo")
    os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))


def test_tar_stream_keeps_owners_modes_links_and_skips_devices(tmp_path: Path) -> None:
    make_tree(tmp_path)
    entries: list[str] = []
    data = b"".join(tar_stream(tmp_path, entries.append))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        secret = members["etc/secret"]
        assert (secret.uid, secret.gid, secret.uname, secret.gname) == (1234, 5678, "", "")
        assert secret.mode == 0o4750 and secret.size == 3_000_001
        extracted = tar.extractfile(secret)
        assert extracted is not None and extracted.read() == b"x" * 3_000_001
    assert (
        members["etc/secret-link"].islnk() and members["etc/secret-link"].linkname == "etc/secret"
    )
    assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
    assert members["private"].isdir() and members["private"].mode == 0o700
    assert members["fifo"].isfifo()
    assert "null" not in members
    assert list(members).index("etc") < list(members).index("etc/secret")
    assert sorted(entries) == sorted([*members, "null"])


def test_clean_rootfs_removes_caches_and_host_bits_but_nothing_outside(tmp_path: Path) -> None:
    rootfs, outside = tmp_path / "rootfs", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host file")
    for name in ("var/lib/apt/lists/x_Packages", "var/cache/apt/archives/a.deb", "etc/hostname"):
        (rootfs / name).parent.mkdir(parents=True, exist_ok=True)
        (rootfs / name).write_text("x")
    (rootfs / "var/cache/apt/archives/lock").write_text("")
    (rootfs / "usr/sbin").mkdir(parents=True)
    (rootfs / "tmp").symlink_to(outside)  # tmp/* must not reach the host through it
    clean_rootfs(rootfs)
    assert not (rootfs / "etc/hostname").exists()
    assert list((rootfs / "var/lib/apt/lists").iterdir()) == []
    assert [p.name for p in (rootfs / "var/cache/apt/archives").iterdir()] == ["lock"]
    assert (outside / "keep").read_text() == "host file"
    assert os.access(rootfs / "usr/sbin/policy-rc.d", os.X_OK)


# -- against the engine ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runtime() -> Iterator[DockerRuntime]:
    runtime = DockerRuntime(host_firewall=False)  # no engine: the tests fail here, never skip
    yield runtime
    runtime.close()


@pytest.fixture(scope="module")
def built(runtime: DockerRuntime) -> tuple[BuildResult, list[ProgressUpdate]]:
    updates: list[ProgressUpdate] = []
    return build_base_image(runtime, on_progress=updates.append), updates


def without_debootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH on which no debootstrap can be found (nor run)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


CHECKS = r"""
set -e
for tool in python3 rsync ps ip bash; do command -v "$tool"; done
test -x /usr/lib/openssh/sftp-server
test -d /etc/ssl/certs && test -s /etc/ssl/certs/ca-certificates.crt
python3 -c 'import ssl; ssl.create_default_context(); print("python ok")'
ps -o comm= -p 1
ip -o link show lo
test -z "$(find /var/cache/apt/archives /var/lib/apt/lists -name '*.deb' -o -name '*_Packages')"
echo "workdir=$(pwd) lang=$LANG"
"""


@pytest.mark.docker
@pytest.mark.timeout(1500)
def test_base_image_has_the_tools(
    engine: docker.DockerClient, built: tuple[BuildResult, list[ProgressUpdate]]
) -> None:
    result, updates = built
    image = engine.api.inspect_image(BASE_IMAGE)
    assert result.image_id == image["Id"] and result.size_bytes == image["Size"] > 0
    config = image["Config"]
    assert config["Labels"] == {"org.gpudock.base": "1"}
    assert "LANG=C.UTF-8" in config["Env"] and config["Cmd"] == ["/bin/bash"]
    output = engine.containers.run(
        BASE_IMAGE, ["sh", "-c", CHECKS], remove=True, network_disabled=True
    ).decode()
    for expected in (
        "/usr/bin/python3",
        "/usr/bin/rsync",
        "/usr/bin/ps",
        "/usr/sbin/ip",
        "/usr/bin/bash",
    ):
        assert expected in output
    assert "python ok" in output and "workdir=/root lang=C.UTF-8" in output
    if result.status == "built":  # this run built it: check the progress it reported
        assert first_appearances(updates) == list(STAGES)
        assert updates[-1].stage == "import" and updates[-1].done == updates[-1].total
        assert_monotonic_per_stage(updates)


@pytest.mark.docker
def test_second_build_is_cached_without_debootstrap(
    runtime: DockerRuntime,
    built: tuple[BuildResult, list[ProgressUpdate]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without_debootstrap(tmp_path, monkeypatch)  # looking for it would fail the build
    updates: list[ProgressUpdate] = []
    work = tmp_path / "work"
    again = build_base_image(runtime, workdir=work, on_progress=updates.append)
    assert again.status == "cached" and again.cached
    assert again.image_id == built[0].image_id
    assert not work.exists() and updates == []


@pytest.mark.docker
def test_missing_debootstrap_says_how_to_install_it(
    runtime: DockerRuntime,
    built: tuple[BuildResult, list[ProgressUpdate]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without_debootstrap(tmp_path, monkeypatch)
    with pytest.raises(RuntimeFailure, match="apt-get install debootstrap"):
        build_base_image(runtime, force=True, workdir=tmp_path / "work")
    assert not (tmp_path / "work").exists()
    assert build_base_image(runtime).image_id == built[0].image_id  # the image is untouched


@pytest.mark.docker
def test_debootstrap_failure_shows_its_output_and_cleans_up(
    engine: docker.DockerClient, runtime: DockerRuntime, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    with pytest.raises(RuntimeFailure, match="debootstrap failed") as failure:
        # Nothing listens on 127.0.0.1:9, so debootstrap fails on its first download.
        build_base_image(runtime, tag=TEST_TAG, mirror="http://127.0.0.1:9/debian", workdir=work)
    assert "127.0.0.1:9" in failure.value.message
    assert 0 < len(failure.value.details["output_tail"]) <= 20
    assert list(work.iterdir()) == []  # the temporary rootfs is gone
    with pytest.raises(docker.errors.ImageNotFound):
        engine.api.inspect_image(TEST_TAG)


@pytest.mark.docker
def test_import_streams_a_rootfs_with_owners_and_config(
    engine: docker.DockerClient, runtime: DockerRuntime, tmp_path: Path
) -> None:
    make_tree(tmp_path / "rootfs")
    updates: list[ProgressUpdate] = []
    try:
        image_id = import_rootfs(runtime, tmp_path / "rootfs", TEST_TAG, updates.append)
        image = engine.api.inspect_image(TEST_TAG)
        assert image["Id"] == image_id
        assert image["Config"]["WorkingDir"] == "/root"
        assert image["Config"]["Labels"] == {"org.gpudock.base": "1"}
        layer = saved_layer(engine, TEST_TAG)
    finally:
        engine.api.remove_image(TEST_TAG, force=True)
    assert {u.stage for u in updates} == {"import"}
    assert_monotonic_per_stage(updates)
    assert updates[-1].done == updates[-1].total == 9
    secret = layer["etc/secret"]
    assert (secret.uid, secret.gid, secret.mode) == (1234, 5678, 0o4750)
    assert layer["bin"].linkname == "usr/bin"


def saved_layer(engine: docker.DockerClient, tag: str) -> dict[str, tarfile.TarInfo]:
    """The members of the single layer of `docker save <tag>`."""
    saved = b"".join(engine.api.get_image(tag))
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        names = [m.name for m in outer.getmembers() if m.name.endswith("layer.tar")]
        assert len(names) == 1, names
        blob = outer.extractfile(names[0])
        assert blob is not None
        with tarfile.open(fileobj=io.BytesIO(blob.read())) as layer:
            return {m.name: m for m in layer.getmembers()}
