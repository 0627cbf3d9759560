"""The console's API tokens page, and an admin disabling, enabling and deleting users."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.db.models import InstanceModel, InstanceStatus, UserModel
from gpudock.platform import Platform
from gpudock.services.accounts import tokens, users
from gpudock.services.instances.actions import InstanceRequest, create_instance
from tests.support.web import PASSWORD, csrf_of, log_in

_TOKEN = re.compile(r'<code id="new-token">(gpd_[^<]+)</code>')


def _user(console: Platform, name: str) -> UserModel:
    return next(u for u in users.list_users(console.ctx) if u.name == name)


def test_token_pages_need_a_login_and_a_csrf_token(console: Platform) -> None:
    anonymous = TestClient(create_app(console, run_reconciler=False))
    assert anonymous.get("/tokens", follow_redirects=False).headers["location"].startswith("/login")
    alice = log_in(console, "alice")
    for path in ("/tokens", "/tokens/0123456789abcdef/revoke"):
        refused = alice.client.post(path, data={"name": "x"}, follow_redirects=False)
        assert refused.status_code == 403


def test_another_users_token_id_is_404(console: Platform) -> None:
    bobs = tokens.create_token(console.ctx, _user(console, "bob"), "bobs-ci-token")
    alice = log_in(console, "alice")
    response = alice.post(f"/tokens/{bobs.view.token.id}/revoke")
    assert response.status_code == 404
    assert "no token" in response.text
    page = alice.client.get("/tokens").text
    assert "bobs-ci-token" not in page and bobs.view.token.id not in page
    assert tokens.authenticate(console.ctx, bobs.value).user.name == "bob"


def test_create_shows_the_token_once_and_revoke_ends_it(console: Platform) -> None:
    alice = log_in(console, "alice")
    made = alice.post("/tokens", {"name": "laptop", "expires_in": "30d"})
    assert made.status_code == 201, made.text
    value = _TOKEN.search(made.text)
    assert value is not None and "not shown again" in made.text
    caller = tokens.authenticate(console.ctx, value.group(1))
    assert caller.user.name == "alice"
    page = alice.client.get("/tokens").text
    assert 'data-token="laptop"' in page and value.group(1) not in page
    assert 'data-status="active"' in page
    duplicate = alice.post("/tokens", {"name": "laptop"})
    assert duplicate.status_code == 422 and "already have a token named" in duplicate.text
    revoked = alice.post(f"/tokens/{caller.token_id}/revoke")
    assert revoked.status_code == 303
    assert 'data-token="laptop"' not in alice.client.get("/tokens").text
    api = TestClient(create_app(console, run_reconciler=False))
    me = api.get("/api/v1/users/me", headers={"Authorization": f"Bearer {value.group(1)}"})
    assert me.status_code == 401 and me.json()["error"]["code"] == "token_revoked"


def test_a_disabled_users_console_session_ends_and_login_says_why(console: Platform) -> None:
    alice, admin = log_in(console, "alice"), log_in(console, "admin")
    assert alice.client.get("/", follow_redirects=False).status_code == 200
    done = admin.post("/admin/users/alice/disable", {"reason": "left the lab"})
    assert done.status_code == 200 and "alice is disabled" in done.text
    assert alice.client.get("/", follow_redirects=False).headers["location"].startswith("/login")
    again = TestClient(create_app(console, run_reconciler=False))
    token = csrf_of(again.get("/login").text)
    login = again.post(
        "/login", data={"username": "alice", "password": PASSWORD, "csrf_token": token}
    )
    assert login.status_code == 403 and "is disabled" in login.text and "left the lab" in login.text
    wrong = again.post(
        "/login",
        data={"username": "alice", "password": "wrong password", "csrf_token": csrf_of(login.text)},
    )
    assert wrong.status_code == 401 and "is disabled" not in wrong.text  # no hint without it
    assert admin.post("/admin/users/alice/enable").status_code == 200
    log_in(console, "alice")


def test_admin_user_actions_and_what_deletion_keeps(console: Platform) -> None:
    admin = log_in(console, "admin")
    page = admin.client.get("/admin/users").text
    assert "ledger postings" in page and 'data-action="delete-user"' in page
    own = re.search(r'<tr data-user="admin">.*?</tr>', page, re.S)
    assert own is not None and "data-action" not in own.group(0)  # no buttons for oneself
    request = InstanceRequest(gpu_model=None, gpu_count=0, name="nb")
    instance = create_instance(console.ctx, _user(console, "bob"), request)
    refused = admin.post("/admin/users/bob/delete")
    assert refused.status_code == 409 and "force" in refused.text
    deleted = admin.post("/admin/users/bob/delete", {"force": "true"})
    assert deleted.status_code == 200 and "bob is deleted" in deleted.text
    with console.ctx.sessions() as session:
        row = session.get(InstanceModel, instance.id)
        assert row is not None and row.status == InstanceStatus.DELETING
    assert 'data-user="bob"' not in admin.client.get("/admin/users").text
    bob = TestClient(create_app(console, run_reconciler=False))
    token = csrf_of(bob.get("/login").text)
    gone = bob.post("/login", data={"username": "bob", "password": PASSWORD, "csrf_token": token})
    assert gone.status_code == 401  # the password went with the user
    assert admin.post("/admin/users/nobody/disable").status_code == 404
    assert log_in(console, "alice").post("/admin/users/admin/disable").status_code == 403
