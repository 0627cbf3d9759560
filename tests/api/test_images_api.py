"""Images through the API on the fake runtime, over SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.db.models import ImageModel
from gpudock.platform import Platform
from gpudock.runtime.fake import FakeRuntime
from tests.support.factories import Tenant, make_tenant
from tests.support.platforms import PlatformFactory

API = "/api/v1"
CU128 = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
CU124 = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
# Logic that does not depend on the database runs on SQLite only; the tests that
# write rows (registration, privacy, save-image) run on both.
SQLITE_ONLY = pytest.mark.parametrize("database_url", [None], ids=["sqlite"])
ROUTES = [
    ("get", "/images"),
    ("post", "/images"),
    ("delete", "/images/img-0000000000"),
    ("post", "/images/build?name=x"),
    ("post", "/images/validate"),
    ("post", "/instances/i-0000000000/save-image"),
]


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime(images={"gpudock/base:bookworm", CU128, CU124})


@pytest.fixture
def platform(
    platform_factory: PlatformFactory, database_url: str | None, runtime: FakeRuntime
) -> Platform:
    return platform_factory(runtime=runtime, database_url=database_url)


@pytest.fixture
def client(platform: Platform) -> TestClient:
    return TestClient(create_app(platform, run_reconciler=False))


@pytest.fixture
def admin(platform: Platform) -> Tenant:
    return make_tenant(platform, "root", admin=True)


def tar_of(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buffer.getvalue()


def events(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


@SQLITE_ONLY
def test_every_image_endpoint_needs_a_token(client: TestClient) -> None:
    for method, path in ROUTES:
        for headers in ({}, {"Authorization": "Bearer gpd_nope"}):
            response = client.request(method, API + path, headers=headers)
            assert response.status_code == 401, (method, path, response.text)


@SQLITE_ONLY
def test_the_catalog_says_where_each_image_runs(client: TestClient, alice: Tenant) -> None:
    found = {i["reference"]: i for i in client.get(f"{API}/images", headers=alice.headers).json()}
    assert found[CU124]["runs_on"] == {"A100-80GB": "ok", "RTX4090-24GB": "ok"}
    assert "needs NVIDIA driver >= 570.26" in found[CU128]["runs_on"]["A100-80GB"]
    assert found["gpudock/base:bookworm"]["size_bytes"] > 0  # the engine has it
    assert found["gpudock/base:bookworm"]["on_host"] is True and found[CU124]["on_host"] is True
    not_pulled = [i for i in found.values() if i["reference"] not in (CU124, CU128)]
    assert any(i["on_host"] is False for i in not_pulled)  # the catalog's other tags
    narrowed = client.get(f"{API}/images?gpu=A100-80GB", headers=alice.headers).json()
    assert all(set(i["runs_on"]) == {"A100-80GB"} for i in narrowed)


@SQLITE_ONLY
def test_preflight_refuses_an_image_the_driver_cannot_run(
    client: TestClient, alice: Tenant
) -> None:
    body = {"gpu_model": "A100-80GB", "gpu_count": 1, "image": CU128}
    response = client.post(f"{API}/instances", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert f"image {CU128!r} cannot run on A100-80GB here" in message
    assert "CUDA 12.8 needs NVIDIA driver >= 570.26, this one is 550.54.15" in message
    assert CU124 in message  # what would work instead
    assert "GPU models that can run" in message and "none in this fleet" in message
    assert client.get(f"{API}/instances", headers=alice.headers).json() == []


@SQLITE_ONLY
def test_preflight_refuses_an_architecture_the_build_lacks(
    client: TestClient, alice: Tenant, runtime: FakeRuntime
) -> None:
    body: dict[str, Any] = {"reference": CU124, "name": "again", "cuda": "12.4"}
    assert client.post(f"{API}/images", json=body, headers=alice.headers).status_code == 409
    body["reference"] = "acme/hopper:1"
    missing = client.post(f"{API}/images", json=body, headers=alice.headers)
    assert missing.status_code == 422 and "unknown image" in missing.text
    runtime.images.add("acme/hopper:1")
    body["compute_capabilities"] = ["9.0"]
    registered = client.post(f"{API}/images", json=body, headers=alice.headers)
    assert registered.status_code == 201, registered.text
    assert registered.json()["visibility"] == "private"
    create = {"gpu_model": "RTX4090-24GB", "image": "acme/hopper:1"}
    response = client.post(f"{API}/instances", json=create, headers=alice.headers)
    assert response.status_code == 422, response.text
    assert "GPU architecture sm_89 is not in this build (sm_90)" in response.text
    assert "no kernel image" in response.text
    public = {**body, "reference": "acme/hopper:1", "public": True}
    assert client.post(f"{API}/images", json=public, headers=alice.headers).status_code == 403


@SQLITE_ONLY
def test_an_image_for_a_toolkit_outside_the_data_is_not_refused_but_flagged(
    client: TestClient, alice: Tenant, runtime: FakeRuntime
) -> None:
    runtime.images.add("acme/next:1")
    body = {"reference": "acme/next:1", "name": "next", "cuda": "13.9"}
    assert client.post(f"{API}/images", json=body, headers=alice.headers).status_code == 201
    found = {i["reference"]: i for i in client.get(f"{API}/images", headers=alice.headers).json()}
    verdict = found["acme/next:1"]["runs_on"]["A100-80GB"]
    assert verdict.startswith("unknown: ") and "CUDA 13.9" in verdict
    create = {"gpu_model": "A100-80GB", "image": "acme/next:1"}
    response = client.post(f"{API}/instances", json=create, headers=alice.headers)
    assert response.status_code in (200, 201, 202), response.text
    events = client.get(
        f"{API}/instances/{response.json()['id']}/events", headers=alice.headers
    ).json()
    assert any("not checked" in e["message"] and "CUDA 13.9" in e["message"] for e in events)


@SQLITE_ONLY
def test_unknown_images_stay_refused(client: TestClient, alice: Tenant) -> None:
    body = {"gpu_model": "A100-80GB", "image": "nosuch/image:1"}
    response = client.post(f"{API}/instances", json=body, headers=alice.headers)
    assert response.status_code == 422 and "unknown image" in response.text


def test_build_registers_a_private_image_and_streams_the_log(
    client: TestClient, alice: Tenant, bob: Tenant, runtime: FakeRuntime
) -> None:
    context = tar_of({"Dockerfile": f"FROM {CU124}\nRUN echo hi\n", "app.py": "print(1)\n"})
    response = client.post(
        f"{API}/images/build?name=mine:v1", content=context, headers=alice.headers
    )
    found = events(response)
    logs = [e["log"] for e in found if "log" in e]
    assert logs[0] == f"Step 1/3 : FROM {CU124}"
    assert logs[-1].startswith("Step 3/3 : COPY .gpudock-doctor /usr/local/bin/gpudock-doctor")
    image = found[-1]["image"]
    assert image["reference"] == "gpudock/alice/mine:v1" and image["visibility"] == "private"
    assert image["cuda"] == "12.4" and "8.0" in image["compute_capabilities"]  # from its FROM
    mine = [i["reference"] for i in client.get(f"{API}/images", headers=alice.headers).json()]
    theirs = [i["reference"] for i in client.get(f"{API}/images", headers=bob.headers).json()]
    assert "gpudock/alice/mine:v1" in mine and "gpudock/alice/mine:v1" not in theirs
    # bob can neither use nor delete it
    body = {"gpu_model": "A100-80GB", "image": "gpudock/alice/mine:v1"}
    refused = client.post(f"{API}/instances", json=body, headers=bob.headers)
    assert refused.status_code == 422 and "unknown image" in refused.text
    assert client.delete(f"{API}/images/{image['id']}", headers=bob.headers).status_code == 404
    sneaky = tar_of({"Dockerfile": "FROM gpudock/alice/mine:v1\n"})
    built = client.post(f"{API}/images/build?name=copy", content=sneaky, headers=bob.headers)
    assert built.status_code == 422 and "unknown image" in built.text
    created = client.post(f"{API}/instances", json=body, headers=alice.headers)
    assert created.status_code == 201, created.text
    assert client.delete(f"{API}/images/{image['id']}", headers=alice.headers).status_code == 200
    assert "gpudock/alice/mine:v1" not in runtime.images


@SQLITE_ONLY
def test_build_errors_are_shown_as_they_are(client: TestClient, alice: Tenant) -> None:
    context = tar_of({"Dockerfile": "FROM gpudock/base:bookworm\nRUN false\n"})
    found = events(
        client.post(f"{API}/images/build?name=bad", content=context, headers=alice.headers)
    )
    assert found[-1] == {"error": "The command '/bin/sh -c false' returned a non-zero code: 1"}
    missing = client.post(
        f"{API}/images/build?name=bad&dockerfile=Nope", content=context, headers=alice.headers
    )
    assert missing.status_code == 422 and "Nope" in missing.text


def test_save_image_commits_the_system_disk_only(
    client: TestClient, platform: Platform, alice: Tenant, bob: Tenant
) -> None:
    body = {"name": "work", "gpu_model": "A100-80GB", "gpu_count": 1}
    instance = client.post(f"{API}/instances", json=body, headers=alice.headers).json()
    path = f"{API}/instances/{instance['id']}/save-image"
    early = client.post(path, json={"name": "snap"}, headers=alice.headers)
    assert early.status_code == 409  # no container yet
    platform.reconciler.drain()
    assert client.post(path, json={"name": "snap"}, headers=bob.headers).status_code == 404
    saved = client.post(path, json={"name": "snap"}, headers=alice.headers)
    assert saved.status_code == 201, saved.text
    assert "data volume" in saved.json()["note"] and "NOT" in saved.json()["note"]
    image = saved.json()["image"]
    assert image["reference"] == "gpudock/alice/snap:latest" and image["origin"] == "save"
    again = client.post(
        f"{API}/instances",
        json={**body, "name": "w2", "image": image["reference"]},
        headers=alice.headers,
    )
    assert again.status_code == 201, again.text


@SQLITE_ONLY
def test_validation_publishes_passing_candidates_and_holds_back_the_broken(
    client: TestClient, admin: Tenant, alice: Tenant
) -> None:
    matrix = {
        "threshold": 0.5,
        "candidates": [
            {"name": "good", "dockerfile": "FROM gpudock/base:bookworm\n"},
            {"name": "broken", "dockerfile": "FROM gpudock/base:bookworm\nRUN false\n"},
        ],
    }
    denied = client.post(f"{API}/images/validate", json={"matrix": matrix}, headers=alice.headers)
    assert denied.status_code == 403
    found = events(
        client.post(f"{API}/images/validate", json={"matrix": matrix}, headers=admin.headers)
    )
    report = found[-1]["report"]
    status = {c["name"]: c["status"] for c in report["candidates"]}
    assert status == {"good": "published", "broken": "held back"}
    assert report["passed"] and report["failure_rate"] == 0.5
    public = [i["reference"] for i in client.get(f"{API}/images", headers=alice.headers).json()]
    assert report["published"][0] in public
    strict = events(
        client.post(
            f"{API}/images/validate",
            json={"matrix": {**matrix, "threshold": 0.003}},
            headers=admin.headers,
        )
    )[-1]["report"]
    assert not strict["passed"] and strict["published"] == []


@SQLITE_ONLY
@pytest.mark.parametrize("path", ["/instances", "/images"])
def test_an_overlong_image_reference_is_a_422_naming_the_limit(
    client: TestClient, alice: Tenant, path: str
) -> None:
    reference = "a" * 256
    body = {"gpu_count": 0, "image": reference} if path == "/instances" else {}
    if path == "/images":
        body = {"reference": reference, "name": "long"}
    answer = client.post(API + path, json=body, headers=alice.headers)
    assert answer.status_code == 422, answer.text
    assert "at most 255 characters" in answer.json()["error"]["message"]


@SQLITE_ONLY
def test_unparseable_architectures_are_refused_at_the_edge(
    client: TestClient, alice: Tenant
) -> None:
    body = {"reference": CU124, "name": "bad", "compute_capabilities": ["8.0", "eight"]}
    answer = client.post(API + "/images", json=body, headers=alice.headers)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"].startswith("compute_capabilities")


def test_a_stored_bad_row_does_not_break_the_image_list(
    client: TestClient, platform: Platform, runtime: FakeRuntime, alice: Tenant
) -> None:
    """Rows written before validation existed are shown, 'not checked', not a 500."""
    runtime.images.add("acme/train:1")
    body = {"reference": "acme/train:1", "name": "fine", "cuda": "12.4"}
    made = client.post(API + "/images", json=body, headers=alice.headers)
    assert made.status_code == 201, made.text
    with platform.ctx.sessions.begin() as session:
        row = session.get(ImageModel, made.json()["id"])
        assert row is not None
        row.compute_capabilities = '["eight"]'
    listed = client.get(API + "/images", headers=alice.headers)
    assert listed.status_code == 200, listed.text
    entry = next(i for i in listed.json() if i["id"] == made.json()["id"])
    assert all(v.startswith("unknown:") and "do not parse" in v for v in entry["runs_on"].values())
    answer = client.post(
        API + "/instances",
        json={"gpu_model": "A100-80GB", "image": "acme/train:1"},
        headers=alice.headers,
    )
    assert answer.status_code == 201, answer.text


def test_an_unreachable_registry_is_not_called_an_unknown_image(
    platform_factory: PlatformFactory,
) -> None:
    offline = FakeRuntime(pullable={"pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"})
    platform = platform_factory(runtime=offline, image_pull="missing")
    client, alice = (
        TestClient(create_app(platform, run_reconciler=False)),
        make_tenant(platform, "alice"),
    )
    body = {"gpu_model": "A100-80GB", "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"}
    offline.registry_reachable = False
    response = client.post(f"{API}/instances", json=body, headers=alice.headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "image"
    assert "registry cannot be reached" in error["message"]
    assert "unknown image" not in error["message"] and "check the name" not in error["message"]
    offline.registry_reachable = True
    missing = client.post(
        f"{API}/instances",
        json={**body, "image": "pytorch/pytorch:no-such-tag"},
        headers=alice.headers,
    )
    assert missing.status_code == 422 and "unknown image" in missing.text
    assert "registry does not have it" in missing.text
    services = client.post(
        f"{API}/instances",
        json={"gpu_count": 0, "image": "gpudock/jupyter:bookworm"},
        headers=alice.headers,
    )
    assert services.status_code == 422  # built on the host: no registry is asked
    assert "`gpudock images build-services` once" in services.json()["error"]["message"]
