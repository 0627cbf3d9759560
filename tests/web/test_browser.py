"""The console end to end: Chromium, uvicorn, the reconciler and real containers."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
from playwright.sync_api import Locator, Page, expect

from gpudock.platform import Platform
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.instances import container_spec as containers
from tests.support.key_proof import make_key
from tests.support.platforms import PlatformFactory
from tests.support.web import PASSWORD, make_user
from tests.web.browser import chromium, fill_key_with_proof, screenshot_dir, serve

pytestmark = pytest.mark.docker
WAIT_MS = 90_000


@pytest.fixture
def real(docker_platform_factory: PlatformFactory) -> Platform:
    platform = docker_platform_factory(stop_timeout_s=1)
    make_user(platform, "alice")
    accounts.set_password(platform.ctx, users.ADMIN_NAME, PASSWORD)
    return platform


def log_in(page: Page, url: str, name: str) -> None:
    if "/login" not in page.url:
        page.goto(f"{url}/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("a.who")).to_contain_text(name)


def status(page: Page) -> Locator:
    return page.locator("#instance-live [data-status]").first


def container_state(engine: docker.DockerClient, platform: Platform, instance_id: str) -> str:
    name = containers.container_name(platform.ctx.cluster_id, instance_id)
    state: str = engine.containers.get(name).status
    return state


def test_user_and_operator_journey_in_chromium(
    real: Platform, engine: docker.DockerClient, tmp_path: Path
) -> None:
    shots = screenshot_dir(tmp_path)
    with serve(real) as url, chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{url}/instances")
        expect(page).to_have_url(f"{url}/login?next=/instances")
        page.screenshot(path=shots / "login.png")
        set_price_and_top_up(page, url, shots)
        page.goto(f"{url}/instances")
        log_in(page, url, "alice")
        expect(page).to_have_url(f"{url}/instances")
        add_ssh_key(page, tmp_path)
        instance_id = create_and_watch(page, url, shots)
        assert container_state(engine, real, instance_id) == "running"  # a real container
        ssh = page.locator("#ssh-command")
        if ssh.count():  # the SSH gateway (issue 3) is installed
            page.click('button[data-copy="#ssh-command"]')
            expect(page.locator('button[data-copy="#ssh-command"]')).to_have_text("Copied")
            copied = page.evaluate("navigator.clipboard.readText()")
            assert copied == ssh.inner_text() and copied.startswith("ssh ")
        else:
            expect(page.locator("body")).not_to_contain_text("docker exec")
        stop_and_start(page, engine, real, instance_id)
        see_the_ledger_line(page, shots)
        page.goto(f"{url}/instances/{instance_id}")
        switch_languages(page, shots)
        page.goto(f"{url}/")
        page.screenshot(path=shots / "dashboard.png", full_page=True)
        page.goto(f"{url}/instances")
        expect(page.locator(f"tr[data-instance={instance_id}]")).to_contain_text("running")
        page.screenshot(path=shots / "instances.png", full_page=True)
        page.click("header form button")  # log out
        expect(page).to_have_url(f"{url}/login")
        operator(page, url, shots)


def set_price_and_top_up(page: Page, url: str, shots: Path) -> None:
    """As the admin: RTX 4090s cost 3.6 an hour, and alice gets 100 to spend."""
    log_in(page, url, "admin")
    page.click("header nav >> text=Prices & top-ups")
    form = page.locator("#price-form")
    form.locator("select[name=kind]").select_option("gpu")
    form.locator("select[name=gpu_model]").select_option("RTX4090-24GB")
    form.locator("input[name=amount]").fill("3.6")
    form.locator("button[type=submit]").click()
    expect(page.locator("tr[data-price='gpu:RTX4090-24GB']")).to_contain_text("3.6")
    topup = page.locator("#topup-form")
    topup.locator("select[name=user]").select_option("alice")
    topup.locator("input[name=amount]").fill("100")
    topup.locator("button[type=submit]").click()
    expect(page.locator("#topped")).to_contain_text("Credited 100 CNY to alice")
    page.screenshot(path=shots / "admin-billing.png", full_page=True)
    page.click("header form button")  # log out
    expect(page).to_have_url(f"{url}/login")


def add_ssh_key(page: Page, key_dir: Path) -> None:
    """The page's own screenshot is test_ssh_keys_browser.py's."""
    page.click("header nav >> text=SSH keys")
    fill_key_with_proof(page, make_key(key_dir, "alice"))
    page.click("#key-form button[type=submit]")
    expect(page.locator("tr[data-key='alice@test']")).to_contain_text("SHA256:")


def see_the_ledger_line(page: Page, shots: Path) -> None:
    """The stop closed the first running interval: a compute line at 3.6/h."""
    page.click("header nav >> text=Billing")
    line = page.locator("#ledger tr[data-kind=compute]").first
    expect(line).to_contain_text("web-demo")
    expect(line).to_contain_text("1 × RTX4090-24GB at 3.6/h")
    expect(page.locator("#ledger tr[data-kind=topup]")).to_contain_text("100")
    expect(page.locator("#usage tr[data-usage]")).to_contain_text("web-demo")
    expect(page.locator("#spend-chart rect.bar")).to_have_count(30)
    page.screenshot(path=shots / "billing.png", full_page=True)
    page.click("header nav >> text=Images")
    expect(page.locator("#images tr[data-image]").first).to_be_visible()
    page.screenshot(path=shots / "images.png", full_page=True)


def create_and_watch(page: Page, url: str, shots: Path) -> str:
    page.click("header nav >> text=Instances")
    page.click("text=New instance")
    page.select_option("select[name=gpu_model]", "RTX4090-24GB")
    expect(page.locator("#availability")).to_contain_text("2 of 2 free")
    expect(page.locator("#estimate")).to_have_text("3.6 CNY")
    page.fill("input[name=gpu_count]", "2")
    page.locator("input[name=gpu_count]").dispatch_event("change")
    expect(page.locator("#estimate")).to_have_text("7.2 CNY")
    price_a_share(page)
    expect(page.locator("#estimate")).to_have_text("7.2 CNY")  # whole GPUs again
    expect(page.locator("#image-hint [data-compat]")).to_be_visible()
    page.fill("input[name=name]", "web-demo")
    page.fill("input[name=gpu_count]", "3")
    page.click("#create-form button[type=submit]")
    expect(page.locator(".field-error")).to_contain_text(
        "from 0 to 2: no RTX4090-24GB host has more"
    )
    page.fill("input[name=gpu_count]", "1")
    page.locator("input[name=gpu_count]").dispatch_event("change")
    expect(page.locator("#estimate")).to_have_text("3.6 CNY")
    page.screenshot(path=shots / "instance-new.png", full_page=True)
    page.click("#create-form button[type=submit]")
    expect(page.locator("h1")).to_contain_text("web-demo")
    expect(status(page)).to_have_attribute("data-status", "running", timeout=WAIT_MS)
    page.screenshot(path=shots / "instance.png", full_page=True)
    return page.url.rsplit("/", 1)[1]


def price_a_share(page: Page) -> None:
    """The "share of a GPU" choice: the price follows the share as it is typed,
    as a fraction of the card or as GB of its memory, then back to whole GPUs."""
    page.check("input[name=gpu_mode][value=share]")
    page.fill("#gpu-share", "0.5")
    expect(page.locator("#estimate")).to_have_text("1.8 CNY")  # half of 3.6 an hour
    expect(page.locator("#availability")).to_contain_text("12 GiB of its GPU memory")
    page.select_option("#share-unit", "gb")
    page.fill("#gpu-share", "6")
    expect(page.locator("#estimate")).to_have_text("0.9 CNY")  # 6 of the card's 24 GB
    page.check("input[name=gpu_mode][value=whole]")


def stop_and_start(
    page: Page, engine: docker.DockerClient, platform: Platform, instance_id: str
) -> None:
    page.click("button[data-action=stop]")
    expect(status(page)).to_have_attribute("data-status", "stopped", timeout=WAIT_MS)
    assert container_state(engine, platform, instance_id) == "exited"
    page.click("button[data-action=start]")
    expect(status(page)).to_have_attribute("data-status", "running", timeout=WAIT_MS)
    assert container_state(engine, platform, instance_id) == "running"
    expect(page.locator("ol.timeline li")).to_have_count(8)


def switch_languages(page: Page, shots: Path) -> None:
    page.click("a.lang[data-lang=zh-CN]")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(status(page)).to_have_text("运行中")
    expect(page.locator("header nav")).to_contain_text("实例")
    page.screenshot(path=shots / "instance-zh-CN.png", full_page=True)
    page.click("a.lang[data-lang=en]")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(status(page)).to_have_text("running")


def operator(page: Page, url: str, shots: Path) -> None:
    log_in(page, url, "admin")
    page.click("text=Hosts & GPUs")
    host = page.locator("section[data-host=sim1-rtx4090-24gb]")
    expect(host).to_contain_text("web-demo")
    expect(host).to_contain_text("(alice)")
    expect(host.locator("[data-state=healthy]")).to_have_count(2)
    page.screenshot(path=shots / "admin-hosts.png", full_page=True)
    inject_and_repair(page, shots)
    page.click("header nav >> text=Users")
    page.fill("#user-form input[name=name]", "carol")
    page.click("#user-form button[type=submit]")
    expect(page.locator("#new-token")).to_contain_text("gpd_")
    carol = page.locator("tr[data-user=carol]")
    expect(carol).to_be_visible()
    carol.locator("input[name=reason]").fill("browser drill")
    carol.locator("button[data-action=disable-user]").click()  # the dialog is accepted
    expect(page.locator("tr[data-user=carol] [data-status=disabled]")).to_be_visible()
    page.screenshot(path=shots / "admin-users.png", full_page=True)


def inject_and_repair(page: Page, shots: Path) -> None:
    """Xid 48 (double-bit ECC) on an idle simulated A100: it leaves service, then comes back."""
    option = page.locator("#fault-form select[name=gpu] option", has_text="sim0-a100-80gb #0")
    gpu = option.get_attribute("value")
    assert gpu
    page.select_option("#fault-form select[name=gpu]", gpu)
    page.fill("#fault-form input[name=xid]", "48")
    page.fill("#fault-form input[name=message]", "browser drill")
    page.click("button[data-action=inject-fault]")
    row = page.locator(f"tr[data-gpu='{gpu}']")
    expect(row.locator("[data-state]")).to_have_attribute(
        "data-state", "unhealthy", timeout=WAIT_MS
    )
    expect(row).to_contain_text("Xid 48")
    row.scroll_into_view_if_needed()
    page.screenshot(path=shots / "admin-gpu-fault.png", full_page=True)
    page.click("header nav >> text=Reliability")
    expect(page.locator("#faults")).to_contain_text("browser drill")
    page.screenshot(path=shots / "admin-reliability.png", full_page=True)
    page.click("header nav >> text=Hosts & GPUs")
    page.locator(f"tr[data-gpu='{gpu}'] button[data-action=repair]").click()
    expect(page.locator(f"tr[data-gpu='{gpu}'] [data-state]")).to_have_attribute(
        "data-state", "healthy", timeout=WAIT_MS
    )
