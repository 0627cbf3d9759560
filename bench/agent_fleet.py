"""Control-plane cost per agent host: CPU and memory of a real `gpudock server`
with no agents (the baseline), with 3 real agents on netns test hosts, and with
100 simulated agents, at a short and at the default heartbeat.

    nice .venv/bin/python -m bench.agent_fleet [--window-s 30] [--sim-hosts 100]
        [--heartbeats 0.3,5] [--no-netns]          # root, iproute2, nsenter, Docker

For each heartbeat interval a server is started (simulated local fleet, SQLite in
a temp data dir, the agent link on 127.0.0.1, the reconcile and health intervals
at their defaults) and measured over a window with no agent: CPU seconds per
minute from /proc/PID/stat (utime + stime of it and its live descendants) and
RSS at the window's end. Then one child process (`simulate` below) adds
`--sim-hosts` hosts through the API, redeems their join tokens with the real
`Agent` link code (each its own key and state dir, a `FakeRuntime` engine, a
fake NVML with a GPU of its own, a fence), and the server is measured again
once every link is up; the child times each heartbeat to its acknowledgement.
Then, unless `--no-netns`, a second server with its link on the netns fleet's
bridge enrolls 3 real `gpudock agent` processes, one per test host, each beside
its own dockerd, through `gpudock hosts add` and the join command; the server
and each agent are measured over the same window. Per-host figures are
(with N - baseline) / N against the baseline of the same heartbeat. First, in
process, `bench.heartbeat_writes`: the statements and CPU of one heartbeat.

Traffic goes only to 127.0.0.1 and to the fleet's own veth addresses; the fleet's
teardown removes its namespaces, engines and agents.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from tests.support.server_process import API, ServerProcess

from bench import heartbeat_writes
from gpudock.settings import Settings

if TYPE_CHECKING:
    from tests.support.fleet_netns import NetnsFleet

CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_TIMEOUT_S = 300.0  # 100 enrollments on a loaded 2-core machine
SETTLE_S = 5.0  # after the last link is up, before a window opens
SIM_PREFIX = "sim-"
REAL_HOSTS = ("a", "b", "c")


# -- reading a process ---------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants."""
    children, found, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def rss_mib(pids: list[int]) -> float:
    total_kib = 0
    for pid in pids:
        with contextlib.suppress(OSError, StopIteration):
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            total_kib += int(next(line for line in status if line.startswith("VmRSS:")).split()[1])
    return total_kib / 1024


@dataclass(frozen=True)
class Usage:
    cpu_s_per_min: float
    rss_mib: float


def measure(pids: dict[str, int], window_s: float) -> dict[str, Usage]:
    """CPU per minute of each named process tree over one shared window (a
    measurement interval, not a wait for anything), and its RSS at the end."""
    trees = {name: process_tree(pid) for name, pid in pids.items()}
    before = {name: cpu_seconds(tree) for name, tree in trees.items()}
    began = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - began
    trees = {name: process_tree(pid) for name, pid in pids.items()}
    return {
        name: Usage((cpu_seconds(tree) - before[name]) * 60 / elapsed, rss_mib(tree))
        for name, tree in trees.items()
    }


# -- the server ----------------------------------------------------------------------------


def start_server(data_dir: Path, heartbeat_s: float, link_host: str) -> ServerProcess:
    defaults = Settings.model_fields
    server = ServerProcess(
        data_dir,
        simulate="1x1xA100-80GB",
        env={
            # The test harness's fast loops would be most of the baseline: use the defaults.
            "GPUDOCK_RECONCILE_INTERVAL_S": str(defaults["reconcile_interval_s"].default),
            "GPUDOCK_HEALTH_CHECK_INTERVAL_S": str(defaults["health_check_interval_s"].default),
            "GPUDOCK_AGENT_LINK_HOST": link_host,
            "GPUDOCK_AGENT_LINK_PORT": "0",
            "GPUDOCK_AGENT_HEARTBEAT_S": str(heartbeat_s),
        },
        healthy_timeout_s=120.0,
    )
    server.start()
    return server


def link_states(server: ServerProcess) -> dict[str, str]:
    with server.client() as admin:
        listed = admin.get("/agent-hosts")
        listed.raise_for_status()
        return {host["name"]: host["link_state"] for host in listed.json()}


def wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float = READY_TIMEOUT_S
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


# -- scenarios -----------------------------------------------------------------------------


@dataclass
class SimResult:
    baseline: Usage
    server: Usage
    agents: Usage  # the one child process holding every simulated agent
    hosts: int
    enroll_s: float
    rtt_ms: list[float]


@dataclass
class RealResult:
    server: Usage
    agents: dict[str, Usage]


def run_simulated(workdir: Path, heartbeat_s: float, hosts: int, window_s: float) -> SimResult:
    server = start_server(workdir / "server", heartbeat_s, "127.0.0.1")
    assert server.process is not None
    child: subprocess.Popen[bytes] | None = None
    try:
        baseline = measure({"server": server.process.pid}, window_s)["server"]
        report = workdir / "sim-report.json"
        command = [sys.executable, "-m", "bench.agent_fleet", "simulate", "--url", server.url]
        command += ["--hosts", str(hosts), "--workdir", str(workdir / "agents")]
        command += ["--report", str(report)]
        env = {**os.environ, "GPUDOCK_TOKEN": server.admin_token()}
        with (workdir / "sim.log").open("wb") as log:
            child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        enrolled = workdir / "agents" / "enrolled.json"
        wait_until(lambda: enrolled.exists() or child.poll() is not None, "the simulated agents")
        if child.poll() is not None:
            raise RuntimeError(f"simulated agents exited:\n{(workdir / 'sim.log').read_text()}")
        up = [state for name, state in link_states(server).items() if name.startswith(SIM_PREFIX)]
        assert up.count("up") == hosts, f"{up.count('up')} of {hosts} links up"
        time.sleep(SETTLE_S)  # enrollment's own work (placement woken per host) dies down
        window_began = time.time()
        usage = measure({"server": server.process.pid, "agents": child.pid}, window_s)
        stop(child)
        data = json.loads(report.read_text())
        return SimResult(
            baseline=baseline,
            server=usage["server"],
            agents=usage["agents"],
            hosts=hosts,
            enroll_s=json.loads(enrolled.read_text())["enroll_s"],
            rtt_ms=[rtt * 1000 for at, rtt in data["rtts"] if at >= window_began],
        )
    finally:
        if child is not None:
            stop(child)
        server.kill()


def run_real(workdir: Path, heartbeats: list[float], window_s: float) -> dict[float, RealResult]:
    from tests.support.agent_cluster import fake_gpus
    from tests.support.fleet_netns import leftovers, netns_fleet

    with netns_fleet(workdir, direct=REAL_HOSTS, natted=None) as fleet:
        for name in REAL_HOSTS:
            gpus = fake_gpus("H200", 1, 140)
            (workdir / f"nvml-{name}.json").write_text(json.dumps({"gpus": gpus}))
        results = {beat: _one_real(fleet, workdir, beat, window_s) for beat in heartbeats}
    left = leftovers(fleet)
    if left:
        raise RuntimeError(f"the netns fleet left {left}")
    return results


def _one_real(fleet: NetnsFleet, workdir: Path, heartbeat_s: float, window_s: float) -> RealResult:
    """A server on the fleet's bridge and one `gpudock agent` per host, joined
    through `gpudock hosts add`; stopped again after the window."""
    from tests.support.agent_cluster import Cluster

    server = start_server(workdir / f"server-{heartbeat_s}", heartbeat_s, fleet.server_address)
    assert server.process is not None
    cluster = Cluster(fleet, server, workdir)
    agents: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in REAL_HOSTS:
            words = cluster.add(name)
            host = fleet.hosts[name]
            agents[name] = cluster.agent(host, "join", *words[3:5], tag=f"-{heartbeat_s}")
        wait_until(
            lambda: list(link_states(server).values()).count("up") == len(REAL_HOSTS),
            "the real agents' links",
        )
        time.sleep(SETTLE_S)
        pids = {"server": server.process.pid}
        pids |= {f"agent {name}": agent.pid for name, agent in agents.items()}
        usage = measure(pids, window_s)
        return RealResult(usage.pop("server"), usage)
    finally:
        for agent in agents.values():
            stop(agent)
        server.kill()


# -- the simulated agents' process ---------------------------------------------------------


def simulate(url: str, hosts: int, workdir: Path, report: Path) -> None:
    """Add `hosts` hosts through the API, join an agent to each, all on one event
    loop; write `enrolled.json` once every agent is welcomed, and on SIGTERM every
    heartbeat's round trip as (wall time, seconds)."""
    headers = {"Authorization": f"Bearer {os.environ['GPUDOCK_TOKEN']}"}
    commands = []
    with httpx.Client(base_url=url + API, headers=headers, timeout=60) as admin:
        for index in range(hosts):
            added = admin.post("/agent-hosts", json={"name": f"{SIM_PREFIX}{index:03d}"})
            added.raise_for_status()
            commands.append(added.json()["join_command"])
    rtts: list[tuple[float, float]] = []
    _time_heartbeats(rtts)
    asyncio.run(_run_agents(commands, workdir, rtts))
    report.write_text(json.dumps({"rtts": rtts}))


async def _run_agents(commands: list[str], workdir: Path, rtts: list[tuple[float, float]]) -> None:
    from tests.gpu.fake_pynvml import MIB, FakeGpu, FakeNvml, fake_uuid
    from tests.support.agents import join_parts

    from gpudock.agent.fencing import Fence
    from gpudock.agent.inventory import HostInventory
    from gpudock.agent.link import Agent
    from gpudock.gpu.nvml import NvmlGpuSource
    from gpudock.runtime.fake import FakeRuntime

    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    began, welcomed = time.monotonic(), set()

    def on_welcome(name: str) -> None:
        welcomed.add(name)
        if len(welcomed) == len(commands):
            enroll_s = time.monotonic() - began
            (workdir / "enrolled.json").write_text(json.dumps({"enroll_s": enroll_s}))

    tasks = []
    for index, command in enumerate(commands):
        gpu = FakeGpu(
            name="NVIDIA H200",
            uuid=fake_uuid(0x5100, index),
            memory_total=143771 * MIB,
            bus_id="00000000:1B:00.0",
        )
        runtime = FakeRuntime()
        inventory = HostInventory(NvmlGpuSource(nvml=FakeNvml([gpu])), runtime)
        state_dir = workdir / f"agent-{index:03d}"
        state_dir.mkdir(parents=True)
        agent = Agent.joining(state_dir, inventory, *join_parts(command))
        agent.fence, agent.on_welcome = Fence(runtime), on_welcome
        tasks.append(asyncio.ensure_future(agent.run()))
    await stopping.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _time_heartbeats(rtts: list[tuple[float, float]]) -> None:
    """Time each heartbeat from its send to its acknowledgement, per SSH channel
    (a bench-only wrapper around the link's message functions, in this process)."""
    from gpudock.link import wire

    sent: dict[int, float] = {}
    send, receive = wire.send, wire.receive

    async def timed_send(writer: Any, message: Any) -> None:
        if isinstance(message, wire.Heartbeat):
            sent[id(writer.channel)] = time.perf_counter()
        await send(writer, message)

    async def timed_receive(reader: Any, timeout_s: float | None = None) -> Any:
        message = await receive(reader, timeout_s)
        if isinstance(message, wire.Ack):
            began = sent.pop(id(reader.channel), None)
            if began is not None:
                rtts.append((time.time(), time.perf_counter() - began))
        return message

    wire.send, wire.receive = timed_send, timed_receive  # type: ignore[assignment]


# -- the report ----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def print_report(
    heartbeat_s: float, sim: SimResult, real: RealResult | None, window_s: float
) -> None:
    base = sim.baseline
    print(f"\n## heartbeat every {heartbeat_s:g} s (window {window_s:g} s)")
    print(f"{'case':<34} {'CPU s/min':>10} {'RSS MiB':>9} {'CPU x base':>11}")
    rows: list[tuple[str, Usage]] = [("server, no agents (baseline)", base)]
    if real is not None:
        rows.append((f"server, {len(real.agents)} real agents", real.server))
        rows += [(f"  {name} (own process)", use) for name, use in real.agents.items()]
    rows.append((f"server, {sim.hosts} simulated agents", sim.server))
    rows.append((f"  {sim.hosts} simulated agents (1 process)", sim.agents))
    for label, use in rows:
        ratio = use.cpu_s_per_min / base.cpu_s_per_min if base.cpu_s_per_min else float("nan")
        print(f"{label:<34} {use.cpu_s_per_min:>10.3f} {use.rss_mib:>9.1f} {ratio:>10.2f}x")
    per_host_cpu = (sim.server.cpu_s_per_min - base.cpu_s_per_min) / sim.hosts
    per_host_rss = (sim.server.rss_mib - base.rss_mib) / sim.hosts
    print(
        f"per host (simulated): server {per_host_cpu * 1000:.1f} ms CPU/min, "
        f"{per_host_rss * 1024:.0f} KiB RSS"
    )
    if real is not None:
        n = len(real.agents)
        real_cpu = (real.server.cpu_s_per_min - base.cpu_s_per_min) / n
        real_rss = (real.server.rss_mib - base.rss_mib) / n
        agent_cpu = statistics.mean(use.cpu_s_per_min for use in real.agents.values())
        agent_rss = statistics.mean(use.rss_mib for use in real.agents.values())
        print(
            f"per host (real, n={n}): server {real_cpu * 1000:.1f} ms CPU/min, "
            f"{real_rss * 1024:.0f} KiB RSS; agent {agent_cpu:.3f} s CPU/min, {agent_rss:.1f} MiB"
        )
    print(
        f"enroll {sim.hosts} simulated agents: {sim.enroll_s:.1f} s; heartbeat round trip "
        f"p50 {percentile(sim.rtt_ms, 0.5):.1f} ms, p99 {percentile(sim.rtt_ms, 0.99):.1f} ms "
        f"({len(sim.rtt_ms)} beats, {len(sim.rtt_ms) / window_s:.1f}/s)"
    )
    beats_per_s = len(sim.rtt_ms) / window_s
    extra_cpu_s_per_s = (sim.server.cpu_s_per_min - base.cpu_s_per_min) / 60
    per_beat_ms = extra_cpu_s_per_s / beats_per_s * 1000 if beats_per_s else float("nan")
    print(
        f"server CPU per heartbeat {per_beat_ms:.1f} ms; at 1,000 hosts: "
        f"{1000 / heartbeat_s:.0f} heartbeat write transactions/s, "
        f"{1000 / heartbeat_s * per_beat_ms / 1000:.2f} cores of server CPU"
    )


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--sim-hosts", type=int, default=100)
    parser.add_argument("--heartbeats", default="0.3,5", help="seconds, comma separated")
    parser.add_argument("--no-netns", action="store_true", help="skip the 3 real agents")
    args = parser.parse_args(argv)
    heartbeats = [float(value) for value in args.heartbeats.split(",")]
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load {load_average()}")
    with _workdir() as workdir:
        costs = heartbeat_writes.measure(workdir / "writes", [1, 8], beats=300)
        sims = {
            heartbeat_s: run_simulated(
                workdir / f"sim-{heartbeat_s}", heartbeat_s, args.sim_hosts, args.window_s
            )
            for heartbeat_s in heartbeats
        }
        reals = {} if args.no_netns else run_real(workdir / "real", heartbeats, args.window_s)
    heartbeat_writes.print_costs(costs)
    for heartbeat_s in heartbeats:
        print_report(heartbeat_s, sims[heartbeat_s], reals.get(heartbeat_s), args.window_s)
    print(f"\nload at the end: {load_average()}")


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gpudock-agent-fleet-") as name:
        yield Path(name)


def _simulate_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench.agent_fleet simulate")
    parser.add_argument("--url", required=True)
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    simulate(args.url, args.hosts, args.workdir, args.report)


if __name__ == "__main__":
    if sys.argv[1:2] == ["simulate"]:
        _simulate_main(sys.argv[2:])
    else:
        main()
