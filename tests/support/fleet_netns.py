"""A fleet of real test hosts on this machine: network namespaces, each with its own dockerd.

    root netns (the server)                      gpudock-fleet-<tag>-<name>
    bridge gdf<tag>  10.213.S.1/24 ──veth──────▶ eth0 10.213.S.1x/24, dockerd, agent
                                   ──veth──────▶ gpudock-fleet-<tag>-nat   eth0 10.213.S.2/24
                                                   MASQUERADE out of eth0
                                                   lan0 10.214.S.1/24 ──veth──▶ NATed host
                                                                        eth0 10.214.S.2/24

The server's side has an `unreachable` route for 10.214.S.0/24 (without it the
machine's default route would carry such packets off the machine), so nothing
can dial the NATed host: it is reached only over a connection it opened, as
behind a home or campus router. Addresses are private ones made on these
veths, and every packet between them stays on the machine.

Facts this relies on (probed): `ip netns exec` remounts /sys, and a dockerd
started under it fails ("Devices cgroup isn't mounted"), so dockerd is started
with `nsenter --net=` only; each dockerd has its own data root, a short exec
root (Unix socket paths are limited to 108 bytes), a pid file, a socket, a
cgroup parent, and spawns a containerd of its own under its exec root. Each
engine gets the suite's base image from one `docker save` tarball, cached
between runs by image id.

Teardown kills every process left in a host's namespace (its agent included),
stops its dockerd, unmounts what it mounted, removes its cgroups, namespaces
and links; it runs whatever the test did. A ledger under /run/gpudock-fleet
lets the next fleet remove what a killed test process left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker

from gpudock.images.base_image import BASE_IMAGE

LEDGER_DIR = Path("/run/gpudock-fleet")
NETNS_PREFIX = "gpudock-fleet-"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CGROUP_ROOT = Path("/sys/fs/cgroup")
FAKE_NVIDIA_HOOK = Path(__file__).resolve().parent / "fake_nvidia_hook"  # see the hook itself


@dataclass
class TestHost:
    """One host: its namespace, its engine, and the address it dials out from."""

    name: str
    netns: str
    address: str  # its own address (behind NAT: the LAN one the server never sees)
    workdir: Path
    exec_root: Path
    nat: bool
    dockerd: subprocess.Popen[bytes] | None = None
    start_s: float = 0.0  # from `ip netns add` to an engine with the base image

    @property
    def docker_url(self) -> str:
        return f"unix://{self.exec_root / 'd.sock'}"

    @property
    def cgroup_parent(self) -> str:
        return f"/{self.netns}"

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` as run inside this host's network namespace (only the network:
        the mount namespace, /sys and cgroups stay the machine's)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", *argv]

    def popen(self, argv: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                self.command(argv), stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def engine(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.docker_url, timeout=60)

    def memory_mib(self) -> float:
        """Resident memory of this host's dockerd and its containerd (MiB)."""
        total_kib = 0
        for pid in _netns_pids(self.netns) | _containerd_pids(self.exec_root):
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                name = _status_field(status, "Name")
                if name in ("dockerd", "containerd"):
                    total_kib += int(_status_field(status, "VmRSS").split()[0])
        return total_kib / 1024


@dataclass
class NetnsFleet:
    tag: str
    subnet: str  # "10.213.S"
    workdir: Path
    hosts: dict[str, TestHost] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"gdf{self.tag}"

    @property
    def server_address(self) -> str:
        """The server's address on the fleet's bridge: bind listeners here."""
        return f"{self.subnet}.1"

    @property
    def nat_lan(self) -> str:
        """The NATed host's network, "10.214.S": unreachable from the server's side."""
        return self.subnet.replace("10.213.", "10.214.", 1)

    def cut(self, name: str) -> None:
        """Take the host's link down (its processes keep running): a pulled cable."""
        _run(["ip", "link", "set", self._uplink(name), "down"])

    def mend(self, name: str) -> None:
        _run(["ip", "link", "set", self._uplink(name), "up"])

    def _uplink(self, name: str) -> str:
        index = list(self.hosts).index(name)
        return f"gdf{self.tag}n" if self.hosts[name].nat else f"gdf{self.tag}{index}"


@contextlib.contextmanager
def netns_fleet(
    workdir: Path, direct: Sequence[str] = ("a", "b"), natted: str | None = "n"
) -> Iterator[NetnsFleet]:
    """Hosts `direct` on the bridge and, unless None, `natted` behind the NAT namespace."""
    for tool in ("ip", "nsenter", "dockerd", "iptables"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is missing: the test command installs iproute2 and docker")
    sweep_leftovers()
    fleet = _new_fleet(workdir)
    _write_ledger(fleet)
    try:
        _make_bridge(fleet)
        for index, name in enumerate(direct):
            fleet.hosts[name] = _direct_host(fleet, index, name)
        if natted is not None:
            fleet.hosts[natted] = _natted_host(fleet, natted)
        tarball = base_image_tarball()
        with ThreadPoolExecutor(len(fleet.hosts)) as pool:
            list(pool.map(lambda host: _start_engine(host, tarball), fleet.hosts.values()))
        yield fleet
    finally:
        teardown(fleet)


def base_image_tarball() -> Path:
    """`docker save` of the base image, made once per image id and kept in /var/tmp."""
    image = docker.from_env(timeout=300).images.get(BASE_IMAGE)
    path = Path("/var/tmp") / f"gpudock-test-base-{image.id.removeprefix('sha256:')[:16]}.tar"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.part")
        with partial.open("wb") as out:
            for chunk in image.save(named=True):
                out.write(chunk)
        partial.rename(path)
    return path


def leftovers(fleet: NetnsFleet) -> list[str]:
    """Everything of the fleet still on the machine (empty after teardown)."""
    tag = fleet.tag
    found = [f"netns {ns}" for ns in _netns_names() if ns.startswith(f"{NETNS_PREFIX}{tag}-")]
    links = _run(["ip", "-o", "link", "show"], capture=True)
    found += [
        f"link {line.split(':')[1].strip()}" for line in links.splitlines() if f"gdf{tag}" in line
    ]
    routes = _run(["ip", "-4", "route", "show"], capture=True)
    found += [f"route {line}" for line in routes.splitlines() if f"{fleet.nat_lan}." in line]
    mounts = Path("/proc/mounts").read_text()
    found += [
        f"mount {line.split()[1]}"
        for line in mounts.splitlines()
        if f"gdf{tag}" in line or str(fleet.workdir / "fleet") in line
    ]
    found += [f"cgroup {path}" for path in CGROUP_ROOT.glob(f"*/{NETNS_PREFIX}{tag}-*")]
    for pid_dir in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if f"gdf{tag}" in cmdline:
                found.append(f"process {pid_dir.name}: {cmdline[:120]}")
    return found


def teardown(fleet: NetnsFleet) -> None:
    for name in [*fleet.hosts, "nat"]:
        for pid in _netns_pids(f"{NETNS_PREFIX}{fleet.tag}-{name}"):
            _kill_unless_dockerd(pid)
    with ThreadPoolExecutor(max(1, len(fleet.hosts))) as pool:
        list(pool.map(_stop_engine, fleet.hosts.values()))
    _remove_namespaces_and_links(fleet.tag, fleet.nat_lan)
    shutil.rmtree(fleet.workdir / "fleet", ignore_errors=True)
    (LEDGER_DIR / f"{fleet.tag}.json").unlink(missing_ok=True)


def sweep_leftovers() -> None:
    """Remove fleets whose test process died before its teardown ran."""
    if not LEDGER_DIR.is_dir():
        return
    for ledger in LEDGER_DIR.glob("*.json"):
        entry = json.loads(ledger.read_text())
        if Path(f"/proc/{entry['owner']}").exists():
            continue
        fleet = NetnsFleet(tag=entry["tag"], subnet=entry["subnet"], workdir=Path(entry["workdir"]))
        for name, exec_root in entry.get("hosts", {}).items():
            fleet.hosts[name] = TestHost(
                name,
                f"{NETNS_PREFIX}{fleet.tag}-{name}",
                "",
                Path(entry["workdir"]),
                Path(exec_root),
                nat=False,
            )
        teardown(fleet)


# -- building ----------------------------------------------------------------------------------


def _new_fleet(workdir: Path) -> NetnsFleet:
    used = _run(["ip", "-4", "-o", "addr", "show"], capture=True)
    routes = _run(["ip", "-4", "route", "show"], capture=True)
    for _ in range(100):
        tag = f"{random.randrange(16**4):04x}"
        octet = random.randrange(1, 255)
        if (
            f"10.213.{octet}." not in used
            and f"10.214.{octet}." not in routes
            and not any(ns.startswith(f"{NETNS_PREFIX}{tag}-") for ns in _netns_names())
        ):
            (workdir / "fleet").mkdir(parents=True, exist_ok=True)
            return NetnsFleet(tag=tag, subnet=f"10.213.{octet}", workdir=workdir)
    raise RuntimeError("no free 10.213.x.0/24 subnet for the test fleet")


def _write_ledger(fleet: NetnsFleet) -> None:
    LEDGER_DIR.mkdir(parents=True, exist_ok=True)
    entry = {
        "tag": fleet.tag,
        "subnet": fleet.subnet,
        "owner": os.getpid(),
        "workdir": str(fleet.workdir),
        "hosts": {name: str(host.exec_root) for name, host in fleet.hosts.items()},
    }
    (LEDGER_DIR / f"{fleet.tag}.json").write_text(json.dumps(entry))


def _make_bridge(fleet: NetnsFleet) -> None:
    _run(["ip", "link", "add", fleet.bridge, "type", "bridge"])
    _run(["ip", "addr", "add", f"{fleet.server_address}/24", "dev", fleet.bridge])
    _run(["ip", "link", "set", fleet.bridge, "up"])


def _namespace(fleet: NetnsFleet, name: str, uplink: str, address: str) -> str:
    """A namespace whose eth0 is the far end of `uplink` (a veth on the bridge). No
    default route: the bridge's subnet is all it reaches, so nothing it sends can be
    forwarded off the machine by the server's side."""
    netns = f"{NETNS_PREFIX}{fleet.tag}-{name}"
    _run(["ip", "netns", "add", netns])
    _run(["ip", "link", "add", uplink, "type", "veth", "peer", "name", f"{uplink}p"])
    _run(["ip", "link", "set", f"{uplink}p", "netns", netns])
    _run(["ip", "-n", netns, "link", "set", f"{uplink}p", "name", "eth0"])
    _run(["ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "eth0"])
    for device in ("lo", "eth0"):
        _run(["ip", "-n", netns, "link", "set", device, "up"])
    return netns


def _direct_host(fleet: NetnsFleet, index: int, name: str) -> TestHost:
    uplink = f"gdf{fleet.tag}{index}"
    address = f"{fleet.subnet}.{11 + index}"
    netns = _namespace(fleet, name, uplink, address)
    _run(["ip", "link", "set", uplink, "master", fleet.bridge, "up"])
    return _host(fleet, name, netns, address, nat=False)


def _natted_host(fleet: NetnsFleet, name: str) -> TestHost:
    uplink = f"gdf{fleet.tag}n"
    router = _namespace(fleet, "nat", uplink, f"{fleet.subnet}.2")
    _run(["ip", "link", "set", uplink, "master", fleet.bridge, "up"])
    _run(["nsenter", f"--net=/run/netns/{router}", "sysctl", "-qw", "net.ipv4.ip_forward=1"])
    nat = ["nsenter", f"--net=/run/netns/{router}", "iptables", "-t", "nat"]
    _run([*nat, "-A", "POSTROUTING", "-o", "eth0", "-j", "MASQUERADE"])
    netns = f"{NETNS_PREFIX}{fleet.tag}-{name}"
    lan, lan_net = f"gdf{fleet.tag}l", fleet.nat_lan
    _run(["ip", "route", "add", "unreachable", f"{lan_net}.0/24"])
    _run(["ip", "netns", "add", netns])
    _run(["ip", "-n", router, "link", "add", "lan0", "type", "veth", "peer", "name", lan])
    _run(["ip", "-n", router, "link", "set", lan, "netns", netns])
    _run(["ip", "-n", router, "addr", "add", f"{lan_net}.1/24", "dev", "lan0"])
    _run(["ip", "-n", router, "link", "set", "lan0", "up"])
    _run(["ip", "-n", netns, "link", "set", lan, "name", "eth0"])
    _run(["ip", "-n", netns, "addr", "add", f"{lan_net}.2/24", "dev", "eth0"])
    for device in ("lo", "eth0"):
        _run(["ip", "-n", netns, "link", "set", device, "up"])
    _run(["ip", "-n", netns, "route", "add", "default", "via", f"{lan_net}.1"])
    return _host(fleet, name, netns, f"{lan_net}.2", nat=True)


def _host(fleet: NetnsFleet, name: str, netns: str, address: str, *, nat: bool) -> TestHost:
    workdir = fleet.workdir / "fleet" / name
    workdir.mkdir(parents=True)
    host = TestHost(name, netns, address, workdir, Path(f"/tmp/gdf{fleet.tag}{name}"), nat)
    host.exec_root.mkdir()
    _write_ledger(fleet)
    return host


def _start_engine(host: TestHost, tarball: Path) -> None:
    started = time.monotonic()
    command = [
        "dockerd",
        f"--data-root={host.workdir / 'docker'}",
        f"--exec-root={host.exec_root}",
        f"--pidfile={host.exec_root / 'd.pid'}",
        f"--host={host.docker_url}",
        f"--cgroup-parent={host.cgroup_parent}",
        # Rules would land in the host's own namespace; without them nothing is left to undo.
        "--iptables=false",
        "--ip6tables=false",
    ]
    # The fake NVIDIA hook on its PATH: the engine takes GPU requests for the fake NVML's GPUs.
    env = {**os.environ, "PATH": f"{FAKE_NVIDIA_HOOK}:{os.environ.get('PATH', '')}"}
    host.dockerd = host.popen(command, host.workdir / "dockerd.log", env)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if host.dockerd.poll() is not None:
            log = (host.workdir / "dockerd.log").read_text()[-2000:]
            raise RuntimeError(f"dockerd of test host {host.name} exited: {log}")
        with contextlib.suppress(docker.errors.DockerException):
            host.engine().ping()
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"dockerd of test host {host.name} did not answer in time")
        time.sleep(0.1)
    with tarball.open("rb") as data:
        host.engine().images.load(data)
    host.start_s = time.monotonic() - started


# -- tearing down ------------------------------------------------------------------------------


def _stop_engine(host: TestHost) -> None:
    emptied = False
    with contextlib.suppress(docker.errors.DockerException):
        for container in host.engine().containers.list(all=True):
            container.remove(force=True)
        emptied = True
    # With no container left there is nothing a clean shutdown would undo (its data
    # root goes next), and dockerd's takes seconds on a loaded machine.
    stop = signal.SIGKILL if emptied else signal.SIGTERM
    pid = host.dockerd.pid if host.dockerd is not None else _read_pid(host.exec_root / "d.pid")
    containerds = _containerd_pids(host.exec_root)
    if pid is not None:
        _terminate(pid, stop)
    for containerd in containerds | _containerd_pids(host.exec_root):
        _terminate(containerd, stop)
    _unmount_under(host.exec_root, host.workdir)
    shutil.rmtree(host.exec_root, ignore_errors=True)
    for cgroup in CGROUP_ROOT.glob(f"*{host.cgroup_parent}"):
        _remove_cgroup(cgroup)


def _remove_namespaces_and_links(tag: str, nat_lan: str) -> None:
    _run(["ip", "route", "del", "unreachable", f"{nat_lan}.0/24"], check=False)
    for netns in _netns_names():
        if netns.startswith(f"{NETNS_PREFIX}{tag}-"):
            _run(["ip", "netns", "del", netns], check=False)
    links = _run(["ip", "-o", "link", "show"], capture=True)
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(f"gdf{tag}"):
            _run(["ip", "link", "del", name], check=False)


def _terminate(pid: int, first: signal.Signals = signal.SIGTERM) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _kill_unless_dockerd(pid: int) -> None:
    """Agents and whatever else a test started there; dockerd is stopped in order later."""
    with contextlib.suppress(OSError):
        if _status_field(Path(f"/proc/{pid}/status").read_text(), "Name") in (
            "dockerd",
            "containerd",
            "containerd-shim",
            "containerd-shim-runc-v2",
        ):
            return
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = _status_field(Path(f"/proc/{pid}/status").read_text(), "State")
    except OSError:
        return False
    return not state.startswith("Z")


def _unmount_under(*roots: Path) -> None:
    prefixes = tuple(str(root) for root in roots)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in reversed(mounts):
        if mount.startswith(prefixes):
            _run(["umount", "-l", mount], check=False)


def _remove_cgroup(path: Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            with contextlib.suppress(OSError):
                child.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


# -- reading the machine -----------------------------------------------------------------------


def _netns_names() -> list[str]:
    out = _run(["ip", "netns", "list"], capture=True)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _netns_pids(netns: str) -> set[int]:
    if not Path(f"/run/netns/{netns}").exists():
        return set()
    out = _run(["ip", "netns", "pids", netns], capture=True, check=False)
    return {int(pid) for pid in out.split()}


def _containerd_pids(exec_root: Path) -> set[int]:
    pid = _read_pid(exec_root / "containerd" / "containerd.pid")
    return {pid} if pid is not None and _alive(pid) else set()


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _status_field(status: str, name: str) -> str:
    for line in status.splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    return ""


def _run(argv: list[str], *, capture: bool = False, check: bool = True) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout if capture else ""
