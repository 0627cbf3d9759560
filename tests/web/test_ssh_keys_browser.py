"""The SSH keys page in a real Chromium: copy the one-line command, run it, paste the
signature; a wrong key is refused with the reason and the form keeps what was pasted.
The fake runtime: no container is involved."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import expect

from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.ssh import keys as ssh_keys
from tests.support.key_proof import make_key, public_text
from tests.support.platforms import PlatformFactory
from tests.support.web import PASSWORD, make_user
from tests.web.browser import chromium, fill_key_with_proof, screenshot_dir, serve


def _owner(platform: Platform, name: str) -> list[str]:
    user = next(u for u in users.list_users(platform.ctx) if u.name == name)
    return [k.fingerprint for k in ssh_keys.list_keys(platform.ctx, user)]


def test_a_key_is_added_with_the_pages_command_and_a_wrong_key_is_refused(
    platform_factory: PlatformFactory, tmp_path: Path
) -> None:
    platform = platform_factory()
    make_user(platform, "alice")
    mine, theirs = make_key(tmp_path, "alice"), make_key(tmp_path, "someone")
    with serve(platform) as url, chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
        page = context.new_page()
        page.goto(f"{url}/login?next=/ssh-keys")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        expect(page).to_have_url(f"{url}/ssh-keys")

        page.click("button[data-copy='#sign-command']")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == page.locator("#sign-command").inner_text()
        assert "ssh-keygen -Y sign -n gpudock-key-proof" in copied

        # signed with alice's key, but someone else's public key pasted
        fill_key_with_proof(page, mine, public_key=theirs)
        page.click("#key-form button[type=submit]")
        error = page.locator("#key-form .field-error")
        expect(error).to_contain_text("the signature was made with the key")
        kept = page.locator("textarea[name=signature]")
        expect(kept).to_have_value(re.compile(r"^-----BEGIN SSH SIGNATURE-----[\s\S]+-----END"))
        pasted = public_text(theirs)
        expect(page.locator("textarea[name=public_key]")).to_have_value(pasted)
        assert _owner(platform, "alice") == []

        fill_key_with_proof(page, mine)
        page.click("#key-form button[type=submit]")
        row = page.locator("tr[data-key='alice@test']")
        expect(row).to_contain_text("SHA256:")
        expect(row.locator("[data-proof=proven]")).to_be_visible()
        page.screenshot(path=screenshot_dir(tmp_path) / "ssh-keys.png", full_page=True)
    assert len(_owner(platform, "alice")) == 1
