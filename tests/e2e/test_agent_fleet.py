"""Real hosts on this machine: agents in network namespaces, each beside its own
dockerd, one behind NAT, enrolled with a real `gpudock server` through the CLI.

One fleet and one server serve the module (a host costs seconds to start); each
test enrolls hosts of its own names and leaves the others alone.
"""

from __future__ import annotations

import json
import signal
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.agent_cluster import Cluster, fake_gpus, linked_server
from tests.support.fleet_netns import leftovers, netns_fleet
from tests.support.sshgw import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.netns]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("agent-fleet")
    with netns_fleet(workdir, direct=("a", "b"), natted="n") as fleet:
        for name, gpus in (
            ("a", fake_gpus("A100-SXM4-80GB", 2, 80)),
            ("b", fake_gpus("A100-SXM4-80GB", 1, 80)),
            ("n", fake_gpus("H200", 1, 140)),
        ):
            (workdir / f"nvml-{name}.json").write_text(json.dumps({"gpus": gpus}))
        with linked_server(fleet, workdir) as cluster:
            yield cluster
    assert leftovers(fleet) == []  # after the fleet's teardown


def _state_gpus(cluster: Cluster, name: str) -> list[str]:
    data = json.loads((cluster.workdir / f"nvml-{name}.json").read_text())
    return [gpu["uuid"] for gpu in data["gpus"]]


def _link(cluster: Cluster, name: str, state: str) -> dict[str, Any]:
    return wait_for(
        lambda: (host := cluster.hosts().get(name)) and host["link_state"] == state and host,
        f"host {name} link {state}",
    )


def test_hosts_enroll_from_their_namespaces_one_behind_nat(cluster: Cluster) -> None:
    fleet = cluster.fleet
    for name in ("a", "n"):
        cluster.agent(fleet.hosts[name], "join", *cluster.add(name)[3:5])
    direct, natted = _link(cluster, "a", "up"), _link(cluster, "n", "up")
    # Each record is that host's: its own engine's version, its own GPUs.
    for record, name in ((direct, "a"), (natted, "n")):
        engine = fleet.hosts[name].engine().version()["Version"]
        assert record["engine_version"] == engine
        assert [gpu["uuid"] for gpu in record["gpus"]] == _state_gpus(cluster, name)
    assert [gpu["model"] for gpu in natted["gpus"]] == ["H200-140GB"]
    assert direct["link_peer"] == fleet.hosts["a"].address
    assert natted["link_peer"] == f"{fleet.subnet}.2"  # the NAT's address, not the host's
    with pytest.raises(OSError), socket.create_connection((fleet.hosts["n"].address, 9), 1):
        pass  # and no way in to the NATed host from the server's side
    listing = cluster.cli("hosts", "list")
    assert "H200-140GB" in listing.stdout and "up" in listing.stdout


def test_a_used_token_is_refused_on_another_host(cluster: Cluster) -> None:
    fleet = cluster.fleet
    words = cluster.add("b")
    first = cluster.agent(fleet.hosts["b"], "join", *words[3:5])
    _link(cluster, "b", "up")
    second = cluster.agent(fleet.hosts["a"], "join", *words[3:5], tag="-reuse")
    assert second.wait(timeout=60) == 1
    assert "the join token was used already" in cluster.log(fleet.hosts["a"], "-reuse")
    assert first.poll() is None and cluster.hosts()["b"]["link_state"] == "up"


def test_sigkill_of_an_agent_is_seen_down_and_a_rerun_relinks(cluster: Cluster) -> None:
    host = cluster.fleet.hosts["b"]
    agent = cluster.agent(host, "join", *cluster.add("b2")[3:5], tag="-2")
    before = _link(cluster, "b2", "up")
    cluster.saved(host, "-2")
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=30)
    down = _link(cluster, "b2", "down")
    assert down["link_changed_at"] > before["link_changed_at"]
    cluster.agent(host, "run", tag="-2")
    _link(cluster, "b2", "up")


def test_a_pulled_link_is_seen_down_by_missed_heartbeats_and_heals(cluster: Cluster) -> None:
    fleet = cluster.fleet
    cluster.agent(fleet.hosts["a"], "join", *cluster.add("a2")[3:5], tag="-cut")
    _link(cluster, "a2", "up")
    fleet.cut("a")  # dockerd and the agent keep running; only the cable is out
    try:
        _link(cluster, "a2", "down")
    finally:
        fleet.mend("a")
    _link(cluster, "a2", "up")


def test_removing_a_host_disconnects_its_agent_and_refuses_it(cluster: Cluster) -> None:
    host = cluster.fleet.hosts["n"]
    agent = cluster.agent(host, "join", *cluster.add("n2")[3:5], tag="-rm")
    _link(cluster, "n2", "up")
    cluster.saved(host, "-rm")
    removed = cluster.cli("hosts", "remove", "n2")
    assert removed.returncode == 0, removed.stderr
    assert agent.wait(timeout=60) == 1
    assert "host 'n2' was removed" in cluster.log(host, "-rm")
    rerun = cluster.agent(host, "run", tag="-rm")
    assert rerun.wait(timeout=60) == 1
    assert "not enrolled with this server" in cluster.log(host, "-rm")
    assert "n2" not in cluster.hosts()


def test_an_xid_the_hosts_driver_raises_is_a_fault_on_the_server(cluster: Cluster) -> None:
    gpus = fake_gpus("A100-SXM4-80GB", 2, 80)
    cluster.write_gpus("x1", gpus)  # its own GPUs: no other agent reports them
    cluster.agent(cluster.fleet.hosts["a"], "join", *cluster.add("x1")[3:5], tag="-x", nvml="x1")
    _link(cluster, "x1", "up")
    cluster.write_gpus("x1", gpus, xids=[(1, 48)])

    def faults() -> list[dict[str, Any]]:
        listed = cluster.cli("admin", "gpus", "faults", "--json")
        assert listed.returncode == 0, listed.stderr
        return [f for f in json.loads(listed.stdout) if f["gpu_uuid"] == gpus[1]["uuid"]]

    (fault,) = wait_for(faults, "the Xid recorded by the server")
    assert (fault["xid"], fault["source"], fault["action"]) == (48, "agent", "migrate")
    assert fault["gpu_state"] in ("draining", "unhealthy")  # nothing new lands on it
