"""Builds, save-as-image, validation and the doctor against the real Docker Engine."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import docker
import pytest
from fastapi.testclient import TestClient

from gpudock.platform import Platform
from gpudock.services.instances import container_spec as containers
from tests.support.factories import Tenant, make_tenant
from tests.support.platforms import PlatformFactory

API = "/api/v1"
BASE = "gpudock/base:bookworm"


@pytest.fixture
def real(docker_platform_factory: PlatformFactory) -> Platform:
    return docker_platform_factory(remove_images_tagged=("gpudock/dora/", "gpudock-sys/validated/"))


@pytest.fixture
def dora(real: Platform) -> Tenant:
    return make_tenant(real, "dora", admin=True)


def lines(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def container_of(real: Platform, engine: docker.DockerClient, instance_id: str) -> Any:
    return engine.containers.get(containers.container_name(real.ctx.cluster_id, instance_id))


def sh(container: Any, command: str) -> tuple[int, str]:
    code, output = container.exec_run(["sh", "-c", command])
    return int(code), output.decode()


def create_running(api: TestClient, real: Platform, tenant: Tenant, **body: Any) -> str:
    body.setdefault("gpu_model", "A100-80GB")
    response = api.post(f"{API}/instances", json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    real.reconciler.drain()
    shown = api.get(f"{API}/instances/{response.json()['id']}", headers=tenant.headers).json()
    assert shown["status"] == "running", shown
    return str(shown["id"])


def test_build_then_run_it_with_the_doctor_inside(
    real: Platform, api: TestClient, dora: Tenant, engine: docker.DockerClient, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        text = f"FROM {BASE}\nCOPY hello.txt /opt/hello.txt\nRUN cat /opt/hello.txt\n".encode()
        for name, data in (("Dockerfile", text), ("hello.txt", b"built by gpudock\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    found = lines(
        api.post(
            f"{API}/images/build?name=hello:v1", content=buffer.getvalue(), headers=dora.headers
        )
    )
    assert any("built by gpudock" in e.get("log", "") for e in found), found  # the RUN's output
    image = found[-1]["image"]
    assert image["reference"] == "gpudock/dora/hello:v1" and image["size_bytes"] > 0
    instance_id = create_running(api, real, dora, image=image["reference"], gpu_count=1)
    container = container_of(real, engine, instance_id)
    assert sh(container, "cat /opt/hello.txt") == (0, "built by gpudock\n")
    # Simulated GPUs: the instance was promised a GPU that no driver shows. The
    # doctor (copied in by the build) must say so and exit 1.
    code, output = sh(container, "gpudock-doctor --json")
    report = json.loads(output)
    assert code == 1 and not report["healthy"], output
    assert report["findings"][0]["code"] == "gpu_missing"
    assert "was given GPUs" in report["findings"][0]["message"]


def test_a_failing_build_reports_the_engines_error(api: TestClient, dora: Tenant) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = f"FROM {BASE}\nRUN echo about to fail && exit 3\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    found = lines(
        api.post(f"{API}/images/build?name=bad", content=buffer.getvalue(), headers=dora.headers)
    )
    assert any("about to fail" in e.get("log", "") for e in found)
    assert "returned a non-zero code: 3" in found[-1]["error"]


def test_save_image_round_trip_keeps_the_system_disk_not_the_data(
    real: Platform, api: TestClient, dora: Tenant, engine: docker.DockerClient
) -> None:
    first = create_running(api, real, dora, name="origin", gpu_count=0)
    container = container_of(real, engine, first)
    assert sh(container, "echo sys > /opt/system-marker && echo data > /root/data/d")[0] == 0
    code, output = sh(container, "gpudock-doctor")  # copied in at creation
    assert code == 0 and "No NVIDIA GPU on this machine" in output, output
    saved = api.post(
        f"{API}/instances/{first}/save-image", json={"name": "snap"}, headers=dora.headers
    )
    assert saved.status_code == 201, saved.text
    reference = saved.json()["image"]["reference"]
    second = create_running(api, real, dora, name="copy", gpu_count=0, image=reference)
    copy = container_of(real, engine, second)
    assert sh(copy, "cat /opt/system-marker") == (0, "sys\n")
    assert sh(copy, "test -e /root/data/d")[0] == 1  # the data volume is not in the image


def test_validation_holds_back_a_broken_candidate(
    api: TestClient, dora: Tenant, engine: docker.DockerClient
) -> None:
    matrix = {
        "threshold": 0.5,
        "templates": [
            {
                "name": "py{python}",
                "dockerfile": "FROM {base}\n",
                "axes": {"python": ["3.11", "3.12"], "base": [BASE]},
                "expect": {"python": "{python}", "imports": ["json", "sqlite3"]},
            }
        ],
    }
    found = lines(api.post(f"{API}/images/validate", json={"matrix": matrix}, headers=dora.headers))
    report = found[-1]["report"]
    by_name = {c["name"]: c for c in report["candidates"]}
    assert by_name["py3.11"]["status"] == "published", by_name
    broken = by_name["py3.12"]
    assert broken["status"] == "held back"
    failed = [c for c in broken["checks"] if not c["ok"]]
    assert [c["check"] for c in failed] == ["python 3.12"]
    assert {c["check"] for c in by_name["py3.11"]["checks"]} >= {"doctor", "tiny computation"}
    assert report["failure_rate"] == 0.5 and report["passed"]
    published = report["published"][0]
    engine.images.get(published)  # still on the engine
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(published.replace("py3.11", "py3.12"))


def test_the_doctor_runs_for_real_on_this_gpu_less_host(tmp_path: Path) -> None:
    gpudock = Path(sys.executable).with_name("gpudock")
    done = subprocess.run(
        [gpudock, "doctor", "--json"], capture_output=True, text=True, timeout=120, check=False
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert report["facts"]["gpus"] == [] and report["findings"][0]["code"] == "no_gpu"
    assert "No NVIDIA GPU" in report["findings"][0]["message"]
    script = tmp_path / "gpudock-doctor"
    subprocess.run([gpudock, "doctor", "--write-script", str(script)], check=True, timeout=60)
    plain = subprocess.run(
        ["/usr/bin/env", "-i", "/usr/bin/python3", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert plain.returncode == 0 and "No NVIDIA GPU on this machine" in plain.stdout, plain
