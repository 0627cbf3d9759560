"""Host loss on real hosts: agents in network namespaces beside their own
dockerd, a real `gpudock server`, instances created through the API.

An agent killed with SIGKILL, or a host whose cable is pulled while its
dockerd and agent run on: the server declares the host lost after
GPUDOCK_HOST_LOST_AFTER_S, its GPUs go unhealthy, its instances stop being
billed at the last heartbeat and their policy is applied (wait for the host,
or restart elsewhere with an empty data volume); a cut-off agent stops its
tenants itself, and the server fences what it finds when the host returns.
The server itself killed and started again finds its agents back and adopts
their containers as they run. A move off a GPU that raised an Xid 79 carries
the data volume to the other host and resumes where it stopped when the
server, then the source host's agent, is killed in the middle of the copy.

Every agent host here is alone on its test host's engine while it holds
instances: a real host has one agent, and the fence acts on the engine's
every container of an instance that is not meant to be there.
"""

from __future__ import annotations

import itertools
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import docker
import httpx
import pytest
from sqlalchemy import select

from gpudock.db.models import GpuDeviceModel
from tests.support.agent_cluster import Cluster, fake_gpus, linked_server
from tests.support.billing import compute_intervals
from tests.support.fleet_netns import leftovers, netns_fleet
from tests.support.server_process import free_port
from tests.support.sshgw import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.netns]

LOST_AFTER_S = 4
LONG_LEASE = ("--lease-s", "300")  # the agent's own: longer than a server's restart
H200 = "H200-140GB"
Interval = tuple[datetime, datetime | None, int]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("agent-failures")
    env = {
        "GPUDOCK_HOST_LOST_AFTER_S": str(LOST_AFTER_S),  # the agents' lease too
        "GPUDOCK_AGENT_LINK_PORT": str(free_port()),  # the same after a restart
        "GPUDOCK_BILLING_TICK_S": "0.5",
    }
    with (
        netns_fleet(workdir, direct=("a", "b"), natted=None) as fleet,
        linked_server(fleet, workdir, env=env) as cluster,
    ):
        yield cluster
    assert leftovers(fleet) == []  # after the fleet's teardown


def _enroll(cluster: Cluster, name: str, on: str, label: str, *options: str) -> Any:
    """Agent host `name` with one H200 of its own, labelled `label`, on test host `on`
    (`options`: the agent's own)."""
    cluster.write_gpus(name, fake_gpus("H200", 1, 140))
    added = cluster.cli("hosts", "add", name, "--label", label)
    assert added.returncode == 0, added.stderr
    words = next(line for line in added.stdout.splitlines() if line.startswith("gpudock agent"))
    join = ("join", *words.split()[3:5], *options)
    # A state dir of its own: a test that failed leaves the others an unused one.
    agent = cluster.agent(cluster.fleet.hosts[on], *join, tag=f"-{name}", nvml=name)
    cluster.link(name, "up")
    cluster.saved(cluster.fleet.hosts[on], tag=f"-{name}")
    with cluster.server.client() as admin:  # a price once the model is in the fleet
        priced = admin.put("/admin/prices", json={"gpu_model": H200, "amount": "3.6"})
        assert priced.status_code == 200, priced.text
    return agent


def _user(cluster: Cluster, name: str) -> str:
    """A new user with a balance: its token (a client is bound to one server start)."""
    with cluster.server.client() as admin:
        token = str(admin.post("/users", json={"name": name}).json()["token"])
        topped = admin.post("/admin/topups", json={"user": name, "amount": "100"})
        assert topped.status_code == 201, topped.text
    return token


def _create(user: httpx.Client, label: str, on_host_loss: str) -> str:
    key, value = label.split("=")
    body = {"gpu_model": H200, "gpu_count": 1, "host_labels": {key: value}}
    created = user.post("/instances", json={**body, "on_host_loss": on_host_loss})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _reached(user: httpx.Client, instance_id: str, status: str, host: str = "") -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found: dict[str, Any] = user.get(f"/instances/{instance_id}").json()
        wanted = found["status"] == status and (not host or found["host"] == host)
        return found if wanted else None

    return wait_for(reached, f"instance {instance_id} {status} {host}", deadline_s=120)


def _container(engine: docker.DockerClient, instance_id: str) -> Any:
    [container] = engine.containers.list(
        all=True, filters={"label": f"gpudock.instance={instance_id}"}
    )
    return container


def _intervals(cluster: Cluster, instance_id: str) -> list[Interval]:
    """(opened, closed, charged seconds) of the instance's compute intervals, as the
    server's ledger holds them."""
    engine, sessions, _cluster_id = cluster.server.database()
    try:
        with sessions() as session:
            rows = compute_intervals(session, instance_id)
            return [(r.opened_at, r.closed_at, r.charged_seconds) for r in rows]
    finally:
        engine.dispose()


def _intervals_if(cluster: Cluster, instance_id: str, count: int) -> list[Interval] | None:
    found = _intervals(cluster, instance_id)
    return found if len(found) == count else None


def _gpu_states(cluster: Cluster, uuids: list[str]) -> list[str]:
    engine, sessions, _cluster_id = cluster.server.database()
    try:
        with sessions() as session:
            rows = session.scalars(select(GpuDeviceModel).where(GpuDeviceModel.id.in_(uuids)))
            return [row.state.value for row in rows]
    finally:
        engine.dispose()


def _never_overlapping(intervals: list[Interval]) -> None:
    for (_, closed, _), (opened, _, _) in itertools.pairwise(intervals):
        assert closed is not None and closed <= opened
    for opened, closed, charged in intervals:
        if closed is not None:  # charged what ran, the charge made ahead refunded
            assert abs(charged - (closed - opened).total_seconds()) <= 1


def _told(user: httpx.Client) -> list[str]:
    return [n["kind"] for n in user.get("/notifications").json()]


def _remove_host(cluster: Cluster, name: str, agent: Any) -> None:
    removed = cluster.cli("hosts", "remove", name)
    assert removed.returncode == 0, removed.stderr
    agent.wait(timeout=60)


def test_a_killed_agent_loses_its_host_unbilled_then_it_and_a_restarted_server_adopt(
    cluster: Cluster,
) -> None:
    # Its operator gave it a lease longer than the server takes to restart.
    agent = _enroll(cluster, "la", "a", "zone=la", *LONG_LEASE)
    engine = cluster.fleet.hosts["a"].engine()
    token = _user(cluster, "lena")
    with cluster.server.client(token) as user:
        instance_id = _create(user, "zone=la", "wait")
        running = _reached(user, instance_id, "running", host="la")
        container = _container(engine, instance_id)
        wait_for(lambda: _intervals(cluster, instance_id), "a compute interval open")

        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
        killed_at = datetime.now(UTC)
        lost = _reached(user, instance_id, "unreachable")
        assert "no heartbeat since" in lost["status_reason"]
        assert _gpu_states(cluster, running["gpus"]) == ["unhealthy"]
        [(opened, closed, _charged)] = _intervals(cluster, instance_id)
        heard = datetime.fromisoformat(cluster.hosts()["la"]["last_heartbeat_at"])
        # It may have started running after the last heartbeat (the run's reply came
        # between two beats): then it was billed for nothing.
        stopped_at = max(heard, opened)
        assert closed is not None and abs(closed - stopped_at) < timedelta(milliseconds=1)
        assert closed <= killed_at  # billing stopped at the last heartbeat
        assert "instance.host_lost" in _told(user)
        container.reload()
        assert container.status == "running"  # nobody on the host fences: its agent is dead

        back_at = datetime.now(UTC)
        agent = cluster.agent(cluster.fleet.hosts["a"], "run", *LONG_LEASE, tag="-la", nvml="la")
        back = _reached(user, instance_id, "running")
        assert (back["host"], back["container_id"]) == ("la", running["container_id"])
        assert _gpu_states(cluster, running["gpus"]) == ["healthy"]
        intervals = wait_for(lambda: _intervals_if(cluster, instance_id, 2), "billing again")
        assert intervals[1][0] >= back_at - timedelta(seconds=1)  # never over the outage
        _never_overlapping(intervals)

    # The server killed and started again: its agent relinks, the container is adopted.
    started = container.attrs["State"]["StartedAt"]
    cluster.server.kill()
    cluster.server.start()
    cluster.link("la", "up")
    with cluster.server.client(token) as user:
        adopted = _reached(user, instance_id, "running")
        assert adopted["container_id"] == running["container_id"]
        container.reload()
        assert (container.status, container.attrs["State"]["StartedAt"]) == ("running", started)
        assert user.delete(f"/instances/{instance_id}").status_code == 200
        _reached(user, instance_id, "deleted")
    _remove_host(cluster, "la", agent)


def test_a_cut_host_fences_itself_its_instance_restarts_elsewhere_and_the_server_fences(
    cluster: Cluster,
) -> None:
    first = _enroll(cluster, "ea", "a", "pool=e")
    token = _user(cluster, "eli")
    with cluster.server.client(token) as user:
        instance_id = _create(user, "pool=e", "elsewhere")
        _reached(user, instance_id, "running", host="ea")
        second = _enroll(cluster, "eb", "b", "pool=e")
        old = _container(cluster.fleet.hosts["a"].engine(), instance_id)
        wrote = old.exec_run(["sh", "-c", "echo weights > /root/data/kept.txt"])
        assert wrote.exit_code == 0, wrote.output

        cluster.fleet.cut("a")  # dockerd and the agent run on; only the cable is out
        try:
            moved = _reached(user, instance_id, "running", host="eb")
            # The agent, past its lease without the server, stopped its tenant itself.
            wait_for(lambda: old.reload() or old.status == "exited", "the agent's own fence")
        finally:
            cluster.fleet.mend("a")
        new = _container(cluster.fleet.hosts["b"].engine(), instance_id)
        assert new.exec_run(["test", "-e", "/root/data/kept.txt"]).exit_code == 1  # empty
        assert moved["container_id"] == new.id
        assert "instance.host_lost" in _told(user)

        cluster.link("ea", "up")  # back: what it holds of the moved instance is kept, stopped
        with cluster.server.client() as admin:
            kept = wait_for(
                lambda: admin.get("/agent-hosts/ea/kept").json(), "the fenced container listed"
            )
        assert [(k["instance_id"], k["running"]) for k in kept] == [(instance_id, False)]
        old.reload()
        assert old.status == "exited"  # stopped, never removed without the operator
        _never_overlapping(_intervals(cluster, instance_id))
        assert user.delete(f"/instances/{instance_id}").status_code == 200
        _reached(user, instance_id, "deleted")
    _remove_host(cluster, "ea", first)
    _remove_host(cluster, "eb", second)


def _spooled(cluster: Cluster) -> int:
    """Bytes the destination agents hold of copies under way (their resumable spools)."""
    return sum(part.stat().st_size for part in cluster.workdir.glob("state-*/transfers/*.part"))


class _KillMidCopy(threading.Thread):
    """SIGKILL `agent` as soon as the spools pass `above` bytes: mid-copy.
    `killed_at`: the bytes spooled then (0: the copy was never seen under way)."""

    def __init__(self, cluster: Cluster, agent: Any, above: int) -> None:
        super().__init__()
        self.cluster, self.agent, self.above = cluster, agent, above
        self.killed_at = 0

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while (held := _spooled(self.cluster)) <= self.above and time.monotonic() < deadline:
            time.sleep(0.005)  # a tight poll with a deadline: the copy takes a second or two
        self.agent.send_signal(signal.SIGKILL)
        self.killed_at = held if held > self.above else 0


def test_a_move_off_an_xid_79_resumes_after_the_server_and_the_source_agent_die_mid_copy(
    cluster: Cluster,
) -> None:
    source = _enroll(cluster, "ma", "a", "pool=m", *LONG_LEASE)
    token = _user(cluster, "mo")
    with cluster.server.client(token) as user:
        instance_id = _create(user, "pool=m", "wait")
        _reached(user, instance_id, "running", host="ma")
    target = _enroll(cluster, "mb", "b", "pool=m")
    on_a = _container(cluster.fleet.hosts["a"].engine(), instance_id)
    wrote = on_a.exec_run(
        ["sh", "-c", "head -c 160M /dev/urandom > /root/data/blob && sha256sum /root/data/blob"]
    )
    assert wrote.exit_code == 0, wrote.output
    digest = wrote.output.decode().split()[0]

    # The server dies in the middle of the copy, with part of it on the destination.
    cluster.server.kill()
    cluster.server.start(GPUDOCK_CRASH_POINTS="mid_data_copy")
    cluster.link("ma", "up")
    cluster.link("mb", "up")
    gpus = json.loads((cluster.workdir / "nvml-ma.json").read_text())["gpus"]
    cluster.write_gpus("ma", gpus, xids=[(0, 79)])  # read by the agent on host a
    cluster.server.wait_for_death()
    kept = _spooled(cluster)
    assert kept > 0
    # Started again, it resumes; then the source host's agent dies mid-copy too.
    cluster.write_gpus("ma", gpus)  # a driver does not raise the same Xid twice
    watcher = _KillMidCopy(cluster, source, above=kept)
    watcher.start()
    cluster.server.start()
    watcher.join()
    assert watcher.killed_at > kept
    source.wait(timeout=30)
    source = cluster.agent(cluster.fleet.hosts["a"], "run", *LONG_LEASE, tag="-ma", nvml="ma")

    with cluster.server.client(token) as user:
        moved = _reached(user, instance_id, "running", host="mb")
        on_b = _container(cluster.fleet.hosts["b"].engine(), instance_id)
        assert moved["container_id"] == on_b.id
        summed = on_b.exec_run(["sha256sum", "/root/data/blob"])
        assert summed.output.decode().split()[0] == digest
        wait_for(lambda: not _of_instance(cluster, "a", instance_id), "nothing left on host a")
        events = [e["message"] for e in user.get(f"/instances/{instance_id}/events").json()]
        assert any(re.fullmatch(r"moving data to mb: \d+ MiB so far", m) for m in events)
        [disk] = [m for m in events if m.startswith("the system disk moved to mb")]
        layers = re.fullmatch(r".*: (\d+) KiB sent; (\d+) base layer\(s\) were there", disk)
        assert layers and int(layers[2]) >= 1, disk  # only the commit's own layer crossed
        [resumed] = [m for m in events if "resumed where it stopped" in m]
        sent = re.fullmatch(r".*: (\d+) MiB of (\d+) MiB sent again", resumed)
        assert sent, resumed
        assert int(sent[1]) < int(sent[2])  # never from the start again
        assert user.delete(f"/instances/{instance_id}").status_code == 200
        _reached(user, instance_id, "deleted")
    _remove_host(cluster, "ma", source)
    _remove_host(cluster, "mb", target)


def _of_instance(cluster: Cluster, host: str, instance_id: str) -> list[str]:
    """The instance's containers and volumes on test host `host`'s engine."""
    engine = cluster.fleet.hosts[host].engine()
    label = {"label": f"gpudock.instance={instance_id}"}
    found = [c.name for c in engine.containers.list(all=True, filters=label)]
    return found + [v.name for v in engine.volumes.list(filters=label)]
