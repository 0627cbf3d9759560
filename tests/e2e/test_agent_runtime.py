"""The server's runtime routed to a host's agent, end to end: a real `gpudock
server`, an agent on a test host behind NAT with its own dockerd, an instance
created through the API.

The host's engine takes GPU requests through the suite's fake NVIDIA hook
(`tests/support/fake_nvidia_hook`), so the container is made exactly as on a
real GPU host, for the UUIDs the host's fake NVML reports.
"""

from __future__ import annotations

import hashlib
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from gpudock.images.base_image import BASE_IMAGE
from tests.support.agent_cluster import Cluster, fake_gpus, linked_server
from tests.support.fleet_netns import leftovers, netns_fleet
from tests.support.key_proof import make_key, post_with_proof
from tests.support.server_process import free_port
from tests.support.ssh_options import SSH_OPTIONS
from tests.support.sshgw import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.netns]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("agent-runtime")
    with (
        netns_fleet(workdir, direct=(), natted="n") as fleet,
        linked_server(fleet, workdir) as cluster,
    ):
        yield cluster
    assert leftovers(fleet) == []  # after the fleet's teardown


def _instance(user: httpx.Client, instance_id: str, status: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found: dict[str, Any] = user.get(f"/instances/{instance_id}").json()
        return found if found["status"] == status else None

    return wait_for(reached, f"instance {instance_id} {status}", deadline_s=120)


def _ssh(
    instance: dict[str, Any],
    key: Path,
    command: str,
    *,
    options: tuple[str, ...] = (),
    stdin: bytes = b"",
) -> subprocess.CompletedProcess[bytes]:
    """OpenSSH through the server's gateway, with the command the API printed."""
    match = re.search(r"-p (\d+) (\S+)@", instance["ssh_command"])
    assert match, instance["ssh_command"]
    port, login = match.groups()
    argv = ["ssh", "-p", port, "-i", str(key), *SSH_OPTIONS, *options]
    argv += [f"{login}@127.0.0.1", *([command] if command else [])]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60, check=False)


ECHO_SERVER = """
import socket
server = socket.create_server(("127.0.0.1", 7000))
while True:
    conn, _ = server.accept()
    while data := conn.recv(65536):
        conn.sendall(data)
    conn.close()
"""
PORT_OPEN = "import socket; socket.create_connection(('127.0.0.1', 7000), 1).close()"


def _scp(
    instance: dict[str, Any], key: Path, local: str, remote: str
) -> subprocess.CompletedProcess[bytes]:
    match = re.search(r"-p (\d+) (\S+)@", instance["ssh_command"])
    assert match, instance["ssh_command"]
    port, login = match.groups()
    argv = ["scp", "-P", port, "-i", str(key), *SSH_OPTIONS, local, f"{login}@127.0.0.1:{remote}"]
    return subprocess.run(argv, capture_output=True, timeout=60, check=False)


def _login(instance: dict[str, Any]) -> tuple[str, str]:
    match = re.search(r"-p (\d+) (\S+)@", instance["ssh_command"])
    assert match, instance["ssh_command"]
    port, login = match.groups()
    return port, login


def _through_local_forward(instance: dict[str, Any], key: Path, port: int, data: bytes) -> bytes:
    """`ssh -L` to a port on the instance's loopback: what an echo server there sends back."""
    gateway_port, login = _login(instance)
    local = free_port()
    argv = ["ssh", "-p", gateway_port, "-i", str(key), *SSH_OPTIONS, "-N"]
    argv += ["-o", "ExitOnForwardFailure=yes", "-L", f"{local}:127.0.0.1:{port}"]
    tunnel = subprocess.Popen([*argv, f"{login}@127.0.0.1"], stderr=subprocess.PIPE)
    try:
        conn = wait_for(lambda: _connect(local), "the forwarded port open")
        with conn:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            echoed = b""
            while chunk := conn.recv(1 << 16):
                echoed += chunk
        return echoed
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


def _connect(port: int) -> socket.socket | None:
    """A connection through the tunnel, once the far end answers (ssh listens before
    its channel opens; a connection then is closed at once)."""
    try:
        conn = socket.create_connection(("127.0.0.1", port), 5)
    except OSError:  # ssh is not listening yet
        return None
    try:
        conn.sendall(b"?")
        if conn.recv(1) == b"?":
            return conn
    except OSError:
        pass
    conn.close()
    return None


def _rsync_tree(workdir: Path, instance: dict[str, Any], key: Path, container: Any) -> None:
    """rsync over the gateway puts a tree into the instance on the NATed host."""
    tree = workdir / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "weights.bin").write_bytes(hashlib.sha256(b"w").digest() * 8192)
    (tree / "notes.txt").write_text("epoch 3\n")
    gateway_port, login = _login(instance)
    ssh = " ".join(["ssh", "-p", gateway_port, "-i", str(key), *SSH_OPTIONS])
    argv = ["rsync", "-a", "-e", ssh, f"{tree}/", f"{login}@127.0.0.1:/root/data/tree/"]
    synced = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert synced.returncode == 0, synced.stderr
    listed = container.exec_run(["sh", "-c", "cd /root/data/tree && sha256sum sub/weights.bin"])
    digest = hashlib.sha256(hashlib.sha256(b"w").digest() * 8192).hexdigest()
    assert listed.output.decode().split()[0] == digest
    assert container.exec_run(["cat", "/root/data/tree/notes.txt"]).output == b"epoch 3\n"


def _deleted(user: httpx.Client, instance_id: str) -> None:
    def gone() -> bool:
        answer = user.get(f"/instances/{instance_id}")
        return answer.status_code == 404 or answer.json()["status"] == "deleted"

    wait_for(gone, f"instance {instance_id} deleted", deadline_s=120)


WEB_SERVER = "cd /root/data && exec python3 -m http.server --bind 127.0.0.1 8000"
WEB_OPEN = "import socket; socket.create_connection(('127.0.0.1', 8000), 1).close()"


def _service_url_answers(
    cluster: Cluster, user: httpx.Client, container: Any, instance_id: str
) -> None:
    """A service URL on the server reaches a server on the instance's loopback
    on the NATed host: the proxy's connection crosses the host's link."""
    page = hashlib.sha256(b"page").hexdigest().encode() * 4096  # 256 KiB: many windows
    write = f"open('/root/data/page.txt', 'wb').write({page[:64]!r} * 4096)"
    put = container.exec_run(["python3", "-c", write])
    assert put.exit_code == 0, put.output
    container.exec_run(["sh", "-c", WEB_SERVER], detach=True)
    wait_for(lambda: container.exec_run(["python3", "-c", WEB_OPEN]).exit_code == 0, "web")
    exposed = user.post(f"/instances/{instance_id}/services", json={"name": "web", "port": 8000})
    assert exposed.status_code == 201, exposed.text
    made = user.post(f"/instances/{instance_id}/services/web/links")
    assert made.status_code == 201, made.text
    with httpx.Client(follow_redirects=True, timeout=60) as friend:
        listing = friend.get(made.json()["url"])
        assert listing.status_code == 200, listing.text
        assert "page.txt" in listing.text
        served = friend.get(str(listing.url) + "page.txt")
        assert served.status_code == 200 and served.content == page
    assert user.delete(f"/instances/{instance_id}/services/web/links").status_code == 200


def _containers(client: docker.DockerClient, instance_id: str) -> list[Any]:
    return list(
        client.containers.list(all=True, filters={"label": f"gpudock.instance={instance_id}"})
    )


def test_an_instance_runs_stops_and_goes_on_its_agent_hosts_engine(
    cluster: Cluster, engine: docker.DockerClient
) -> None:
    host = cluster.fleet.hosts["n"]
    gpus = fake_gpus("H200", 1, 140)
    cluster.write_gpus("n", gpus)
    # No registry has gpudock's base image: the server sends it from its own engine.
    host.engine().images.remove(BASE_IMAGE)
    cluster.agent(host, "join", *cluster.add("n")[3:5])
    cluster.link("n", "up")
    with cluster.server.client() as admin:
        token = admin.post("/users", json={"name": "dora"}).json()["token"]
    with cluster.server.client(token) as user:
        created = user.post("/instances", json={"gpu_model": "H200-140GB", "gpu_count": 1})
        assert created.status_code == 201, created.text
        instance_id = created.json()["id"]
        _instance(user, instance_id, "running")
        told = [e["message"] for e in user.get(f"/instances/{instance_id}/events").json()]
        assert any(f"image {BASE_IMAGE} sent to n" in m for m in told), told
        on_host = host.engine()
        assert on_host.images.get(BASE_IMAGE).id == engine.images.get(BASE_IMAGE).id
        [container] = _containers(on_host, instance_id)
        assert container.status == "running"
        config, sandbox = container.attrs["Config"], container.attrs["HostConfig"]
        assert config["Labels"]["gpudock.cluster"] == cluster.server.cluster_id
        assert config["Labels"]["gpudock.host"] == "n"
        assert config["Labels"]["gpudock.gpus"] == gpus[0]["uuid"]
        assert f"NVIDIA_VISIBLE_DEVICES={gpus[0]['uuid']}" in config["Env"]
        assert [r["DeviceIDs"] for r in sandbox["DeviceRequests"]] == [[gpus[0]["uuid"]]]
        assert sandbox["CapDrop"] == ["ALL"] and not sandbox["Privileged"]
        assert "no-new-privileges:true" in sandbox["SecurityOpt"]
        assert sandbox["PidsLimit"] > 0 and sandbox["Memory"] > 0
        assert on_host.volumes.list(filters={"label": f"gpudock.instance={instance_id}"})
        # The doctor was copied in over the link, and runs there.
        ran = container.exec_run(["test", "-x", "/usr/local/bin/gpudock-doctor"])
        assert ran.exit_code == 0
        assert _containers(engine, instance_id) == []  # nothing on the server's own engine

        # A session through the server's one SSH gateway, relayed over the host's link.
        key = make_key(cluster.workdir, "dora")
        assert post_with_proof(user, key, prefix="").status_code == 201
        running = _instance(user, instance_id, "running")
        data = bytes(range(256)) * 4096
        piped = _ssh(running, key, "cat > /root/data/blob; sha256sum /root/data/blob", stdin=data)
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout.decode().split()[0] == hashlib.sha256(data).hexdigest()
        ran = _ssh(running, key, "echo $NVIDIA_VISIBLE_DEVICES; echo oops >&2; exit 3")
        said = (ran.returncode, ran.stdout.decode(), ran.stderr)
        assert said == (3, f"{gpus[0]['uuid']}\n", b"oops\n")
        terminal = _ssh(running, key, "tty; stty size; exit 5", options=("-tt",))
        assert terminal.returncode == 5, terminal.stderr
        assert b"/dev/pts/" in terminal.stdout
        # scp (SFTP underneath), rsync, -W and -L run their relays as execs over the link too.
        local = cluster.workdir / "upload"
        local.write_bytes(data[::-1])
        copied = _scp(running, key, str(local), "/root/data/upload")
        assert copied.returncode == 0, copied.stderr
        summed = container.exec_run(["sha256sum", "/root/data/upload"]).output.decode()
        assert summed.split()[0] == hashlib.sha256(data[::-1]).hexdigest()
        container.exec_run(["python3", "-c", ECHO_SERVER], detach=True)
        wait_for(lambda: container.exec_run(["python3", "-c", PORT_OPEN]).exit_code == 0, "echo")
        relayed = _ssh(running, key, "", options=("-W", "127.0.0.1:7000"), stdin=b"ping")
        assert relayed.stdout == b"ping", relayed.stderr
        assert _through_local_forward(running, key, 7000, b"pong" * 20_000) == b"pong" * 20_000
        _rsync_tree(cluster.workdir, running, key, container)
        _service_url_answers(cluster, user, container, instance_id)

        assert user.post(f"/instances/{instance_id}/stop").status_code == 200
        _instance(user, instance_id, "stopped")
        container.reload()
        assert container.status == "exited"
        assert user.delete(f"/instances/{instance_id}").status_code == 200
        _deleted(user, instance_id)
    assert _containers(on_host, instance_id) == []
    assert not on_host.volumes.list(filters={"label": f"gpudock.instance={instance_id}"})
