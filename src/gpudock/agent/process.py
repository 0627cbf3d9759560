"""The agent process: its engine and GPU source, and the link kept until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from gpudock.agent.fencing import Fence
from gpudock.agent.health import HealthJournal, HealthWatcher
from gpudock.agent.inventory import HostInventory
from gpudock.agent.link import Agent
from gpudock.agent.state import load_enrollment
from gpudock.errors import InvalidRequest


def open_inventory(docker_host: str) -> HostInventory:
    """The host's Docker Engine (its Unix socket only: the Engine API is never put on
    the network) and its GPUs through NVML."""
    if not docker_host.startswith("unix://"):
        raise InvalidRequest(
            f"the agent talks to its engine through a Unix socket only, not {docker_host!r}: "
            "pass --docker-host unix:///PATH (default: the engine's own socket)",
            field="docker_host",
        )
    from gpudock.gpu.nvml import NvmlGpuSource
    from gpudock.runtime.docker import DockerRuntime

    runtime = DockerRuntime(docker_host, timeout_s=30.0, pool_size=4, host_firewall=False)
    return HostInventory(NvmlGpuSource(), runtime)


def join(
    state_dir: Path, url: str, token: str, docker_host: str, lease_s: float | None = None
) -> None:
    """Enroll with the server at `url`, then keep the link (as `run` does).
    `lease_s`: how long tenants keep running cut off from the server (None: as
    the server says)."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    inventory = open_inventory(docker_host)
    agent = Agent.joining(state_dir, inventory, url, token)
    _serve(_equipped(agent, lease_s))


def run(state_dir: Path, docker_host: str, lease_s: float | None = None) -> None:
    inventory = open_inventory(docker_host)
    agent = Agent.enrolled(state_dir, inventory, load_enrollment(state_dir))
    _serve(_equipped(agent, lease_s))


def _equipped(agent: Agent, lease_s: float | None) -> Agent:
    """The fence on its lease, and the health watcher on its NVML and journal."""
    agent.fence = Fence(agent.inventory.runtime, lease_s)
    journal = HealthJournal(agent.state_dir)
    agent.health = HealthWatcher(agent.inventory.gpu_source, journal)
    return agent


def _serve(agent: Agent) -> None:
    """Run the link until SIGTERM or SIGINT (returns) or a refusal (`AgentStopped`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gpudock-agent %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # a line per packet kind at INFO

    async def until_signalled() -> None:
        loop = asyncio.get_running_loop()
        linked = loop.create_task(agent.run())
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, linked.cancel)
        try:
            await linked
        except asyncio.CancelledError:
            logging.getLogger(__name__).info("stopped by a signal")

    asyncio.run(until_signalled())
