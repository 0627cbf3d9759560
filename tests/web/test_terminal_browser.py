"""The instance page's terminal end to end: Chromium, uvicorn, a real container.

One platform, server and running instance (alice's "train") serve both tests:
starting a container costs seconds. The browser's test drives the terminal as a
user does (typing, ^C, resizing the window, a dropped connection, a reload); the
other opens the WebSocket without a browser, to read the HTTP answers a browser
hides from its pages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import httpx
import pytest
from argon2 import PasswordHasher
from playwright.sync_api import Page, WebSocketRoute, expect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gpudock.db.models import InstanceStatus, SshSessionModel
from gpudock.platform import Platform, open_platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.settings import Settings
from tests.support.docker import docker_client, remove_cluster_objects, unmount_everything_under
from tests.support.sshgw import wait_for
from tests.support.web import CHEAP, PASSWORD, make_user
from tests.web.browser import chromium, screenshot_dir, serve

pytestmark = pytest.mark.docker
WAIT_MS = 20_000
FILE_NAME = "训练数据-2026.txt"


@dataclass
class Site:
    platform: Platform
    url: str
    instance_id: str
    engine: docker.DockerClient

    def in_container(self, command: str) -> str:
        name = containers.container_name(self.platform.ctx.cluster_id, self.instance_id)
        result = self.engine.containers.get(name).exec_run(["sh", "-c", command])
        return str(result.output.decode())

    def processes(self) -> list[str]:
        listing = self.in_container("cat /proc/[0-9]*/comm 2>/dev/null")
        return listing.split()

    def sessions(self) -> list[SshSessionModel]:
        admin = next(u for u in users.list_users(self.platform.ctx) if u.is_admin)
        return ssh_sessions.list_sessions(self.platform.ctx, admin, self.instance_id)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("terminal")
    settings = Settings(data_dir=tmp / "data", simulate="1x2xA100-80GB", image_pull="never")
    platform = open_platform(settings, runtime=DockerRuntime())
    engine = docker_client()
    accounts.configure_hashing(CHEAP)
    try:
        make_user(platform, "alice")
        make_user(platform, "bob")
        alice = next(u for u in users.list_users(platform.ctx) if u.name == "alice")
        request = InstanceRequest(gpu_model=None, gpu_count=0, name="train")
        instance_id = instances.create_instance(platform.ctx, alice, request).id

        def running() -> bool:
            platform.reconciler.drain()
            found = instances.get_instance(platform.ctx, alice, instance_id)
            return found.status == InstanceStatus.RUNNING

        wait_for(running, "alice's instance to run", deadline_s=90)
        with serve(platform) as url:
            yield Site(platform, url, instance_id, engine)
    finally:
        accounts.configure_hashing(PasswordHasher())
        remove_cluster_objects(engine, platform.ctx.cluster_id)
        platform.close()
        unmount_everything_under(tmp)


def log_in(page: Page, url: str, name: str, next_path: str) -> None:
    page.goto(f"{url}/login?next={next_path}")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{url}{next_path}")


def run(page: Page, command: str) -> None:
    """Type COMMAND into the terminal at a typist's pace, wait until the shell
    has echoed all of it, then Enter (so a step never races the previous one's
    prompt)."""
    page.keyboard.type(command, delay=15)
    expect(page.locator("#terminal .xterm-rows")).to_contain_text(command)
    page.keyboard.press("Enter")


def screen_text(page: Page) -> str:
    return page.locator("#terminal .xterm-rows").inner_text()


def expect_on_screen(page: Page, pattern: str) -> re.Match[str]:
    expect(page.locator("#terminal .xterm-rows")).to_contain_text(re.compile(pattern))
    found = re.search(pattern, screen_text(page))
    assert found, pattern
    return found


def test_a_shell_in_the_browser_types_interrupts_resizes_and_reconnects(
    site: Site, tmp_path: Path
) -> None:
    earlier = {s.id for s in site.sessions()}
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
        page = context.new_page()
        refusals: list[str] = []
        page.on(
            "console", lambda m: refusals.append(m.text) if "Content Security" in m.text else None
        )
        routes: list[WebSocketRoute] = []

        def through(socket: WebSocketRoute) -> None:  # to drop the connection at will
            socket.connect_to_server()
            routes.append(socket)

        page.route_web_socket(re.compile(r"/terminal\?"), through)
        path = f"/instances/{site.instance_id}"
        log_in(page, site.url, "alice", path)
        page.click("[data-terminal-open]")
        state = page.locator("[data-terminal-state]")
        expect(state).to_have_attribute("data-state", "connected", timeout=WAIT_MS)

        # UTF-8 both ways: a name typed in Chinese, listed by `ls`, the same bytes on disk
        run(page, f"cd /root && touch {FILE_NAME} && ls")
        expect_on_screen(page, re.escape(FILE_NAME))
        assert FILE_NAME in site.in_container("ls /root")

        # ^C interrupts the foreground command (the terminal's own interrupt character)
        run(page, "sleep 600")
        wait_for(lambda: "sleep" in site.processes(), "sleep to be the foreground command")
        page.keyboard.press("Control+C")
        run(page, 'echo "after-interrupt=$?"')
        expect_on_screen(page, r"after-interrupt=130")

        # a smaller window: the PTY follows the rows xterm.js shows
        run(page, 'echo "size=$(stty size)"')
        before = expect_on_screen(page, r"size=(\d+) (\d+)")
        page.set_viewport_size({"width": 800, "height": 600})
        shown_rows = page.locator("#terminal .xterm-rows > div")
        run(page, 'clear; echo "resized=$(stty size)"')
        after = expect_on_screen(page, r"resized=(\d+) (\d+)")
        assert int(after.group(2)) < int(before.group(2))  # fewer columns
        assert int(after.group(1)) == shown_rows.count()

        # the connection drops: the page reconnects to the same shell
        run(page, "export MARK=still-the-same-shell")
        routes[-1].close()
        expect(state).to_have_attribute("data-state", "connected", timeout=WAIT_MS)
        assert len(routes) == 2
        run(page, 'echo "mark=$MARK"')
        expect_on_screen(page, r"mark=still-the-same-shell")

        # a reload: the tab's shell again, with what it showed before
        page.reload()
        expect(state).to_have_attribute("data-state", "connected", timeout=WAIT_MS)
        expect_on_screen(page, r"mark=still-the-same-shell")
        run(page, 'echo "again=$MARK"')
        expect_on_screen(page, r"again=still-the-same-shell")
        page.screenshot(path=screenshot_dir(tmp_path) / "terminal.png", full_page=True)

        # audited like an SSH session: one row for the shell, in the page's session list
        web = [s for s in site.sessions() if s.id not in earlier]
        assert [(s.origin.value, s.outcome.value, s.key_fingerprint) for s in web] == [
            ("web", "open", None)
        ]
        expect(
            page.locator("#ssh-sessions tr[data-session=open] [data-origin=web]")
        ).to_be_visible()

        page.click("[data-terminal-close]")
        expect(state).to_have_attribute("data-state", "closed")

        def row() -> SshSessionModel:
            return next(s for s in site.sessions() if s.id == web[0].id)

        wait_for(lambda: row().outcome.value == "closed", "the shell's row to close")
        closed = row()
        assert closed.reason == "closed from the console" and closed.bytes_in > 0
        assert closed.bytes_out > closed.bytes_in  # the output, prompts and replays
        assert refusals == []  # the page's CSP admits what xterm.js needs


def test_another_tenant_and_another_origin_are_refused(site: Site) -> None:
    def cookie_of(name: str) -> str:
        with httpx.Client(base_url=site.url) as client:
            form = client.get("/login")
            token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
            assert token
            data = {"username": name, "password": PASSWORD, "csrf_token": token.group(1)}
            client.post("/login", data=data | {"next_url": "/"})
            return str(client.cookies["gpudock_session"])

    socket_url = site.url.replace("http://", "ws://") + f"/instances/{site.instance_id}/terminal"

    def status(cookie: str, origin: str) -> int:
        headers = {"Cookie": f"gpudock_session={cookie}", "Origin": origin}
        try:
            with connect(socket_url, additional_headers=headers, open_timeout=20) as socket:
                assert '"type": "attached"' in str(socket.recv(timeout=20))
                socket.send('{"type": "hangup"}')  # no shell left behind for the other test
                return 101
        except InvalidStatus as refused:
            return refused.response.status_code

    earlier = {s.id for s in site.sessions()}
    alice, bob = cookie_of("alice"), cookie_of("bob")
    assert status(bob, site.url) == 404
    assert status(alice, "http://evil.example") == 403
    assert status("forged", site.url) == 401
    assert status(alice, site.url) == 101
    refused = [s for s in site.sessions() if s.outcome.value == "refused" and s.id not in earlier]
    assert [s.origin.value for s in refused] == ["web"]
    assert "'http://evil.example' refused" in refused[0].reason
