"""`gpudock instances create --idle-stop …`, `instances auto-stop`, `webhooks …`
and `notifications …` against a real server."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.support.cli import Invoke

Unique = Callable[[str], str]


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_auto_stop_is_set_at_create_changed_and_removed(gpudock: Invoke, unique: Unique) -> None:
    name = unique("idle")
    made = _json(
        gpudock(
            "instances", "create", "--gpu", "A100-80GB", "--name", name,
            "--idle-stop", "30m", "--idle-below", "10", "--stop-after", "2h", "--json",
        )
    )  # fmt: skip
    policy = made["auto_stop"]
    assert (policy["idle_after_s"], policy["idle_below_pct"]) == (1800, 10.0)
    assert policy["stop_at"] is not None and policy["stop_on_exit"] is False
    changed = gpudock("instances", "auto-stop", name, "--stop-on-exit")
    assert changed.exit_code == 0, changed.output
    assert "stops when the main process exits" in changed.stdout
    shown = gpudock("instances", "show", name)
    assert "Auto-stop" in shown.stdout and "when the main process exits" in shown.stdout
    off = _json(gpudock("instances", "auto-stop", name, "--off", "--json"))
    assert off["auto_stop"] is None
    bad = gpudock("instances", "auto-stop", name, "--idle-stop", "soon")
    assert bad.exit_code != 0 and "90s, 30m, 2h, 1d" in bad.output


def test_a_job_command_is_created_shown_and_refused_when_blank(
    gpudock: Invoke, unique: Unique
) -> None:
    name = unique("job")
    made = _json(
        gpudock(
            "instances", "create", "--gpu", "A100-80GB", "--name", name,
            "--command", "echo [done]; exit 3", "--json",
        )
    )  # fmt: skip
    assert made["command"] == "echo [done]; exit 3"
    assert made["auto_stop"]["stop_on_exit"] is True  # a job stops when it exits
    shown = gpudock("instances", "show", name)
    assert "Command" in shown.stdout and "echo [done]; exit 3" in shown.stdout
    kept = _json(
        gpudock(
            "instances", "create", "--gpu", "A100-80GB", "--name", unique("loop"),
            "--command", "serve", "--restart-on-exit", "--json",
        )
    )  # fmt: skip
    assert kept["auto_stop"] is None  # asked to restart: no rule left
    blank = gpudock("instances", "create", "--gpu", "A100-80GB", "--command", " ")
    assert blank.exit_code != 0 and "the command is empty" in blank.output


def test_webhooks_add_prints_the_secret_once_and_remove_ends_it(
    gpudock: Invoke, unique: Unique
) -> None:
    token = _json(gpudock("users", "create", unique("hook"), "--json"))["token"]
    added = gpudock(
        "webhooks", "add", "https://example.com/h", "--kind", "instance.stopped", token=token
    )
    assert added.exit_code == 0, added.output
    secret = next(line for line in added.stdout.splitlines() if line.startswith("whsec_"))
    assert "not shown again" in added.stderr
    listed = gpudock("webhooks", "list", token=token)
    assert "https://example.com/h" in listed.stdout and secret not in listed.stdout
    [hook] = _json(gpudock("webhooks", "list", "--json", token=token))
    assert hook["kinds"] == ["instance.stopped"]
    assert gpudock("webhooks", "deliveries", hook["id"], token=token).exit_code == 0
    assert gpudock("webhooks", "remove", hook["id"], token=token).exit_code == 0
    assert _json(gpudock("webhooks", "list", "--json", token=token)) == []
    unknown = gpudock("webhooks", "add", "https://e.com", "--kind", "nope", token=token)
    assert unknown.exit_code != 0 and "unknown notification kind nope" in unknown.output
    assert "instance.idle_warning" in gpudock("notifications", "kinds", token=token).stdout
    assert "No notifications yet" in gpudock("notifications", "list", token=token).stdout
    no_smtp = gpudock("notifications", "email", "me@example.com", token=token)
    assert no_smtp.exit_code != 0 and "GPUDOCK_SMTP_HOST" in no_smtp.output
