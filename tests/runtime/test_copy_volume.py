"""`DockerRuntime.copy_volume` against the real engine (data moves), and its
wait for the copy helper against a stand-in for docker-py that never ends."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import docker
import pytest
import requests.exceptions
import urllib3.exceptions

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import RuntimeTimeout
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.docker.volumes import COPY_POLL_S, wait_for_copy

IMAGE = "gpudock/base:bookworm"
LABELS = {"gpudock.test": "copy-volume"}


@pytest.fixture
def volumes(engine: docker.DockerClient) -> Iterator[tuple[str, str]]:
    tag = secrets.token_hex(4)
    names = (f"gpudock-test-copy-{tag}-a", f"gpudock-test-copy-{tag}-b")
    for name in names:
        engine.volumes.create(name, labels=LABELS)
    yield names
    for name in names:
        engine.volumes.get(name).remove(force=True)


def _sh(engine: docker.DockerClient, volume: str, command: str) -> str:
    output = engine.containers.run(
        IMAGE, ["sh", "-c", command], remove=True, network_mode="none",
        volumes={volume: {"bind": "/v", "mode": "rw"}},
    )  # fmt: skip
    return bytes(output).decode()


LISTING = "cd /v && find . -mindepth 1 | sort | xargs stat -c '%n %U %a %s %Y' && sha256sum blob"


def test_copy_keeps_owners_modes_times_and_links_and_reports_progress(
    engine: docker.DockerClient, volumes: tuple[str, str]
) -> None:
    source, target = volumes
    _sh(
        engine, source,
        "head -c 3145728 /dev/urandom > /v/blob && mkdir -p /v/d && echo x > /v/d/f"
        " && chown 1000:1000 /v/d/f && chmod 640 /v/d/f && ln -s d/f /v/link"
        " && touch -d 2020-01-01 /v/d/f",
    )  # fmt: skip
    seen: list[tuple[int, int]] = []
    copied = DockerRuntime().copy_volume(
        source, target, image=IMAGE, helper_name=f"{target}-helper", labels=LABELS,
        on_progress=lambda done, total: seen.append((done, total)),
    )  # fmt: skip
    assert _sh(engine, target, LISTING) == _sh(engine, source, LISTING)
    assert copied >= 3145728 and seen[-1] == (copied, copied)
    assert not engine.containers.list(all=True, filters={"name": f"{target}-helper"})


def test_a_copy_cut_short_is_finished_by_running_it_again(
    engine: docker.DockerClient, volumes: tuple[str, str]
) -> None:
    source, target = volumes
    _sh(engine, source, "head -c 2097152 /dev/urandom > /v/blob && echo a > /v/keep")
    # what an interrupted copy leaves: half a file, and a file the source no longer has
    _sh(engine, target, "head -c 1000 /dev/zero > /v/blob && echo stale > /v/gone")
    runtime = DockerRuntime()
    helper = f"{target}-helper"
    engine.containers.create(IMAGE, ["true"], name=helper, labels=LABELS)  # a leftover helper
    runtime.copy_volume(source, target, image=IMAGE, helper_name=helper, labels=LABELS)
    assert _sh(engine, target, LISTING) == _sh(engine, source, LISTING)


def test_a_helper_image_the_engine_lacks_is_a_runtime_failure(
    engine: docker.DockerClient, volumes: tuple[str, str]
) -> None:
    source, target = volumes
    with pytest.raises(RuntimeFailure, match="copy volume"):
        DockerRuntime().copy_volume(
            source, target, image="gpudock/no-such-image:1", helper_name=f"{target}-helper",
            labels=LABELS,
        )  # fmt: skip


class EndlessCopy:
    """docker-py's `APIClient` for a copy helper that never exits: each `wait`
    times out as docker-py reports it over a Unix socket, and the helper's log
    shows a copy stuck at 40 of 100 bytes. Its clock moves only by those waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits = 0

    def clock(self) -> float:
        return self.now

    def wait(self, container: str, timeout: float) -> dict[str, Any]:
        self.waits += 1
        self.now += timeout
        timed_out = urllib3.exceptions.ReadTimeoutError(None, "/wait", "Read timed out.")
        raise requests.exceptions.ConnectionError(timed_out)

    def logs(self, container: str, stdout: bool, stderr: bool) -> bytes:
        return b"total 100\ndone 40\n"


def test_a_copy_that_never_ends_stops_at_its_limit_naming_the_helper() -> None:
    api, seen = EndlessCopy(), []
    with pytest.raises(RuntimeTimeout) as raised:
        wait_for_copy(
            api, "c0ffee", name="gpudock-x-move", limit_s=30, clock=api.clock,
            on_progress=lambda done, total: seen.append((done, total)),
        )  # fmt: skip
    message = raised.value.message
    assert "gpudock-x-move" in message and "ran 30 s" in message and "limit of 30 s" in message
    assert api.waits == 30 / COPY_POLL_S
    assert seen and set(seen) == {(40, 100)}


def test_an_engine_lost_during_a_copy_is_not_taken_for_a_copy_still_running() -> None:
    class Gone(EndlessCopy):
        def wait(self, container: str, timeout: float) -> dict[str, Any]:
            raise requests.exceptions.ConnectionError("connection refused")

    api = Gone()
    with pytest.raises(requests.exceptions.ConnectionError, match="refused"):
        wait_for_copy(api, "c0ffee", name="gpudock-x-move", limit_s=30, clock=api.clock)
