"""SSH to an instance on another host: the server's gateway, relayed over the
host's agent link, versus OpenSSH's sshd in that same container.

Issue 16's targets: scp to an instance on another host ≥ 0.8 × the direct
sshd's throughput, and at most 2 ms added to the keystroke round trip.

One run builds a netns test fleet with one host behind NAT (its own dockerd,
`tests/support/fleet_netns.py`), starts a real `gpudock server` in the
machine's own namespace with its agent link on the fleet's bridge, joins the
host's agent as an operator would (`gpudock hosts add`, `gpudock agent join`)
and creates one instance through the API, which lands on that host.

- relayed: `scp`/`ssh` from this machine's namespace to the gateway on
  127.0.0.1; the gateway relays each channel over the agent link (TCP across
  the fleet bridge and the NAT namespace) to the agent, which runs
  sftp-server (or the shell) in the container with runc's exec.
- direct: OpenSSH's sshd in the same container (`bench.ssh_throughput`'s
  baseline: the Debian binary, an unprivileged user, the image's own
  sftp-server), reached from the host's own network namespace at the
  container's bridge address. Nothing on the server's side can reach a NATed
  container; a client on the host is the closest "same network" path: both
  write through the same sftp-server to the same filesystem, and what the
  relayed path adds is the gateway, the link and the agent (plus two veths
  and a NAT, which cost the kernel little next to two SSH ciphers).

Rounds alternate the order (relayed first, then direct first) so that the
machine's load, shared with other work, hits both alike; the throughput ratio
is the median over rounds of relayed / direct, upload and download. The
keystroke round trip: one byte into `ssh -tt HOST 'exec cat >/dev/null'`
until the terminal's echo comes back, SAMPLES times each way, p50 and p99.

Usage: .venv/bin/python -m bench.ssh_remote [--size-mib 256] [--rounds 3]
           [--samples 300] [--json]

Exit status: 0 whether or not the targets are met (a benchmark, not a test);
1 when something failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from tests.support.agent_cluster import Cluster, fake_gpus
from tests.support.fleet_netns import netns_fleet
from tests.support.key_proof import post_with_proof
from tests.support.server_process import ServerProcess

from bench.ssh_throughput import (
    TARGET_ADDED_RTT_MS,
    TARGET_THROUGHPUT_RATIO,
    Endpoint,
    keystroke_rtt,
    start_direct_sshd,
    unmount_below,
    wait_until_reachable,
)
from bench.start_latency import BenchError

HOST = "n"


@dataclass(frozen=True)
class HostEndpoint(Endpoint):
    """An endpoint whose client runs in a test host's network namespace."""

    netns: str = ""

    def ssh(self, key: Path, *args: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}", *super().ssh(key, *args)]

    def scp(self, key: Path, source: str, target: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}", *super().scp(key, source, target)]


def _server(workdir: Path, link_host: str) -> ServerProcess:
    return ServerProcess(
        workdir / "server",
        simulate="1x1xA100-80GB",
        env={
            "GPUDOCK_AGENT_LINK_HOST": link_host,
            "GPUDOCK_AGENT_LINK_PORT": "0",
            "GPUDOCK_AGENT_HEARTBEAT_S": "1",
        },
    )


def _instance_on_host(cluster: Cluster, key: Path) -> tuple[str, str, int]:
    """A user with the key and a running instance on the NATed host with all of
    its CPUs; (instance id, container id, gateway port)."""
    with cluster.server.client() as admin:
        token = admin.post("/users", json={"name": "bench"}).json()["token"]
        cpus = next(h["cpus"] for h in admin.get("/hosts").json() if h["name"] == HOST)
    with cluster.server.client(token) as user:
        post_with_proof(user, key, prefix="").raise_for_status()
        body = {"name": "bench", "gpu_model": "H200-140GB", "gpu_count": 1, "cpu": cpus}
        created = user.post("/instances", json=body)
        if created.status_code != 201:
            raise BenchError(f"creating the instance failed: {created.text}")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            shown = user.get(f"/instances/{created.json()['id']}").json()
            if shown["status"] == "running":
                port = user.get("/ssh").json()["port"]
                return str(shown["id"]), str(shown["container_id"]), int(port)
            time.sleep(0.2)
    raise BenchError("the instance did not reach running in 180 s")


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    key = workdir / "id_bench"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    payload = workdir / "payload.bin"
    with payload.open("wb") as out:
        for _ in range(args.size_mib):
            out.write(os.urandom(2**20))
    with netns_fleet(workdir, direct=(), natted=HOST) as fleet:
        server = _server(workdir, fleet.server_address)
        server.start()
        try:
            cluster = Cluster(fleet, server, workdir)
            host = fleet.hosts[HOST]
            cluster.write_gpus(HOST, fake_gpus("H200", 1, 140))
            cluster.agent(host, "join", *cluster.add(HOST)[3:5])
            cluster.link(HOST, "up")
            instance_id, container_id, ssh_port = _instance_on_host(cluster, key)
            container = host.engine().containers.get(container_id)
            relayed = Endpoint("relayed", "127.0.0.1", ssh_port, instance_id, "/root")
            direct = start_direct_sshd(container, key.with_suffix(".pub").read_text(), workdir)
            direct = HostEndpoint(**vars(direct), netns=host.netns)
            for endpoint in (relayed, direct):
                wait_until_reachable(endpoint, key)
            return _rounds(args, key, payload, relayed, direct)
        finally:
            server.kill()
            unmount_below(workdir)


def _scp_s(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise BenchError(f"scp failed: {done.stderr.decode()[-500:]}")
    return elapsed


def _rounds(
    args: argparse.Namespace, key: Path, payload: Path, *endpoints: Endpoint
) -> dict[str, Any]:
    times: dict[str, dict[str, list[float]]] = {e.name: {"up": [], "down": []} for e in endpoints}
    for round_ in range(args.rounds):
        order = endpoints if round_ % 2 == 0 else tuple(reversed(endpoints))
        for endpoint in order:
            up = _scp_s(endpoint.scp(key, str(payload), endpoint.remote("payload.bin")))
            back = payload.with_suffix(f".{endpoint.name}")
            down = _scp_s(endpoint.scp(key, endpoint.remote("payload.bin"), str(back)))
            back.unlink()
            times[endpoint.name]["up"].append(up)
            times[endpoint.name]["down"].append(down)
            print(
                f"round {round_ + 1} {endpoint.name}: up {up:.2f} s, down {down:.2f} s",
                file=sys.stderr,
            )
    rtts = {e.name: sorted(keystroke_rtt(e, key, args.samples)) for e in endpoints}
    return summarize(times, rtts, args.size_mib)


def _percentile(sorted_ms: list[float], fraction: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * fraction))]


def summarize(
    times: dict[str, dict[str, list[float]]], rtts: dict[str, list[float]], size_mib: int
) -> dict[str, Any]:
    result: dict[str, Any] = {"size_mib": size_mib, "load_average": os.getloadavg()}
    for name, series in times.items():
        result[name] = {
            "upload_mib_s": size_mib / statistics.median(series["up"]),
            "download_mib_s": size_mib / statistics.median(series["down"]),
            "rtt_p50_ms": _percentile(rtts[name], 0.5),
            "rtt_p99_ms": _percentile(rtts[name], 0.99),
        }
    relayed, direct = times["relayed"], times["direct"]
    # Per round, throughput relayed / direct = direct's time / relayed's time.
    result["ratios"] = {
        way: statistics.median(d / r for r, d in zip(relayed[way], direct[way], strict=True))
        for way in ("up", "down")
    }
    result["added_rtt_ms"] = {
        "p50": result["relayed"]["rtt_p50_ms"] - result["direct"]["rtt_p50_ms"],
        "p99": result["relayed"]["rtt_p99_ms"] - result["direct"]["rtt_p99_ms"],
    }
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        f"scp of {result['size_mib']} MiB to an instance on a NATed agent host, load average "
        + ", ".join(f"{x:.1f}" for x in result["load_average"]),
        f"{'':9}{'up MiB/s':>10}{'down MiB/s':>12}{'RTT p50 ms':>12}{'RTT p99 ms':>12}",
    ]
    for name in ("relayed", "direct"):
        r = result[name]
        lines.append(
            f"{name:9}{r['upload_mib_s']:>10.1f}{r['download_mib_s']:>12.1f}"
            f"{r['rtt_p50_ms']:>12.2f}{r['rtt_p99_ms']:>12.2f}"
        )
    ratios, added = result["ratios"], result["added_rtt_ms"]
    lines.append(
        f"relayed/direct throughput (median of rounds): up {ratios['up']:.2f}, down "
        f"{ratios['down']:.2f} (target ≥ {TARGET_THROUGHPUT_RATIO}); added RTT: p50 "
        f"{added['p50']:.2f} ms, p99 {added['p99']:.2f} ms (target ≤ {TARGET_ADDED_RTT_MS} ms)"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        with tempfile.TemporaryDirectory(prefix="gpudock-ssh-remote-") as tmp:
            result = measure(args, Path(tmp))
    except (BenchError, subprocess.CalledProcessError, httpx.HTTPError, RuntimeError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
