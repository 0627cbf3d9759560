"""Named API tokens through the API: create (shown once), list, revoke, expiry, last use.

SQLite and PostgreSQL, with an injected clock: expiry and the once-a-minute
record of last use need time to pass, and tests never sleep.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.settings import Settings
from tests.support.clocks import FakeClock
from tests.support.factories import Tenant, make_tenant

API = "/api/v1"
ROUTES = [("post", "/tokens"), ("get", "/tokens"), ("delete", "/tokens/0123456789abcdef")]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def platform(tmp_path: Path, database_url: str | None, clock: FakeClock) -> Iterator[Platform]:
    settings = Settings(
        data_dir=tmp_path / "data",
        simulate="1x2xA100-80GB",
        runtime="fake",
        image_pull="never",
        database_url=database_url,
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    yield platform
    platform.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create(client: TestClient, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = client.post(f"{API}/tokens", json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def listed(client: TestClient, headers: dict[str, str], query: str = "") -> dict[str, Any]:
    response = client.get(f"{API}/tokens{query}", headers=headers)
    assert response.status_code == 200, response.text
    return {t["name"]: t for t in response.json()}


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_unauthenticated_is_401(client: TestClient, method: str, path: str) -> None:
    for headers in ({}, bearer("gpd_not-a-real-token")):
        response = client.request(method, API + path, headers=headers, json={"name": "x"})
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_another_tenants_token_is_404_and_never_listed(
    client: TestClient, alice: Tenant, bob: Tenant
) -> None:
    mine = create(client, alice, name="ci")
    first = listed(client, alice.headers)["default"]
    for ref in (mine["id"], "ci", first["id"]):
        response = client.delete(f"{API}/tokens/{ref}", headers=bob.headers)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    assert set(listed(client, bob.headers, "?include_revoked=true")) == {"default"}
    assert listed(client, alice.headers)["ci"]["state"] == "active"
    assert client.get(f"{API}/users/me", headers=bearer(mine["token"])).status_code == 200


def test_first_tokens_are_named_default(client: TestClient, admin: Tenant, alice: Tenant) -> None:
    for tenant in (admin, alice):
        tokens = listed(client, tenant.headers)
        assert list(tokens) == ["default"]
        assert tokens["default"]["current"] is True and tokens["default"]["expires_at"] is None


def test_create_shows_the_value_once_and_lists_what_is_known(
    client: TestClient, alice: Tenant, clock: FakeClock
) -> None:
    created = create(client, alice, name="laptop", expires_in="90d")
    assert created["token"].startswith("gpd_") and created["current"] is False
    assert created["expires_at"] == "2027-02-27T12:00:00Z"  # T0 + 90 days
    clock.advance(5)
    me = client.get(f"{API}/users/me", headers=bearer(created["token"]))
    assert me.status_code == 200 and me.json()["name"] == "alice"
    laptop = listed(client, alice.headers)["laptop"]
    assert "token" not in laptop
    assert laptop["created_at"] == "2026-11-29T12:00:00Z"
    assert laptop["last_used_at"] == "2026-11-29T12:00:05Z"
    at = create(client, alice, name="until-new-year", expires_at="2027-01-01T08:00:00+08:00")
    assert at["expires_at"] == "2027-01-01T00:00:00Z"


def test_an_expired_token_is_refused_saying_how_to_get_a_new_one(
    client: TestClient, alice: Tenant, clock: FakeClock
) -> None:
    short = create(client, alice, name="short", expires_in="1h")
    clock.advance(3599)
    assert client.get(f"{API}/users/me", headers=bearer(short["token"])).status_code == 200
    clock.advance(1)
    response = client.get(f"{API}/instances", headers=bearer(short["token"]))
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "token_expired"
    assert "'short' expired at 2026-11-29 13:00:00 UTC" in error["message"]
    assert "gpudock tokens create" in error["message"]
    assert listed(client, alice.headers)["short"]["state"] == "expired"
    again = create(client, alice, name="short")  # an expired token's name can be reused
    assert client.get(f"{API}/users/me", headers=bearer(again["token"])).status_code == 200
    old = client.get(f"{API}/users/me", headers=bearer(short["token"])).json()["error"]
    assert old["code"] == "token_expired"


def test_a_revoked_token_is_refused_at_once(client: TestClient, alice: Tenant) -> None:
    ci = create(client, alice, name="ci")
    revoked = client.delete(f"{API}/tokens/ci", headers=alice.headers)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    response = client.get(f"{API}/users/me", headers=bearer(ci["token"]))
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "token_revoked" and "'ci' was revoked at" in error["message"]
    assert "ci" not in listed(client, alice.headers)
    assert listed(client, alice.headers, "?include_revoked=true")["ci"]["state"] == "revoked"
    assert client.delete(f"{API}/tokens/{ci['id']}", headers=alice.headers).status_code == 404


def test_revoking_the_token_in_use_ends_it_too(client: TestClient, alice: Tenant) -> None:
    response = client.delete(f"{API}/tokens/default", headers=alice.headers)
    assert response.status_code == 200 and response.json()["current"] is True
    assert client.get(f"{API}/tokens", headers=alice.headers).status_code == 401


def test_names_and_expiries_that_are_refused(client: TestClient, alice: Tenant) -> None:
    create(client, alice, name="ci")
    duplicate = client.post(f"{API}/tokens", json={"name": "ci"}, headers=alice.headers)
    assert duplicate.status_code == 409
    assert "revoke it first" in duplicate.json()["error"]["message"]
    for body, field in (
        ({"name": "has space"}, "name"),
        ({"name": "trailing-newline\n"}, "name"),
        ({"name": "x", "expires_in": "1d\n"}, "expires_in"),
        ({"name": "x", "expires_in": "10y"}, "expires_in"),
        ({"name": "x", "expires_in": "0d"}, "expires_in"),
        ({"name": "x", "expires_at": "2026-11-29T11:59:59Z"}, "expires_at"),  # the past
        ({"name": "x", "expires_at": "2027-01-01T00:00:00"}, "expires_at"),  # no zone
        ({"name": "x", "expires_at": 1893456000}, "expires_at"),  # a number is no timestamp
        ({"name": "x", "expires_at": "9999-12-31T23:00:00-05:00"}, "expires_at"),
        ({"name": "x", "expires_in": "1d", "expires_at": "2027-01-01T00:00:00Z"}, "expires_in"),
    ):
        response = client.post(f"{API}/tokens", json=body, headers=alice.headers)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["field"] == field, body


def _count_token_writes(engine: Engine) -> list[str]:
    writes: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE API_TOKENS"):
            writes.append(statement)

    return writes


def test_last_use_is_written_at_most_once_a_minute(
    client: TestClient, platform: Platform, alice: Tenant, clock: FakeClock
) -> None:
    writes = _count_token_writes(platform.ctx.sessions.kw["bind"])
    for _ in range(5):
        assert client.get(f"{API}/users/me", headers=alice.headers).status_code == 200
    assert len(writes) == 1
    clock.advance(59)
    client.get(f"{API}/users/me", headers=alice.headers)
    assert len(writes) == 1
    assert listed(client, alice.headers)["default"]["last_used_at"] == "2026-11-29T12:00:00Z"
    clock.advance(1)
    client.get(f"{API}/users/me", headers=alice.headers)
    assert len(writes) == 2
    assert listed(client, alice.headers)["default"]["last_used_at"] == "2026-11-29T12:01:00Z"


def test_tokens_of_the_users_create_command_and_new_ones_are_independent(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    other = make_tenant(platform, "carol")
    create(client, other, name="ci")
    create(client, alice, name="ci")  # one name per user, not per installation
    client.delete(f"{API}/tokens/ci", headers=other.headers)
    assert listed(client, alice.headers)["ci"]["state"] == "active"
