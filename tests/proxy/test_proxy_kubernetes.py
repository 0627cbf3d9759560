"""A service URL on the Kubernetes runtime, end to end: the browser's request
goes through the proxy (uvicorn in front), the runtime's pod port-forward over
WebSocket to the fake cluster, and into the pod, whose kubelet runs it as a
real container with a real HTTP server inside; the owner gets through, another
tenant gets 404."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.platform import Platform, default_runtime, open_platform
from gpudock.services.accounts import logins, users
from gpudock.services.instances import actions
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings
from tests.support.docker import docker_client
from tests.support.kube_fake import TEST_IMAGE, FakeKubeCluster, tag_test_image
from tests.support.sshgw import wait_for
from tests.support.web import CHEAP, PASSWORD, csrf_of
from tests.web.browser import serve

pytestmark = pytest.mark.docker
DEADLINE_S = 90.0
SERVER = "cd /srv && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[Platform, FakeKubeCluster]]:
    engine = docker_client()
    tag_test_image(engine.api)
    logins.configure_hashing(CHEAP)
    with FakeKubeCluster(engine.api) as cluster:
        cluster.add_node("gpu-a", gpus=1, product="NVIDIA-A100-SXM4-80GB")
        settings = Settings(
            data_dir=tmp_path / "data",
            runtime="kubernetes",
            kubeconfig=cluster.kubeconfig(tmp_path),
            kubernetes_start_timeout_s=DEADLINE_S,
            image_pull="missing",
            service_auth_cache_s=0,
            rate_limits_enabled=False,
        )
        platform = open_platform(settings, runtime=default_runtime(settings))
        try:
            yield platform, cluster
        finally:
            platform.close()


def _login(url: str, name: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    token = csrf_of(client.get("/login").text)
    form = {"username": name, "password": PASSWORD, "csrf_token": token, "next_url": "/"}
    assert client.post("/login", data=form).status_code == 303
    return client


def test_a_service_url_reaches_a_server_in_the_pod_through_port_forward(
    kube: tuple[Platform, FakeKubeCluster],
) -> None:
    platform, cluster = kube
    ctx = platform.ctx
    people = {name: users.create_user(ctx, name).user for name in ("alice", "bob")}
    for name in people:
        logins.set_password(ctx, name, PASSWORD)
    alice = people["alice"]
    request = InstanceRequest(
        gpu_model="A100-80GB", gpu_count=1, name="web", image=TEST_IMAGE, services=(("app", 8000),)
    )
    created = actions.create_instance(ctx, alice, request)

    def running() -> bool:
        platform.reconciler.drain()
        with ctx.sessions() as session:
            row = session.get(InstanceModel, created.id)
            assert row is not None and row.status != InstanceStatus.FAILED, row.status_reason
            return row.status == InstanceStatus.RUNNING

    wait_for(running, "the instance to run", DEADLINE_S)
    namespace = f"gpudock-{ctx.cluster_id}-u-{alice.id}"
    pod = containers.container_name(ctx.cluster_id, created.id)
    cluster.exec(namespace, pod, ["sh", "-c", "mkdir -p /srv && echo from-the-pod > /srv/hello"])
    cluster.exec(namespace, pod, ["sh", "-c", SERVER])
    with serve(platform) as url:
        owner = _login(url, "alice")
        service = f"/i/{created.id}/app/hello"

        def served() -> httpx.Response | None:
            answer = owner.get(service)
            return answer if answer.status_code == 200 else None  # the server may be starting

        answer = wait_for(served, "the pod's server through the proxy", DEADLINE_S)
        assert answer.text == "from-the-pod\n"
        assert _login(url, "bob").get(service).status_code == 404  # another tenant's
