"""The agent link in one test process: the server's gateway and agents on one event
loop in a thread, over real TCP on 127.0.0.1, with real keys and a real database.

Agents here report a fake NVML (`tests.gpu.fake_pynvml`) through the real NVML
code and run the server's runtime calls on an engine of their own (a
`FakeRuntime` unless the test gives one: `runtimes[name]`); the netns fleet
(`fleet_netns.py`) runs them as processes on hosts of their own instead.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from gpudock.agent.fencing import Fence
from gpudock.agent.health import HealthJournal, HealthWatcher
from gpudock.agent.inventory import HostInventory
from gpudock.agent.link import Agent
from gpudock.agent.state import load_enrollment
from gpudock.agentgw.gateway import AgentGateway
from gpudock.errors import RuntimeFailure
from gpudock.gpu.nvml import NvmlGpuSource
from gpudock.platform import Platform
from gpudock.runtime.base import Runtime
from gpudock.runtime.fake import FakeRuntime
from tests.gpu.fake_pynvml import FakeNvml, h200_1x
from tests.support.sshgw import GatewayThread

T = TypeVar("T")


class LinkRig:
    """`start()` the platform's gateway; `join()`/`rerun()` agents; `stop()` all."""

    def __init__(self, platform: Platform, workdir: Path) -> None:
        self.platform = platform
        self.gateway = AgentGateway(platform.ctx)
        self.workdir = workdir
        self._thread = GatewayThread(self.gateway, name="agent-link")
        self.loop = self._thread.loop
        self.agents: dict[str, Future[None]] = {}
        self.runtimes: dict[str, Runtime] = {}
        self.watched: set[str] = set()  # agents that watch their NVML's health
        self.nvmls: dict[str, FakeNvml] = {}  # what each agent's NVML reports
        self._welcomed: dict[str, threading.Event] = {}  # set once its server.json is saved

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._thread.run(coroutine)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        for running in self.agents.values():
            running.cancel()
        self._thread.stop()

    def state_dir(self, name: str) -> Path:
        return self.workdir / f"agent-{name}"

    def join(
        self,
        name: str,
        url: str,
        token: str,
        nvml: FakeNvml | None = None,
        runtime: Runtime | None = None,
        watch_health: bool = False,
    ) -> Future[None]:
        """Start agent `name` (its own key in its own state dir) with a join command.
        `nvml`: the GPUs it reports (one H200 unless given); a test may change its
        `devices` while the agent runs, and the next heartbeat reports the change.
        `runtime`: its engine, on which the server's runtime calls run and its fence
        stops tenants (a `FakeRuntime` unless given; `runtimes[name]`).
        `watch_health`: it polls its NVML's health and journals it, as `gpudock agent`
        does (here every 0.1 s), also when run again."""
        if watch_health:
            self.watched.add(name)
        inventory = self._inventory(name, nvml, runtime)
        agent = Agent.joining(self.state_dir(name), inventory, url, token)
        agent.fence = Fence(inventory.runtime)
        return self._launch(name, agent)

    def rerun(self, name: str, nvml: FakeNvml | None = None) -> Future[None]:
        """Start agent `name` again from what its join saved (`gpudock agent run`),
        on the same engine as before."""
        enrollment = load_enrollment(self.state_dir(name))
        inventory = self._inventory(name, nvml, self.runtimes.get(name))
        return self._launch(name, Agent.enrolled(self.state_dir(name), inventory, enrollment))

    def _inventory(
        self, name: str, nvml: FakeNvml | None, runtime: Runtime | None
    ) -> HostInventory:
        engine = self.runtimes[name] = runtime or FakeRuntime()
        self.nvmls[name] = nvml or self.nvmls.get(name) or h200_1x()
        return HostInventory(NvmlGpuSource(nvml=self.nvmls[name]), engine)

    def halt(self, name: str) -> None:
        """Stop agent `name` as SIGTERM would (its connection closes), once it has
        been welcomed: the server shows a link up when it sends its welcome, before
        a joining agent has saved its enrollment (which `rerun` needs)."""
        assert self._welcomed[name].wait(timeout=30), f"agent {name} was never welcomed"
        self.agents[name].cancel()

    def journal(self, name: str) -> HealthJournal:
        """Agent `name`'s health journal, as its state dir holds it now."""
        return HealthJournal(self.state_dir(name))

    def _launch(self, name: str, agent: Agent) -> Future[None]:
        self.state_dir(name).mkdir(parents=True, exist_ok=True)
        if name in self.watched:
            source = agent.inventory.gpu_source
            agent.health = HealthWatcher(source, HealthJournal(self.state_dir(name)), every_s=0.1)
        welcomed = self._welcomed[name] = threading.Event()
        agent.on_welcome = lambda _host_name: welcomed.set()
        running = asyncio.run_coroutine_threadsafe(agent.run(), self.loop)
        self.agents[name] = running
        return running


def join_parts(command: str) -> tuple[str, str]:
    """(URL, TOKEN) of `gpudock agent join URL TOKEN`."""
    words = command.split()
    assert words[:3] == ["gpudock", "agent", "join"], command
    return words[3], words[4]


class DirectoryVolumesRuntime(FakeRuntime):
    """A `FakeRuntime` (no GPU container can run here) whose volumes are real
    directories under `root`, so that an agent moves real files between hosts."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def volume_directory(self, name: str) -> Path:
        if name not in self.volumes:
            raise RuntimeFailure(f"could not find volume {name}")
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def remove_volume(self, name: str) -> None:
        super().remove_volume(name)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def save_image(self, ref: str) -> Iterator[bytes]:
        if ref not in self.images:
            raise RuntimeFailure(f"could not save image {ref}: no such image")
        return iter([ref.encode()])

    def load_image(self, chunks: Iterator[bytes]) -> None:
        self.images.add(b"".join(chunks).decode())


def leave_behind(source: FakeRuntime, host: FakeRuntime, container: str) -> None:
    """What the fence keeps on a host an instance left while it was out of reach:
    the instance's container there, stopped, and its old data volume — made on
    `host`'s engine as copies of the ones it runs with on `source` now (the same
    names and instance labels)."""
    spec = source.spec_of(container)
    volume = source.volumes[spec.volume_name]
    host.images.add(spec.image)
    host.ensure_volume(volume.name, volume.labels)
    host.create_container(spec)
