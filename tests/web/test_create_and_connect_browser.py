"""The create form, the Connect panel and the instance's sizes in a real
Chromium at a phone's width (390 px), on the fake runtime: every problem of the
form at once, the limits before submitting, what a new user needs to log in,
and one CPU and one memory figure, the enforced ones."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from gpudock.services.instances import actions as instances
from tests.support.key_proof import add_with_proof, make_key
from tests.web.browser import chromium, screenshot_dir, serve
from tests.web.scene import TOO_NEW, Scene, scene, user_named  # noqa: F401
from tests.web.test_zh_cn_crawl import log_in

PHONE = {"width": 390, "height": 844}


def field_error(page: Page, name: str) -> str:
    return page.locator(f'[data-error-for="{name}"]').inner_text()


def test_the_create_form_shows_every_problem_at_once_and_stays_on_its_page(
    scene: Scene,  # noqa: F811
    tmp_path: Path,
) -> None:
    with serve(scene.platform) as url, chromium() as browser:
        page = browser.new_context(viewport=PHONE, locale="en-US").new_page()
        log_in(page, url, "alice")
        page.goto(f"{url}/instances/new")
        page.select_option("#gpu-model", "A100-80GB")
        expect(page.locator("#availability")).to_contain_text("at most 4 on one host")
        expect(page.locator("#gpu-count")).to_have_attribute("max", "4")
        expect(page.locator("#disk-limit")).to_contain_text("1 to ")
        page.fill("input[name=name]", "Bad_Name")
        page.fill("#gpu-count", "9")
        page.fill("#image-ref", TOO_NEW)
        page.fill("input[name=disk_gb]", "0")
        page.click("#create-form button[type=submit]")

        expect(page).to_have_url(f"{url}/instances/new")
        assert "bad instance name 'Bad_Name'" in field_error(page, "name")
        assert "from 0 to 4: no A100-80GB host has more" in field_error(page, "gpu_count")
        assert "cannot run on A100-80GB" in field_error(page, "image")
        assert "from 1 to" in field_error(page, "disk_gb")
        alert = page.locator("p.error[role=alert]")
        expect(alert).to_have_text("Fix the problems marked below and try again.")
        expect(page.locator("#image-hint")).to_have_text("")  # no second, older verdict
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        page.screenshot(
            path=str(screenshot_dir(tmp_path) / "phone-create-errors.png"), full_page=True
        )

        page.fill("#gpu-count", "2")  # what the error spoke of changed: it goes
        expect(page.locator('[data-error-for="gpu_count"]')).to_have_count(0)
        expect(page.locator('[data-error-for="name"]')).to_have_count(1)
        page.fill("input[name=name]", "fine")
        page.fill("#image-ref", "gpudock/base:bookworm")
        page.fill("input[name=disk_gb]", "20")
        page.click("#create-form button[type=submit]")
        expect(page).to_have_url(re.compile(rf"{re.escape(url)}/instances/i-[0-9a-f]+$"))


def test_a_new_user_is_led_to_ssh_keys_and_then_given_every_way_to_connect(
    scene: Scene,  # noqa: F811
    tmp_path: Path,
) -> None:
    ctx = scene.platform.ctx
    admin = user_named(scene.platform, "admin")
    mine = instances.create_instance(
        ctx, admin, instances.InstanceRequest(gpu_model=None, gpu_count=0, name="solo")
    )
    scene.platform.reconciler.drain()
    with serve(scene.platform) as url, chromium() as browser:
        page = browser.new_context(viewport=PHONE, locale="en-US").new_page()
        log_in(page, url, "admin")  # the admin has no key yet
        page.goto(f"{url}/")
        page.locator("#first-steps a[href='/ssh-keys']").click()
        expect(page).to_have_url(f"{url}/ssh-keys")
        page.goto(f"{url}/instances/{mine.id}")
        expect(page.locator("#connect-no-key a[href='/ssh-keys']")).to_be_visible()

        add_with_proof(ctx, admin, make_key(tmp_path, "admin", "-t", "rsa", "-b", "2048"), "work")
        page.reload()
        expect(page.locator("#first-steps")).to_have_count(0)
        expect(page.locator("#connect-keys [data-key-works=yes]")).to_have_text("work")
        lines = {
            key: page.locator(f"#connect-{key}").inner_text()
            for key in ("ssh", "scp", "rsync", "forward", "vscode", "ssh-config")
        }
        assert lines["ssh"].startswith("ssh -i ~/.ssh/id_rsa -p ") and lines["ssh"].count(mine.id)
        assert "scp -i ~/.ssh/id_rsa -P " in lines["scp"] and ":/root/data/" in lines["scp"]
        assert 'rsync -av -e "ssh -i ~/.ssh/id_rsa -p ' in lines["rsync"]
        assert "-N -L 8888:localhost:8888" in lines["forward"]
        assert lines["vscode"] == "code --remote ssh-remote+solo /root/data"
        assert (
            lines["ssh-config"].startswith("Host solo\n")
            and f"User {mine.id}" in lines["ssh-config"]
        )
        assert "IdentityFile ~/.ssh/id_rsa" in lines["ssh-config"]
        live_ssh = page.locator("#ssh-command").inner_text()
        assert live_ssh == lines["ssh"]  # the status card's line is the panel's
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        page.screenshot(path=str(screenshot_dir(tmp_path) / "phone-connect.png"), full_page=True)


def test_messages_to_a_stopped_or_missing_instance_say_console_and_cli(
    scene: Scene,  # noqa: F811
) -> None:
    with serve(scene.platform) as url, chromium() as browser:
        page = browser.new_context(viewport=PHONE, locale="en-US").new_page()
        log_in(page, url, "alice")
        page.goto(f"{url}/instances/{scene.stopped}")
        refused = page.locator("tr[data-session=refused] td").last.inner_text()
        assert "Start on its page in the console" in refused
        assert "`gpudock instances start notebook`" in refused
        assert (
            "`gpudock instances start notebook`"
            in page.locator("#connect-not-running").inner_text()
        )
        page.goto(f"{url}/instances/i-0000000000")
        message = page.locator("p.error[role=alert]").inner_text()
        assert "the console's Instances page" in message and "gpudock instances list" in message


def test_an_instance_shows_one_cpu_and_one_memory_figure_the_enforced_ones(
    scene: Scene,  # noqa: F811
) -> None:
    engine = scene.platform.ctx.runtime.engine_info()
    with serve(scene.platform) as url, chromium() as browser:
        page = browser.new_context(viewport=PHONE, locale="en-US").new_page()
        log_in(page, url, "alice")
        page.goto(f"{url}/instances/{scene.running}")
        facts = page.locator("#instance-live dl.facts").inner_text()
        cores = float(re.search(r"CPU\s+([\d.]+) cores", facts).group(1))  # type: ignore[union-attr]
        memory_gb = int(re.search(r"Memory\s+(\d+) GB", facts).group(1))  # type: ignore[union-attr]
        expect(page.locator("#usage-cpu")).to_contain_text("of ")
        limit = page.locator("#usage-cpu").inner_text()
        assert f"of {cores:g} cores" in limit
        assert cores <= engine.cpus and memory_gb * 2**30 <= engine.memory_bytes
        used = page.locator("#usage-memory").inner_text()
        assert used.endswith(f"/ {memory_gb} GiB") or f"/ {memory_gb}" in used
