"""A real gpudock server in a background thread, and a runner for the CLI against it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
import uvicorn
from typer.testing import CliRunner, Result

from gpudock.api.app import create_app
from gpudock.cli.main import app
from gpudock.platform import open_platform
from gpudock.settings import Settings
from tests.support.cli import (
    FLEET,
    STARTUP_DEADLINE_S,
    Invoke,
    LiveServer,
    instance_names,
    wait_until_started,
)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data_dir = tmp_path_factory.mktemp("gpudock-data")
    settings = Settings(data_dir=data_dir, simulate=FLEET, runtime="fake", image_pull="never")
    platform = open_platform(settings)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))  # the port is ours from here on: no race for it
    port = listener.getsockname()[1]
    config = uvicorn.Config(create_app(platform), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="gpudock-test-server"
    )
    thread.start()
    try:
        wait_until_started(server, thread)
        token = (data_dir / "admin.token").read_text().strip()
        yield LiveServer(url=f"http://127.0.0.1:{port}", admin_token=token, data_dir=data_dir)
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_DEADLINE_S)
        listener.close()
        platform.close()
    assert not thread.is_alive(), "the test server did not shut down"


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
