"""One tenant can never reach another's images: every alias, every Dockerfile form.

Against the real Docker Engine: amy builds a private image holding a secret;
ben tries each way in that once worked (builds through a second stage,
`COPY --from`, an ARG, a registry prefix, image ids; creates through aliases
and ids; registering an alias and deleting it) and each must fail as an
unknown image, with the secret never printed and nothing registered.
"""

from __future__ import annotations

import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from typing import Any

import docker
import pytest
from fastapi.testclient import TestClient

from gpudock.platform import Platform
from gpudock.runtime.base import LABEL_CLUSTER, LABEL_OWNER
from tests.support.docker import docker_client
from tests.support.factories import Tenant, make_tenant
from tests.support.platforms import PlatformFactory

pytestmark = pytest.mark.docker

API = "/api/v1"
BASE = "gpudock/base:bookworm"
SECRET = "amy-secret-4711"
NAMESPACES = ("gpudock/amy/", "gpudock/ben/", "gpudock/stc_x/", "gpudock/stc-x/", "gpudock-sys/")


@pytest.fixture
def real(docker_platform_factory: PlatformFactory) -> Platform:
    return docker_platform_factory(remove_images_tagged=NAMESPACES)


@pytest.fixture
def amy(real: Platform) -> Tenant:
    return make_tenant(real, "amy")


@pytest.fixture
def ben(real: Platform) -> Tenant:
    return make_tenant(real, "ben")


def tar_of(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build(api: TestClient, tenant: Tenant, name: str, dockerfile: str) -> Any:
    return api.post(
        f"{API}/images/build?name={name}",
        content=tar_of({"Dockerfile": dockerfile}),
        headers=tenant.headers,
    )


def events(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


@pytest.fixture
def secret(api: TestClient, amy: Tenant, engine: docker.DockerClient) -> dict[str, str]:
    """amy's private image with a secret file: its reference and image id."""
    found = events(build(api, amy, "secret:v1", f"FROM {BASE}\nRUN echo {SECRET} > /secret.txt\n"))
    image = found[-1]["image"]
    assert image["reference"] == "gpudock/amy/secret:v1", found
    image_id = engine.images.get(image["reference"]).id
    return {"reference": image["reference"], "id": image_id}


def ben_images(api: TestClient, ben: Tenant) -> set[str]:
    listed = api.get(f"{API}/images", headers=ben.headers)
    assert listed.status_code == 200, listed.text
    return {i["reference"] for i in listed.json()}


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM {ref} AS s\nRUN cat /secret.txt\nFROM " + BASE + "\n",
        "FROM " + BASE + "\nCOPY --from={ref} /secret.txt /x\n",
        "ARG B={ref}\nFROM $B\n",
        "ARG B={ref}\nFROM ${{B}}\n",
        "FROM docker.io/{ref}\n",
        "FROM {id}\n",
        "FROM {short}\n",
        "FROM " + BASE + " AS a\nFROM " + BASE + "\nCOPY --from=docker.io/{ref} /secret.txt /x\n",
    ],
    ids=[
        "stage",
        "copy-from",
        "arg",
        "arg-braces",
        "registry-alias",
        "id",
        "short-id",
        "alias-from",
    ],
)
def test_a_build_cannot_read_another_tenants_private_image(
    api: TestClient, ben: Tenant, secret: dict[str, str], dockerfile: str
) -> None:
    text = dockerfile.format(ref=secret["reference"], id=secret["id"], short=secret["id"][7:19])
    answer = build(api, ben, "steal:v1", text)
    assert answer.status_code == 422, answer.text
    assert "unknown image" in answer.json()["error"]["message"]
    assert SECRET not in answer.text
    assert not any("steal" in ref for ref in ben_images(api, ben))


def test_an_image_variable_without_a_value_is_refused(api: TestClient, ben: Tenant) -> None:
    answer = build(api, ben, "x:v1", "ARG B\nFROM $B\n")
    assert answer.status_code == 422, answer.text
    assert "cannot be resolved" in answer.json()["error"]["message"]


@pytest.mark.parametrize("form", ["alias", "id", "bare-id", "short-id"])
def test_an_instance_cannot_start_from_another_tenants_image(
    api: TestClient, ben: Tenant, secret: dict[str, str], form: str
) -> None:
    image = {
        "alias": f"docker.io/{secret['reference']}",
        "id": secret["id"],
        "bare-id": secret["id"].removeprefix("sha256:"),
        "short-id": secret["id"][7:19],
    }[form]
    answer = api.post(
        f"{API}/instances", json={"gpu_count": 0, "image": image}, headers=ben.headers
    )
    assert answer.status_code == 422, answer.text
    assert "unknown image" in answer.json()["error"]["message"]


def test_another_tenants_committed_system_disk_is_unknown(
    api: TestClient, real: Platform, amy: Tenant, ben: Tenant, engine: docker.DockerClient
) -> None:
    """What gpudock commits for amy (moves, restarts on other GPUs) carries her
    id; its guessable name and its id are both unknown to ben."""
    holder = engine.containers.create(BASE, ["true"])
    try:
        amy_id = api.get(f"{API}/users/me", headers=amy.headers).json()["id"]
        name = f"gpudock-sys/{real.ctx.cluster_id}-i-0123456789"
        labels = {LABEL_OWNER: amy_id, LABEL_CLUSTER: real.ctx.cluster_id}
        real.ctx.runtime.commit_container(holder.id, name, "t1", labels)
    finally:
        holder.remove(force=True)
    image_id = engine.images.get(f"{name}:t1").id
    for image in (f"{name}:t1", image_id):
        answer = api.post(
            f"{API}/instances", json={"gpu_count": 0, "image": image}, headers=ben.headers
        )
        assert answer.status_code == 422, answer.text
        assert "unknown image" in answer.json()["error"]["message"]


def test_registering_an_alias_cannot_delete_another_tenants_image(
    api: TestClient, ben: Tenant, secret: dict[str, str], engine: docker.DockerClient
) -> None:
    alias = f"docker.io/{secret['reference']}"
    answer = api.post(
        f"{API}/images", json={"reference": alias, "name": "mine"}, headers=ben.headers
    )
    assert answer.status_code == 422, answer.text
    answer = api.post(
        f"{API}/images", json={"reference": secret["id"], "name": "mine"}, headers=ben.headers
    )
    assert answer.status_code == 422, answer.text
    assert engine.images.get(secret["reference"]).id == secret["id"]  # still there


def test_deleting_a_hand_made_entry_never_removes_the_engines_image(
    api: TestClient, ben: Tenant, engine: docker.DockerClient
) -> None:
    """The shared default image, through an alias: refused as a duplicate of
    the built-in entry; any other image ben points an entry at stays on the
    engine when he deletes the entry."""
    default = api.post(
        f"{API}/images",
        json={"reference": f"docker.io/{BASE}", "name": "base"},
        headers=ben.headers,
    )
    assert default.status_code == 409, default.text
    engine.images.get(BASE).tag("gpudock-test-plain", "v1")
    try:
        made = api.post(
            f"{API}/images",
            json={"reference": "docker.io/library/gpudock-test-plain:v1", "name": "plain"},
            headers=ben.headers,
        )
        assert made.status_code == 201, made.text
        assert made.json()["reference"] == "gpudock-test-plain:v1"  # stored normalised
        gone = api.delete(f"{API}/images/{made.json()['id']}", headers=ben.headers)
        assert gone.status_code == 200, gone.text
        assert engine.images.get("gpudock-test-plain:v1")  # still on the engine
    finally:
        engine.images.remove("gpudock-test-plain:v1", force=True)
    assert engine.images.get(BASE)


def test_user_names_map_to_distinct_namespaces(real: Platform, api: TestClient) -> None:
    underscore, dash = make_tenant(real, "stc_x"), make_tenant(real, "stc-x")
    refs = []
    for tenant in (underscore, dash):
        found = events(
            build(api, tenant, "env:v1", f"FROM {BASE}\nRUN echo {tenant.name} > /who\n")
        )
        refs.append(found[-1]["image"]["reference"])
    assert refs == ["gpudock/stc_x/env:v1", "gpudock/stc-x/env:v1"]
    engine = docker_client()
    for tenant, ref in zip((underscore, dash), refs, strict=True):
        out = engine.containers.run(ref, ["cat", "/who"], remove=True).decode().strip()
        assert out == tenant.name


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        _Recorder.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"host secret\n")

    def log_message(self, *_: Any) -> None:
        return None


@pytest.fixture
def host_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.hits = []
    yield server.server_address[1]
    server.shutdown()


def test_builds_cannot_reach_the_hosts_network(
    api: TestClient, ben: Tenant, host_server: int
) -> None:
    remote = build(api, ben, "add:v1", f"FROM {BASE}\nADD http://127.0.0.1:{host_server}/x /x\n")
    assert remote.status_code == 422, remote.text
    assert "remote ADD is refused" in remote.json()["error"]["message"]
    probe = "python3 -c 'import socket; print(\"interfaces\", socket.if_nameindex())'"
    found = events(build(api, ben, "net:v1", f"FROM {BASE}\nRUN {probe}\n"))
    shown = [e["log"] for e in found if e.get("log", "").startswith("interfaces")]
    assert shown == ["interfaces [(1, 'lo')]"], found  # no interface but loopback
    assert _Recorder.hits == []
