"""Console accounts: argon2 passwords, session cookies, logout, CSRF."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select

from gpudock.api.app import create_app
from gpudock.db.models import UserPasswordModel, WebSessionModel
from gpudock.platform import Platform
from gpudock.services.accounts import logins as accounts
from tests.support.factories import make_tenant
from tests.support.platforms import PlatformFactory
from tests.support.web import PASSWORD, csrf_of, log_in, make_user


def test_pages_need_a_login_and_fragments_ask_htmx_to_redirect(console: Platform) -> None:
    client = TestClient(create_app(console, run_reconciler=False))
    for path in ("/", "/instances", "/instances/new", "/admin/hosts", "/account"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"].startswith("/login")
    fragment = client.get("/instances/rows", headers={"HX-Request": "true"})
    assert fragment.status_code == 401 and fragment.headers["HX-Redirect"].startswith("/login")


def test_passwords_are_stored_as_argon2id_only(platform: Platform) -> None:
    make_user(platform, "alice")
    with platform.ctx.sessions() as session:
        stored = session.scalars(select(UserPasswordModel.password_hash)).one()
    assert stored.startswith("$argon2id$") and PASSWORD not in stored


def test_wrong_password_and_unknown_user_get_one_message(console: Platform) -> None:
    client = TestClient(create_app(console, run_reconciler=False))
    for name, password in (("alice", "wrong password"), ("nobody", PASSWORD)):
        token = csrf_of(client.get("/login").text)
        response = client.post(
            "/login", data={"username": name, "password": password, "csrf_token": token}
        )
        assert response.status_code == 401
        assert "wrong user name or password" in response.text
        assert "gpudock_session" not in response.cookies
        assert f'name="username" autocomplete="username" required value="{name}"' in response.text


def test_session_cookie_flags(platform_factory: PlatformFactory) -> None:
    for secure in (False, True):
        platform = platform_factory(session_cookie_secure=secure)
        make_user(platform, "alice")
        client = TestClient(create_app(platform, run_reconciler=False), base_url="https://x")
        token = csrf_of(client.get("/login").text)
        response = client.post(
            "/login",
            data={"username": "alice", "password": PASSWORD, "csrf_token": token},
            follow_redirects=False,
        )
        cookie = next(
            v for k, v in response.headers.multi_items() if v.startswith("gpudock_session=")
        )
        flags = {part.strip().lower() for part in cookie.split(";")}
        assert "httponly" in flags and "samesite=lax" in flags and "path=/" in flags
        assert ("secure" in flags) is secure


def test_logout_invalidates_the_session_server_side(console: Platform) -> None:
    browser = log_in(console, "alice")
    stolen = browser.client.cookies["gpudock_session"]
    assert browser.post("/logout").status_code == 303
    with console.ctx.sessions() as session:
        assert session.scalars(select(WebSessionModel)).all() == []
    replay = TestClient(create_app(console, run_reconciler=False))
    replay.cookies.set("gpudock_session", stolen)
    assert replay.get("/", follow_redirects=False).status_code == 303


def test_post_without_or_with_a_wrong_csrf_token_is_403(console: Platform) -> None:
    browser = log_in(console, "alice")
    other = log_in(console, "bob").csrf()
    for data in ({}, {"csrf_token": "nope"}, {"csrf_token": other}):
        for path in ("/instances", "/logout", "/account/password", "/instances/i-x/stop"):
            response = browser.client.post(path, data=data, follow_redirects=False)
            assert response.status_code == 403, (path, data, response.text)
    anonymous = TestClient(create_app(console, run_reconciler=False))
    login = anonymous.post("/login", data={"username": "alice", "password": PASSWORD})
    assert login.status_code == 403  # login CSRF: no token cookie, no login
    assert browser.client.get("/", follow_redirects=False).status_code == 200  # still logged in


def test_change_password_ends_other_sessions(console: Platform) -> None:
    first, second = log_in(console, "alice"), log_in(console, "alice")
    new = "a brand new password"
    bad = first.post("/account/password", {"current": "nope", "new": new, "repeat": new})
    assert bad.status_code == 422
    differ = first.post("/account/password", {"current": PASSWORD, "new": new, "repeat": "x"})
    assert differ.status_code == 422
    done = first.post("/account/password", {"current": PASSWORD, "new": new, "repeat": new})
    assert done.status_code == 303
    assert first.client.get("/", follow_redirects=False).status_code == 200
    assert second.client.get("/", follow_redirects=False).status_code == 303
    log_in(console, "alice", new)


def test_admin_sets_a_password_through_the_api(platform: Platform) -> None:
    client = TestClient(create_app(platform, run_reconciler=False))
    assert platform.admin_token_path is not None
    admin = {"Authorization": f"Bearer {platform.admin_token_path.read_text().strip()}"}
    alice = make_tenant(platform, "alice")
    body = {"password": "long enough pw"}
    assert client.put("/api/v1/users/alice/password", json=body).status_code == 401
    assert (
        client.put("/api/v1/users/alice/password", json=body, headers=alice.headers).status_code
        == 403
    )
    ok = client.put("/api/v1/users/alice/password", json=body, headers=admin)
    assert ok.status_code == 200 and ok.json()["name"] == "alice"
    short = client.put("/api/v1/users/alice/password", json={"password": "x"}, headers=admin)
    assert short.status_code == 422
    missing = client.put("/api/v1/users/nobody/password", json=body, headers=admin)
    assert missing.status_code == 404
    assert accounts.log_in(platform.ctx, "alice", "long enough pw").session.user.name == "alice"
