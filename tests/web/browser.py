"""A real console in a real Chromium: uvicorn in a thread, Debian's Chromium via Playwright."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from playwright.sync_api import Browser, Page, sync_playwright

from gpudock.api.app import create_app
from gpudock.platform import Platform
from tests.support.key_proof import public_text

CHROMIUM = os.environ.get("GPUDOCK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SCREENSHOT_ENV = "GPUDOCK_SCREENSHOT_DIR"


@contextmanager
def serve(platform: Platform) -> Iterator[str]:
    """The app with its reconciler on 127.0.0.1, on a socket bound before the thread
    starts: early connections wait in the backlog, so nobody polls for readiness."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(platform), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextmanager
def chromium() -> Iterator[Browser]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's Chromium and CJK fonts with "
            "`apt-get install -y chromium fonts-noto-cjk` (scripts/setup.sh --tests does)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def screenshot_dir(tmp_path: Path) -> Path:
    """docs/screenshots when GPUDOCK_SCREENSHOT_DIR says so, else a temporary folder."""
    target = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


def fill_key_with_proof(page: Page, private_key: Path, public_key: Path | None = None) -> None:
    """Fill the SSH keys form as a user does: run the page's one-line command with the
    key's path, paste what it printed and the .pub (PUBLIC_KEY's, if given)."""
    command = page.locator("#sign-command").inner_text()
    line = command.replace("~/.ssh/id_ed25519", str(private_key))
    signed = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    page.fill("textarea[name=public_key]", public_text(public_key or private_key))
    page.fill("textarea[name=signature]", signed.stdout)
