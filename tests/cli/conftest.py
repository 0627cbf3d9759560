"""A real gpudock server in a background thread, and a runner for the CLI against it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpudock.cli.main import app
from gpudock.platform import open_platform
from gpudock.settings import Settings
from tests.support.cli import FLEET, Invoke, LiveServer, instance_names, serving


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data_dir = tmp_path_factory.mktemp("gpudock-data")
    settings = Settings(data_dir=data_dir, simulate=FLEET, runtime="fake", image_pull="never")
    with serving(open_platform(settings)) as server:
        yield server


@pytest.fixture
def config_home(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def gpudock(live_server: LiveServer, config_home: Path) -> Invoke:
    """`gpudock(*args, token=..., url=..., env=..., input=...)` as the admin by default.

    XDG_CONFIG_HOME always points into tmp_path, so no real config file is ever read.
    """
    runner = CliRunner()

    def invoke(
        *args: str,
        token: str | None = live_server.admin_token,
        url: str | None = live_server.url,
        env: Mapping[str, str | None] | None = None,
        input: str | None = None,
    ) -> Result:
        environment: dict[str, str | None] = {
            "GPUDOCK_URL": url,
            "GPUDOCK_TOKEN": token,
            "XDG_CONFIG_HOME": str(config_home),
            "COLUMNS": "200",
            **(env or {}),
        }
        return runner.invoke(app, list(args), env=environment, input=input)

    return invoke


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names no other test in the module uses (the server is shared)."""
    return lambda prefix: f"{prefix}-{next(instance_names)}"
