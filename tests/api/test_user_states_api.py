"""Admins disable, enable and delete users through the API.

The fake runtime (its containers and volumes are what the assertions read),
priced GPUs and an injected clock, so that deletion runs against a ledger with
real charges in it; SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from argon2 import PasswordHasher
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpudock.db.models import (
    BillingIntervalModel,
    BillingPostingModel,
    GpuAllocationModel,
    SshKeyModel,
    WebSessionModel,
)
from gpudock.platform import Platform, open_platform
from gpudock.reconcile import charging
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import tokens
from gpudock.services.accounts.states import AccountDisabled
from gpudock.services.billing import postings as ledger
from gpudock.settings import Settings
from tests.support.clocks import FakeClock
from tests.support.factories import Tenant
from tests.support.key_proof import add_with_proof, make_key
from tests.support.web import CHEAP, PASSWORD

API = "/api/v1"
ROUTES = [
    ("post", "/users/alice/disable"),
    ("post", "/users/alice/enable"),
    ("delete", "/users/alice"),
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def runtime(clock: FakeClock) -> FakeRuntime:
    return FakeRuntime(clock=clock)


@pytest.fixture
def platform(
    tmp_path: Path, database_url: str | None, clock: FakeClock, runtime: FakeRuntime
) -> Iterator[Platform]:
    settings = Settings(
        data_dir=tmp_path / "data",
        simulate="1x2xA100-80GB",
        runtime="fake",
        image_pull="never",
        database_url=database_url,
    )
    platform = open_platform(settings, runtime=runtime, clock=clock)
    yield platform
    platform.close()


class Api:
    def __init__(self, client: TestClient) -> None:
        self.client = client

    def __call__(self, tenant: Tenant, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.request(method, API + path, headers=tenant.headers, **kwargs)
        assert response.status_code < 300, response.text
        return response.json()


@pytest.fixture
def api(client: TestClient) -> Api:
    return Api(client)


def _running(api: Api, platform: Platform, tenant: Tenant, name: str) -> dict[str, Any]:
    body = {"name": name, "gpu_model": "A100-80GB", "gpu_count": 1}
    created: dict[str, Any] = api(tenant, "post", "/instances", json=body)
    platform.reconciler.drain()
    assert api(tenant, "get", f"/instances/{name}")["status"] == "running"
    return created


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_unauthenticated_is_401(client: TestClient, alice: Tenant, method: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer gpd_not-a-real-token"}):
        response = client.request(method, API + path, headers=headers)
        assert response.status_code == 401, response.text
    assert client.get(f"{API}/users/me", headers=alice.headers).json()["state"] == "active"


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_tenant_is_refused_and_an_unknown_user_is_404(
    client: TestClient, admin: Tenant, alice: Tenant, bob: Tenant, method: str, path: str
) -> None:
    refused = client.request(method, API + path, headers=bob.headers)
    assert refused.status_code == 403 and "admin" in refused.json()["error"]["message"]
    unknown = client.request(method, API + path.replace("alice", "nobody"), headers=admin.headers)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert client.get(f"{API}/users/me", headers=alice.headers).json()["state"] == "active"


def test_disable_ends_access_and_stops_instances_keeping_their_data(
    api: Api,
    client: TestClient,
    platform: Platform,
    runtime: FakeRuntime,
    admin: Tenant,
    alice: Tenant,
) -> None:
    instance = _running(api, platform, alice, "train")
    spare = api(alice, "post", "/tokens", json={"name": "ci"})["token"]
    done = api(admin, "post", "/users/alice/disable", json={"reason": "left the lab"})
    assert done["user"]["state"] == "disabled" and done["instances"] == [instance["id"]]
    for token in (alice.token, spare):
        response = client.get(f"{API}/instances", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 403
        error = response.json()["error"]
        assert error["code"] == "account_disabled"
        assert (
            "left the lab" in error["message"] and "gpudock users enable alice" in error["message"]
        )
    platform.reconciler.drain()
    stopped = api(admin, "get", f"/instances/{instance['id']}")
    assert (stopped["status"], stopped["desired_state"], stopped["gpus"]) == (
        "stopped",
        "stopped",
        [],
    )
    events = api(admin, "get", f"/instances/{instance['id']}/events")
    assert any(
        "user alice disabled by admin (left the lab); data kept" in e["message"] for e in events
    )
    container = runtime.inspect_container(stopped["container_id"])
    assert container is not None and not container.running  # the system disk is kept
    assert any(instance["id"] in name for name in runtime.volumes)  # and the data volume
    with platform.ctx.sessions() as session:
        assert session.scalars(select(GpuAllocationModel)).all() == []
        open_compute = session.scalars(
            select(BillingIntervalModel).where(
                BillingIntervalModel.kind == "compute", BillingIntervalModel.closed_at.is_(None)
            )
        ).all()
        assert open_compute == []  # compute billing ended with the stop


def test_enable_gives_access_back_and_instances_stay_stopped(
    api: Api, client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    instance = _running(api, platform, alice, "train")
    api(admin, "post", "/users/alice/disable")
    platform.reconciler.drain()
    refused = client.post(f"{API}/instances/{instance['id']}/start", headers=admin.headers)
    assert refused.status_code == 409 and "disabled" in refused.json()["error"]["message"]
    assert api(admin, "post", "/users/alice/enable")["state"] == "active"
    platform.reconciler.drain()
    assert api(alice, "get", "/instances/train")["status"] == "stopped"
    api(alice, "post", "/instances/train/start")
    platform.reconciler.drain()
    assert api(alice, "get", f"/instances/{instance['id']}")["status"] == "running"


def test_disable_ends_console_sessions_at_once(
    platform: Platform, api: Api, admin: Tenant, alice: Tenant
) -> None:
    accounts.configure_hashing(CHEAP)
    try:
        accounts.set_password(platform.ctx, "alice", PASSWORD)
        opened = accounts.log_in(platform.ctx, "alice", PASSWORD)
        assert accounts.resolve_session(platform.ctx, opened.cookie) is not None
        api(admin, "post", "/users/alice/disable")
        assert accounts.resolve_session(platform.ctx, opened.cookie) is None
        with platform.ctx.sessions() as session:
            assert session.scalars(select(WebSessionModel)).all() == []
        with pytest.raises(AccountDisabled, match="disabled"):  # after the right password only
            accounts.log_in(platform.ctx, "alice", PASSWORD)
    finally:
        accounts.configure_hashing(PasswordHasher())


def test_an_admin_cannot_disable_or_delete_themselves(
    client: TestClient, api: Api, admin: Tenant
) -> None:
    for method, path in (("post", "/users/admin/disable"), ("delete", "/users/admin?force=true")):
        response = client.request(method, API + path, headers=admin.headers)
        assert response.status_code == 409
        assert "yourself" in response.json()["error"]["message"]
    assert api(admin, "get", "/users/me")["state"] == "active"


def test_two_admins_disabling_each_other_at_once_leave_one_admin(
    client: TestClient, api: Api, admin: Tenant
) -> None:
    made = api(admin, "post", "/users", json={"name": "root2", "is_admin": True})
    root2 = Tenant("root2", made["token"], {"Authorization": f"Bearer {made['token']}"})
    answers: dict[str, int] = {}
    start = threading.Barrier(2)

    def disable(caller: Tenant, target: str) -> None:
        start.wait()
        response = client.post(f"{API}/users/{target}/disable", headers=caller.headers)
        answers[target] = response.status_code

    threads = [
        threading.Thread(target=disable, args=(admin, "root2")),
        threading.Thread(target=disable, args=(root2, "admin")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers.values()) in ([200, 403], [200, 409]), answers
    winner = admin if answers["root2"] == 200 else root2
    states = {u["name"]: u["state"] for u in api(winner, "get", "/users")}
    assert sorted(states.values()) == ["active", "disabled"]


def test_delete_refuses_while_instances_exist_unless_forced(
    api: Api, client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    _running(api, platform, alice, "train")
    refused = client.delete(f"{API}/users/alice", headers=admin.headers)
    assert refused.status_code == 409
    assert "train" in refused.json()["error"]["message"]
    assert api(alice, "get", "/instances/train")["status"] == "running"


def test_delete_removes_instances_and_credentials_and_keeps_the_ledger(
    api: Api,
    client: TestClient,
    platform: Platform,
    runtime: FakeRuntime,
    clock: FakeClock,
    admin: Tenant,
    alice: Tenant,
    tmp_path: Path,
) -> None:
    api(admin, "put", "/admin/prices", json={"gpu_model": "A100-80GB", "amount": "3.6"})
    api(admin, "post", "/admin/topups", json={"user": "alice", "amount": "100"})
    instance = _running(api, platform, alice, "train")
    clock.advance(600)
    charging.charge_pass(platform.ctx)
    owner = tokens.authenticate(platform.ctx, alice.token).user
    add_with_proof(platform.ctx, owner, make_key(tmp_path, "alice"))
    deleted = api(admin, "delete", "/users/alice?force=true")
    assert deleted["user"]["state"] == "deleted" and deleted["instances"] == [instance["id"]]
    assert "ledger postings" in deleted["retention"] and "name stays taken" in deleted["retention"]
    assert deleted["balance"] == "99.4"  # 600 s at 3.6 an hour, as it stood
    clock.advance(30)
    platform.reconciler.drain()
    charging.charge_pass(platform.ctx)
    assert api(admin, "get", f"/instances/{instance['id']}")["status"] == "deleted"
    assert not any(instance["id"] in c.spec.name for c in runtime.containers.values())
    assert not any(instance["id"] in name for name in runtime.volumes)
    gone = client.get(f"{API}/users/me", headers=alice.headers)
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "account_deleted"
    with platform.ctx.sessions() as session:
        assert ledger.verify_balances(session) == {}
        assert ledger.verify_month_totals(session) == {}
        assert session.scalars(select(SshKeyModel)).all() == []
        postings = session.scalars(select(BillingPostingModel)).all()
    assert {p.kind for p in postings} >= {"topup", "compute"}
    statement = api(admin, "get", "/billing/ledger?user=alice")  # still addressable by name
    assert len(statement["lines"]) == len(postings)
    listed = {u["name"]: u["state"] for u in api(admin, "get", "/users?include_deleted=true")}
    assert listed["alice"] == "deleted"
    assert "alice" not in {u["name"] for u in api(admin, "get", "/users")}
    again = client.post(f"{API}/users", json={"name": "alice"}, headers=admin.headers)
    assert again.status_code == 409 and "stays taken" in again.json()["error"]["message"]
    for method, path in ROUTES:
        answer = client.request(method, API + path, headers=admin.headers)
        assert answer.status_code == 404, (path, answer.text)
