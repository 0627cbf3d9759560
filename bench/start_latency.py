"""Start latency: create → running through gpudock versus `docker run`.

Issue 19's targets: p50 ≤ 1.2 × a `docker run` with the same hardening and
≤ 1.5 × a bare `docker run` of the same image, p99 ≤ 2 s.

One run starts a real `gpudock server` (simulated 3 × 8 × A100-80GB fleet, real
Docker Engine, GPUDOCK_IMAGE_PULL=never, the isolation defaults) as a subprocess
and measures, round by round so that machine noise hits every series alike:

- gpudock:  POST /api/v1/instances, then GET it every 10 ms until "running";
- hardened: `docker run` (CLI) with gpudock's sandbox and limits on a network
  of its own, and an ext4 data volume of the instance's size formatted and
  loop-mounted by hand in the same timed run (`bench.docker_baselines`);
- bare-cli: `docker run -d --init --name X IMAGE sleep infinity` (docker CLI);
- bare-sdk: docker-py `containers.run(IMAGE, ["sleep", "infinity"], detach=True,
  init=True, name=X)`, the client library gpudock itself uses (no CLI start-up).

The hardening is read from a first gpudock instance (not measured), so the
hardened run asks the engine for what gpudock asks. The order of the series
rotates from round to round, so the work a series leaves behind (gpudock's
reconciler finishing its pass, its volume pool refilling) does not always land
on the same neighbour. Containers stay running until the end (or go after each
measurement with --delete-each). gpudock's per-instance events split its
latency into phases (server and client share the wall clock: same machine).

Usage: .venv/bin/python -m bench.start_latency [--count 20] [--json]

Exit status: 0 whether or not the targets are met (a benchmark, not a test);
1 when something failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx

from bench.docker_baselines import Bare, BenchError, Hardened, Hardening

REPO = Path(__file__).resolve().parent.parent
GPUDOCK = REPO / ".venv" / "bin" / "gpudock"
IMAGE = "gpudock/base:bookworm"
FLEET = "3x8xA100-80GB"
FLEET_GPUS = 24
GPU_MODEL = "A100-80GB"
# The reconciler is woken by every create and by each step it finishes, so the
# interval (its idle tick) should not matter for create → running; stated here
# so that a reader can check that claim by changing it.
RECONCILE_INTERVAL_S = "1.0"
POLL_INTERVAL_S = 0.010
RUNNING_DEADLINE_S = 60.0
DELETED_DEADLINE_S = 60.0
STARTUP_DEADLINE_S = 60.0
DISK_GB = 50  # the server's default disk: the hardened run's volume is as large
TARGET_P50_RATIOS = {"hardened": 1.2, "bare-cli": 1.5}
TARGET_P99_S = 2.0
SERIES = ("gpudock", "hardened", "bare-cli", "bare-sdk")
BASELINES = SERIES[1:]
PHASES = ("api", "placement", "container", "report")
PHASE_HELP = {
    "api": "client t0 → 'pending' event (HTTP, auth, image check, insert)",
    "placement": "'pending' → 'creating' event (reconciler wake-up, placement)",
    "container": "'creating' → Docker's StartedAt (volume, create, copy-in, start)",
    "report": "StartedAt → client saw 'running' (inspect, DB write, poll)",
}


# -- statistics -------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else math.nan,
    }


# -- the gpudock server --------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    data_dir: Path
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def running_server(data_dir: Path, log_path: Path) -> Iterator[Server]:
    port = free_port()
    env = {
        **os.environ,
        "GPUDOCK_IMAGE_PULL": "never",
        "GPUDOCK_RECONCILE_INTERVAL_S": RECONCILE_INTERVAL_S,
        # The SSH gateway stays on (as shipped) but on any free port, not 2222.
        "GPUDOCK_SSH_PORT": "0",
    }
    command = [
        str(GPUDOCK),
        "server",
        "--data-dir",
        str(data_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--simulate",
        FLEET,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Server(data_dir=data_dir, port=port, process=process, log_path=log_path)
    try:
        _wait_healthy(server)
        yield server
    finally:
        _stop(process)


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BenchError(
                f"the server exited during start-up (status {server.process.returncode}):\n"
                + server.log_tail()
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + "/readyz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise BenchError(
        f"the server was not healthy within {STARTUP_DEADLINE_S:g} s:\n" + server.log_tail()
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()  # uvicorn shuts down cleanly on SIGTERM
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


# -- gpudock through its API -----------------------------------------------------------
def parse_time(value: str) -> float:
    """An API timestamp as a Unix time (the API always sends UTC offsets)."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


class Api:
    def __init__(
        self,
        url: str,
        token: str,
        poll_interval_s: float = POLL_INTERVAL_S,
        follow: bool = False,
    ) -> None:
        """`follow`: wait on GET /instances/{id}/wait (answered at the change, as the
        CLI's --wait does) instead of a GET every `poll_interval_s`."""
        self.poll_interval_s, self.follow = poll_interval_s, follow
        self._http = httpx.Client(
            base_url=url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30.0,
        )

    def close(self) -> None:
        self._http.close()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=body)
        if response.status_code >= 400:
            raise BenchError(f"{method} {path}: HTTP {response.status_code}: {response.text}")
        return response.json()

    def wait_for(self, instance_id: str, wanted: str, deadline_s: float) -> dict[str, Any]:
        """GET the instance every poll interval until it is `wanted`; fail loudly."""
        deadline = time.perf_counter() + deadline_s
        while True:
            left = max(0.0, min(25.0, deadline - time.perf_counter()))
            path = (
                f"/instances/{instance_id}/wait?status={wanted}&timeout_s={left:.3f}"
                if self.follow
                else f"/instances/{instance_id}"
            )
            instance: dict[str, Any] = self.call("GET", path)
            if instance["status"] == wanted:
                return instance
            if instance["status"] == "failed" and wanted != "failed":
                raise BenchError(f"instance {instance_id} failed: {instance['status_reason']}")
            if time.perf_counter() > deadline:
                raise BenchError(
                    f"instance {instance_id} not {wanted} within {deadline_s:g} s: "
                    f"{instance['status']} ({instance['status_reason']})"
                )
            if not self.follow:
                time.sleep(self.poll_interval_s)


def make_user(server: Server, poll_interval_s: float, follow: bool = False) -> Api:
    admin_token = (server.data_dir / "admin.token").read_text().strip()
    admin = Api(server.url, admin_token)
    try:
        user = admin.call("POST", "/users", {"name": f"bench-{secrets.token_hex(3)}"})
    finally:
        admin.close()
    return Api(server.url, user["token"], poll_interval_s, follow)


@dataclass
class GpudockSample:
    seconds: float
    phases: dict[str, float]


def measure_gpudock(api: Api, created: list[str]) -> GpudockSample:
    wall0 = time.time()
    t0 = time.perf_counter()
    instance = api.call("POST", "/instances", {"gpu_model": GPU_MODEL, "gpu_count": 1})
    created.append(instance["id"])
    api.wait_for(instance["id"], "running", RUNNING_DEADLINE_S)
    t1 = time.perf_counter()
    wall1 = wall0 + (t1 - t0)
    events = api.call("GET", f"/instances/{instance['id']}/events")
    return GpudockSample(seconds=t1 - t0, phases=phases_of(events, wall0, wall1))


def phases_of(events: list[dict[str, Any]], wall0: float, wall1: float) -> dict[str, float]:
    """Split wall0 → wall1 at the first 'pending', 'creating' and 'running' events."""
    first: dict[str, float] = {}
    for event in events:
        first.setdefault(event["to_status"], parse_time(event["at"]))
    marks = [wall0, first.get("pending"), first.get("creating"), first.get("running"), wall1]
    if any(mark is None for mark in marks):
        return {}
    points = [m for m in marks if m is not None]
    return {name: points[i + 1] - points[i] for i, name in enumerate(PHASES)}


def delete_instances(api: Api, instance_ids: list[str]) -> None:
    for instance_id in instance_ids:
        api.call("DELETE", f"/instances/{instance_id}")
    for instance_id in instance_ids:
        api.wait_for(instance_id, "deleted", DELETED_DEADLINE_S)


# -- Docker's own leftovers -----------------------------------------------------------
def sweep_gpudock_leftovers(client: Any, instance_ids: list[str]) -> int:
    """After the server stopped: remove containers and volumes of our instances
    that the API's delete left behind (none, when all went well)."""
    removed = 0
    for instance_id in instance_ids:
        label = {"label": f"gpudock.instance={instance_id}"}
        for container in client.api.containers(all=True, filters=label):
            client.api.remove_container(container["Id"], force=True)
            removed += 1
        for volume in client.api.volumes(filters=label).get("Volumes") or []:
            client.api.remove_volume(volume["Name"], force=True)
            removed += 1
    return removed


# -- the run -------------------------------------------------------------------------
@dataclass
class Results:
    count: int
    warmup: int
    delete_each: bool
    poll_interval_s: float
    follow: bool = False
    load_before: float = field(default_factory=lambda: os.getloadavg()[0])
    load_after: float = math.nan
    seconds: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SERIES})
    phases: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})


def measure_baseline(series: str, hardened: Hardened, delete_each: bool) -> float:
    bare = hardened.bare
    if series == "hardened":
        seconds, name = hardened.measure()
    elif series == "bare-cli":
        seconds, name = bare.measure_cli()
    else:
        seconds, name = bare.measure_sdk()
    if delete_each:
        hardened.remove(name) if series == "hardened" else bare.remove(name)
    return seconds


def run_rounds(
    api: Api, hardened: Hardened, results: Results, created: list[str], log: Callable[[str], None]
) -> None:
    for round_no in range(results.warmup + results.count):
        recorded = round_no >= results.warmup
        shift = round_no % len(SERIES)
        for series in SERIES[shift:] + SERIES[:shift]:
            if series == "gpudock":
                sample = measure_gpudock(api, created)
                seconds = sample.seconds
                if recorded:
                    for phase, value in sample.phases.items():
                        results.phases[phase].append(value)
                if results.delete_each:
                    delete_instances(api, [created[-1]])
            else:
                seconds = measure_baseline(series, hardened, results.delete_each)
            if recorded:
                results.seconds[series].append(seconds)
        results.load_after = os.getloadavg()[0]
        tag = "warm-up" if not recorded else f"{round_no - results.warmup + 1}/{results.count}"
        log(f"round {tag} done")


def hardening_of_gpudock(api: Api, client: Any, created: list[str]) -> Hardening:
    """What gpudock asked of the engine for one instance (made, not measured)."""
    measure_gpudock(api, created)
    disk_gb = api.call("GET", f"/instances/{created[-1]}")["disk_gb"]
    if disk_gb != DISK_GB:
        raise BenchError(f"the server's default disk is {disk_gb} GB, the hardened run's {DISK_GB}")
    label = {"label": f"gpudock.instance={created[-1]}"}
    found = client.api.containers(all=True, filters=label)
    if not found:
        raise BenchError(f"no container carries the label gpudock.instance={created[-1]}")
    return Hardening.of(client.api.inspect_container(found[0]["Id"]))


def report(results: Results) -> dict[str, Any]:
    stats = {name: summary(values) for name, values in results.seconds.items()}
    gpudock = stats["gpudock"]
    ratios = {
        f"p50_gpudock/p50_{baseline}": gpudock["p50"] / stats[baseline]["p50"]
        for baseline in BASELINES
    }
    targets = {
        f"p50 <= {limit:g} x {baseline}": ratios[f"p50_gpudock/p50_{baseline}"] <= limit
        for baseline, limit in TARGET_P50_RATIOS.items()
    }
    targets[f"p99 <= {TARGET_P99_S:g} s"] = gpudock["p99"] <= TARGET_P99_S
    return {
        "benchmark": "start_latency",
        "count": results.count,
        "warmup_rounds": results.warmup,
        "delete_each": results.delete_each,
        "image": IMAGE,
        "fleet": FLEET,
        "disk_gb": DISK_GB,
        "poll_interval_s": results.poll_interval_s,
        "client_waits": "GET /instances/{id}/wait" if results.follow else "polls",
        "reconcile_interval_s": float(RECONCILE_INTERVAL_S),
        "loadavg_1m": {"before": results.load_before, "after": results.load_after},
        "seconds": stats,
        "ratios": ratios,
        "targets_met": targets,
        "gpudock_phases_seconds": {p: summary(v) for p, v in results.phases.items()},
        "samples_seconds": results.seconds,
    }


def print_table(data: dict[str, Any]) -> None:
    def ms(value: float) -> str:
        return f"{value * 1000:8.0f}"

    print(
        f"start latency, create → running: {data['count']} per series "
        f"(+{data['warmup_rounds']} warm-up round), times in ms"
    )
    load = data["loadavg_1m"]
    print(
        (
            "the client waits on GET /instances/{id}/wait"
            if data["client_waits"] != "polls"
            else f"poll every {data['poll_interval_s'] * 1000:g} ms"
        )
        + "; 1-minute load average "
        f"{load['before']:.2f} before, {load['after']:.2f} after"
    )
    print(f"{'series':<10} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for name, stats in data["seconds"].items():
        print(f"{name:<10} " + " ".join(ms(stats[k]) for k in ("p50", "p90", "p99", "max")))
    for name, ratio in data["ratios"].items():
        print(f"{name}: {ratio:.2f}")
    for name, met in data["targets_met"].items():
        print(f"target {name}: {'met' if met else 'MISSED'}")
    print("gpudock phases (ms):")
    print(f"{'phase':<10} {'p50':>8} {'p90':>8} {'max':>8}")
    for phase, stats in data["gpudock_phases_seconds"].items():
        values = " ".join(ms(stats[k]) for k in ("p50", "p90", "max"))
        print(f"{phase:<10} {values}   {PHASE_HELP[phase]}")


def benchmark(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    client = docker.from_env()
    client.images.get(IMAGE)  # fails now, not mid-run, if the image is missing
    results = Results(
        count=args.count,
        warmup=args.warmup,
        delete_each=args.delete_each,
        poll_interval_s=args.poll_ms / 1000,
        follow=args.follow,
    )
    created: list[str] = []
    tmp = tempfile.TemporaryDirectory(prefix="gpudock-bench-")
    log_path = Path(tmp.name) / "server.log"
    hardened_dir = Path(tmp.name) / "hardened"
    hardened_dir.mkdir()
    bare = Bare(client=client, image=IMAGE)
    hardened = Hardened(bare, Hardening(()), DISK_GB, hardened_dir)
    try:
        with running_server(Path(tmp.name) / "data", log_path) as server:
            log(f"server up at {server.url}")
            api = make_user(server, args.poll_ms / 1000, args.follow)
            try:
                hardened.hardening = hardening_of_gpudock(api, client, created)
                if args.delete_each:
                    delete_instances(api, created)
                log(f"hardened runs: {' '.join(hardened.hardening.flags)}")
                hardened.make_network()
                run_rounds(api, hardened, results, created, log)
                alive = [] if args.delete_each else created
                log(f"deleting {len(alive)} gpudock instances")
                delete_instances(api, alive)
            finally:
                api.close()
    finally:
        removed = bare.remove_all()
        hardened.remove_all()
        leftovers = sweep_gpudock_leftovers(client, created)
        log(f"removed {removed} bare containers; swept {leftovers} gpudock leftovers")
        client.close()
        if args.keep_log and log_path.exists():
            Path(args.keep_log).write_bytes(log_path.read_bytes())
        tmp.cleanup()
    return report(results)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=20, help="measured rounds (default 20)")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded rounds first (default 1)")
    parser.add_argument(
        "--delete-each",
        action="store_true",
        help="delete each instance/container right after measuring it (default: keep all "
        "running until the end)",
    )
    parser.add_argument(
        "--poll-ms",
        type=float,
        default=POLL_INTERVAL_S * 1000,
        help="GET interval while waiting for 'running' (default 10 ms)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="wait on GET /instances/{id}/wait, answered at the change (as `gpudock create "
        "--wait` does), instead of polling",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep-log", metavar="PATH", help="copy the server's log here")
    args = parser.parse_args(argv)
    if args.count < 1 or args.warmup < 0 or args.poll_ms <= 0:
        parser.error("--count must be ≥ 1, --warmup ≥ 0 and --poll-ms > 0")
    if not args.delete_each and args.count + args.warmup + 1 > FLEET_GPUS:
        parser.error(
            f"{args.count + args.warmup} instances and the hardening probe do not fit on "
            f"{FLEET_GPUS} GPUs at once: lower --count or use --delete-each"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def log(message: str) -> None:
        print(f"[start_latency] {message}", file=sys.stderr, flush=True)

    try:
        data = benchmark(args, log)
    except (BenchError, httpx.HTTPError, docker.errors.DockerException, OSError) as exc:
        print(f"start_latency: FAILED: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print_table(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
