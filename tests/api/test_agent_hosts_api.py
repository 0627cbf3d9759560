"""Hosts with agents over the API: admin only, the join command, drain, remove."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpudock.link.tokens import JoinToken
from gpudock.link.wire import HostReport, JoinRequest
from gpudock.platform import Platform
from gpudock.services.agents import enrollment
from gpudock.services.agents.server_key import server_fingerprint
from tests.support.factories import Tenant
from tests.support.platforms import PlatformFactory

API = "/api/v1/agent-hosts"
AGENT_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq2Y1l9b0b2m2yQpq9pXxkzRpq0m3b2wE9xJcRk9m7p"


@pytest.fixture
def platform(platform_factory: PlatformFactory, database_url: str | None) -> Platform:
    return platform_factory(
        database_url=database_url, agent_link_port=7443, agent_link_host="10.0.0.5"
    )


def _enroll(platform: Platform, command: str) -> None:
    token = JoinToken.parse(command.split()[4])
    enrollment.redeem(
        platform.ctx,
        JoinRequest(token_id=token.token_id, secret=token.secret),
        AGENT_KEY,
        HostReport(agent_version="0.1.0"),
        "10.0.0.9",
    )


def test_unauthenticated_is_401_and_a_tenant_is_403(client: TestClient, alice: Tenant) -> None:
    assert client.get(API).status_code == 401
    for method, path in (("get", API), ("post", API), ("delete", f"{API}/box-1")):
        response = client.request(method, path, json={"name": "box-1"}, headers=alice.headers)
        assert response.status_code == 403, (method, path)


def test_add_prints_a_join_command_pinning_the_server_key(
    client: TestClient, admin: Tenant, platform: Platform
) -> None:
    answer = client.post(API, json={"name": "box-1"}, headers=admin.headers)
    assert answer.status_code == 201
    body = answer.json()
    words = body["join_command"].split()
    assert words[:4] == ["gpudock", "agent", "join", "ssh://10.0.0.5:7443"]
    token = JoinToken.parse(words[4])
    assert token.server_fingerprint == server_fingerprint(platform.ctx.settings)
    assert (body["host"]["state"], body["host"]["link_state"]) == ("pending", "none")
    listed = client.get(API, headers=admin.headers).json()
    assert [host["name"] for host in listed] == ["box-1"]
    assert token.secret not in str(listed)


def test_adding_a_pending_host_again_voids_its_first_token(
    client: TestClient, admin: Tenant, platform: Platform
) -> None:
    first = client.post(API, json={"name": "box-1"}, headers=admin.headers).json()
    second = client.post(API, json={"name": "box-1"}, headers=admin.headers).json()
    with pytest.raises(enrollment.JoinRefused, match="not valid"):
        _enroll(platform, first["join_command"])
    _enroll(platform, second["join_command"])
    again = client.post(API, json={"name": "box-1"}, headers=admin.headers)
    assert again.status_code == 409
    assert "gpudock hosts remove box-1" in again.json()["error"]["message"]


@pytest.mark.parametrize("name", ["Box", "-box", "box_1", "a" * 64])
def test_a_bad_host_name_is_422_saying_what_fits(
    client: TestClient, admin: Tenant, name: str
) -> None:
    answer = client.post(API, json={"name": name}, headers=admin.headers)
    assert answer.status_code == 422


def test_drain_needs_an_agent_then_toggles(
    client: TestClient, admin: Tenant, platform: Platform
) -> None:
    command = client.post(API, json={"name": "box-1"}, headers=admin.headers).json()
    pending = client.post(f"{API}/box-1/drain", headers=admin.headers)
    assert pending.status_code == 409 and "no agent yet" in pending.json()["error"]["message"]
    _enroll(platform, command["join_command"])
    drained = client.post(f"{API}/box-1/drain", headers=admin.headers).json()
    assert drained["state"] == "draining"
    assert client.post(f"{API}/box-1/undrain", headers=admin.headers).json()["state"] == "active"


def test_remove_forgets_the_host_and_an_unknown_one_is_404(
    client: TestClient, admin: Tenant, platform: Platform
) -> None:
    client.post(API, json={"name": "box-1"}, headers=admin.headers)
    assert client.delete(f"{API}/box-1", headers=admin.headers).status_code == 200
    assert client.get(API, headers=admin.headers).json() == []
    missing = client.delete(f"{API}/box-1", headers=admin.headers)
    assert missing.status_code == 404 and "gpudock hosts list" in missing.json()["error"]["message"]


def test_a_server_without_the_link_says_how_to_open_it(
    platform_factory: PlatformFactory,
) -> None:
    from gpudock.api.app import create_app

    plain = platform_factory()
    token = plain.admin_token_path.read_text().strip() if plain.admin_token_path else ""
    client = TestClient(create_app(plain, run_reconciler=False))
    answer = client.post(API, json={"name": "box-1"}, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 409
    assert "GPUDOCK_AGENT_LINK_PORT" in answer.json()["error"]["message"]


def test_labels_are_set_at_add_changed_and_taken_off(
    client: TestClient, admin: Tenant, alice: Tenant
) -> None:
    added = client.post(
        API, json={"name": "box-1", "labels": {"region": "eu"}}, headers=admin.headers
    )
    assert added.json()["host"]["labels"] == {"region": "eu"}
    labels = f"{API}/box-1/labels"
    assert client.post(labels, json={"set": {"zone": "a"}}).status_code == 401
    assert (
        client.post(labels, json={"set": {"zone": "a"}}, headers=alice.headers).status_code == 403
    )
    changed = client.post(
        labels, json={"set": {"zone": "eu-west-1"}, "remove": ["region"]}, headers=admin.headers
    )
    assert changed.status_code == 200 and changed.json()["labels"] == {"zone": "eu-west-1"}
    assert client.get(f"{API}/box-1", headers=admin.headers).json()["labels"] == {
        "zone": "eu-west-1"
    }
    missing = client.post(f"{API}/box-9/labels", json={"set": {}}, headers=admin.headers)
    assert missing.status_code == 404


@pytest.mark.parametrize("labels", [{"Region": "eu"}, {"region": "eu west"}, {"region": ""}])
def test_a_bad_label_is_422(client: TestClient, admin: Tenant, labels: dict[str, str]) -> None:
    answer = client.post(API, json={"name": "box-1", "labels": labels}, headers=admin.headers)
    assert answer.status_code == 422


def test_an_instance_asks_for_host_labels_and_its_loss_policy(
    client: TestClient, admin: Tenant, alice: Tenant
) -> None:
    client.post(API, json={"name": "box-1", "labels": {"region": "eu"}}, headers=admin.headers)
    create = "/api/v1/instances"
    bad = client.post(
        create, json={"gpu_count": 0, "host_labels": {"Region": "eu"}}, headers=alice.headers
    )
    assert bad.status_code == 422 and "bad label key 'Region'" in bad.json()["error"]["message"]
    made = client.post(
        create,
        json={"gpu_count": 0, "host_labels": {"region": "eu"}, "on_host_loss": "elsewhere"},
        headers=alice.headers,
    )
    assert made.status_code == 201, made.json()
    assert (made.json()["host_labels"], made.json()["on_host_loss"]) == (
        {"region": "eu"},
        "elsewhere",
    )
