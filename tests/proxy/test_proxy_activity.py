"""Use through a service URL is activity for the idle auto-stop: the proxy
writes the instance's last use (at most once a minute), and an idle stop
counts from it. Fake runtime, a real server in front and the echo service
behind, an injected clock (the passes run one at a time; nothing waits)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import logins, users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.instances.auto_stop import AutoStopPolicy, auto_stop_pass
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples
from gpudock.settings import Settings
from tests.support.clocks import FakeClock
from tests.support.service_echo import echo_server
from tests.support.web import CHEAP, PASSWORD, csrf_of
from tests.web.browser import serve

S = InstanceStatus
MINUTE = 60.0


@dataclass
class Stage:
    platform: Platform
    clock: FakeClock
    instance_id: str
    browser: httpx.Client

    def use(self) -> None:
        seen = self.browser.get(f"/i/{self.instance_id}/app/")
        assert seen.status_code == 200, seen.text

    def last_use(self) -> datetime | None:
        with self.platform.ctx.sessions() as session:
            instance = session.get(InstanceModel, self.instance_id)
            assert instance is not None
            return instance.last_service_use_at

    def status(self) -> tuple[InstanceStatus, str]:
        with self.platform.ctx.sessions() as session:
            instance = session.get(InstanceModel, self.instance_id)
            assert instance is not None
            return instance.status, instance.status_reason

    def idle_minutes(self, n: int) -> None:
        """n minutes of idle GPU samples, the auto-stop pass after each."""
        for _ in range(n):
            self.clock.advance(MINUTE)
            figure = GpuFigure(utilisation_percent=0.0, memory_used_mb=100.0)
            sample = Sample(self.instance_id, self.clock.now, 1.0, 1 << 20, gpus=(figure,))
            with self.platform.ctx.sessions.begin() as session:
                record_samples(session, [sample])
            auto_stop_pass(self.platform.ctx)


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    logins.configure_hashing(CHEAP)
    clock = FakeClock()
    runtime = FakeRuntime(clock=clock)
    settings = Settings(
        data_dir=tmp_path / "d",
        simulate="1x1xA100-80GB",
        runtime="fake",
        image_pull="never",
        service_auth_cache_s=0,
    )
    platform = open_platform(settings, runtime=runtime, clock=clock)
    alice = users.create_user(platform.ctx, "alice").user
    logins.set_password(platform.ctx, "alice", PASSWORD)
    request = InstanceRequest(
        gpu_model="A100-80GB",
        gpu_count=1,
        name="nb",
        services=(("app", 8000),),
        auto_stop=AutoStopPolicy(idle_after_s=30 * 60),
    )
    instance = actions.create_instance(platform.ctx, alice, request)
    platform.reconciler.drain()
    running = actions.get_instance(platform.ctx, alice, instance.id)
    assert running.status == S.RUNNING and running.container_id is not None
    try:
        with echo_server() as address, serve(platform) as url, httpx.Client(base_url=url) as web:
            runtime.serve_port(running.container_id, 8000, address)
            token = csrf_of(web.get("/login").text)
            form = {"username": "alice", "password": PASSWORD, "csrf_token": token}
            assert web.post("/login", data={**form, "next_url": "/"}).status_code == 303
            yield Stage(platform, clock, instance.id, web)
    finally:
        platform.close()


def test_proxied_use_is_written_once_a_minute(stage: Stage) -> None:
    assert stage.last_use() is None
    stage.use()
    first = stage.clock.now
    assert stage.last_use() == first
    stage.clock.advance(30)
    stage.use()
    assert stage.last_use() == first  # within the minute: no second write
    stage.clock.advance(31)
    stage.use()
    assert stage.last_use() == stage.clock.now


def test_a_recently_used_instance_is_not_idle_stopped_until_the_window_passes(
    stage: Stage,
) -> None:
    stage.idle_minutes(15)
    stage.use()  # 15 min in: the notebook is opened through its URL
    stage.idle_minutes(25)  # 40 min of idle GPUs, but only 25 since the use
    status, reason = stage.status()
    assert status == S.RUNNING, reason
    stage.idle_minutes(6)  # 31 min after the use, warned 10 min before
    status, reason = stage.status()
    assert status in (S.STOPPING, S.STOPPED)
    assert "no SSH session or service-URL use" in reason


def test_opening_a_websocket_is_use(stage: Stage) -> None:
    base = str(stage.browser.base_url).rstrip("/").replace("http://", "ws://")
    url = f"{base}/i/{stage.instance_id}/app/ws"
    cookie = f"gpudock_session={stage.browser.cookies['gpudock_session']}"

    async def talk() -> str | bytes:
        async with connect(url, additional_headers={"Cookie": cookie}) as ws:
            await ws.send("hello")
            return await ws.recv()

    assert asyncio.run(talk()) == "hello"
    assert stage.last_use() == stage.clock.now
