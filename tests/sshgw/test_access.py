"""Who gets in: public keys only, the owner's or an admin's; refusals are audited."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.db.models import SshKeyModel, SshSessionModel
from gpudock.services.ssh import keys as ssh_keys
from gpudock.services.ssh import sessions as ssh_sessions
from tests.support.key_proof import add_with_proof
from tests.support.sshgw import World, make_key, wait_for

pytestmark = pytest.mark.docker
DENIED = b"Permission denied (publickey)"


def _refusal(world: World, instance_id: str, text: str) -> SshSessionModel:
    def find() -> SshSessionModel | None:
        rows = world.sessions(instance_id)
        return next((r for r in rows if r.outcome == "refused" and text in r.reason), None)

    return wait_for(find, f"a refusal mentioning {text!r}")


def _refusals_without_instance(world: World, text: str) -> list[SshSessionModel]:
    from sqlalchemy import select

    with world.platform.ctx.sessions() as session:
        rows = session.scalars(select(SshSessionModel).where(SshSessionModel.instance_id.is_(None)))
        return [r for r in rows if text in r.reason]


def test_an_unregistered_key_is_refused_and_audited(world: World) -> None:
    result = world.ssh(world.instance.id, "true", key="stranger")
    assert result.returncode == 255 and DENIED in result.stderr
    fingerprint = ssh_keys.parse_public_key(
        world.keys["stranger"].with_suffix(".pub").read_text()
    ).fingerprint
    wait_for(
        lambda: _refusals_without_instance(world, f"{fingerprint} is not registered"),
        "the refusal of an unregistered key",
    )


def test_another_users_key_is_refused_and_the_owner_sees_it(world: World) -> None:
    result = world.ssh(world.instance.id, "true", key="bob")
    assert result.returncode == 255 and DENIED in result.stderr
    row = _refusal(world, world.instance.id, "the key belongs to bob")
    assert row.user_id == world.users["bob"].id
    assert row.client_address.startswith("127.0.0.1:")
    # by name, bob's key only ever looks among bob's own instances
    assert world.ssh("train", "true", key="bob").returncode == 255
    wait_for(lambda: _refusals_without_instance(world, "bob has no instance 'train'"), "refusal")


def test_an_admin_key_reaches_any_instance_by_id(world: World) -> None:
    result = world.ssh(world.instance.id, "hostname", key="admin")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"train\n"


def test_password_and_keyboard_interactive_are_refused_and_audited(world: World) -> None:
    options = (
        "-o",
        "PubkeyAuthentication=no",
        "-o",
        "PreferredAuthentications=password,keyboard-interactive",
    )
    result = world.ssh("train", "true", options=options)
    assert result.returncode == 255 and DENIED in result.stderr
    wait_for(
        lambda: _refusals_without_instance(world, "password and keyboard-interactive"),
        "the refusal of a password login",
    )


@pytest.fixture
def agent(tmp_path: Path, world: World) -> Iterator[dict[str, str]]:
    """A running ssh-agent holding alice's key, as on a laptop."""
    socket_path = tmp_path / "agent.sock"
    process = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)])
    try:
        wait_for(socket_path.exists, "ssh-agent's socket")
        env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        subprocess.run(["ssh-add", "-q", str(world.keys["alice"])], env=env, check=True)
        yield env
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_agent_and_x11_forwarding_are_refused_and_audited(
    world: World, agent: dict[str, str]
) -> None:
    env = {**agent, "DISPLAY": ":7"}
    options = ("-A", "-X", "-o", "ForwardX11Trusted=yes")
    result = world.ssh("train", 'echo "agent=${SSH_AUTH_SOCK:-none}"', options=options, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"agent=none\n"
    _refusal(world, world.instance.id, "agent forwarding refused")
    _refusal(world, world.instance.id, "X11 forwarding refused")


def test_a_session_is_audited_with_its_key_and_byte_counts(world: World) -> None:
    payload = os.urandom(200_000)
    result = world.ssh("train", "wc -c", input=payload)
    assert result.stdout.strip() == b"200000"

    def closed_session() -> SshSessionModel | None:
        rows = world.sessions(world.instance.id)
        return next((r for r in rows if r.outcome == "closed" and r.bytes_in >= 200_000), None)

    row = wait_for(closed_session, "the closed session's record")
    fingerprint = ssh_keys.parse_public_key(
        world.keys["alice"].with_suffix(".pub").read_text()
    ).fingerprint
    assert row.key_fingerprint == fingerprint
    assert row.user_id == world.users["alice"].id
    assert row.bytes_out >= len(b"200000\n")
    assert row.ended_at is not None and row.ended_at >= row.started_at
    assert row.client_address.startswith("127.0.0.1:")


def test_a_removed_key_stops_working(world: World) -> None:
    key = make_key(world.tmp, "carol-laptop")
    added = add_with_proof(world.platform.ctx, world.users["alice"], key, "laptop")
    world.keys["laptop"] = key
    assert world.ssh("train", "true", key="laptop").returncode == 0
    ssh_keys.remove_key(world.platform.ctx, world.users["alice"], added.id)
    assert world.ssh("train", "true", key="laptop").returncode == 255


def test_sessions_are_listed_for_the_owner_only(world: World) -> None:
    from gpudock.errors import NotFound

    rows = ssh_sessions.list_sessions(world.platform.ctx, world.users["alice"], "train")
    assert rows and all(r.instance_id == world.instance.id for r in rows)
    with pytest.raises(NotFound):
        ssh_sessions.list_sessions(world.platform.ctx, world.users["bob"], world.instance.id)


def test_a_key_is_marked_used_by_a_login_not_by_an_offer(world: World) -> None:
    """Anyone with the public key alone can offer it (ssh -i KEY.pub); that is no use."""
    key = make_key(world.tmp, "dora-laptop")
    added = add_with_proof(world.platform.ctx, world.users["alice"], key, "dora")
    public_only = world.tmp / "public-only" / "id_dora.pub"
    public_only.parent.mkdir()
    public_only.write_text(key.with_name(key.name + ".pub").read_text())
    world.keys["dora-public"] = public_only
    offered = world.ssh("train", "true", key="dora-public", options=("-v",))
    assert offered.returncode == 255 and b"Server accepts key" in offered.stderr
    assert _last_used(world, added.id) is None
    world.keys["dora"] = key
    assert world.ssh("train", "true", key="dora").returncode == 0
    wait_for(lambda: _last_used(world, added.id), "the login to mark the key used")


def _last_used(world: World, key_id: str) -> object:
    with world.platform.ctx.sessions() as session:
        row = session.get(SshKeyModel, key_id)
        assert row is not None
        return row.last_used_at
