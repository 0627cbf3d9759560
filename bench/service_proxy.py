"""Service URLs: a 1 GiB download and small-request latency through the proxy,
against the same port reached directly, in the same run.

Issue targets: proxied throughput ≥ 0.8 × direct, at most 2 ms added to the p50.

One run starts a real `gpudock server` (real Docker Engine), creates one
no-GPU instance from the base image that publishes port 8000 as `bench`, and
starts Python's threading HTTP/1.1 file server inside it (serving a 1 GiB file
of zeros and a 2-byte one from /root/data). Direct: the container's address on
its tenant bridge, from this host. Proxied: `/i/<id>/bench/…` on the server,
authenticated by a link cookie (the proxy's credential check is cached, as in
production). Downloads with curl (C: the client is not the bottleneck),
alternating direct and proxied each round; latency with one keep-alive httpx
client per path, SAMPLES sequential GETs each.

Usage: .venv/bin/python -m bench.service_proxy [--rounds 3] [--samples 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
import httpx

from bench.start_latency import BenchError, running_server

SERVE = (
    "cd /root/data && head -c 1073741824 /dev/zero > big && printf ok > small && "
    'exec python3 -c "import http.server as h; '
    "h.SimpleHTTPRequestHandler.protocol_version = 'HTTP/1.1'; "
    "h.SimpleHTTPRequestHandler.disable_nagle_algorithm = True; "
    "h.ThreadingHTTPServer(('0.0.0.0', 8000), h.SimpleHTTPRequestHandler).serve_forever()\""
)


def _api(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"})


def _wait(check: Any, what: str, deadline_s: float = 120.0) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise BenchError(f"timed out waiting for {what}")


def _curl_seconds(url: str, cookie: str | None) -> float:
    command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total}", url]
    if cookie:
        command[1:1] = ["-b", cookie]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout)


def _latencies(url: str, cookies: dict[str, str], samples: int) -> list[float]:
    with httpx.Client(cookies=cookies) as client:
        client.get(url).raise_for_status()  # warm: connections and the credential cache
        taken = []
        for _ in range(samples):
            started = time.perf_counter()
            client.get(url).raise_for_status()
            taken.append((time.perf_counter() - started) * 1000)
    return taken


def run(rounds: int, samples: int) -> dict[str, Any]:
    # A sequential client on the loopback outruns the shipped per-address limit
    # (300/s); the limit is still checked on every request, as in production.
    os.environ.setdefault("GPUDOCK_RATE_LIMIT_SERVICE_ADDRESS", "100000/second")
    engine = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="gpudock-bench-") as scratch:
        data = Path(scratch)
        with running_server(data / "data", data / "server.log") as server:
            token = (data / "data" / "admin.token").read_text().strip()
            api = _api(server.url, token)
            body = {"name": "bench", "gpu_count": 0, "services": {"bench": 8000}}
            created = api.post("/instances", json=body)
            created.raise_for_status()
            instance_id = created.json()["id"]

            try:
                speeds, latency = _measure(api, engine, server.url, instance_id, rounds, samples)
            finally:  # the server's stop leaves a live instance's volume mounted
                api.delete(f"/instances/{instance_id}")
    best = {k: max(v) for k, v in speeds.items()}
    p50 = {k: statistics.median(v) for k, v in latency.items()}
    return {
        "download_mib_s": {k: [round(s) for s in v] for k, v in speeds.items()},
        "throughput_ratio": round(best["proxied"] / best["direct"], 2),
        "p50_ms": {k: round(v, 3) for k, v in p50.items()},
        "p99_ms": {k: round(statistics.quantiles(v, n=100)[98], 3) for k, v in latency.items()},
        "added_p50_ms": round(p50["proxied"] - p50["direct"], 3),
    }


def _measure(
    api: httpx.Client,
    engine: docker.DockerClient,
    url: str,
    instance_id: str,
    rounds: int,
    samples: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    def container_id() -> str | None:
        shown = api.get(f"/instances/{instance_id}").json()
        return shown["container_id"] if shown["status"] == "running" else None

    container = engine.containers.get(_wait(container_id, "the instance to run"))
    container.exec_run(["sh", "-c", SERVE], detach=True)
    networks = container.attrs["NetworkSettings"]["Networks"]
    address = next(n["IPAddress"] for n in networks.values() if n["IPAddress"])
    direct = f"http://{address}:8000"
    link = api.post(f"/instances/{instance_id}/services/bench/links").json()["token"]
    proxied = f"{url}/i/{instance_id}/bench"
    cookie = f"gpudock_link={link}"

    def serving() -> bool:
        try:
            return httpx.get(direct + "/small", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    _wait(serving, "the file server inside the instance")
    big_bytes = 1 << 30
    speeds: dict[str, list[float]] = {"direct": [], "proxied": []}
    for _ in range(rounds):
        speeds["direct"].append(big_bytes / _curl_seconds(direct + "/big", None) / 2**20)
        speeds["proxied"].append(big_bytes / _curl_seconds(proxied + "/big", cookie) / 2**20)
    latency = {
        "direct": _latencies(direct + "/small", {}, samples),
        "proxied": _latencies(proxied + "/small", {"gpudock_link": link}, samples),
    }
    return speeds, latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.rounds, args.samples)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
