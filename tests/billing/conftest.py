"""A platform on the fake runtime whose clock (and the runtime's) the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.settings import Settings
from tests.support.billing import (
    FLEET,
    MakePlatform,
)
from tests.support.clocks import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_platform(tmp_path: Path, clock: FakeClock) -> Iterator[MakePlatform]:
    opened: list[Platform] = []

    def make(database_url: str | None = None, **overrides: Any) -> Platform:
        values: dict[str, Any] = {
            "data_dir": tmp_path / f"data{len(opened)}",
            "simulate": FLEET,
            "runtime": "fake",
            "image_pull": "never",
            "database_url": database_url,
            **overrides,
        }
        platform = open_platform(Settings(**values), runtime=FakeRuntime(clock=clock), clock=clock)
        opened.append(platform)
        return platform

    yield make
    for platform in opened:
        platform.close()


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    """SQLite; tests that need PostgreSQL too ask for `make_platform(database_url)`."""
    return make_platform()
