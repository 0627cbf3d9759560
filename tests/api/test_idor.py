"""IDOR sweep: every API route with an id in its path, every verb, another tenant.

The routes come from the app's OpenAPI schema, which FastAPI builds from its
route table (this FastAPI nests included routers, so the schema is the public,
flattened view of it): an endpoint added later is swept without editing this
file, unless it names a path parameter nobody here knows how to make an object
for, which fails loudly (teach `OwnedObjects`).

The rule, one for the whole API, for a non-admin caller:
- a tenant route answers another tenant's object exactly as it answers an id
  that does not exist: 404, never 403 (which would confirm it exists) nor 2xx;
- an admin-only route answers 403 "this needs an admin token" before looking
  anything up, so its answer is the same for an existing object and a made-up
  one: it says "you are not an admin", never whether the object exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpudock.images.catalog import ImageSpec
from gpudock.platform import Platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import tokens
from gpudock.services.images import catalog as images
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.notifications import endpoints, gpu_watches
from tests.support.factories import Tenant
from tests.support.key_proof import add_with_proof, make_key
from tests.support.platforms import PlatformFactory

API = "/api/v1"
TOOLS_IMAGE = "example/tools:1"
MADE_UP = "zz-no-such-object-0000"
# A valid body for each request model a path-parameter route takes, so that the
# answer is about the object, not about a malformed body (422 comes first).
BODIES: dict[str, dict[str, Any]] = {
    "SaveImageRequest": {"name": "stolen:v1"},
    "PasswordSetRequest": {"password": "correct horse battery"},
    "UserDisableRequest": {"reason": "swept"},
    "AutoStopRequest": {"idle_after_s": 1800},
    "ServiceExposeRequest": {"name": "stolen", "port": 8000},
}


@dataclass(frozen=True)
class Sweep:
    method: str
    path: str  # the template, under /api/v1
    operation: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.method.upper()} {self.path}"

    @property
    def path_params(self) -> list[str]:
        return [p["name"] for p in self.operation.get("parameters", []) if p["in"] == "path"]

    @property
    def body_model(self) -> str | None:
        content = self.operation.get("requestBody", {}).get("content", {})
        if "application/json" not in content:
            return None
        return str(content["application/json"]["schema"]["$ref"].rpartition("/")[2])

    def body(self) -> dict[str, Any] | None:
        """A valid body if one is known; else `{}` (enough for an admin-only route,
        which refuses a non-admin before it reads the body)."""
        return None if self.body_model is None else BODIES.get(self.body_model, {})


def id_routes(schema: dict[str, Any]) -> list[Sweep]:
    """Every (verb, path) of the API with at least one path parameter."""
    return [
        Sweep(method, path.removeprefix(API), operation)
        for path, operations in schema["paths"].items()
        if path.startswith(API + "/") and "{" in path
        for method, operation in operations.items()
    ]


@pytest.fixture
def platform(platform_factory: PlatformFactory, database_url: str | None) -> Platform:
    runtime = FakeRuntime(images={"gpudock/base:bookworm", TOOLS_IMAGE})
    return platform_factory(runtime=runtime, database_url=database_url)


@dataclass(frozen=True)
class OwnedObjects:
    """One object of each kind, owned by alice; path parameter name → its id."""

    values: dict[str, str]
    alice: Tenant

    @classmethod
    def make(cls, platform: Platform, alice: Tenant, key_dir: Path) -> OwnedObjects:
        ctx = platform.ctx
        owner = tokens.authenticate(ctx, alice.token).user
        instance = instances.create_instance(
            ctx, owner, InstanceRequest(name="secret", gpu_model="A100-80GB", gpu_count=1)
        )
        spec = ImageSpec(reference=TOOLS_IMAGE, name="tools", origin="manual")
        image = images.register(ctx, owner, spec)
        key = add_with_proof(ctx, owner, make_key(key_dir, "alice"), "laptop")
        token = tokens.create_token(ctx, owner, "ci")
        webhook = endpoints.create_webhook(ctx, owner, "https://alice.example/hook", [])
        watch = gpu_watches.create_watch(ctx, owner, "A100-80GB", 1)
        assert image.id is not None
        return cls(
            values={
                "instance_id": instance.id,
                "image_id": image.id,
                "key_ref": key.id,
                "token_ref": token.view.token.id,
                "webhook_id": webhook.endpoint.id,
                "watch_id": watch.id,
                "name": owner.name,  # /users/{name}/...: admin-only
            },
            alice=alice,
        )

    def url(self, sweep: Sweep, *, made_up: bool = False) -> str | None:
        """The route's URL for alice's objects (or made-up ids); None if one is unknown."""
        values = {}
        for name in sweep.path_params:
            if made_up:
                values[name] = MADE_UP
            elif name in self.values:
                values[name] = self.values[name]
            else:
                return None
        return API + sweep.path.format(**values)


Answer = tuple[int, dict[str, Any]]


def _answer(client: TestClient, sweep: Sweep, url: str, tenant: Tenant) -> Answer:
    response = client.request(sweep.method, url, headers=tenant.headers, json=sweep.body())
    return response.status_code, response.json()


def _sweeps(client: TestClient) -> list[Sweep]:
    return id_routes(client.get("/openapi.json").json())


def test_the_sweep_finds_every_id_route(client: TestClient) -> None:
    swept = {s.id for s in _sweeps(client)}
    # a floor, not the list: new routes join the sweep without editing this
    assert {
        "GET /instances/{instance_id}",
        "DELETE /instances/{instance_id}",
        "POST /instances/{instance_id}/stop",
        "POST /instances/{instance_id}/save-image",
        "GET /instances/{instance_id}/sessions",
        "DELETE /images/{image_id}",
        "DELETE /ssh-keys/{key_ref}",
        "DELETE /tokens/{token_ref}",
        "PUT /users/{name}/password",
        "POST /users/{name}/disable",
        "POST /users/{name}/enable",
        "DELETE /users/{name}",
    } <= swept


def test_another_tenant_gets_404_for_every_verb_on_every_id_route(
    client: TestClient, platform: Platform, alice: Tenant, bob: Tenant, tmp_path: Path
) -> None:
    owned = OwnedObjects.make(platform, alice, tmp_path)
    refused = client.get(f"{API}/users", headers=bob.headers)  # an admin-only route
    assert refused.status_code == 403
    admin_refusal: Answer = (403, refused.json())
    wrong, admin_only = [], set()
    for sweep in _sweeps(client):
        made_up_url, url = owned.url(sweep, made_up=True), owned.url(sweep)
        assert made_up_url is not None
        made_up = _answer(client, sweep, made_up_url, bob)
        if made_up == admin_refusal:  # refused before any lookup...
            admin_only.add(sweep.id)
            if url is not None and _answer(client, sweep, url, bob) != made_up:
                wrong.append(f"{sweep.id}: alice's object is answered unlike a made-up id")
            continue  # ...so the answer is the same whether the object exists or not
        if sweep.body_model is not None and sweep.body_model not in BODIES:
            pytest.fail(f"{sweep.id}: add a valid {sweep.body_model} body to BODIES ({__file__})")
        if url is None:
            pytest.fail(
                f"{sweep.id}: no object for its path parameters {sweep.path_params}; "
                f"make alice one in OwnedObjects.make ({__file__})"
            )
        status, body = _answer(client, sweep, url, bob)
        if (status, made_up[0]) != (404, 404) or body["error"]["code"] != "not_found":
            wrong.append(f"{sweep.id}: {status} {body} (a made-up id: {made_up})")
    assert not wrong, "\n".join(wrong)
    assert {
        "PUT /users/{name}/password",
        "POST /users/{name}/disable",
        "POST /users/{name}/enable",
        "DELETE /users/{name}",
    } <= admin_only
    assert not any(s.startswith(("GET /instances", "DELETE /instances")) for s in admin_only)
    _assert_untouched(client, owned)


def test_an_object_id_in_the_path_is_the_owners_to_use(
    client: TestClient, platform: Platform, alice: Tenant, tmp_path: Path
) -> None:
    """The sweep's premise: the same URLs do reach the objects for their owner."""
    owned = OwnedObjects.make(platform, alice, tmp_path)
    for path in ("/instances/{instance_id}", "/instances/{instance_id}/events"):
        url = API + path.format(**owned.values)
        assert client.get(url, headers=alice.headers).status_code == 200
    key = client.delete(f"{API}/ssh-keys/{owned.values['key_ref']}", headers=alice.headers)
    assert key.status_code == 200
    image = client.delete(f"{API}/images/{owned.values['image_id']}", headers=alice.headers)
    assert image.status_code == 200
    token = client.delete(f"{API}/tokens/{owned.values['token_ref']}", headers=alice.headers)
    assert token.status_code == 200 and token.json()["state"] == "revoked"


def _assert_untouched(client: TestClient, owned: OwnedObjects) -> None:
    alice = owned.alice
    instance_url = f"{API}/instances/{owned.values['instance_id']}"
    instance = client.get(instance_url, headers=alice.headers).json()
    assert instance["desired_state"] == "running" and instance["status"] == "pending"
    keys = client.get(f"{API}/ssh-keys", headers=alice.headers).json()
    assert [k["id"] for k in keys] == [owned.values["key_ref"]]
    mine = client.get(f"{API}/images", headers=alice.headers).json()
    assert owned.values["image_id"] in {i["id"] for i in mine}
    listed = client.get(f"{API}/tokens", headers=alice.headers).json()
    assert {t["id"]: t["state"] for t in listed}[owned.values["token_ref"]] == "active"
    assert client.get(f"{API}/users/me", headers=alice.headers).json()["state"] == "active"
    hooks = client.get(f"{API}/webhooks", headers=alice.headers).json()
    assert [h["id"] for h in hooks] == [owned.values["webhook_id"]]
    watches = client.get(f"{API}/gpu-watches", headers=alice.headers).json()
    assert [w["id"] for w in watches] == [owned.values["watch_id"]]
    assert instance["auto_stop"] is None  # bob's PUT changed nothing
