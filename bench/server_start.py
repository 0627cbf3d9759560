"""`gpudock server`: start to the first 200 from /healthz, against bare Python
starts measured in the same run.

    nice .venv/bin/python -m bench.server_start [--runs 5] [--imports 12]

Each run starts `gpudock server` on the simulated fleet with the SSH gateway
on a free port, polls /healthz every 10 ms and kills the server at the first
200; run 1 is a fresh data dir (the schema is made), the others restart on it
(the steady case: a migrated database). Baselines, each as many times:
`python -c 'import fastapi, uvicorn'` (the floor of any FastAPI server) and a
one-route uvicorn app started to its first 200. Then `python -X importtime`
of what the server imports before it can answer, the slowest cumulative
entries first. Target: ≤ 1 s to the first 200 on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from tests.support.server_process import free_port

BIN = Path(sys.executable).parent
GPUDOCK = str(BIN / "gpudock")
ONE_ROUTE_APP = """
import sys, fastapi, uvicorn
app = fastapi.FastAPI()
app.get("/healthz")(lambda: {"status": "ok"})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
SERVER_IMPORTS = "import uvicorn, gpudock.platform, gpudock.api.app, gpudock.sshgw.gateway"


def time_to_first_200(command: list[str], port: int, env: dict[str, str]) -> float:
    began = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited with {process.returncode}")
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                if response.status_code == 200:
                    return time.perf_counter() - began
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
    finally:
        process.kill()
        process.wait()


def time_command(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - began


def server_runs(data_dir: Path, runs: int) -> list[float]:
    env = {**os.environ, "GPUDOCK_SSH_PORT": "0", "GPUDOCK_IMAGE_PULL": "never"}
    times = []
    for _ in range(runs):
        port = free_port()
        command = [GPUDOCK, "server", "--data-dir", str(data_dir), "--port", str(port)]
        times.append(time_to_first_200([*command, "--simulate", "1x4xA100-80GB"], port, env))
    return times


def slowest_imports(count: int) -> list[tuple[float, str]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", SERVER_IMPORTS],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if found:
            rows.append((int(found.group(1)) / 1e6, f"{found.group(2)[1:]}{found.group(3)}"))
    return sorted(rows, reverse=True)[:count]


def summary(name: str, values: list[float]) -> str:
    shown = " ".join(f"{v:.2f}" for v in values)
    return f"{name:34} median {statistics.median(values):5.2f} s  ({shown})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--imports", type=int, default=12)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="gpudock-start-") as tmp:
        server = server_runs(Path(tmp) / "data", args.runs)
    imports = [
        time_command([sys.executable, "-c", "import fastapi, uvicorn"]) for _ in range(args.runs)
    ]
    bare = []
    for _ in range(args.runs):
        port = free_port()
        bare.append(
            time_to_first_200(
                [sys.executable, "-c", ONE_ROUTE_APP, str(port)], port, dict(os.environ)
            )
        )
    print(summary("gpudock server, first start", server[:1]))
    print(summary("gpudock server, restarts", server[1:] or server))
    print(summary("python -c 'import fastapi, uvicorn'", imports))
    print(summary("one-route uvicorn app", bare))
    steady = statistics.median(server[1:] or server)
    print(
        f"restart / bare import: {steady / statistics.median(imports):.2f}; "
        f"restart / one-route app: {steady / statistics.median(bare):.2f}"
    )
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("slowest imports (cumulative s):")
    for seconds, name in slowest_imports(args.imports):
        print(f"  {seconds:6.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
