"""A host PID to its container through /proc/<pid>/cgroup: the cgroup layouts
Docker makes, and a real container's processes on the real engine."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from gpudock.platform import Platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.docker.containers import container_of_pid
from tests.runtime.test_container_stats import running_container

ID = "fd43863e10f4b9a1027c559dc49c0a54d6b93d1f9fc0ed55ae59236c83b6a28d"
INNER = "0" * 63 + "1"


def proc_with(tmp_path: Path, pid: int, cgroup: str) -> Path:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cgroup").write_text(cgroup)
    return tmp_path


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        (f"12:pids:/docker/{ID}\n0::/docker/{ID}\n", ID),  # cgroupfs, v1
        (f"0::/docker/{ID}\n", ID),  # cgroupfs, v2
        (f"0::/system.slice/docker-{ID}.scope\n", ID),  # systemd
        (f"0::/docker/{ID}/docker/{INNER}\n", INNER),  # an engine inside a container
        (f"0::/gpudock-fleet-x-n/{ID}\n", ID),  # cgroupfs, dockerd's --cgroup-parent
        ("0::/user.slice/user-1000.slice/session-2.scope\n", None),  # not in a container
        (f"0::/docker/{ID[:12]}\n", None),  # not a full id
    ],
)
def test_the_cgroup_names_the_container(tmp_path: Path, cgroup: str, expected: str | None) -> None:
    assert container_of_pid(7, proc_with(tmp_path, 7, cgroup)) == expected


def test_a_process_that_has_gone_is_in_no_container(tmp_path: Path) -> None:
    assert container_of_pid(8, tmp_path) is None


@pytest.mark.docker
def test_a_containers_processes_map_to_it(real: Platform, engine: docker.DockerClient) -> None:
    runtime = real.ctx.runtime
    assert isinstance(runtime, DockerRuntime)
    container = engine.containers.get(running_container(real))
    run = container.exec_run(["sh", "-c", "sleep 30 & echo $!"])
    assert run.exit_code == 0
    pids = [int(p[1]) for p in container.top(ps_args="-o comm,pid")["Processes"]]
    assert len(pids) >= 2  # its init and the sleep
    assert {runtime.container_of_pid(pid) for pid in pids} == {container.id}
    assert runtime.container_of_pid(1) is None  # the host's init
