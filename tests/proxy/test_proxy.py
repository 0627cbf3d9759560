"""The service-URL proxy on the fake runtime: a real server (uvicorn) in front,
a real service behind (the echo server), the database on SQLite."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.platform import Platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import logins, users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from tests.support.platforms import PlatformFactory
from tests.support.service_echo import echo_server
from tests.support.web import CHEAP, PASSWORD, csrf_of
from tests.web.browser import serve


@dataclass
class Stage:
    url: str
    platform: Platform
    runtime: FakeRuntime
    instance_id: str
    people: dict[str, users.NewUser]

    def api_headers(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.people[name].token}"}

    def login(self, name: str) -> httpx.Client:
        client = httpx.Client(base_url=self.url)
        token = csrf_of(client.get("/login").text)
        form = {"username": name, "password": PASSWORD, "csrf_token": token, "next_url": "/"}
        assert client.post("/login", data=form).status_code == 303
        return client

    def service_url(self, name: str = "app") -> str:
        return f"{self.url}/i/{self.instance_id}/{name}/"


@pytest.fixture
def stage(platform_factory: PlatformFactory) -> Iterator[Stage]:
    logins.configure_hashing(CHEAP)
    runtime = FakeRuntime()
    platform = platform_factory(runtime=runtime, service_auth_cache_s=0)
    people = {name: users.create_user(platform.ctx, name) for name in ("alice", "bob")}
    for name in people:
        logins.set_password(platform.ctx, name, PASSWORD)
    alice = people["alice"].user
    request = InstanceRequest(gpu_model=None, gpu_count=0, name="nb", services=(("app", 8000),))
    created = actions.create_instance(platform.ctx, alice, request)
    _drain_until_running(platform, created.id)
    with echo_server() as address, serve(platform) as url:
        container = actions.get_instance(platform.ctx, alice, created.id).container_id
        assert container is not None
        runtime.serve_port(container, 8000, address)
        yield Stage(url, platform, runtime, created.id, people)


def _drain_until_running(platform: Platform, instance_id: str) -> None:
    for _ in range(20):
        platform.reconciler.drain()
        with platform.ctx.sessions() as session:
            found = session.get(InstanceModel, instance_id)
            if found is not None and found.status == InstanceStatus.RUNNING:
                return
    raise AssertionError(f"{instance_id} never ran")


def test_no_credentials_go_to_the_login_page_and_a_forged_cookie_is_refused(stage: Stage) -> None:
    with httpx.Client() as anonymous:
        page = anonymous.get(stage.service_url() + "x", headers={"accept": "text/html"})
        assert page.status_code == 303
        assert page.headers["location"] == f"/login?next=/i/{stage.instance_id}/app/x"
        api = anonymous.get(stage.service_url())
        assert api.status_code == 401
        forged = anonymous.get(stage.service_url(), cookies={"gpudock_session": "A" * 43})
        assert forged.status_code == 401
        forged_link = anonymous.get(
            stage.service_url(), cookies={"gpudock_link": "gps_" + "B" * 43}
        )
        assert forged_link.status_code == 401


def test_another_tenant_gets_404_and_the_owner_gets_through(stage: Stage) -> None:
    bob = stage.login("bob")
    assert bob.get(stage.service_url()).status_code == 404
    assert bob.get(f"{stage.url}/i/nb/app/").status_code == 404  # bob has no 'nb'
    alice = stage.login("alice")
    seen = alice.get(stage.service_url() + "deep/path?q=1", cookies={"theirs": "kept"})
    assert seen.status_code == 200, seen.text
    got = seen.json()
    assert got["path"] == "/deep/path" and got["query"] == "q=1"
    assert "gpudock_" not in got["headers"].get("cookie", "")
    assert "theirs=kept" in got["headers"]["cookie"]
    assert got["headers"]["x-forwarded-prefix"] == f"/i/{stage.instance_id}/app"
    assert "connection" not in got["headers"]  # hop-by-hop: the browser's, not the instance's
    assert "app_cookie" in seen.headers["set-cookie"]
    assert "planted" not in seen.headers["set-cookie"]  # an instance cannot set the console's


def test_the_name_redirects_to_the_id_and_bodies_and_streams_pass(stage: Stage) -> None:
    alice = stage.login("alice")
    moved = alice.get(f"{stage.url}/i/nb/app/x")
    assert moved.status_code == 303 and moved.headers["location"] == f"/i/{stage.instance_id}/app/x"
    posted = alice.post(stage.service_url() + "form", content=b"a" * 100_000)
    assert json.loads(posted.text)["body"] == "a" * 100_000
    with alice.stream("GET", stage.service_url() + "stream") as response:
        assert b"".join(response.iter_raw()) == b"part0\npart1\npart2\n"


def test_a_link_opens_the_service_until_it_is_revoked(stage: Stage) -> None:
    with httpx.Client(base_url=stage.url) as api:
        headers = stage.api_headers("alice")
        made = api.post("/api/v1/instances/nb/services/app/links", headers=headers)
        assert made.status_code == 201, made.text
        link = made.json()["url"]
        assert link.startswith(stage.service_url() + "?gpudock_token=gps_")
        with httpx.Client() as friend:
            first = friend.get(link)
            assert (
                first.status_code == 303
                and first.headers["location"] == f"/i/{stage.instance_id}/app/"
            )
            assert "gpudock_link=" in first.headers["set-cookie"]
            assert friend.get(stage.service_url()).status_code == 200
            assert "gps_" not in friend.get(stage.service_url()).json()["headers"].get("cookie", "")
            revoked = api.delete("/api/v1/instances/nb/services/app/links", headers=headers)
            assert revoked.json() == {"revoked": 1}
            assert friend.get(stage.service_url()).status_code == 401


def test_websockets_pass_both_ways_and_other_sites_are_refused(stage: Stage) -> None:
    alice = stage.login("alice")
    cookie = f"gpudock_session={alice.cookies['gpudock_session']}"
    ws_url = stage.service_url().replace("http://", "ws://") + "ws"
    host = stage.url.removeprefix("http://")

    async def talk() -> list[str | bytes]:
        async with connect(
            ws_url,
            additional_headers={"Cookie": cookie},
            origin=f"http://{host}",  # type: ignore[arg-type]
            subprotocols=["v1.kernel.websocket.jupyter.org"],  # type: ignore[list-item]
        ) as ws:
            assert ws.subprotocol == "v1.kernel.websocket.jupyter.org"
            await ws.send("hello")
            await ws.send(b"\x00\x01")
            return [await ws.recv(), await ws.recv()]

    assert asyncio.run(talk()) == ["hello", b"\x00\x01"]

    async def from_elsewhere() -> None:
        async with connect(
            ws_url, additional_headers={"Cookie": cookie}, origin="http://evil.example"
        ):  # type: ignore[arg-type]
            pass

    with pytest.raises(InvalidStatus):
        asyncio.run(from_elsewhere())


def test_a_port_nobody_serves_and_a_stopped_instance_say_so(stage: Stage) -> None:
    alice = stage.login("alice")
    body = {"name": "other", "port": 9}
    exposed = alice.post(
        "/api/v1/instances/nb/services", json=body, headers=stage.api_headers("alice")
    )
    assert exposed.status_code == 201, exposed.text
    closed = alice.get(stage.service_url("other"))
    assert closed.status_code == 502 and "nothing answers on port 9" in closed.text
    page = alice.get(stage.service_url("other"), headers={"accept": "text/html"})
    assert page.status_code == 502 and 'http-equiv="refresh"' in page.text  # still starting?
    actions.stop_instance(stage.platform.ctx, stage.people["alice"].user, "nb")
    stopped = alice.get(stage.service_url())
    assert stopped.status_code == 409 and "gpudock instances start nb" in stopped.text
