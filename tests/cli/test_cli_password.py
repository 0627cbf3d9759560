"""`gpudock users set-password NAME`, then a console login with that password."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support.cli import Invoke, LiveServer
from tests.support.web import csrf_of


def test_set_password_from_the_cli_then_log_in(
    gpudock: Invoke,
    live_server: LiveServer,
    unique: Callable[[str], str],
) -> None:
    name = unique("dora")
    assert gpudock("users", "create", name).exit_code == 0
    short = gpudock("users", "set-password", name, input="short\nshort\n")
    assert short.exit_code == 1 and "at least 8" in short.output
    done = gpudock("users", "set-password", name, input="dora's password\ndora's password\n")
    assert done.exit_code == 0, done.output
    assert "dora's password" not in done.output
    missing = gpudock("users", "set-password", "nobody", env={"GPUDOCK_NEW_PASSWORD": "x" * 9})
    assert missing.exit_code == 1 and "no user 'nobody'" in missing.output
    with httpx.Client(base_url=live_server.url) as browser:
        token = csrf_of(browser.get("/login").text)
        form = {"username": name, "password": "dora's password", "csrf_token": token}
        assert browser.post("/login", data=form).status_code == 303
        assert browser.get("/account").status_code == 200
