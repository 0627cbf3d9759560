"""Pages of capabilities from other issues: they appear when their service exists."""

from __future__ import annotations

import pytest

from gpudock.services.platform import Platform
from gpudock.web import extensions
from tests.web.conftest import log_in


def test_each_present_capability_has_a_nav_entry_and_a_page(console: Platform) -> None:
    alice, admin = log_in(console, "alice"), log_in(console, "admin")
    home, admin_home = alice.client.get("/").text, admin.client.get("/").text
    for page in extensions.present_pages():
        assert f'href="{page.path}"' in admin_home
        response = admin.client.get(page.path)
        assert response.status_code == 200, (page.path, response.text)
        assert (f'href="{page.path}"' in home) is not page.admin_only
        assert alice.client.get(page.path).status_code == (403 if page.admin_only else 200)
    keys = {p.key for p in extensions.present_pages()}
    assert keys <= {"ssh_keys", "tokens", "billing", "images", "billing_admin", "health"}


def test_absent_capabilities_have_no_nav_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extensions, "_exists", lambda module: "billing" in module)
    extensions.present_pages.cache_clear()
    try:
        assert [p.key for p in extensions.nav_entries(is_admin=True)] == [
            "billing",
            "billing_admin",
        ]
        assert [p.key for p in extensions.nav_entries(is_admin=False)] == ["billing"]
    finally:
        extensions.present_pages.cache_clear()


def test_running_instance_shows_the_ssh_command_when_the_gateway_exists(
    console: Platform,
) -> None:
    alice = log_in(console, "alice")
    data = {"gpu_model": "A100-80GB", "gpu_count": "1", "name": "s", "image": "", "disk_gb": ""}
    instance_id = alice.post("/instances", data).headers["location"].rsplit("/", 1)[1]
    console.reconciler.drain()
    page = alice.client.get(f"/instances/{instance_id}").text
    expected = extensions.ssh_command(console.ctx.settings, instance_id)
    if expected is None:
        assert 'id="ssh-command"' not in page and "docker exec" not in page
    else:
        assert f'<code id="ssh-command">{expected}</code>' in page
