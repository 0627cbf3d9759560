"""`gpudock keys`, `gpudock ssh`, `gpudock ssh-config` and the ssh line of `instances show`."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpudock.db.engine import make_engine, make_sessionmaker
from gpudock.db.models import SshKeyModel
from gpudock.services.ssh import keys as ssh_keys
from tests.support.cli import Invoke, LiveServer


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
    added = gpudock("keys", "add", str(private), "--name", name)
    assert added.exit_code == 0, added.output
    assert fingerprint(private.with_suffix(".pub")) in added.output and "proven" in added.output
    listed = json.loads(gpudock("keys", "list", "--json").output)
    assert [k["verified"] for k in listed if k["name"] == name] == [True]
    table = gpudock("keys", "list")
    assert name in table.output and "ssh-ed25519 256" in table.output
    assert "PROVEN" in table.output and "were registered before" not in table.output
    removed = gpudock("keys", "remove", name)
    assert removed.exit_code == 0 and "Removed" in removed.output
    assert gpudock("keys", "remove", name).exit_code == 1


def test_keys_add_defaults_to_the_users_key_and_never_sends_a_private_one(
    gpudock: Invoke, home: Path, tmp_path: Path
) -> None:
    nothing = gpudock("keys", "add", env={"HOME": str(home)})
    assert nothing.exit_code == 2 and "ssh-keygen -t ed25519" in nothing.output
    (home / ".ssh").mkdir()
    private = keygen(home / ".ssh", "ed25519")
    disguised = tmp_path / "id_disguised.pub"  # a private key under a public key's name
    disguised.write_bytes(private.read_bytes())
    refused = gpudock("keys", "add", str(disguised))
    assert refused.exit_code == 2 and "private key" in refused.output
    lone = keygen(tmp_path, "lone")
    lone.with_suffix(".pub").unlink()
    missing = gpudock("keys", "add", str(lone))
    assert missing.exit_code == 2 and f"ssh-keygen -y -f {lone}" in missing.output
    default = gpudock("keys", "add", "--json", env={"HOME": str(home)})
    assert default.exit_code == 0, default.output
    assert json.loads(default.output)["fingerprint"] == fingerprint(private.with_suffix(".pub"))


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A running ssh-agent (its environment), as on a laptop. Without -D, ssh-agent
    returns only once its socket listens, so nothing has to wait for it."""
    socket_path = tmp_path / "agent.sock"
    started = subprocess.run(
        ["ssh-agent", "-s", "-a", str(socket_path)], capture_output=True, text=True, check=True
    )
    match = re.search(r"SSH_AGENT_PID=(\d+)", started.stdout)
    assert match, started.stdout
    try:
        yield {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
    finally:
        os.kill(int(match.group(1)), signal.SIGTERM)


def test_keys_add_signs_through_ssh_agent_when_only_the_pub_is_on_disk(
    gpudock: Invoke,
    tmp_path: Path,
    home: Path,
    agent: dict[str, str],
    unique: Callable[[str], str],
) -> None:
    (home / ".ssh").mkdir()
    named, default = keygen(tmp_path, "agent"), keygen(home / ".ssh", "ed25519")
    for private in (named, default):
        subprocess.run(["ssh-add", "-q", str(private)], env=agent, check=True)
        private.unlink()
    name = unique("agent")
    added = gpudock("keys", "add", str(named.with_suffix(".pub")), "--name", name, env=agent)
    assert added.exit_code == 0, added.output
    assert fingerprint(named.with_suffix(".pub")) in added.output
    by_default = gpudock(
        "keys", "add", "--name", unique("default"), env={**agent, "HOME": str(home)}
    )
    assert by_default.exit_code == 0, by_default.output
    assert fingerprint(default.with_suffix(".pub")) in by_default.output


def test_another_users_public_key_cannot_be_added_without_its_private_key(
    gpudock: Invoke, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """The squat through the CLI: bob has a copy of alice's .pub only."""
    alice = keygen(tmp_path, "alice")
    copy = tmp_path / "bob" / "alice.pub"
    copy.parent.mkdir()
    copy.write_text(alice.with_suffix(".pub").read_text())
    bob = json.loads(gpudock("users", "create", unique("bob"), "--json").output)["token"]
    squat = gpudock("keys", "add", str(copy), token=bob, env={"SSH_AUTH_SOCK": None})
    assert squat.exit_code == 1, squat.output
    assert f"ssh-keygen could not sign with {copy}" in squat.output
    assert json.loads(gpudock("keys", "list", "--json", token=bob).output) == []
    owner = json.loads(gpudock("users", "create", unique("alice"), "--json").output)["token"]
    assert gpudock("keys", "add", str(alice), token=owner).exit_code == 0


def _register_unproven(live_server: LiveServer, user_id: str, key: Path) -> None:
    """A key as registered before proofs existed (straight into the server's database)."""
    parsed = ssh_keys.parse_public_key(key.with_suffix(".pub").read_text())
    engine = make_engine(f"sqlite:///{live_server.data_dir / 'gpudock.db'}")
    try:
        with make_sessionmaker(engine).begin() as session:
            session.add(
                SshKeyModel(
                    id="k-cli-legacy",
                    user_id=user_id,
                    name="old-laptop",
                    algorithm=parsed.algorithm,
                    bits=parsed.bits,
                    fingerprint=parsed.fingerprint,
                    public_key=parsed.public_key,
                    created_at=datetime.now(UTC),
                )
            )
    finally:
        engine.dispose()


def test_keys_list_flags_an_unproven_key_and_keys_add_proves_it(
    gpudock: Invoke, live_server: LiveServer, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    made = json.loads(gpudock("users", "create", unique("old"), "--json").output)
    key = keygen(tmp_path, "old")
    _register_unproven(live_server, made["id"], key)
    table = gpudock("keys", "list", token=made["token"])
    assert "old-laptop" in table.output and " NO " in table.output
    assert "prove each with `gpudock keys add PATH`" in table.output
    proven = gpudock("keys", "add", str(key), "--json", token=made["token"])
    assert proven.exit_code == 0, proven.output
    assert json.loads(proven.output)["id"] == "k-cli-legacy"
    listed = json.loads(gpudock("keys", "list", "--json", token=made["token"]).output)
    assert [k["verified"] for k in listed] == [True]


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
