"""End to end in a real Chromium: a real server, a real container of
gpudock/jupyter:bookworm, its JupyterLab and TensorBoard through the proxy.

The proxy's idle timeout is IDLE_S here (an hour in production): a kernel
WebSocket whose ends answer outlives three times it, and one whose instance
side stops answering (a paused container) is closed once it has passed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import docker
import pytest
from playwright.sync_api import Page, WebSocket

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.images.base_image import BASE_IMAGE
from gpudock.images.service_image import SERVICES_IMAGE, build_services_image
from gpudock.platform import Platform
from gpudock.reconcile.garbage import collect_garbage
from gpudock.runtime.docker import DockerRuntime
from gpudock.services.accounts import logins, users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for
from tests.support.web import CHEAP, PASSWORD
from tests.web.browser import chromium, serve

pytestmark = pytest.mark.docker
READY_S = 180.0
IDLE_S = 6.0
UI_MS = 120_000
LOG_SCALAR = (
    "from tensorboard.summary import Writer\n"
    "w = Writer('/root/data/tensorboard/run1')\n"
    "for step in range(3): w.add_scalar('gpudock_loss', 1.0 / (step + 1), step=step)\n"
    "w.close()\n"
)


@pytest.fixture(scope="session")
def services_image() -> str:
    """Built once per machine (cached by recipe); the wheels come from PyPI the first time."""
    runtime = DockerRuntime(host_firewall=False)
    try:
        build_services_image(runtime, base_image=BASE_IMAGE)
    finally:
        runtime.close()
    return SERVICES_IMAGE


@pytest.fixture
def notebook(
    docker_platform_factory: PlatformFactory, services_image: str
) -> Iterator[tuple[Platform, str, str]]:
    """(platform, server URL, instance id): alice's running instance of the image."""
    logins.configure_hashing(CHEAP)
    platform = docker_platform_factory(
        stop_timeout_s=1, service_auth_cache_s=0, service_idle_timeout_s=IDLE_S
    )
    alice = users.create_user(platform.ctx, "alice").user
    logins.set_password(platform.ctx, "alice", PASSWORD)
    request = InstanceRequest(gpu_model=None, gpu_count=0, name="nb", image=services_image)
    with serve(platform) as url:  # its reconciler runs the instance
        created = actions.create_instance(platform.ctx, alice, request)
        wait_for(lambda: _running(platform, created.id), "the instance to run", READY_S)
        yield platform, url, created.id


def _running(platform: Platform, instance_id: str) -> bool:
    with platform.ctx.sessions() as session:
        found = session.get(InstanceModel, instance_id)
        return found is not None and found.status == InstanceStatus.RUNNING


def _run_cell(page: Page, code: str, printed: str) -> None:
    """Type CODE into the notebook's last cell, run it, and wait for what it prints."""
    page.locator(".jp-Notebook .jp-Cell .cm-content").last.click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    output = page.locator(".jp-OutputArea-output", has_text=printed)
    output.wait_for(timeout=UI_MS)


def _kernel_socket(sockets: list[WebSocket]) -> WebSocket:
    channels = [ws for ws in sockets if "/channels" in ws.url and not ws.is_closed()]
    assert len(channels) == 1, [ws.url for ws in sockets]
    return channels[0]


def test_jupyterlab_and_tensorboard_in_the_browser_through_the_proxy(
    notebook: tuple[Platform, str, str], engine: docker.DockerClient
) -> None:
    platform, url, instance_id = notebook
    base = f"{url}/i/{instance_id}"
    with chromium() as browser:
        context = browser.new_context()
        page = context.new_page()
        sockets: list[WebSocket] = []
        page.on("websocket", lambda ws: sockets.append(ws))
        sent: list[str] = []

        page.goto(f"{base}/jupyter/lab")  # no credentials: the console's login first
        assert "/login?next=" in page.url
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/jupyter/lab**")

        # Until JupyterLab answers, the proxy's page reloads itself every 3 s.
        page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=UI_MS)
        page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=UI_MS)  # connected
        _run_cell(page, "print('through the proxy', 6 * 7)", "through the proxy 42")
        kernel = _kernel_socket(sockets)
        kernel.on("framesent", lambda payload: sent.append(str(payload)))

        page.wait_for_timeout(3 * IDLE_S * 1000)  # quiet but alive: three idle timeouts
        assert not kernel.is_closed()
        _run_cell(page, "print('still', 7 * 6)", "still 42")
        assert not kernel.is_closed() and any("still" in frame for frame in sent)

        # An image gpudock built passes on no build labels: the start-up garbage
        # pass once took its instances for a crashed build's steps.
        labels = engine.images.get(SERVICES_IMAGE).labels
        assert not labels.get("gpudock.build") and not labels.get("gpudock.managed")
        collect_garbage(platform.ctx, at_startup=True)
        container = engine.containers.get(_container_of(platform, instance_id))
        assert container.status == "running"
        logged = container.exec_run(["/opt/gpudock-services/bin/python", "-c", LOG_SCALAR])
        assert logged.exit_code == 0, logged.output
        board = context.new_page()  # the same login, a second tab
        tags = f"{base}/tensorboard/data/plugin/scalars/tags"
        wait_for(
            lambda: "gpudock_loss" in board.request.get(tags).text(),
            "TensorBoard to read the logged scalar",
            60,
        )
        board.goto(f"{base}/tensorboard/#scalars")
        board.get_by_text("gpudock_loss").first.wait_for(timeout=UI_MS)

        _pause(container)  # the instance side stops answering; the browser's stays
        paused = time.monotonic()
        try:
            kernel.wait_for_event("close", timeout=4 * IDLE_S * 1000)
        finally:
            container.unpause()
        assert kernel.is_closed() and time.monotonic() - paused >= IDLE_S / 2


def _container_of(platform: Platform, instance_id: str) -> str:
    with platform.ctx.sessions() as session:
        found = session.get(InstanceModel, instance_id)
        assert found is not None and found.container_id
        return found.container_id


def _pause(container: docker.models.containers.Container) -> None:
    """`docker pause`, again when the kernel could not freeze the cgroup at once (seen
    in CI: "OCI runtime pause failed: unable to freeze", a freeze that timed out while
    the container's processes were busy)."""
    for attempt in range(5):
        try:
            container.pause()
            return
        except docker.errors.APIError as exc:
            if "unable to freeze" not in str(exc) or attempt == 4:
                raise
