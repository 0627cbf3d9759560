"""The console's hosts page shows the hosts with agents (admins only): state, link,
last heartbeat, agent and engine versions, GPUs, labels — live, as the link changes;
and what the fence kept on each, which an admin removes there."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect

from gpudock.db.models import InstanceStatus, LinkState
from gpudock.platform import Platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.agents import hosts
from gpudock.services.fleet import inventory
from gpudock.services.instances import actions as instances
from gpudock.services.instances import container_spec as containers
from tests.support.agents import LinkRig, join_parts, leave_behind
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for
from tests.support.web import PASSWORD, log_in, make_user
from tests.web.browser import chromium, serve
from tests.web.test_zh_cn_crawl import english_words


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


@dataclass(frozen=True)
class Kept:
    """An instance running on a simulated host, with a stopped copy of its container
    and data volume left on agent host box-1, as the fence keeps them."""

    instance_id: str
    container: str
    volume: str
    lives_on: str  # the simulated host it runs on
    box: FakeRuntime  # box-1's engine
    live: FakeRuntime  # the simulated hosts' engine

    def all_on_the_box(self) -> bool:
        """Its container and its volume are both still on box-1."""
        container = self.box.inspect_container(self.container)
        return container is not None and self.volume in self.box.volumes


@pytest.fixture
def left(rig: LinkRig, console: Platform) -> Kept:
    linked(rig, console, "box-1", {})
    ctx = console.ctx
    alice = next(u for u in users.list_users(ctx) if u.name == "alice")
    request = instances.InstanceRequest(gpu_model="RTX4090-24GB", gpu_count=1, name="train")
    created = instances.create_instance(ctx, alice, request)
    console.reconciler.drain()
    running = instances.get_instance(ctx, alice, created.id)
    assert running.status == InstanceStatus.RUNNING
    lives_on = next(h.name for h in inventory.list_hosts(ctx) if h.id == running.host_id)
    box, live = rig.runtimes["box-1"], ctx.runtime
    assert isinstance(box, FakeRuntime) and isinstance(live, FakeRuntime)
    container = containers.container_name(ctx.cluster_id, created.id)
    leave_behind(live, box, container)
    volume = live.spec_of(container).volume_name
    return Kept(created.id, container, volume, lives_on, box, live)


def kept_of(page: str, instance_id: str) -> str:
    return page.split(f'data-kept="{instance_id}"')[1].split("</tr>")[0]


def test_the_page_lists_what_the_fence_kept_on_each_host_apart_from_its_live_refresh(
    left: Kept, console: Platform
) -> None:
    admin = log_in(console, "admin")
    page = admin.client.get("/admin/hosts").text
    assert 'hx-get="/admin/hosts/box-1/kept"' in page.split('id="kept"')[1]
    assert "data-kept-host" not in admin.client.get("/admin/hosts/live").text
    fragment = admin.client.get("/admin/hosts/box-1/kept").text
    row = kept_of(fragment, left.instance_id)
    assert "train" in row and "alice" in row and left.volume in row
    assert "stopped" in row.split("data-container")[1] and f'title="{left.container}"' in row
    reason = row.split("data-reason>")[1].split("</td>")[0]
    assert reason == f"the instance lives on host {left.lives_on} now"
    assert 'name="with_data"' in row and 'type="checkbox"' in row
    left.box.remove_container(left.container)
    left.box.remove_volume(left.volume)
    nothing = admin.client.get("/admin/hosts/box-1/kept").text
    assert "data-kept-none" in nothing and "data-kept=" not in nothing


def shown_text(html: str) -> list[str]:
    """What a reader sees of `html` (its text, tooltips and confirmations), code aside."""
    html = re.sub(r"<code[^>]*>.*?</code>", " ", html, flags=re.DOTALL)
    return [*re.findall(r'(?:title|data-confirm)="([^"]*)"', html), re.sub(r"<[^>]+>", " ", html)]


def test_the_kept_list_and_a_removal_read_in_chinese(left: Kept, console: Platform) -> None:
    admin = log_in(console, "admin")
    zh = {"Accept-Language": "zh-CN"}
    names = frozenset({"box-1", "train", "alice", left.lives_on, left.container})
    section = admin.client.get("/admin/hosts", headers=zh).text.split('id="kept"')[1]
    assert english_words(shown_text(section.split("</section>")[0]), names) == []
    fragment = admin.client.get("/admin/hosts/box-1/kept", headers=zh).text
    assert f"该实例现在位于主机 {left.lives_on}" in kept_of(fragment, left.instance_id)
    assert english_words(shown_text(fragment), names) == []
    action = f"/admin/hosts/box-1/kept/{left.instance_id}/remove"
    form = {"csrf_token": admin.csrf(), "with_data": "true"}
    removed = admin.client.post(action, data=form, headers=zh).text
    done = removed.split('id="kept-done">')[1].split("</p>")[0]
    assert done == f"已删除 box-1 为实例 {left.instance_id} 保留的容器和旧数据卷。"
    refused = admin.client.post(action, data=form, headers=zh).text
    error = refused.split('id="kept-error">')[1].split("</p>")[0]
    assert "没有保留实例" in error and english_words(shown_text(error), names) == []


def test_an_admin_removes_a_kept_container_then_with_the_box_ticked_its_volume(
    left: Kept, console: Platform
) -> None:
    admin = log_in(console, "admin")
    action = f"/admin/hosts/box-1/kept/{left.instance_id}/remove"
    removed = admin.post(action)
    assert removed.status_code == 200
    done = removed.text.split('id="kept-done">')[1].split("</p>")[0]
    assert done == (
        f"Removed the container box-1 kept of instance {left.instance_id}; "
        "its old data volume stays there until you remove it too."
    )
    assert left.box.inspect_container(left.container) is None and left.volume in left.box.volumes
    row = kept_of(admin.client.get("/admin/hosts/box-1/kept").text, left.instance_id)
    assert "only its data volume is left" in row and left.volume in row
    assert admin.post(action, {"with_data": "true"}).status_code == 200
    assert left.box.volumes == {} and left.box.containers == {}
    assert "data-kept-none" in admin.client.get("/admin/hosts/box-1/kept").text
    # The instance's own container and volume, on the host it lives on, are untouched.
    assert left.live.inspect_container(left.container) is not None
    assert left.volume in left.live.volumes
    again = admin.post(action, {"with_data": "true"})
    assert again.status_code == 404
    assert "keeps no container of instance" in again.text.split('id="kept-error">')[1]


def test_a_tenant_can_neither_see_nor_remove_what_was_kept(left: Kept, console: Platform) -> None:
    alice = log_in(console, "alice")
    assert alice.client.get("/admin/hosts/box-1/kept").status_code == 403
    action = f"/admin/hosts/box-1/kept/{left.instance_id}/remove"
    refused = alice.post(action, {"with_data": "true"})  # with her own valid CSRF token
    assert refused.status_code == 403 and "this page is for admins" in refused.text
    assert left.all_on_the_box()


def test_a_remove_without_or_with_a_wrong_csrf_token_is_refused(
    left: Kept, console: Platform
) -> None:
    admin = log_in(console, "admin")
    other = log_in(console, "alice").csrf()
    action = f"/admin/hosts/box-1/kept/{left.instance_id}/remove"
    for data in ({}, {"csrf_token": "nope"}, {"csrf_token": other}):
        refused = admin.client.post(action, data={**data, "with_data": "true"})
        assert refused.status_code == 403, data
        assert "CSRF token" in refused.text
    assert left.all_on_the_box()


def test_a_host_whose_link_is_down_says_so_in_its_place(
    rig: LinkRig, left: Kept, console: Platform
) -> None:
    host_id = hosts.get_host(console.ctx, "box-1").id
    assert console.ctx.hosts is not None
    rig.halt("box-1")
    wait_for(lambda: not console.ctx.hosts.linked(host_id), "box-1 unlinked")  # type: ignore[union-attr]
    admin = log_in(console, "admin")
    assert admin.client.get("/admin/hosts").status_code == 200
    fragment = admin.client.get("/admin/hosts/box-1/kept")
    assert fragment.status_code == 200
    notice = fragment.text.split("data-kept-unreadable>")[1].split("</p>")[0]
    assert "host box-1&#39;s agent is not connected to this server" in notice
    assert "data-kept=" not in fragment.text
    refused = admin.post(f"/admin/hosts/box-1/kept/{left.instance_id}/remove")
    assert refused.status_code == 409 and 'id="kept-error"' in refused.text


def test_in_a_browser_the_list_loads_and_its_form_removes_one_with_its_volume(
    left: Kept, console: Platform
) -> None:
    with serve(console) as url, chromium() as browser:
        page = browser.new_context(locale="en-US").new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # the confirmation
        page.goto(f"{url}/login")
        page.fill("input[name=username]", users.ADMIN_NAME)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{url}/admin/hosts")
        row = page.locator(f"[data-kept-host='box-1'] [data-kept='{left.instance_id}']")
        expect(row.locator("[data-reason]")).to_have_text(
            f"the instance lives on host {left.lives_on} now"
        )
        row.locator("input[name=with_data]").check()
        row.locator("button[data-action=remove-kept]").click()
        expect(page.locator("#kept-done")).to_contain_text("and the old data volume")
        expect(page.locator("[data-kept-host='box-1'] [data-kept-none]")).to_be_visible()
    assert left.box.containers == {} and left.box.volumes == {}
