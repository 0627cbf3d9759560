"""SSH gateway: scp throughput and keystroke round trip, gateway versus a direct sshd.

Issue 3's targets: scp through the gateway ≥ 0.8 × direct throughput, and at
most 2 ms added to the shell round trip.

One run starts a real `gpudock server` (simulated 1 × A100-80GB, real Docker
Engine, the SSH gateway on a free port) and creates one instance through the
API. The baseline is OpenSSH's own sshd *inside that same container*: the
Debian package's binary (same OpenSSH release as the client), fetched with
`apt-get download openssh-server libwrap0` into ~/.cache/gpudock-bench once, copied into
the container and run as an unprivileged user (an instance has no
CAP_SYS_CHROOT, which sshd's root privilege separation needs), reached at the
container's bridge address. Both paths serve SFTP with the image's own
`/usr/lib/openssh/sftp-server` and write to the same filesystem, so the
difference is the SSH hop alone: asyncssh in the gpudock server plus the way
into the container (runc's exec, or `docker exec` through dockerd where runc
cannot be used: gpudock.runtime.docker.exec), versus sshd in the container.

Measured, alternating gateway and direct each round so that machine noise hits
both alike:
- scp (SFTP mode, the client's default cipher) of SIZE MiB of random data,
  upload and download, wall time; and the CPU time the server side used
  (gateway: gpudock server + dockerd + the container; direct: the container);
- keystroke round trip: one byte into `ssh -tt HOST 'exec cat >/dev/null'`
  until the terminal's echo comes back, SAMPLES times, 5 ms apart.

Usage: .venv/bin/python -m bench.ssh_throughput [--size-mib 1024] [--rounds 2]
           [--samples 300] [--json]

Exit status: 0 whether or not the targets are met (a benchmark, not a test);
1 when something failed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import select
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import httpx
from tests.support.key_proof import post_with_proof

from bench.start_latency import BenchError, running_server

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpudock-bench"
DEBS = ("openssh-server", "libwrap0")
DIRECT_PORT = 2022
TARGET_THROUGHPUT_RATIO = 0.8
TARGET_ADDED_RTT_MS = 2.0
SSH_OPTIONS = [
    "-F",
    "/dev/null",
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
]
SSHD_CONFIG = f"""Port {DIRECT_PORT}
ListenAddress 0.0.0.0
HostKey /home/bench/sshd/host_key
PidFile none
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile /home/bench/.ssh/authorized_keys
Subsystem sftp /usr/lib/openssh/sftp-server
"""


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int
    user: str
    remote_dir: str

    def ssh(self, key: Path, *args: str) -> list[str]:
        return ["ssh", "-p", str(self.port), "-i", str(key), *SSH_OPTIONS, *args]

    def scp(self, key: Path, source: str, target: str) -> list[str]:
        return ["scp", "-P", str(self.port), "-i", str(key), *SSH_OPTIONS, source, target]

    def remote(self, name: str) -> str:
        return f"{self.user}@{self.host}:{self.remote_dir}/{name}"


@dataclass
class Series:
    up_s: list[float] = field(default_factory=list)
    down_s: list[float] = field(default_factory=list)
    up_cpu_s: list[float] = field(default_factory=list)
    down_cpu_s: list[float] = field(default_factory=list)
    rtt_ms: list[float] = field(default_factory=list)


# -- CPU accounting ------------------------------------------------------------------------
def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def container_cpu_s(container: Any) -> float:
    stats = container.stats(stream=False)
    return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9


def dockerd_pid() -> int:
    return int(subprocess.check_output(["pidof", "dockerd"]).split()[0])


# -- the gpudock side ----------------------------------------------------------------------
def create_instance(url: str, admin_token: str, key: Path) -> tuple[str, str, int]:
    """A user with the key (proven) and a running 1 × A100 instance with all of the host's CPUs
    (the baseline's sshd runs inside it); (instance id, container id, gateway port)."""
    with httpx.Client(base_url=url + "/api/v1", timeout=60) as http:
        admin = {"Authorization": f"Bearer {admin_token}"}
        user = http.post("/users", json={"name": "bench"}, headers=admin).json()
        headers = {"Authorization": f"Bearer {user['token']}"}
        post_with_proof(http, key, headers=headers, prefix="").raise_for_status()
        cpus = max(h["cpus"] for h in http.get("/hosts", headers=admin).json())
        body = {"name": "bench", "gpu_model": "A100-80GB", "gpu_count": 1, "cpu": cpus}
        created = http.post("/instances", json=body, headers=headers)
        created.raise_for_status()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            shown = http.get(f"/instances/{created.json()['id']}", headers=headers).json()
            if shown["status"] == "running":
                port = http.get("/ssh", headers=headers).json()["port"]
                return str(shown["id"]), str(shown["container_id"]), int(port)
            time.sleep(0.1)
    raise BenchError("the instance did not reach running in 120 s")


# -- the baseline: sshd in the same container ---------------------------------------------
def fetch_sshd() -> tuple[bytes, bytes]:
    """sshd and libwrap.so.0 from the Debian packages (cached in CACHE)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    if not all(list(CACHE.glob(f"{name}_*.deb")) for name in DEBS):
        subprocess.run(["apt-get", "download", *DEBS], cwd=CACHE, check=True, capture_output=True)
    unpacked = CACHE / "root"
    for deb in CACHE.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    sshd = (unpacked / "usr/sbin/sshd").read_bytes()
    libwrap = next((unpacked / "usr/lib/x86_64-linux-gnu").glob("libwrap.so.0.*")).read_bytes()
    return sshd, libwrap


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def start_direct_sshd(container: Any, public_key: str, workdir: Path) -> Endpoint:
    sshd, libwrap = fetch_sshd()
    host_key = workdir / "direct_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    _check(container.exec_run(["useradd", "-m", "-s", "/bin/bash", "bench"]))
    container.put_archive("/usr/local/sbin", _tar({"sshd": (sshd, 0o755)}))
    container.put_archive("/usr/lib/x86_64-linux-gnu", _tar({"libwrap.so.0": (libwrap, 0o644)}))
    files = {
        ".ssh/authorized_keys": (public_key.encode(), 0o600),
        "sshd/host_key": (host_key.read_bytes(), 0o600),
        "sshd/config": (SSHD_CONFIG.encode(), 0o644),
    }
    container.put_archive("/home/bench", _tar(files))
    _check(container.exec_run(["chown", "-R", "bench:bench", "/home/bench"]))
    container.exec_run(
        ["/usr/local/sbin/sshd", "-D", "-e", "-f", "/home/bench/sshd/config"],
        user="bench",
        detach=True,
    )
    container.reload()
    address = container_address(container.attrs["NetworkSettings"])
    return Endpoint("direct", address, DIRECT_PORT, "bench", "/home/bench")


def container_address(settings: dict[str, Any]) -> str:
    """The container's address on the default bridge, or on its own network."""
    addresses = [settings.get("IPAddress")]
    addresses += [n.get("IPAddress") for n in (settings.get("Networks") or {}).values()]
    found = next((a for a in addresses if a), None)
    if found is None:
        raise BenchError("the instance's container has no IP address")
    return str(found)


def _check(result: Any) -> None:
    if result.exit_code != 0:
        raise BenchError(f"setting up the baseline failed: {result.output.decode()[-500:]}")


def wait_until_reachable(endpoint: Endpoint, key: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        argv = endpoint.ssh(key, f"{endpoint.user}@{endpoint.host}", "true")
        if subprocess.run(argv, capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise BenchError(f"{endpoint.name} ssh was not reachable within 60 s")


# -- measurements ----------------------------------------------------------------------------
@contextlib.contextmanager
def cpu_meter(pids: list[int], container: Any) -> Iterator[list[float]]:
    """Yields a list that holds the CPU seconds used by PIDS and the container after."""
    spent: list[float] = []
    before = sum(process_cpu_s(p) for p in pids) + container_cpu_s(container)
    yield spent
    spent.append(sum(process_cpu_s(p) for p in pids) + container_cpu_s(container) - before)


def timed_scp(argv: list[str], pids: list[int], container: Any) -> tuple[float, float]:
    with cpu_meter(pids, container) as spent:
        start = time.perf_counter()
        result = subprocess.run(argv, capture_output=True, check=False)
        elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise BenchError(f"{' '.join(argv[:1])} failed: {result.stderr.decode()[-500:]}")
    return elapsed, spent[0]


def keystroke_rtt(endpoint: Endpoint, key: Path, samples: int) -> list[float]:
    argv = endpoint.ssh(key, "-tt", f"{endpoint.user}@{endpoint.host}", "exec cat >/dev/null")
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        _round_trip(process.stdin, process.stdout.fileno(), b"w")  # warm up: the session is up
        rtts = []
        for _ in range(samples):
            rtts.append(_round_trip(process.stdin, process.stdout.fileno(), b"x") * 1000)
            time.sleep(0.005)
        return rtts
    finally:
        process.kill()
        process.wait()


def _round_trip(stdin: Any, stdout: int, byte: bytes) -> float:
    start = time.perf_counter()
    stdin.write(byte)
    seen = b""
    while byte not in seen:
        ready, _, _ = select.select([stdout], [], [], 30)
        if not ready:
            raise BenchError("no echo within 30 s")
        seen += os.read(stdout, 4096)
    return time.perf_counter() - start


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    key = workdir / "id_bench"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public_key = key.with_suffix(".pub").read_text()
    payload = workdir / "payload.bin"
    with payload.open("wb") as out:
        for _ in range(args.size_mib):
            out.write(os.urandom(2**20))
    engine = docker.from_env()
    with running_server(workdir / "data", workdir / "server.log") as server:
        admin_token = (server.data_dir / "admin.token").read_text().strip()
        instance_id, container_id, ssh_port = create_instance(server.url, admin_token, key)
        container = engine.containers.get(container_id)
        try:
            gateway = Endpoint("gateway", "127.0.0.1", ssh_port, instance_id, "/root")
            direct = start_direct_sshd(container, public_key, workdir)
            for endpoint in (gateway, direct):
                wait_until_reachable(endpoint, key)
            pids = {"gateway": [server.process.pid, dockerd_pid()], "direct": []}
            return _rounds(args, key, payload, container, pids, gateway, direct)
        finally:  # the instance's container and data volume; the server goes with its dir
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
                for volume in engine.volumes.list(
                    filters={"label": f"gpudock.instance={instance_id}"}
                ):
                    volume.remove(force=True)
            unmount_below(workdir)


def unmount_below(directory: Path) -> None:
    """Unmount what the server mounted in its data dir (size-limited data volumes)."""
    prefix = f"{directory.resolve()}/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in reversed(points):
        subprocess.run(["umount", point], check=False, capture_output=True)


def _rounds(
    args: argparse.Namespace,
    key: Path,
    payload: Path,
    container: Any,
    pids: dict[str, list[int]],
    *endpoints: Endpoint,
) -> dict[str, Any]:
    series = {e.name: Series() for e in endpoints}
    for round_ in range(args.rounds):
        order = endpoints if round_ % 2 == 0 else tuple(reversed(endpoints))
        for endpoint in order:
            s, p = series[endpoint.name], pids[endpoint.name]
            up = timed_scp(
                endpoint.scp(key, str(payload), endpoint.remote("payload.bin")), p, container
            )
            back = payload.with_suffix(f".{endpoint.name}")
            down = timed_scp(
                endpoint.scp(key, endpoint.remote("payload.bin"), str(back)), p, container
            )
            back.unlink()
            s.up_s.append(up[0])
            s.up_cpu_s.append(up[1])
            s.down_s.append(down[0])
            s.down_cpu_s.append(down[1])
            print(
                f"round {round_ + 1} {endpoint.name}: up {up[0]:.2f} s, down {down[0]:.2f} s",
                file=sys.stderr,
            )
    for endpoint in endpoints:
        series[endpoint.name].rtt_ms = keystroke_rtt(endpoint, key, args.samples)
    return summarize(series, args.size_mib)


def summarize(series: dict[str, Series], size_mib: int) -> dict[str, Any]:
    def rate(seconds: list[float]) -> float:
        return size_mib / statistics.median(seconds)

    def per_gib(cpu: list[float]) -> float:
        return statistics.median(cpu) * 1024 / size_mib

    result: dict[str, Any] = {"size_mib": size_mib, "load_average": os.getloadavg()}
    for name, s in series.items():
        rtt = sorted(s.rtt_ms)
        result[name] = {
            "upload_mib_s": rate(s.up_s),
            "download_mib_s": rate(s.down_s),
            "upload_cpu_s_per_gib": per_gib(s.up_cpu_s),
            "download_cpu_s_per_gib": per_gib(s.down_cpu_s),
            "rtt_median_ms": statistics.median(rtt),
            "rtt_p95_ms": rtt[int(len(rtt) * 0.95) - 1],
        }
    g, d = result["gateway"], result["direct"]
    result["ratios"] = {
        "upload": g["upload_mib_s"] / d["upload_mib_s"],
        "download": g["download_mib_s"] / d["download_mib_s"],
        "added_rtt_median_ms": g["rtt_median_ms"] - d["rtt_median_ms"],
        "added_rtt_p95_ms": g["rtt_p95_ms"] - d["rtt_p95_ms"],
    }
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        f"scp of {result['size_mib']} MiB, load average "
        + ", ".join(f"{x:.1f}" for x in result["load_average"]),
        f"{'':9}{'up MiB/s':>10}{'down MiB/s':>12}{'up CPU s/GiB':>14}{'down CPU s/GiB':>16}"
        f"{'RTT p50 ms':>12}{'RTT p95 ms':>12}",
    ]
    for name in ("gateway", "direct"):
        r = result[name]
        lines.append(
            f"{name:9}{r['upload_mib_s']:>10.1f}{r['download_mib_s']:>12.1f}"
            f"{r['upload_cpu_s_per_gib']:>14.2f}{r['download_cpu_s_per_gib']:>16.2f}"
            f"{r['rtt_median_ms']:>12.2f}{r['rtt_p95_ms']:>12.2f}"
        )
    ratios = result["ratios"]
    lines.append(
        f"gateway/direct throughput: up {ratios['upload']:.2f}, down {ratios['download']:.2f} "
        f"(target ≥ {TARGET_THROUGHPUT_RATIO}); added RTT: p50 {ratios['added_rtt_median_ms']:.2f}"
        f" ms, p95 {ratios['added_rtt_p95_ms']:.2f} ms (target ≤ {TARGET_ADDED_RTT_MS} ms)"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        with tempfile.TemporaryDirectory(prefix="gpudock-ssh-bench-") as tmp:
            result = measure(args, Path(tmp))
    except (BenchError, subprocess.CalledProcessError, httpx.HTTPError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
