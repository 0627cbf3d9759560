"""A real `gpudock server` in a child process, for crash and concurrency tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from gpudock.db.engine import make_engine, make_sessionmaker
from gpudock.db.models import MetaModel
from tests.support.databases import seed_sqlite

GPUDOCK = str(Path(sys.executable).parent / "gpudock")
API = "/api/v1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    data_dir: Path
    simulate: str
    database_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    starts: int = 0
    cluster_id: str = ""
    healthy_timeout_s: float = 60.0  # a loaded 2-core machine may need more (bench/crash_soak.py)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"server-{self.starts}.log"

    def start(self, **extra_env: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.database_url:
            seed_sqlite(self.data_dir)  # not migrated from empty at every first start
        self.starts += 1
        self.port = free_port()
        env = {
            **os.environ,
            "GPUDOCK_IMAGE_PULL": "never",
            "GPUDOCK_RECONCILE_INTERVAL_S": "0.5",
            "GPUDOCK_HEALTH_CHECK_INTERVAL_S": "1",
            "GPUDOCK_SSH_PORT": "0",  # the SSH gateway on any free port, never 2222
            "GPUDOCK_SLOW_STEP_S": "15",  # a stuck step's stack in the log (wait_settled)
            **self.env,
            **extra_env,
        }
        if self.database_url:
            env["GPUDOCK_DATABASE_URL"] = self.database_url
        command = [GPUDOCK, "server", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        command += ["--simulate", self.simulate]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._wait_healthy(self.healthy_timeout_s)
        if not self.cluster_id:
            db_engine, _sessions, self.cluster_id = self.database()
            db_engine.dispose()

    def _wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not healthy in {timeout_s}s:\n{self.log_path.read_text()}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def wait_for_death(self, timeout_s: float = 60.0) -> int:
        """Wait for the server to kill itself at a crash point; return its exit code."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"server did not crash:\n{self.log_path.read_text()}") from exc

    def admin_token(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.admin_token()}"}
        return httpx.Client(base_url=self.url + API, headers=headers, timeout=30)

    def database(self) -> tuple[Engine, sessionmaker[Session], str]:
        url = self.database_url or f"sqlite:///{self.data_dir / 'gpudock.db'}"
        engine = make_engine(url)
        sessions = make_sessionmaker(engine)
        with sessions() as session:
            cluster = session.get(MetaModel, "cluster_id")
            assert cluster is not None
            return engine, sessions, cluster.value


def wait_for(client: httpx.Client, instance_id: str, status: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        response = client.get(f"/instances/{instance_id}")
        last = response.json()
        if response.status_code == 200 and last["status"] == status:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{instance_id} never became {status}; last seen {last}")


def wait_settled(
    server: ServerProcess,
    token: str,
    timeout_s: float = 90.0,
    others: tuple[ServerProcess, ...] = (),
) -> None:
    """Wait until every instance is stable, in the state asked of it, or queued for
    GPUs that are all taken (none free that would fit it: a GPU freed after the
    queue formed gets the queue's head placed). A stop or start the API has
    accepted but no reconciler has begun counts as busy: its step is still to come.
    On failure the servers' log lines about the unsettled instances (and any
    slow-step stacks) are part of the message: the step may be on any of them."""
    deadline = time.monotonic() + timeout_s
    busy: list[dict[str, Any]] = []
    with server.client(token) as user:
        while time.monotonic() < deadline:
            answer = user.get("/instances")
            if answer.status_code == 429:  # the tenant's rate limit, after a load
                time.sleep(float(answer.headers.get("Retry-After", "1")))
                continue
            assert answer.status_code == 200, answer.text
            busy = [i for i in answer.json() if not _settled(i)]
            queued = [i for i in busy if i["status_reason"].startswith(_QUEUED)]
            if len(queued) == len(busy) and not _placeable_now(user, queued):
                return
            time.sleep(0.1)
    ids = [i["id"] for i in busy]
    logs = "\n".join(_log_about(s, ids) for s in (server, *others))
    raise AssertionError(f"not settled: {busy}\n{logs}")


_TRANSITIONAL = {"pending", "creating", "stopping", "starting", "deleting", "migrating"}
_QUEUED = ("waiting for", "moving: waiting for")  # for GPUs that are all taken


def _settled(instance: dict[str, Any]) -> bool:
    status, desired = instance["status"], instance["desired_state"]
    if status in _TRANSITIONAL:
        return False
    return not (status == "running" and desired != "running") and not (
        status == "stopped" and desired == "running"
    )


def _placeable_now(user: httpx.Client, queued: list[dict[str, Any]]) -> bool:
    """Whether one of the queued instances could be placed on what is free now
    (then the placement pass is about to: not settled yet). Whole GPUs of one
    model on one host, or one GPU: what these tests ask for."""
    if not queued:
        return False
    answer = user.get("/gpus")
    if answer.status_code == 429:
        return True  # ask again
    assert answer.status_code == 200, answer.text
    free = {m["model"]: m for m in answer.json()}
    for instance in queued:
        count = instance["gpu_count"]
        for name in instance["gpu_models"] or [instance["gpu_model"]]:
            model = free.get(name)
            fits = model is not None and model["free"] >= count
            if fits and count and (count == 1 or model["hosts"] == 1):  # type: ignore[index]
                return True
    return False


def _log_about(server: ServerProcess, ids: list[str], most: int = 60) -> str:
    """The lines of each of a server's logs (one per start) that name one of
    `ids` or belong to a stack."""
    parts = []
    for path in sorted(server.data_dir.glob("server-*.log")):
        lines = path.read_text(errors="replace").splitlines()
        stack = ("  File", "    ", "Traceback")
        keep = [line for line in lines if any(i in line for i in ids) or line.startswith(stack)]
        parts.append(f"--- {path.name} ---\n" + "\n".join(keep[-most:]))
    return "\n".join(parts) or f"{server.data_dir}: no server log"
