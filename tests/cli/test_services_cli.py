"""`gpudock instances expose/services/revoke-links` and `gpudock open` against a live server."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.support.cli import Invoke


def test_expose_list_open_and_revoke(gpudock: Invoke, unique: Callable[[str], str]) -> None:
    name = unique("svc")
    made = gpudock("instances", "create", "--count", "0", "--name", name)
    assert made.exit_code == 0, made.output
    exposed = gpudock("instances", "expose", name, "8000", "--name", "app")
    assert exposed.exit_code == 0, exposed.output
    assert "/i/i-" in exposed.output and "/app/" in exposed.output
    listed = gpudock("instances", "services", name, "--json")
    assert listed.exit_code == 0, listed.output
    [service] = json.loads(listed.output)
    assert (service["name"], service["port"], service["kind"]) == ("app", 8000, "http")
    opened = gpudock("open", name)  # the only service: no need to name it
    assert opened.exit_code == 0, opened.output
    assert opened.output.strip().startswith(service["url"] + "?gpudock_token=gps_")
    revoked = gpudock("instances", "revoke-links", name, "app")
    assert "revoked 1 link(s)" in revoked.output
    wrong = gpudock("instances", "expose", name, "8001", "--name", "App-1")
    assert wrong.exit_code != 0 and "bad service name 'App-1'" in wrong.output
    missing = gpudock("open", name, "nope")
    assert missing.exit_code != 0 and "no service 'nope'" in missing.output
    removed = gpudock("instances", "unexpose", name, "app")
    assert removed.exit_code == 0 and "no longer publishes app" in removed.output
    again = gpudock("instances", "unexpose", name, "app")
    assert again.exit_code != 0 and "no service 'app'" in again.output
    assert json.loads(gpudock("instances", "services", name, "--json").output) == []
