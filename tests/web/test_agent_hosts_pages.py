"""The console's hosts page shows the hosts with agents (admins only): state, link,
last heartbeat, agent and engine versions, GPUs, labels — live, as the link changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from gpudock.db.models import LinkState
from gpudock.platform import Platform
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.agents import hosts
from tests.support.agents import LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for
from tests.support.web import PASSWORD, log_in, make_user
from tests.web.browser import chromium, serve


@pytest.fixture
def console(platform_factory: PlatformFactory) -> Platform:
    platform = platform_factory(
        agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=0.2
    )
    make_user(platform, "alice")
    accounts.set_password(platform.ctx, users.ADMIN_NAME, PASSWORD)
    return platform


@pytest.fixture
def rig(console: Platform, tmp_path: Path) -> Iterator[LinkRig]:
    rig = LinkRig(console, tmp_path)
    rig.start()
    yield rig
    rig.stop()


def linked(rig: LinkRig, console: Platform, name: str, labels: dict[str, str]) -> None:
    url, token = join_parts(hosts.add_host(console.ctx, name, labels).join_command)
    rig.join(name, url, token)
    wait_for(lambda: hosts.get_host(console.ctx, name).link_state is LinkState.UP, f"{name} linked")


def agent_row(page: str, name: str) -> str:
    return page.split(f'data-agent-host="{name}"')[1].split("</tr>")[0]


def test_admins_see_each_agent_host_and_a_tenant_does_not(rig: LinkRig, console: Platform) -> None:
    linked(rig, console, "box-1", {"region": "eu"})
    hosts.add_host(console.ctx, "box-2")  # no agent yet
    admin = log_in(console, "admin")
    page = admin.client.get("/admin/hosts/live").text
    row = agent_row(page, "box-1")
    assert 'data-host-state="active"' in row and 'data-link="up"' in row
    assert "1 × H200-140GB" in row and "region=eu" in row and "fake" in row  # its engine
    assert "UTC" in row.split("data-heartbeat")[1]
    pending = agent_row(page, "box-2")
    assert "waiting for its agent" in pending and "never linked" in pending
    # Its GPUs are a host card of their own, marked as an agent's.
    card = page.split('data-host="box-1"')[1].split("</section>")[0]
    assert "agent" in card and "H200-140GB" in card
    alice = log_in(console, "alice")
    assert alice.client.get("/admin/hosts/live").status_code == 403
    assert "box-1" not in alice.client.get("/").text


def test_the_page_follows_the_link_as_it_goes_down(rig: LinkRig, console: Platform) -> None:
    linked(rig, console, "box-1", {"zone": "a"})
    with serve(console) as url, chromium() as browser:
        page = browser.new_context(locale="en-US").new_page()
        page.goto(f"{url}/login")
        page.fill("input[name=username]", users.ADMIN_NAME)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{url}/admin/hosts")
        link = page.locator("[data-agent-host='box-1'] [data-link]")
        expect(link).to_have_attribute("data-link", "up")
        expect(page.locator("[data-agent-host='box-1'] [data-labels]")).to_have_text("zone=a")
        rig.halt("box-1")
        expect(link).to_have_attribute("data-link", "down", timeout=15_000)  # a refresh later
        expect(link).to_have_text("link down")
