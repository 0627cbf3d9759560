"""`gpudock server`: start to the first 200 from /healthz (live) and from
/readyz (everything loaded), against bare Python starts measured in the same run.

    nice .venv/bin/python -m bench.server_start [--runs 5] [--imports 12]
        [--before-src DIR]   # e.g. `git archive main src | tar -x -C DIR`

Each round starts, in turn: `gpudock server` on the simulated fleet (SSH
gateway on a free port), polling /healthz every 10 ms until its first 200,
then /readyz likewise (a server without /readyz is ready when live); the same
from `--before-src` if given (PYTHONPATH, same interpreter and packages);
`python -c 'import fastapi, uvicorn'` (the floor of any FastAPI server); and a
one-route uvicorn app to its first 200. Taking them in turn keeps a changing
load from favouring one. Round 1 is a fresh data dir (the schema is made), the
others restart on it (the steady case: a migrated database); ratios are the
medians of each restart round's own ratio. Then `python -X importtime` of what
the server imports before it is ready, the slowest cumulative entries first.
Target: ≤ 1 s to the first /healthz 200 on an idle machine.
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
# What the server imports before it is ready; before it is live, only up to gpudock.platform.
SERVER_IMPORTS = (
    "import uvicorn, gpudock.api.staged, gpudock.platform, gpudock.api.app, gpudock.sshgw.gateway"
)


def times_to_first_200(
    command: list[str], port: int, env: dict[str, str], paths: tuple[str, ...] = ("/healthz",)
) -> list[float]:
    """Seconds from the process's start to the first 200 of each path, in turn;
    a path answered 404 (a server without it) counts as reached with the one before."""
    began = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    times = []
    try:
        for path in paths:
            while (status := status_of(port, path)) not in (200, 404):
                if process.poll() is not None:
                    raise RuntimeError(f"{command[0]} exited with {process.returncode}")
                time.sleep(0.01)
            times.append(times[-1] if status == 404 else time.perf_counter() - began)
        return times
    finally:
        process.kill()
        process.wait()


def status_of(port: int, path: str) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1).status_code
    except httpx.HTTPError:
        return None


def time_command(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - began


def server_start(data_dir: Path, src: Path | None = None) -> list[float]:
    """[live, ready] seconds of one `gpudock server` start (from `src` if given)."""
    env = {**os.environ, "GPUDOCK_SSH_PORT": "0", "GPUDOCK_IMAGE_PULL": "never"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    port = free_port()
    command = [GPUDOCK, "server", "--data-dir", str(data_dir), "--port", str(port)]
    command += ["--simulate", "1x4xA100-80GB"]
    return times_to_first_200(command, port, env, ("/healthz", "/readyz"))


def one_round(data: Path, before_src: Path | None) -> dict[str, float]:
    times: dict[str, float] = {}
    times["live"], times["ready"] = server_start(data / "ours")
    if before_src is not None:
        times["before live"], times["before ready"] = server_start(data / "before", before_src)
    times["import"] = time_command([sys.executable, "-c", "import fastapi, uvicorn"])
    port = free_port()
    command = [sys.executable, "-c", ONE_ROUTE_APP, str(port)]
    (times["one-route"],) = times_to_first_200(command, port, dict(os.environ))
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


def report(rounds: list[dict[str, float]]) -> None:
    first, restarts = rounds[0], rounds[1:] or rounds
    for name in first:
        if name in ("import", "one-route"):
            values = [r[name] for r in rounds]
            print(f"{name:22} all rounds  median {statistics.median(values):5.2f} s")
            continue
        shown = " ".join(f"{r[name]:.2f}" for r in restarts)
        print(
            f"{name:22} first {first[name]:5.2f} s  restarts median "
            f"{statistics.median(r[name] for r in restarts):5.2f} s  ({shown})"
        )
    for name in (n for n in first if n not in ("import", "one-route")):
        for base in ("import", "one-route"):
            ratio = statistics.median(r[name] / r[base] for r in restarts)
            print(f"restart {name} / {base}: {ratio:.2f}")
    if "before ready" in first:
        ratio = statistics.median(r["ready"] / r["before ready"] for r in restarts)
        print(f"restart ready / before ready: {ratio:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--imports", type=int, default=12)
    parser.add_argument("--before-src", type=Path, help="a src/ tree of another version")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="gpudock-start-") as tmp:
        rounds = [one_round(Path(tmp), args.before_src) for _ in range(args.runs)]
    report(rounds)
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("slowest imports (cumulative s):")
    for seconds, name in slowest_imports(args.imports):
        print(f"  {seconds:6.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
