"""The console at a phone's width (390 px) in a real Chromium: no page is wider
than the screen, the menu folds behind a button and still reaches every entry
and "Log out", and a reason shown only on hover elsewhere shows on a tap. The
fake runtime: no container is involved."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from gpudock.platform import Platform
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from tests.support.platforms import PlatformFactory
from tests.support.web import PASSWORD, make_user
from tests.web.browser import chromium, screenshot_dir, serve

PHONE = {"width": 390, "height": 844}
PAGES = [
    "/",
    "/instances",
    "/instances/new",
    "/images",
    "/billing",
    "/ssh-keys",
    "/tokens",
    "/account",
    "/admin/hosts",
    "/admin/users",
    "/admin/billing",
    "/admin/reliability",
    "/admin/utilisation",
]


@pytest.fixture
def console(platform_factory: PlatformFactory) -> Platform:
    platform = platform_factory()
    make_user(platform, "alice")
    accounts.set_password(platform.ctx, users.ADMIN_NAME, PASSWORD)
    admin = next(u for u in users.list_users(platform.ctx) if u.name == users.ADMIN_NAME)
    request = instances.InstanceRequest(
        gpu_model=None, gpu_count=0, name="a-rather-long-instance-name-for-a-phone"
    )
    instances.create_instance(platform.ctx, admin, request)
    platform.reconciler.drain()
    return platform


def log_in(page: Page, url: str) -> None:
    page.goto(f"{url}/login")
    page.fill("input[name=username]", users.ADMIN_NAME)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator(".menu-toggle")).to_be_visible()


def test_every_page_fits_a_phone_and_the_menu_reaches_log_out(
    console: Platform, tmp_path: Path
) -> None:
    shots = screenshot_dir(tmp_path)
    with serve(console) as url, chromium() as browser:
        page = browser.new_context(viewport=PHONE, locale="en-US").new_page()
        log_in(page, url)
        for path in PAGES:
            page.goto(f"{url}{path}")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{path} is {width} px wide on a 390 px screen"
        page.screenshot(path=str(shots / "phone-admin-hosts.png"), full_page=True)

        page.goto(f"{url}/instances")
        log_out = page.get_by_role("button", name="Log out")
        expect(log_out).to_be_hidden()
        page.click(".menu-toggle")
        expect(page.locator(".menu-toggle")).to_have_attribute("aria-expanded", "true")
        expect(log_out).to_be_visible()
        expect(log_out).to_be_in_viewport()
        expect(page.locator("#site-nav a[href='/admin/users']")).to_be_visible()
        page.screenshot(path=str(shots / "phone-menu.png"))
        page.click("#site-nav a[href='/images']")
        expect(page).to_have_url(f"{url}/images")
        expect(page.locator("#site-nav")).to_be_hidden()


def test_a_reason_shown_on_hover_shows_on_a_tap(console: Platform) -> None:
    with serve(console) as url, chromium() as browser:
        page = browser.new_context(viewport=PHONE, locale="en-US", has_touch=True).new_page()
        log_in(page, url)
        page.goto(f"{url}/images")
        mark = page.locator("td span[title]").first
        reason = mark.get_attribute("title")
        assert reason
        mark.tap()
        tip = page.locator("td .tip").first
        expect(tip).to_have_text(reason)
        expect(tip).to_be_in_viewport()
        mark.tap()
        expect(page.locator("td .tip")).to_have_count(0)
