"""JupyterLab and TensorBoard in a real container of gpudock/jupyter:bookworm,
reached through the proxy over the container's network namespace."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator

import docker
import httpx
import pytest
from websockets.asyncio.client import connect

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.errors import Conflict
from gpudock.images.base_image import BASE_IMAGE
from gpudock.images.service_image import SERVICES_IMAGE, build_services_image
from gpudock.platform import Platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.services.accounts import logins, users
from gpudock.services.instances import actions, launch
from gpudock.services.instances.actions import InstanceRequest
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for
from tests.support.web import CHEAP, PASSWORD, csrf_of, log_in
from tests.web.browser import serve

pytestmark = pytest.mark.docker
READY_S = 120.0


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
def jupyter_instance(
    docker_platform_factory: PlatformFactory, services_image: str
) -> Iterator[tuple[Platform, str, str]]:
    logins.configure_hashing(CHEAP)
    platform = docker_platform_factory(stop_timeout_s=1, service_auth_cache_s=0)
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


def _logged_in(url: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    token = csrf_of(client.get("/login").text)
    form = {"username": "alice", "password": PASSWORD, "csrf_token": token, "next_url": "/"}
    assert client.post("/login", data=form).status_code == 303
    return client


def _until_up(client: httpx.Client, path: str) -> httpx.Response:
    deadline = time.monotonic() + READY_S
    while True:
        answer = client.get(path)
        if answer.status_code != 502 or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)  # the service is still starting inside the container


def test_jupyter_kernel_runs_code_over_the_proxied_websocket(
    jupyter_instance: tuple[Platform, str, str],
) -> None:
    _platform, url, instance_id = jupyter_instance
    client = _logged_in(url)
    base = f"/i/{instance_id}/jupyter"
    status = _until_up(client, f"{base}/api/status")
    assert status.status_code == 200, status.text
    xsrf = client.get(f"{base}/lab").cookies.get("_xsrf") or ""
    kernel = client.post(
        f"{base}/api/kernels", json={"name": "python3"}, headers={"X-XSRFToken": xsrf}
    )
    assert kernel.status_code == 201, kernel.text
    kernel_id = kernel.json()["id"]
    host = url.removeprefix("http://")
    cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())

    async def run_cell() -> str:
        ws_url = f"ws://{host}{base}/api/kernels/{kernel_id}/channels"
        async with connect(
            ws_url, additional_headers={"Cookie": cookie}, origin=f"http://{host}"
        ) as ws:  # type: ignore[arg-type]
            msg_id = uuid.uuid4().hex
            await ws.send(json.dumps(_execute(msg_id, "print('through the proxy', 6 * 7)")))
            while True:
                reply = json.loads(await ws.recv())
                if reply["msg_type"] == "stream" and reply["parent_header"].get("msg_id") == msg_id:
                    return str(reply["content"]["text"])

    assert asyncio.run(asyncio.wait_for(run_cell(), 60)) == "through the proxy 42\n"
    board = _until_up(client, f"/i/{instance_id}/tensorboard/")
    assert board.status_code == 200 and "TensorBoard" in board.text


def _execute(msg_id: str, code: str) -> dict[str, object]:
    return {
        "header": {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "username": "t",
            "session": uuid.uuid4().hex,
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "channel": "shell",
        "buffers": [],
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
        },
    }


def test_start_jupyter_on_an_image_without_it_says_what_is_missing(
    docker_platform_factory: PlatformFactory, engine: docker.DockerClient
) -> None:
    logins.configure_hashing(CHEAP)
    platform = docker_platform_factory(stop_timeout_s=1)
    alice = users.create_user(platform.ctx, "alice")
    logins.set_password(platform.ctx, "alice", PASSWORD)
    request = InstanceRequest(gpu_model=None, gpu_count=0, name="plain")
    created = actions.create_instance(platform.ctx, alice.user, request)
    for _ in range(200):
        platform.reconciler.drain()
        if (
            actions.get_instance(platform.ctx, alice.user, created.id).status
            == InstanceStatus.RUNNING
        ):
            break

    with pytest.raises(Conflict, match=r"missing: jupyter-lab is not on PATH.*installs nothing"):
        launch.start_service(platform.ctx, alice.user, "plain", "jupyter")
    card = log_in(platform, "alice").post(f"/instances/{created.id}/services/jupyter/start")
    assert card.status_code == 200  # the console's card says it where the button was
    assert "jupyter-lab is not on PATH" in card.text and 'id="services-error"' in card.text
