"""Users and tokens: first admin, token format and storage, admin-only routes."""

from __future__ import annotations

import hashlib
import stat

from fastapi.testclient import TestClient
from sqlalchemy import select

from gpudock.db.models import ApiTokenModel
from gpudock.platform import Platform
from tests.support.factories import Tenant

API = "/api/v1"


def test_first_start_writes_the_admin_token_file_0600(platform: Platform, admin: Tenant) -> None:
    assert platform.admin_token_path is not None
    mode = stat.S_IMODE(platform.admin_token_path.stat().st_mode)
    assert mode == 0o600
    assert admin.token.startswith("gpd_") and len(admin.token) >= 4 + 22  # ≥ 128 bits


def test_tokens_are_stored_only_as_sha256(platform: Platform, alice: Tenant) -> None:
    with platform.ctx.sessions() as session:
        stored = list(session.scalars(select(ApiTokenModel.token_hash)))
    assert hashlib.sha256(alice.token.encode()).hexdigest() in stored
    assert all(alice.token not in value for value in stored)


def test_second_start_keeps_the_admin_and_writes_no_token(platform_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = platform_factory(data_dir=tmp_path / "same")
    first.close()
    second = platform_factory(data_dir=tmp_path / "same")
    assert first.admin_token_path is not None and second.admin_token_path is None


def test_admin_creates_users_and_their_token_works(client: TestClient, admin: Tenant) -> None:
    response = client.post(f"{API}/users", json={"name": "carol"}, headers=admin.headers)
    assert response.status_code == 201
    token = response.json()["token"]
    me = client.get(f"{API}/users/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json()["name"] == "carol" and me.json()["is_admin"] is False


def test_only_admins_create_or_list_users(client: TestClient, alice: Tenant) -> None:
    for method, body in (("post", {"name": "mallory"}), ("get", None)):
        response = client.request(method, f"{API}/users", json=body, headers=alice.headers)
        assert response.status_code == 403
        assert "admin" in response.json()["error"]["message"]
    assert client.get(f"{API}/hosts", headers=alice.headers).status_code == 403


def test_duplicate_and_bad_user_names(client: TestClient, admin: Tenant, alice: Tenant) -> None:
    duplicate = client.post(f"{API}/users", json={"name": "alice"}, headers=admin.headers)
    assert duplicate.status_code == 409
    bad = client.post(f"{API}/users", json={"name": "Not OK"}, headers=admin.headers)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "name"


def test_hosts_show_gpus_and_tenants(client: TestClient, platform: Platform, admin: Tenant) -> None:
    created = client.post(
        f"{API}/instances",
        json={"gpu_model": "RTX4090-24GB", "gpu_count": 1},
        headers=admin.headers,
    ).json()
    platform.reconciler.drain()
    hosts = {h["name"]: h for h in client.get(f"{API}/hosts", headers=admin.headers).json()}
    rtx = hosts["sim1-rtx4090-24gb"]
    assert rtx["simulated"] is True and rtx["driver_version"] and rtx["cuda_version"]
    tenants = [g["instance_id"] for g in rtx["gpus"]]
    assert tenants.count(created["id"]) == 1 and tenants.count(None) == 1
    a100 = hosts["sim0-a100-80gb"]["gpus"]
    assert a100[0]["nvlink_peers"] and a100[0]["numa_node"] == 0
