"""`DockerRuntime` and its engine: an engine that cannot be reached, or goes
away, is `RuntimeUnavailable` (503), never mistaken for an answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudock.errors import RuntimeUnavailable
from gpudock.runtime.docker import DockerRuntime
from tests.support.docker import engine_relay

pytestmark = pytest.mark.docker

BASE = "gpudock/base:bookworm"


def test_an_unreachable_engine_is_runtime_unavailable(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailable, match="connect to the Docker Engine"):
        DockerRuntime(f"unix://{tmp_path}/no-docker.sock", host_firewall=False)


def test_an_engine_gone_is_unavailable_not_an_unknown_image() -> None:
    with engine_relay() as relay:
        runtime = DockerRuntime(relay.url, host_firewall=False)
        assert runtime.image_info(BASE) is not None
        assert runtime.image_info("gpudock/no-such-image:1") is None
        relay.cut()
        with pytest.raises(RuntimeUnavailable, match="unreachable"):
            runtime.image_info(BASE)
