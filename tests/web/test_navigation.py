"""The console's navigation: every entry leads to its page, for whom it is meant."""

from __future__ import annotations

from gpudock.platform import Platform
from gpudock.services.ssh import endpoint as ssh_endpoint
from gpudock.web.navigation import NAV_ENTRIES, nav_entries
from tests.support.web import log_in


def test_each_nav_entry_leads_to_its_page_for_whom_it_is_meant(console: Platform) -> None:
    alice, admin = log_in(console, "alice"), log_in(console, "admin")
    home, admin_home = alice.client.get("/").text, admin.client.get("/").text
    for entry in NAV_ENTRIES:
        assert f'href="{entry.path}"' in admin_home
        response = admin.client.get(entry.path)
        assert response.status_code == 200, (entry.path, response.text)
        assert (f'href="{entry.path}"' in home) is not entry.admin_only
        assert alice.client.get(entry.path).status_code == (403 if entry.admin_only else 200)
    assert [e.key for e in nav_entries(is_admin=False)] == [
        "ssh_keys",
        "tokens",
        "billing",
        "notifications",
        "images",
    ]


def test_running_instance_shows_the_ssh_command_when_the_gateway_exists(
    console: Platform,
) -> None:
    alice = log_in(console, "alice")
    data = {"gpu_model": "A100-80GB", "gpu_count": "1", "name": "s", "image": "", "disk_gb": ""}
    instance_id = alice.post("/instances", data).headers["location"].rsplit("/", 1)[1]
    console.reconciler.drain()
    page = alice.client.get(f"/instances/{instance_id}").text
    plain = ssh_endpoint.ssh_command(console.ctx.settings, instance_id)
    assert plain is not None
    expected = plain.replace("ssh ", "ssh -i ~/.ssh/id_ed25519 ", 1)  # no key yet: the default
    assert f'<code id="ssh-command">{expected}</code>' in page
    assert "docker exec" not in page
