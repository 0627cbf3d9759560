"""`gpudock tokens ...` and `gpudock users disable|enable|delete` against a real server."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import typer

from gpudock.cli.commands.tokens import expiry_body
from tests.support.cli import Invoke

Unique = Callable[[str], str]


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _user(gpudock: Invoke, unique: Unique, prefix: str = "tok") -> tuple[str, str]:
    name = unique(prefix)
    return name, _json(gpudock("users", "create", name, "--json"))["token"]


def test_tokens_create_prints_a_working_token_once_and_list_shows_it(
    gpudock: Invoke, unique: Unique
) -> None:
    name, token = _user(gpudock, unique)
    created = gpudock("tokens", "create", "laptop", "--expires", "90d", token=token)
    assert created.exit_code == 0, created.output
    value = next(line for line in created.stdout.splitlines() if line.startswith("gpd_"))
    assert "expires" in created.stdout and "not shown again" in created.stderr
    assert _json(gpudock("whoami", "--json", token=value))["name"] == name
    listed = gpudock("tokens", "list", token=token)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert any("laptop" in line and "active" in line and "*" not in line for line in lines)
    assert any("default" in line and "*" in line for line in lines), listed.stdout
    assert value not in listed.stdout
    shown = {t["name"]: t for t in _json(gpudock("tokens", "list", "--json", token=token))}
    assert shown["laptop"]["expires_at"] and shown["default"]["current"] is True


def test_tokens_revoke_ends_it_and_the_message_says_how_to_renew(
    gpudock: Invoke, unique: Unique
) -> None:
    _name, token = _user(gpudock, unique)
    value = _json(gpudock("tokens", "create", "ci", "--json", token=token))["token"]
    revoked = gpudock("tokens", "revoke", "ci", token=token)
    assert revoked.exit_code == 0, revoked.output
    assert "Revoked token ci" in revoked.stdout
    refused = gpudock("whoami", token=value)
    assert refused.exit_code == 1
    assert "was revoked" in refused.stderr and "gpudock tokens create" in refused.stderr
    assert "ci" not in {t["name"] for t in _json(gpudock("tokens", "list", "--json", token=token))}
    every = _json(gpudock("tokens", "list", "--all", "--json", token=token))
    assert {t["name"]: t["state"] for t in every}["ci"] == "revoked"
    own = gpudock("tokens", "revoke", "default", token=token)
    assert own.exit_code == 0 and "That was the token this CLI uses" in own.stderr


def test_another_users_token_is_not_found(gpudock: Invoke, unique: Unique) -> None:
    _a, alice = _user(gpudock, unique)
    _b, bob = _user(gpudock, unique)
    mine = _json(gpudock("tokens", "create", "ci", "--json", token=alice))
    refused = gpudock("tokens", "revoke", mine["id"], token=bob)
    assert refused.exit_code == 1 and "no token" in refused.stderr
    assert _json(gpudock("whoami", "--json", token=mine["token"]))


def test_expires_takes_durations_and_local_times() -> None:
    assert expiry_body(None) == {}
    assert expiry_body("90d") == {"expires_in": "90d"}
    assert expiry_body("10y") == {"expires_in": "10y"}  # the server says which units
    local = expiry_body("2030-01-01T18:00")["expires_at"]
    assert datetime.fromisoformat(local) == datetime(2030, 1, 1, 18).astimezone()
    assert expiry_body("2030-01-01T18:00:00Z") == {"expires_at": "2030-01-01T18:00:00+00:00"}
    with pytest.raises(typer.BadParameter):
        expiry_body("next week")


def test_a_bad_duration_is_refused_by_the_server(gpudock: Invoke) -> None:
    result = gpudock("tokens", "create", "x", "--expires", "10y")
    assert result.exit_code == 1 and "bad duration" in result.stderr


def test_users_disable_and_enable(gpudock: Invoke, unique: Unique) -> None:
    name, token = _user(gpudock, unique, "leaver")
    created = _json(
        gpudock(
            "instances", "create", "--count", "0", "--name", "nb", "--wait", "--json", token=token
        )
    )
    done = gpudock("users", "disable", name, "--reason", "left the lab")
    assert done.exit_code == 0, done.output
    assert created["id"] in done.stdout and "data kept" in done.stdout
    refused = gpudock("whoami", token=token)
    assert refused.exit_code == 1 and "is disabled" in refused.stderr
    listed = gpudock("users", "list")
    assert any(
        name in line and "disabled (left the lab)" in line for line in listed.stdout.splitlines()
    )
    assert _json(gpudock("users", "enable", name, "--json"))["state"] == "active"
    assert _json(gpudock("whoami", "--json", token=token))["name"] == name
    shown = _json(gpudock("instances", "show", created["id"], "--json"))
    assert shown["desired_state"] == "stopped"


def test_users_delete_asks_states_retention_and_needs_force_for_instances(
    gpudock: Invoke, unique: Unique
) -> None:
    name, token = _user(gpudock, unique, "gone")
    _json(gpudock("instances", "create", "--count", "0", "--name", "nb", "--json", token=token))
    kept = gpudock("users", "delete", name, input="n\n")
    assert kept.exit_code == 1 and "Kept: ledger postings" in kept.stderr
    assert _json(gpudock("whoami", "--json", token=token))["state"] == "active"
    refused = gpudock("users", "delete", name, "--yes")
    assert refused.exit_code == 1 and "--force" in refused.stderr
    deleted = gpudock("users", "delete", name, "--force", "--yes")
    assert deleted.exit_code == 0, deleted.output
    assert f"Deleted {name}" in deleted.stdout and "with their data" in deleted.stdout
    assert "ledger postings" in deleted.stderr  # the server's statement of what is kept
    gone = gpudock("whoami", token=token)
    assert gone.exit_code == 1 and "was deleted" in gone.stderr
    assert name not in gpudock("users", "list").stdout
    assert name in gpudock("users", "list", "--all").stdout
