"""A real `gpudock server` and agents on netns test hosts (`fleet_netns.py`),
driven through the CLI as an operator would: what the agent e2e tests share."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fleet_netns import NetnsFleet, TestHost
from tests.support.server_process import GPUDOCK, ServerProcess
from tests.support.sshgw import wait_for

REPO = Path(__file__).resolve().parents[2]
FAKE_NVML_SITE = REPO / "tests" / "support" / "fake_nvml_site"
GIB = 1024**3


@dataclass
class Cluster:
    fleet: NetnsFleet
    server: ServerProcess
    workdir: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "GPUDOCK_URL": self.server.url,
            "GPUDOCK_TOKEN": self.server.admin_token(),
        }
        return subprocess.run(
            [GPUDOCK, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    def add(self, name: str) -> list[str]:
        """`gpudock hosts add NAME`: the join command's words."""
        added = self.cli("hosts", "add", name)
        assert added.returncode == 0, added.stderr
        line = next(line for line in added.stdout.splitlines() if line.startswith("gpudock agent"))
        return line.split()

    def hosts(self) -> dict[str, Any]:
        listed = self.cli("hosts", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        return {host["name"]: host for host in json.loads(listed.stdout)}

    def agent(
        self, host: TestHost, *args: str, tag: str = "", nvml: str = ""
    ) -> subprocess.Popen[bytes]:
        """`gpudock agent ARGS` in the host's namespace, on its engine and its fake NVML
        (the host's, or the state file `write_gpus(nvml, …)` wrote)."""
        state = self.workdir / f"state-{host.name}{tag}"
        env = {
            **os.environ,
            "PYTHONPATH": f"{FAKE_NVML_SITE}:{REPO}",
            "GPUDOCK_TEST_NVML_STATE": str(self.workdir / f"nvml-{nvml or host.name}.json"),
        }
        command = [GPUDOCK, "agent", *args, "--state-dir", str(state)]
        command += ["--docker-host", host.docker_url]
        return host.popen(command, self.workdir / f"agent-{host.name}{tag}.log", env)

    def saved(self, host: TestHost, tag: str = "") -> None:
        """Wait for the agent to save its welcome (just after the server shows it up)."""
        state = self.workdir / f"state-{host.name}{tag}" / "server.json"
        wait_for(state.exists, f"the agent on {host.name} to save its enrollment")

    def log(self, host: TestHost, tag: str = "") -> str:
        return (self.workdir / f"agent-{host.name}{tag}.log").read_text()

    def link(self, name: str, state: str) -> dict[str, Any]:
        """Host `name` as `gpudock hosts list` shows it, once its link is `state`."""
        return wait_for(
            lambda: (host := self.hosts().get(name)) and host["link_state"] == state and host,
            f"host {name} link {state}",
        )

    def write_gpus(
        self, host: str, gpus: list[dict[str, Any]], xids: Sequence[tuple[int, int]] = ()
    ) -> None:
        """The fake NVML state that host's agents read (`xids`: what its driver raised)."""
        state = {"gpus": gpus, "xids": [list(raised) for raised in xids]}
        partial = self.workdir / f"nvml-{host}.partial"
        partial.write_text(json.dumps(state))
        partial.replace(self.workdir / f"nvml-{host}.json")  # never read half written


def fake_gpus(model: str, count: int, memory_gib: int) -> list[dict[str, Any]]:
    """GPUs for the fake NVML's state file, with fresh UUIDs."""
    return [
        {
            "name": f"NVIDIA {model}",
            "uuid": f"GPU-{uuid.uuid4()}",
            "memory_total": memory_gib * GIB,
            "bus_id": f"00000000:{0x10 + index:02X}:00.0",
        }
        for index in range(count)
    ]


@contextlib.contextmanager
def linked_server(
    fleet: NetnsFleet, workdir: Path, env: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """A `gpudock server` taking agents on the fleet's bridge (fast heartbeats; `env`
    adds or overrides settings), killed after."""
    server = ServerProcess(
        workdir / "server",
        simulate="1x1xA100-80GB",
        env={
            "GPUDOCK_AGENT_LINK_HOST": fleet.server_address,
            "GPUDOCK_AGENT_LINK_PORT": "0",
            "GPUDOCK_AGENT_HEARTBEAT_S": "0.3",
            "GPUDOCK_AGENT_LINK_TIMEOUT_S": "2",
            **(env or {}),
        },
    )
    server.start()
    try:
        yield Cluster(fleet, server, workdir)
    finally:
        server.kill()
