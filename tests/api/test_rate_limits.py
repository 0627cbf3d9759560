"""Rate limits on the API and the console login: 429, Retry-After, the usual body.

Each test builds its own app with limits lowered far below the defaults; the
limiter lives in the app, so no test sees another's counts. No test waits for a
window to pass: each only goes over a limit and looks at the answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from limits import parse_many
from pydantic import ValidationError

from gpudock.api.app import create_app
from gpudock.platform import Platform
from gpudock.settings import Settings
from tests.support.factories import make_tenant
from tests.support.platforms import PlatformFactory

API = "/api/v1"
HERE = ("10.0.0.1", 40000)
ELSEWHERE = ("10.0.0.2", 40000)


def _platform(platform_factory: PlatformFactory, **limits: Any) -> Platform:
    values = {
        "rate_limit_api_token": "1000/minute",
        "rate_limit_api_address": "1000/minute",
        "rate_limit_login_address": "1000/minute",
        **limits,
    }
    return platform_factory(**values)


def _client(platform: Platform, address: tuple[str, int] = HERE) -> TestClient:
    return TestClient(create_app(platform, run_reconciler=False), client=address)


def _assert_limited(response: Any, what: str) -> None:
    assert response.status_code == 429, response.text
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= 60  # every window in these tests is a minute
    error = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert what in error["message"] and f"retry in {retry_after} s" in error["message"]
    assert error["field"] is None


def test_a_token_past_its_limit_gets_429_and_other_tenants_do_not(
    platform_factory: PlatformFactory,
) -> None:
    platform = _platform(platform_factory, rate_limit_api_token="3/minute")
    alice, bob = make_tenant(platform, "alice"), make_tenant(platform, "bob")
    client = _client(platform)
    codes = [client.get(f"{API}/users/me", headers=alice.headers).status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    _assert_limited(client.get(f"{API}/instances", headers=alice.headers), "this token")
    # the same address, another tenant's token: untouched
    me = client.get(f"{API}/users/me", headers=bob.headers)
    assert me.status_code == 200 and me.json()["name"] == "bob"
    # a refused request is not counted: alice stays limited, bob keeps his budget
    _assert_limited(client.get(f"{API}/users/me", headers=alice.headers), "this token")
    assert [client.get(f"{API}/gpus", headers=bob.headers).status_code for _ in range(2)] == [
        200,
        200,
    ]


def test_an_address_past_its_limit_gets_429_whatever_token_it_tries(
    platform_factory: PlatformFactory,
) -> None:
    platform = _platform(platform_factory, rate_limit_api_address="4/minute")
    alice = make_tenant(platform, "alice")
    client = _client(platform)
    # guessing tokens: each guess is a 401 until the address runs out
    guesses = [{"Authorization": f"Bearer gpd_guess{n}"} for n in range(4)]
    assert [client.get(f"{API}/users/me", headers=h).status_code for h in guesses] == [401] * 4
    _assert_limited(client.get(f"{API}/users/me", headers=alice.headers), "10.0.0.1")
    _assert_limited(client.get(f"{API}/users/me"), "10.0.0.1")  # no token at all
    # alice from another address is not affected
    elsewhere = TestClient(client.app, client=ELSEWHERE)  # the same server
    assert elsewhere.get(f"{API}/users/me", headers=alice.headers).status_code == 200


def test_only_the_api_and_the_login_form_are_limited(platform_factory: PlatformFactory) -> None:
    platform = _platform(platform_factory, rate_limit_api_address="1/minute")
    client = _client(platform)
    for _ in range(3):
        assert client.get("/healthz").status_code == 200
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/login").status_code == 200


def test_console_logins_are_limited_per_address(platform_factory: PlatformFactory) -> None:
    platform = _platform(platform_factory, rate_limit_login_address="2/minute")
    client = _client(platform)
    form = {"name": "alice", "password": "not the password"}
    answers = [client.post("/login", data=form).status_code for _ in range(2)]
    assert 429 not in answers
    _assert_limited(client.post("/login", data=form), "console logins")
    assert client.get("/login").status_code == 200  # the form itself stays reachable
    other = TestClient(client.app, client=ELSEWHERE)
    assert other.post("/login", data=form).status_code != 429


def test_limits_can_be_switched_off(platform_factory: PlatformFactory) -> None:
    platform = _platform(
        platform_factory, rate_limits_enabled=False, rate_limit_api_token="1/minute"
    )
    alice = make_tenant(platform, "alice")
    client = _client(platform)
    codes = {client.get(f"{API}/users/me", headers=alice.headers).status_code for _ in range(5)}
    assert codes == {200}


def test_429_is_documented_on_every_api_operation(platform_factory: PlatformFactory) -> None:
    schema = _client(_platform(platform_factory)).get("/openapi.json").json()
    operations = [op for path in schema["paths"].values() for op in path.values()]
    assert operations
    assert all("429" in op["responses"] for op in operations)


@pytest.mark.parametrize("bad", ["", "lots", "10 per fortnight", "-1/minute", "0/second"])
def test_a_malformed_limit_is_refused_at_startup(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not a rate limit"):
        Settings(rate_limit_api_token=bad)


def test_the_defaults_are_generous() -> None:
    """50 parallel creates and 20 polls a second (the e2e tests) stay far below them."""
    settings = Settings()
    per_minute = {
        name: min(i.amount * 60 / i.get_expiry() for i in parse_many(getattr(settings, name)))
        for name in ("rate_limit_api_token", "rate_limit_api_address")
    }
    assert settings.rate_limits_enabled
    assert per_minute["rate_limit_api_token"] >= 1200
    assert per_minute["rate_limit_api_address"] >= per_minute["rate_limit_api_token"]
