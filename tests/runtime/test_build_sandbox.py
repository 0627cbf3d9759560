"""Build steps run in an instance's sandbox, and the builder does what Docker's does.

Against the real Docker Engine, through the API: a `RUN` sees the same
capabilities, no-new-privileges, pids and memory limits as an instance, no
network, and a time limit; the Dockerfile forms users write (stages, COPY
into directories, --chown, ADD of a local archive, ENV/ARG/WORKDIR/USER) give
the image Docker would give, and a rebuild reuses its layers.
"""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import docker
import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform
from tests.support.docker import allowed_capability_mask
from tests.support.factories import Tenant, make_tenant
from tests.support.platforms import PlatformFactory

pytestmark = pytest.mark.docker

API = "/api/v1"
BASE = "gpudock/base:bookworm"


@pytest.fixture
def real(docker_platform_factory: PlatformFactory) -> Platform:
    return docker_platform_factory(
        build_memory_gb=1, pids_limit=128, remove_images_tagged=("gpudock/bea/",)
    )


@pytest.fixture
def bea(real: Platform) -> Tenant:
    return make_tenant(real, "bea")


def context(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build(api: TestClient, tenant: Tenant, name: str, files: dict[str, bytes]) -> list[Any]:
    answer = api.post(
        f"{API}/images/build?name={name}", content=context(files), headers=tenant.headers
    )
    assert answer.status_code == 200, answer.text
    return [json.loads(line) for line in answer.text.splitlines() if line.strip()]


def logged(found: list[dict[str, Any]], prefix: str) -> list[str]:
    return [e["log"][len(prefix) :].strip() for e in found if e.get("log", "").startswith(prefix)]


def test_run_steps_get_the_instance_sandbox(api: TestClient, bea: Tenant) -> None:
    dockerfile = (
        f"FROM {BASE}\n"
        "RUN grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status | sed 's/^/status /'\n"
        "RUN echo pids $(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null"
        " || cat /sys/fs/cgroup/pids.max)\n"
        "RUN echo memory $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null"
        " || cat /sys/fs/cgroup/memory.max)\n"
    )
    found = build(api, bea, "sandbox:v1", {"Dockerfile": dockerfile.encode()})
    assert "image" in found[-1], found
    status = dict(line.split(":", 1) for line in logged(found, "status "))
    allowed = allowed_capability_mask()
    for field in ("CapEff", "CapPrm", "CapBnd"):
        assert int(status[field].strip(), 16) == allowed, (field, status)
    assert status["NoNewPrivs"].strip() == "1"
    assert logged(found, "pids ") == ["128"]
    assert logged(found, "memory ") == [str(2**30)]


def test_a_step_over_its_memory_limit_fails_the_build(api: TestClient, bea: Tenant) -> None:
    hog = "RUN python3 -c \"b = bytearray(1536 * 2**20); print('allocated', len(b))\"\n"
    found = build(api, bea, "hog:v1", {"Dockerfile": f"FROM {BASE}\n{hog}".encode()})
    assert "error" in found[-1], found
    assert "returned a non-zero code: 137" in found[-1]["error"]  # SIGKILL by the OOM killer
    assert logged(found, "allocated") == []


def test_a_build_past_its_time_limit_is_stopped(
    docker_platform_factory: PlatformFactory, engine: docker.DockerClient
) -> None:
    quick = docker_platform_factory(build_timeout_s=3)
    tenant = make_tenant(quick, "bea")
    api = TestClient(create_app(quick, run_reconciler=False))
    dockerfile = f"FROM {BASE}\nRUN sleep 600\n"
    found = build(api, tenant, "slow:v1", {"Dockerfile": dockerfile.encode()})
    assert "error" in found[-1], found
    assert "time limit (3 s)" in found[-1]["error"]
    left = engine.containers.list(all=True, filters={"label": "gpudock.build"})
    assert [c for c in left if c.labels.get("gpudock.cluster") == quick.ctx.cluster_id] == []


def test_dockerfile_forms_build_what_docker_builds(
    api: TestClient, bea: Tenant, engine: docker.DockerClient
) -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        data = b"from the archive\n"
        info = tarfile.TarInfo("inner/file.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    dockerfile = (
        "ARG GREETING=hello\n"
        f"FROM {BASE} AS builder\n"
        "ARG GREETING\n"
        'RUN mkdir -p /out && echo "$GREETING built" > /out/result.txt\n'
        f"FROM {BASE}\n"
        "ARG TOKEN=not-persisted\n"
        'ENV APP_HOME=/srv/app MODE="two words"\n'
        "WORKDIR $APP_HOME\n"
        "COPY app.py ./\n"
        "COPY app.py conf/\n"
        "COPY --chown=nobody:nogroup app.py /srv/owned.py\n"
        "COPY --from=builder /out/result.txt /srv/\n"
        "ADD bundle.tar.gz /srv/unpacked/\n"
        "COPY app.py /usr/local/bin\n"
        "RUN echo token=$TOKEN > /srv/token.txt\n"
        "USER nobody\n"
        "LABEL team=ml\n"
    )
    files = {
        "Dockerfile": dockerfile.encode(),
        "app.py": b"print('app')\n",
        "bundle.tar.gz": archive.getvalue(),
        "ignored.txt": b"x",
        ".dockerignore": b"ignored.txt\n",
    }
    found = build(api, bea, "forms:v1", files)
    assert "image" in found[-1], found
    image = engine.images.get(found[-1]["image"]["reference"])
    config = image.attrs["Config"]
    assert config["WorkingDir"] == "/srv/app" and config["User"] == "nobody"
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["APP_HOME"] == "/srv/app" and env["MODE"] == "two words"
    assert "TOKEN" not in env and "GREETING" not in env  # build arguments never persist
    assert config["Labels"]["team"] == "ml" and config["Labels"]["gpudock.user"]
    script = (
        "cat /srv/app/app.py /srv/app/conf/app.py /srv/result.txt /srv/unpacked/inner/file.txt"
        " /srv/token.txt /usr/local/bin/app.py; stat -c '%U:%G' /srv/owned.py;"
        " test -x /usr/local/bin/gpudock-doctor && echo doctor;"
        " test -d /usr/local/bin && echo bin-is-a-directory; ls /srv/app"
    )
    out = engine.containers.run(image.id, ["sh", "-c", script], remove=True, user="root")
    assert out.decode().split("\n") == [
        "print('app')",
        "print('app')",
        "hello built",
        "from the archive",
        "token=not-persisted",
        "print('app')",
        "nobody:nogroup",
        "doctor",
        "bin-is-a-directory",
        "app.py",
        "conf",
        "",
    ]


def test_a_rebuild_reuses_its_layers(api: TestClient, bea: Tenant) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nRUN echo layer $RANDOM\nCOPY a.txt /a\n".encode()}
    files["a.txt"] = b"a"
    first = build(api, bea, "cached:v1", files)
    second = build(api, bea, "cached:v1", files)
    assert "image" in first[-1] and "image" in second[-1], (first, second)
    assert logged(second, " --->").count("Using cache") == 3  # RUN, COPY, the doctor
    assert logged(second, "layer") == []  # the RUN did not run again
    files["a.txt"] = b"changed"
    third = build(api, bea, "cached:v1", files)
    assert logged(third, " --->").count("Using cache") == 1  # only the RUN before it
