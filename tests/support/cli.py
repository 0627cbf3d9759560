"""A real gpudock server in a background thread, and a runner for the CLI against it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from typer.testing import Result

FLEET = "1x4xA100-80GB,1x2xRTX4090-24GB"


STARTUP_DEADLINE_S = 30.0


@dataclass(frozen=True)
class LiveServer:
    url: str
    admin_token: str
    data_dir: Path


def wait_until_started(server: uvicorn.Server, thread: threading.Thread) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the test server exited during startup")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test server did not start in {STARTUP_DEADLINE_S} s")
        time.sleep(0.01)


Invoke = Callable[..., Result]


instance_names = itertools.count()
