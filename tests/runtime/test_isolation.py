"""Tenant isolation, checked from inside tenants' containers on the real engine.

Each test creates instances through the API (the runtime's real defaults,
nothing set by hand), runs a probe inside the container and asserts what a
hostile tenant could and could not do. `docs/security.md` cites these tests.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import docker
import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform
from gpudock.reconcile import system_disks
from gpudock.reconcile.garbage import collect_garbage
from gpudock.runtime.docker import DockerRuntime
from gpudock.services.instances import container_spec as containers
from tests.support.docker import allowed_capability_mask, remove_cluster_objects
from tests.support.factories import Tenant, make_tenant
from tests.support.platforms import PlatformFactory

API = "/api/v1"
PIDS_LIMIT = 64  # the smallest the settings allow: a fork bomb fills it in milliseconds


@pytest.fixture
def real(docker_platform_factory: PlatformFactory, tmp_path: Path) -> Platform:
    runtime = DockerRuntime(volume_root=tmp_path / "volumes")
    return docker_platform_factory(runtime, pids_limit=PIDS_LIMIT)


@pytest.fixture
def carol(real: Platform) -> Tenant:
    return make_tenant(real, "carol")


@pytest.fixture
def dave(real: Platform) -> Tenant:
    return make_tenant(real, "dave")


def launch(
    real: Platform, api: TestClient, engine: docker.DockerClient, tenant: Tenant, **body: Any
) -> Any:
    """Create a no-GPU instance through the API, converge, return its container."""
    body = {"gpu_count": 0, "disk_gb": 1, **body}
    response = api.post(f"{API}/instances", json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    real.reconciler.drain()
    shown = api.get(f"{API}/instances/{response.json()['id']}", headers=tenant.headers).json()
    assert shown["status"] == "running", shown
    return engine.containers.get(containers.container_name(real.ctx.cluster_id, shown["id"]))


def sh(container: Any, command: str) -> tuple[int, str]:
    exit_code, output = container.exec_run(["sh", "-c", command])
    return int(exit_code), output.decode(errors="replace").strip()


def python(container: Any, script: str) -> Any:
    """Run a probe script (python3 is in the base image); it prints one JSON value."""
    exit_code, output = container.exec_run(["python3", "-c", script])
    assert exit_code == 0, output.decode(errors="replace")
    return json.loads(output.decode().strip().splitlines()[-1])


def test_capabilities_are_the_allow_list_and_no_new_privileges(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant
) -> None:
    container = launch(real, api, engine, carol)
    status = dict(
        line.split(":\t", 1)
        for line in sh(container, "cat /proc/self/status")[1].splitlines()
        if ":\t" in line
    )
    allowed = allowed_capability_mask()
    for field in ("CapEff", "CapPrm", "CapBnd"):
        assert int(status[field], 16) == allowed, (field, status[field])
    assert int(status["CapInh"], 16) == 0 and int(status["CapAmb"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"  # the engine's default filter
    # A setuid-root binary run by an unprivileged user gains nothing.
    setuid = "cp /usr/bin/python3 /usr/local/bin/py && chmod 4755 /usr/local/bin/py"
    assert sh(container, setuid)[0] == 0
    euid = "setpriv --reuid=65534 --regid=65534 --clear-groups /usr/local/bin/py -c "
    assert sh(container, euid + "'import os; print(os.geteuid())'") == (0, "65534")


PRIVILEGED_OPERATIONS = {
    "mount tmpfs": "mount -t tmpfs none /mnt",
    "mount proc": "mkdir -p /tmp/p && mount -t proc proc /tmp/p",
    "bind mount": "mount --bind /root /mnt",
    "unshare user": "unshare --user --map-root-user true",
    "unshare mount": "unshare --mount true",
    "unshare net": "unshare --net true",
    "mknod char": "mknod /tmp/mem c 1 1",
    "mknod block": "mknod /tmp/disk b 254 0",
    "chroot": "chroot / true",
    "raw socket": "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'",
    "packet socket": "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'",
    "set the clock": "date -s '2001-01-01'",
    "load a module": "python3 -c 'import ctypes, sys; "
    "sys.exit(ctypes.CDLL(None).init_module(0, 0, 0))'",
}


def test_mount_unshare_mknod_and_raw_sockets_fail(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant
) -> None:
    container = launch(real, api, engine, carol)
    # The control: what the allow-list keeps still works, so failures below are refusals.
    assert sh(container, "touch /tmp/f && chown nobody /tmp/f && mkdir -p /mnt")[0] == 0
    allowed = "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)'"
    assert sh(container, allowed)[0] == 0
    results = {name: sh(container, command) for name, command in PRIVILEGED_OPERATIONS.items()}
    succeeded = {name: output for name, (code, output) in results.items() if code == 0}
    assert not succeeded, f"privileged operations that worked inside a tenant: {succeeded}"
    assert sh(container, "test -e /tmp/mem || test -e /tmp/disk")[0] != 0


HOST_VIEW_PROBE = r"""
import json, os, stat
VIRTUAL = {"proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "overlay"}
mounts = []
for line in open("/proc/self/mountinfo"):
    left, right = line.split(" - ")
    fields = left.split()
    fstype, source = right.split()[:2]
    mounts.append({"root": fields[3], "at": fields[4], "type": fstype, "source": source})
sockets = []
for d, dirs, files in os.walk("/"):
    if d.startswith(("/proc", "/sys", "/dev")):
        dirs[:] = []
        continue
    for f in files:
        p = os.path.join(d, f)
        try:
            if stat.S_ISSOCK(os.lstat(p).st_mode) or f in ("docker.sock", "containerd.sock"):
                sockets.append(p)
        except OSError:
            pass
devices = [
    os.path.join("/dev", f) for f in os.listdir("/dev")
    if stat.S_ISBLK(os.lstat(os.path.join("/dev", f)).st_mode)
]
init = open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode()
print(json.dumps({
    "host_mounts": [m for m in mounts if m["type"] not in VIRTUAL],
    "sockets": sockets,
    "block_devices": devices,
    "init": init,
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
}))
"""
HOST_FILES_ALLOWED = {"/etc/resolv.conf", "/etc/hostname", "/etc/hosts"}
INIT_PATHS = {"/sbin/docker-init", "/usr/sbin/docker-init", "/dev/init"}


def _own_btrfs_root(mount: dict[str, str]) -> bool:
    """The btrfs driver mounts each container's root as a subvolume of its own."""
    return (
        mount["at"] == "/"
        and mount["type"] == "btrfs"
        and mount["root"].startswith("/btrfs/subvolumes/")
    )


def test_no_docker_socket_or_host_paths_are_visible(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant
) -> None:
    container = launch(real, api, engine, carol)
    seen = python(container, HOST_VIEW_PROBE)
    assert seen["sockets"] == [], "a socket is reachable from inside (the engine's?)"
    assert seen["block_devices"] == [], "a host disk is visible under /dev"
    # Everything from the host's disks: the engine's per-container files, its
    # init, the tenant's own data volume (an ext4 loop file system of its own),
    # and — with the btrfs storage driver — the container's own root subvolume.
    unexpected = [
        m
        for m in seen["host_mounts"]
        if m["at"] not in HOST_FILES_ALLOWED | INIT_PATHS | {containers.DATA_MOUNT}
        and not _own_btrfs_root(m)
    ]
    assert not unexpected, f"host paths mounted into a tenant: {unexpected}"
    for mount in seen["host_mounts"]:
        if mount["at"] in HOST_FILES_ALLOWED:
            assert f"/containers/{container.id}/" in mount["root"], mount
    [data] = [m for m in seen["host_mounts"] if m["at"] == containers.DATA_MOUNT]
    assert (data["type"], data["root"]) == ("ext4", "/data") and "loop" in data["source"]
    # Its own PID namespace: PID 1 is the container's init, and no host process shows.
    assert "init" in seen["init"] and len(seen["pids"]) < 10, seen


PROC_SYS_PROBE = r"""
import json, os
MASKED = ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
          "/proc/latency_stats", "/proc/timer_stats", "/proc/acpi", "/proc/scsi",
          "/sys/firmware", "/proc/asound"]
leaked = {}
for path in MASKED:
    if os.path.isdir(path):
        if os.listdir(path):
            leaked[path] = os.listdir(path)[:5]
    elif os.path.exists(path):
        try:
            data = open(path, "rb").read(4096)
        except OSError:
            data = b""
        if data:
            leaked[path] = data[:80].decode(errors="replace")
writable = []
for path in ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
             "/proc/sysrq-trigger", "/sys/kernel/mm/transparent_hugepage/enabled",
             "/proc/sys/kernel/modprobe", "/sys/fs/cgroup/pids/pids.max",
             "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/pids.max",
             "/sys/fs/cgroup/memory.max"]:
    if not os.path.exists(path):
        continue
    try:
        with open(path, "w") as handle:
            handle.write("1\n")
        writable.append(path)
    except OSError:
        pass
options = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split(" - ")[0].split()
    options[fields[4]] = fields[5].split(",")
read_only = {at: "ro" in opts for at, opts in options.items()
             if at in ("/sys", "/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq")
             or at.startswith("/sys/fs/cgroup/") or at == "/sys/fs/cgroup"}
print(json.dumps({"leaked": leaked, "writable": writable, "read_only": read_only}))
"""


def test_proc_and_sys_are_masked_and_read_only(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant
) -> None:
    container = launch(real, api, engine, carol)
    seen = python(container, PROC_SYS_PROBE)
    assert seen["leaked"] == {}, "host kernel state readable from a tenant"
    assert seen["writable"] == [], "host kernel or cgroup settings writable from a tenant"
    for required in ("/sys", "/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq"):
        assert seen["read_only"].get(required) is True, (required, seen["read_only"])
    cgroup = {at: ro for at, ro in seen["read_only"].items() if at.startswith("/sys/fs/cgroup/")}
    if cgroup:  # cgroup v1: one mount per controller; v2: the one /sys/fs/cgroup
        assert all(cgroup.values()), cgroup
    # /proc/1 of the *host* would show its init; here it is the container's.
    assert sh(container, "cat /proc/1/cmdline")[1].startswith("/sbin/docker-init\x00")


LISTEN = "python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1"
CONNECT = (
    'python3 -c "import socket,sys\n'
    "try:\n socket.create_connection((sys.argv[1], 8000), timeout=3).close(); print('open')\n"
    "except OSError as e: print('closed', e)\" {}"
)


def _address(container: Any) -> str:
    container.reload()
    [(name, network)] = container.attrs["NetworkSettings"]["Networks"].items()
    assert name.startswith("gpudock-") and "-u-" in name, name  # never the shared bridge
    return str(network["IPAddress"])


def _listen(container: Any) -> None:
    container.exec_run(["sh", "-c", LISTEN], detach=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if sh(container, CONNECT.format("127.0.0.1"))[1] == "open":
            return
        time.sleep(0.1)
    raise AssertionError("the probe listener never came up")


def test_another_tenants_container_is_unreachable_over_the_network(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant, dave: Tenant
) -> None:
    carol_a = launch(real, api, engine, carol, name="a")
    carol_b = launch(real, api, engine, carol, name="b")
    dave_c = launch(real, api, engine, dave, name="c")
    for container in (carol_a, dave_c):
        _listen(container)
    # Same tenant: reachable (this is what makes the refusal below meaningful).
    assert sh(carol_b, CONNECT.format(_address(carol_a)))[1] == "open"
    # Another tenant, either way: nothing gets through.
    reply = sh(carol_b, CONNECT.format(_address(dave_c)))[1]
    assert reply.startswith("closed"), reply
    reply = sh(dave_c, CONNECT.format(_address(carol_a)))[1]
    assert reply.startswith("closed"), reply
    tenant_networks = {
        network.name: network.attrs["Labels"]["gpudock.user"]
        for network in engine.networks.list(
            filters={"label": f"gpudock.cluster={real.ctx.cluster_id}"}
        )
    }
    assert len(tenant_networks) == 2 and len(set(tenant_networks.values())) == 2


def _gateway(container: Any) -> str:
    container.reload()
    [network] = container.attrs["NetworkSettings"]["Networks"].values()
    return str(network["Gateway"])


def test_the_host_is_unreachable_from_a_tenant_network(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant
) -> None:
    """A service of the host listening on all interfaces (here: this test's own)
    cannot be reached from an instance, at the bridge's gateway address; the
    host can still open connections into the instance."""
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    try:
        container = launch(real, api, engine, carol)
        probe = CONNECT.replace("8000", str(port)).format(_gateway(container))
        reply = sh(container, probe)[1]
        assert reply.startswith("closed"), reply
        _listen(container)
        with socket.create_connection((_address(container), 8000), timeout=5):
            pass  # host → instance: the reply packets are let back in
    finally:
        listener.close()


FORK_BOMB = r"""
import json, os, time
def first(*paths):
    return next(p for p in paths if os.path.exists(p))
current = first("/sys/fs/cgroup/pids/pids.current", "/sys/fs/cgroup/pids.current")
limit = open(first("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max")).read().strip()
root, peak, refused = os.getpid(), 0, 0
stop_at = time.monotonic() + SECONDS
while time.monotonic() < stop_at:          # every process, parent and child, keeps forking
    try:
        os.fork()
    except OSError:
        refused += 1
        if os.getpid() == root:
            peak = max(peak, int(open(current).read()))
        time.sleep(0.02)
if os.getpid() == root:
    with open("/tmp/bomb.json", "w") as out:
        json.dump({"peak": peak, "limit": limit, "refused": refused}, out)
os._exit(0)                                # bounded: everyone exits at stop_at
"""


def test_a_fork_bomb_stops_at_the_pids_limit_and_the_host_stays_responsive(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant, dave: Tenant
) -> None:
    bomber = launch(real, api, engine, carol, name="bomber")
    neighbour = launch(real, api, engine, dave, name="neighbour")
    seconds = 6
    bomber.exec_run(["python3", "-c", FORK_BOMB.replace("SECONDS", str(seconds))], detach=True)
    started = time.monotonic()
    slowest = 0.0
    while time.monotonic() - started < seconds - 1:  # while the bomb runs
        before = time.monotonic()
        engine.ping()
        assert sh(neighbour, "echo alive") == (0, "alive")
        slowest = max(slowest, time.monotonic() - before)
    assert slowest < 5.0, f"the engine or a neighbour took {slowest:.1f}s to answer"
    deadline = time.monotonic() + 60
    result = None
    while time.monotonic() < deadline:  # the bomb ends by itself; then its report is readable
        code, output = sh(bomber, "cat /tmp/bomb.json")
        if code == 0 and output:
            result = json.loads(output)
            break
        time.sleep(0.2)
    assert result is not None, "the bomb's report never appeared"
    assert result["limit"] == str(PIDS_LIMIT)
    # Forks are refused once the cgroup holds the limit. `docker exec` joins the
    # cgroup without the check, so our own probes may lift the count a little.
    assert result["refused"] > 0 and PIDS_LIMIT <= result["peak"] <= PIDS_LIMIT + 16, result
    real.reconciler.drain()
    bomber.reload()
    assert bomber.status == "running"  # the tenant's own instance survives its bomb


MEMORY_HOG = "python3 -c 'b = bytearray(2 * 1024**3); b[::4096] = b\"x\" * (len(b) // 4096)'"
OOM_COUNT = (
    "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"
    " | awk '$1 == \"oom_kill\" {print $2}'"
)


def test_allocating_past_the_memory_limit_kills_only_that_container(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant, dave: Tenant
) -> None:
    hog = launch(real, api, engine, carol, name="hog", memory_gb=1)
    neighbour = launch(real, api, engine, dave, name="neighbour", memory_gb=1)
    neighbour_started = neighbour.attrs["State"]["StartedAt"]
    code, _ = sh(hog, MEMORY_HOG)
    assert code == 137, f"the allocation was not SIGKILLed (exit {code})"
    assert sh(hog, OOM_COUNT)[1] not in ("", "0"), "not the cgroup's OOM killer"
    assert sh(neighbour, OOM_COUNT)[1] in ("", "0")
    assert sh(neighbour, "echo alive") == (0, "alive")
    real.reconciler.make_due("liveness")
    real.reconciler.drain()
    for name in ("hog", "neighbour"):
        tenant = carol if name == "hog" else dave
        assert api.get(f"{API}/instances/{name}", headers=tenant.headers).json()["status"] == (
            "running"
        )
    neighbour.reload()
    assert neighbour.attrs["State"]["StartedAt"] == neighbour_started  # never restarted


def test_filling_the_data_disk_stops_at_the_quota(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant
) -> None:
    container = launch(real, api, engine, carol, name="fill", disk_gb=1)
    code, size = sh(container, "df -B1 --output=size /root/data | tail -1")
    assert code == 0 and 0.9 * 1024**3 < int(size) <= 1024**3, size
    code, output = sh(container, "dd if=/dev/zero of=/root/data/fill bs=4M 2>&1")
    assert code != 0 and "No space left on device" in output, output
    written = int(sh(container, "stat -c %s /root/data/fill")[1])
    assert 0.85 * 1024**3 < written <= 1024**3, written
    # Only this volume is full: the host's disk (here through the writable
    # layer, which has no quota: see docs/security.md) still takes writes.
    assert sh(container, "echo ok > /root/outside && cat /root/outside") == (0, "ok")
    freed = "rm /root/data/fill && echo again > /root/data/f && cat /root/data/f"
    assert sh(container, freed) == (0, "again")


def test_the_watchdog_stops_an_instance_over_its_system_disk(
    docker_platform_factory: PlatformFactory, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Where the engine has no limit: measured, then stopped — container and data kept."""
    runtime = DockerRuntime(volume_root=tmp_path / "volumes")
    watched = docker_platform_factory(runtime, system_disk_enforce="watchdog")
    api = TestClient(create_app(watched, run_reconciler=False))
    erin = make_tenant(watched, "erin")
    container = launch(watched, api, engine, erin, name="big", system_disk_gb=1)
    assert sh(container, "echo keep > /root/data/marker")[0] == 0
    code, output = sh(container, "dd if=/dev/zero of=/var/tmp/fill bs=4M count=300 2>&1")
    assert code == 0, output  # 1.2 GB: nothing stops the write itself here
    stopped = system_disks.check_system_disks(watched.ctx, system_disks.DiskWatch())
    assert stopped == [container.labels["gpudock.instance"]]
    watched.reconciler.drain()
    shown = api.get(f"{API}/instances/big", headers=erin.headers).json()
    assert shown["status"] == "stopped", shown
    events = api.get(f"{API}/instances/big/events", headers=erin.headers).json()
    assert any("over its 1.0 GB" in e["message"] for e in events), events
    container.reload()
    assert container.status == "exited"  # kept, not removed
    api.post(f"{API}/instances/big/start", headers=erin.headers)
    watched.reconciler.drain()
    again = engine.containers.get(container.id)
    assert sh(again, "cat /root/data/marker") == (0, "keep")


def test_a_quota_volume_survives_stop_start_and_a_lost_mount(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant, tmp_path: Path
) -> None:
    container = launch(real, api, engine, carol, name="keep", disk_gb=2)
    instance_id = container.labels["gpudock.instance"]
    assert sh(container, "echo precious > /root/data/marker")[0] == 0
    api.post(f"{API}/instances/keep/stop", headers=carol.headers)
    real.reconciler.drain()
    volume = containers.volume_name(real.ctx.cluster_id, instance_id)
    mountpoint = tmp_path / "volumes" / volume
    # A reboot: the loop mount is gone, the image file stays. Docker must not
    # fall back to an empty directory on the host's disk.
    assert os.path.ismount(mountpoint)
    assert os.system(f"umount {mountpoint}") == 0  # noqa: S605 (test-controlled path)
    with pytest.raises(docker.errors.APIError):
        engine.containers.get(container.id).start()
    api.post(f"{API}/instances/keep/start", headers=carol.headers)
    real.reconciler.drain()
    container = engine.containers.get(container.id)
    assert sh(container, "cat /root/data/marker") == (0, "precious")
    size = sh(container, "df -B1 --output=size /root/data | tail -1")[1]
    assert 1.8 * 1024**3 < int(size) <= 2 * 1024**3, size
    api.delete(f"{API}/instances/keep", headers=carol.headers)
    real.reconciler.drain()
    assert not os.path.ismount(mountpoint) and not mountpoint.exists()
    assert not (tmp_path / "volumes" / f"{volume}.img").exists()
    assert not engine.networks.list(filters={"label": f"gpudock.cluster={real.ctx.cluster_id}"})


def test_image_env_cannot_preload_or_reach_gpus(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(
        "FROM gpudock/base:bookworm\n"
        "ENV LD_PRELOAD=/tmp/evil.so LD_AUDIT=/tmp/audit.so NVIDIA_VISIBLE_DEVICES=all\n"
    )
    tag = f"gpudock-test/isolation-evil:{real.ctx.cluster_id}"
    engine.images.build(path=str(tmp_path), tag=tag, network_mode="none", rm=True, forcerm=True)
    try:
        container = launch(real, api, engine, carol, name="evil", image=tag)
        # What the engine hands to runc and its hooks (the NVIDIA hook reads this env).
        env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
        assert env["LD_PRELOAD"] == "" and env["LD_AUDIT"] == ""
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
        init_env = sh(container, "tr '\\0' '\\n' < /proc/1/environ")[1].splitlines()
        assert "LD_PRELOAD=" in init_env and "NVIDIA_VISIBLE_DEVICES=void" in init_env
        # The loader would complain about a preload it cannot find; it stays silent.
        assert sh(container, "/bin/true 2>&1; echo done") == (0, "done")
        control = sh(container, "LD_PRELOAD=/tmp/evil.so /bin/true 2>&1")[1]
        assert "LD_PRELOAD" in control and "cannot be preloaded" in control
    finally:
        remove_cluster_objects(engine, real.ctx.cluster_id)
        engine.images.remove(tag, force=True)


def test_networks_go_with_the_last_container_or_to_garbage_collection(
    real: Platform, api: TestClient, engine: docker.DockerClient, carol: Tenant
) -> None:
    first = launch(real, api, engine, carol, name="a")
    launch(real, api, engine, carol, name="b")
    cluster = real.ctx.cluster_id
    label = {"label": f"gpudock.cluster={cluster}"}
    # A crash between making a tenant's network and its container leaves one behind.
    orphan = containers.network_name(cluster, "u-gone")
    engine.networks.create(orphan, labels=containers.network_labels(cluster, "u-gone"))
    collect_garbage(real.ctx)
    carols = containers.network_name(cluster, first.labels["gpudock.user"])
    assert {n.name for n in engine.networks.list(filters=label)} == {carols}
    api.delete(f"{API}/instances/a", headers=carol.headers)
    real.reconciler.drain()
    assert [n.name for n in engine.networks.list(filters=label)] == [carols]  # "b" is on it
    api.delete(f"{API}/instances/b", headers=carol.headers)
    real.reconciler.drain()
    assert engine.networks.list(filters=label) == []
