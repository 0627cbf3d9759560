"""`gpudock keys`, `gpudock ssh`, `gpudock ssh-config` and the ssh line of `instances show`."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Invoke, LiveServer


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def keygen(directory: Path, name: str) -> Path:
    path = directory / f"id_{name}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def fingerprint(public: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(public)], capture_output=True, check=True)
    return out.stdout.decode().split()[1]


def test_keys_add_list_remove(
    gpudock: Invoke, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    private = keygen(tmp_path, "laptop")
    name = unique("laptop")
    added = gpudock("keys", "add", str(private.with_suffix(".pub")), "--name", name)
    assert added.exit_code == 0, added.output
    assert fingerprint(private.with_suffix(".pub")) in added.output
    listed = json.loads(gpudock("keys", "list", "--json").output)
    assert name in [k["name"] for k in listed]
    table = gpudock("keys", "list")
    assert name in table.output and "ssh-ed25519 256" in table.output
    removed = gpudock("keys", "remove", name)
    assert removed.exit_code == 0 and "Removed" in removed.output
    assert gpudock("keys", "remove", name).exit_code == 1


def test_keys_add_defaults_to_the_users_key_and_never_sends_a_private_one(
    gpudock: Invoke, home: Path
) -> None:
    nothing = gpudock("keys", "add", env={"HOME": str(home)})
    assert nothing.exit_code == 2 and "ssh-keygen -t ed25519" in nothing.output
    (home / ".ssh").mkdir()
    private = keygen(home / ".ssh", "ed25519")
    refused = gpudock("keys", "add", str(private))
    assert refused.exit_code == 2 and "private key" in refused.output
    default = gpudock("keys", "add", "--json", env={"HOME": str(home)})
    assert default.exit_code == 0, default.output
    assert json.loads(default.output)["fingerprint"] == fingerprint(private.with_suffix(".pub"))


def test_ssh_config_ssh_and_instances_show(
    gpudock: Invoke,
    live_server: LiveServer,
    home: Path,
    config_home: Path,
    unique: Callable[[str], str],
) -> None:
    name = unique("box")
    created = gpudock("instances", "create", "--count", "0", "--name", name, "--json")
    instance = json.loads(created.output)
    env = {"HOME": str(home)}

    config = gpudock("ssh-config", env=env)
    assert config.exit_code == 0, config.output
    entry = config.output.split(f"Host {name} {instance['id']}\n", 1)[1].split("\n\n")[0]
    known_hosts = config_home / "gpudock" / "known_hosts"
    for line in (
        "HostName 127.0.0.1",
        "Port 2222",
        f"User {instance['id']}",
        f"UserKnownHostsFile {known_hosts}",
        "StrictHostKeyChecking yes",
        "ControlMaster auto",
        f"ControlPath {config_home / 'gpudock' / 'cm'}/%C",
        "ControlPersist 10m",
        "ServerAliveInterval 30",
    ):
        assert f"    {line}\n" in entry + "\n", (line, entry)
    host_key = (live_server.data_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    assert known_hosts.read_text() == f"[127.0.0.1]:2222 {' '.join(host_key)}\n"
    assert (config_home / "gpudock" / "cm").stat().st_mode & 0o777 == 0o700

    printed = gpudock("ssh", name, "--print", "--", "nvidia-smi", "-L", env=env)
    assert printed.exit_code == 0, printed.output
    argv = shlex.split(printed.output)
    assert argv[:3] == ["ssh", "-p", "2222"]
    assert f"UserKnownHostsFile={known_hosts}" in argv and "StrictHostKeyChecking=yes" in argv
    assert argv[-3:] == [f"{instance['id']}@127.0.0.1", "nvidia-smi", "-L"]

    shown = gpudock("instances", "show", name)
    assert f"ssh -p 2222 {instance['id']}@127.0.0.1" in shown.output
    assert gpudock("ssh", "no-such-box", "--print").exit_code == 1
