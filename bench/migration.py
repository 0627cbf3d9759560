"""Migration: GPU fault → running again, with a 1 GiB data volume (issue 6).

Issue 6's target: ≤ 3 s same-host (p50 and p99 reported), cross-host measured.

One run starts a real `gpudock server` (simulated 2 hosts × 2 A100-80GB on this
machine's Docker Engine, GPUDOCK_IMAGE_PULL=never), creates one instance,
writes DATA_MIB of random data into its data volume, then alternates faults:

- same-host: Xid 48 on its GPU → drained, moved to the host's other GPU
  (container stopped, writable layer committed, new container, same volume);
  the GPU is repaired afterwards so the next round has room.
- cross-host: Xid 79 → the whole host drained, moved to the other host
  (plus a copy of the data volume); the host's GPUs are repaired afterwards.

The time is the server's own: from the fault's timestamp to the 'running'
event of the moved instance (one clock, one machine).

Baseline, measured in the same run, round by round: what a person would do by
hand with the Docker CLI for the same move — `docker stop -t 1`, `docker commit`,
`docker run` on the same volume (same-host), plus copying the volume with a
helper container (`cp -a`) for cross-host. The ratio gpudock / baseline shows
the platform's own overhead.

Usage: .venv/bin/python -m bench.migration [--rounds 10] [--data-mib 1024] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
import httpx

REPO = Path(__file__).resolve().parent.parent
GPUDOCK = REPO / ".venv" / "bin" / "gpudock"
IMAGE = "gpudock/base:bookworm"
FLEET = "2x2xA100-80GB"
DEADLINE_S = 300.0


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    data_dir: Path

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )


def start_server(data_dir: Path) -> Server:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "GPUDOCK_IMAGE_PULL": "never", "GPUDOCK_SSH_PORT": "0"}
    log = (data_dir / "server.log").open("wb")
    process = subprocess.Popen(
        [
            str(GPUDOCK),
            "server",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--simulate",
            FLEET,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return Server(url, process, data_dir)
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("the server did not start; see " + str(data_dir / "server.log"))


def wait_running_off(user: httpx.Client, instance_id: str, old_gpu: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found: dict[str, Any] = user.get(f"/instances/{instance_id}").json()
        if found["status"] == "running" and old_gpu not in found["gpus"]:
            return found
        if found["status"] == "failed":
            raise SystemExit(f"the instance failed: {found['status_reason']}")
        time.sleep(0.02)
    raise SystemExit(f"{instance_id} did not move in {DEADLINE_S} s")


def moved_seconds(user: httpx.Client, instance_id: str, fault_at: datetime) -> float:
    events = user.get(f"/instances/{instance_id}/events").json()
    running = [datetime.fromisoformat(e["at"]) for e in events if e["to_status"] == "running"]
    return (running[-1] - fault_at).total_seconds()


def gpudock_move(
    admin: httpx.Client, user: httpx.Client, instance: dict[str, Any], xid: int
) -> tuple[float, dict[str, Any]]:
    gpu = instance["gpus"][0]
    fault = admin.post(f"/admin/gpus/{gpu}/faults", json={"xid": xid}).json()
    moved = wait_running_off(user, instance["id"], gpu)
    seconds = moved_seconds(user, instance["id"], datetime.fromisoformat(fault["at"]))
    hosts = admin.get("/hosts").json()
    for host in hosts:  # repair what the fault took out, so the next round has room
        for g in host["gpus"]:
            if g["state"] != "healthy" and g["instance_id"] is None:
                admin.post(f"/admin/gpus/{g['uuid']}/repair")
    return seconds, moved


def baseline_move(engine: docker.DockerClient, volume: str, cross_host: bool) -> float:
    """The same move by hand with the engine: stop, commit, run (+ copy the volume)."""
    name = "bench-mig-" + secrets.token_hex(4)
    container = engine.containers.run(
        IMAGE, ["sleep", "infinity"], name=name, detach=True, init=True,
        volumes={volume: {"bind": "/root/data", "mode": "rw"}},
    )  # fmt: skip
    target = volume
    began = time.perf_counter()
    container.stop(timeout=1)
    image = container.commit(repository="bench-mig", tag=name)
    if cross_host:
        target = volume + "-copy"
        engine.volumes.create(target)
        engine.containers.run(
            IMAGE, ["cp", "-a", "/from/.", "/to/"], remove=True, network_mode="none",
            volumes={
                volume: {"bind": "/from", "mode": "ro"},
                target: {"bind": "/to", "mode": "rw"},
            },
        )  # fmt: skip
    moved = engine.containers.run(
        image.id, ["sleep", "infinity"], detach=True, init=True,
        volumes={target: {"bind": "/root/data", "mode": "rw"}},
    )  # fmt: skip
    seconds = time.perf_counter() - began
    for leftover in (container, moved):
        leftover.remove(force=True)
    engine.images.remove(image.id, force=True)
    if cross_host:
        engine.volumes.get(target).remove(force=True)
    return seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--data-mib", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    engine = docker.from_env(timeout=300)
    results: dict[str, dict[str, list[float]]] = {
        "same-host": {"gpudock": [], "baseline": []},
        "cross-host": {"gpudock": [], "baseline": []},
    }
    with tempfile.TemporaryDirectory(prefix="gpudock-bench-mig-") as tmp:
        server = start_server(Path(tmp))
        try:
            token = (Path(tmp) / "admin.token").read_text().strip()
            admin = server.client(token)
            user = server.client(admin.post("/users", json={"name": "bench"}).json()["token"])
            created = user.post("/instances", json={"gpu_model": "A100-80GB"}).json()
            instance = wait_running_off(user, created["id"], "none")
            container = engine.containers.get(instance["container_id"])
            fill = f"head -c {args.data_mib}M /dev/urandom > /root/data/blob && sync"
            container.exec_run(["sh", "-c", fill])
            volume = container.attrs["Mounts"][0]["Name"]
            base_volume = "bench-mig-" + secrets.token_hex(4)
            engine.containers.run(
                IMAGE, ["sh", "-c", fill.replace("/root/data", "/d")], remove=True,
                volumes={base_volume: {"bind": "/d", "mode": "rw"}},
            )  # fmt: skip
            for round_ in range(args.rounds):
                for kind, xid in (("same-host", 48), ("cross-host", 79)):
                    seconds, instance = gpudock_move(admin, user, instance, xid)
                    results[kind]["gpudock"].append(seconds)
                    results[kind]["baseline"].append(
                        baseline_move(engine, base_volume, kind == "cross-host")
                    )
                    print(
                        f"round {round_ + 1} {kind}: gpudock {seconds:.2f} s, "
                        f"baseline {results[kind]['baseline'][-1]:.2f} s",
                        file=sys.stderr,
                    )
            del volume
            engine.volumes.get(base_volume).remove(force=True)
            user.delete(f"/instances/{instance['id']}")
            deadline = time.monotonic() + DEADLINE_S  # the server unmounts what it mounted
            while user.get(f"/instances/{instance['id']}").json()["status"] != "deleted":
                if time.monotonic() > deadline:
                    raise SystemExit("the instance was not deleted in time")
                time.sleep(0.1)
        finally:
            server.process.kill()
            server.process.wait()
    summary = {
        kind: {
            "gpudock_p50_s": round(percentile(s["gpudock"], 0.5), 3),
            "gpudock_p99_s": round(percentile(s["gpudock"], 0.99), 3),
            "baseline_p50_s": round(percentile(s["baseline"], 0.5), 3),
            "ratio_p50": round(percentile(s["gpudock"], 0.5) / percentile(s["baseline"], 0.5), 2),
        }
        for kind, s in results.items()
    }
    summary["params"] = {"rounds": args.rounds, "data_mib": args.data_mib}  # type: ignore[assignment]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for kind in ("same-host", "cross-host"):
            row = summary[kind]
            print(
                f"{kind:>10}: gpudock p50 {row['gpudock_p50_s']:.2f} s, p99 "
                f"{row['gpudock_p99_s']:.2f} s; by hand p50 {row['baseline_p50_s']:.2f} s; "
                f"ratio {row['ratio_p50']:.2f}×"
            )
        met = summary["same-host"]["gpudock_p99_s"] <= 3
        print(f"same-host target ≤ 3 s: {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
