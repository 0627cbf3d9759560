"""What the agent tests share: the in-process link rig over each module's `platform`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.platform import Platform
from tests.support.agents import LinkRig


@pytest.fixture
def rig(platform: Platform, tmp_path: Path) -> Iterator[LinkRig]:
    """The platform's agent gateway started; agents joined by the test (stopped after)."""
    made = LinkRig(platform, tmp_path)
    made.start()
    yield made
    made.stop()
