"""A committed image's `docker save` without the base layers the receiving engine
holds: the real engine saves it, the filter leaves those layers' files out, and
the real engine loads what is left and runs a container from it."""

from __future__ import annotations

import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from gpudock.errors import RuntimeFailure
from gpudock.images.base_image import BASE_IMAGE
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.image_delta import without_layers
from gpudock.runtime.transfer import common_bottom

pytestmark = pytest.mark.docker
REPOSITORY = "gpudock-test/delta"


@pytest.fixture
def committed(engine: docker.DockerClient) -> Iterator[str]:
    """The base image plus one layer with a file in it, as a commit makes it."""
    container = engine.containers.run(BASE_IMAGE, ["sleep", "60"], detach=True)
    try:
        container.exec_run(["sh", "-c", "echo 'epoch 7' > /root/notes.txt"])
        ref = f"{REPOSITORY}:{uuid.uuid4().hex[:8]}"
        container.commit(*ref.split(":"))
    finally:
        container.remove(force=True)
    yield ref
    for image in engine.images.list(REPOSITORY):
        engine.images.remove(image.id, force=True)


def _pieces(data: bytes, size: int = 65536) -> Iterator[bytes]:
    return (data[at : at + size] for at in range(0, len(data), size))


def test_the_archive_without_the_held_base_layers_loads_and_runs(
    engine: docker.DockerClient, committed: str, tmp_path: Path
) -> None:
    runtime = DockerRuntime()
    mine, base = runtime.image_info(committed), runtime.image_info(BASE_IMAGE)
    assert mine is not None and base is not None
    omit = common_bottom(mine.layers, base.layers)
    assert omit == list(base.layers) and len(mine.layers) == len(omit) + 1
    whole = b"".join(runtime.save_image(committed))
    delta = b"".join(without_layers(_pieces(whole), set(omit), tmp_path / "spool"))
    assert len(delta) * 100 < len(whole)  # kilobytes of the commit, not the base's megabytes
    assert not list(tmp_path.joinpath("spool").iterdir())  # nothing spooled is left behind

    engine.images.remove(committed, force=True)
    runtime.load_image(iter([delta]))  # the engine takes the base layers from its own store
    loaded = runtime.image_info(committed)
    assert loaded is not None and loaded.layers == mine.layers
    said = engine.containers.run(committed, ["cat", "/root/notes.txt"], remove=True)
    assert said == b"epoch 7\n"


def test_an_archive_without_a_layer_the_engine_lacks_is_refused(
    engine: docker.DockerClient, committed: str, tmp_path: Path
) -> None:
    """Why a move falls back to the whole image: leaving out a layer the engine
    does not hold gives an archive it cannot load."""
    runtime = DockerRuntime()
    mine = runtime.image_info(committed)
    assert mine is not None
    whole = b"".join(runtime.save_image(committed))
    without_top = b"".join(without_layers(_pieces(whole), {mine.layers[-1]}, tmp_path))
    engine.images.remove(committed, force=True)
    with pytest.raises(RuntimeFailure):
        runtime.load_image(iter([without_top]))
    assert runtime.image_info(committed) is None


def test_what_is_not_a_tar_archive_is_a_runtime_failure(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match="not a tar archive"):
        list(without_layers(iter([b"not a tar" * 100]), {"sha256:00"}, tmp_path))


def test_the_oci_layout_leaves_blobs_out_by_their_names(tmp_path: Path) -> None:
    """Docker 25 and later save blobs/sha256/<digest>: the name is the diff ID."""
    archive = tmp_path / "oci.tar"
    with tarfile.open(archive, "w") as out:
        for name, data in (("blobs/sha256/aa", b"base layer"), ("blobs/sha256/bb", b"top")):
            (tmp_path / "member").write_bytes(data)
            out.add(tmp_path / "member", arcname=name)
        out.add(tmp_path / "member", arcname="index.json")
    kept = b"".join(without_layers(_pieces(archive.read_bytes()), {"sha256:aa"}, tmp_path))
    (tmp_path / "kept.tar").write_bytes(kept)
    with tarfile.open(tmp_path / "kept.tar") as result:
        assert result.getnames() == ["blobs/sha256/bb", "index.json"]
