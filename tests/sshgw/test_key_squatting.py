"""Someone else's public key cannot be squatted: the real OpenSSH client, offering
an unregistered key and then the victim's, ends in the victim's instance or is
refused, never in the squatter's instance of the same name."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import SshKeyModel, SshSessionModel
from gpudock.services.accounts import users
from gpudock.services.ssh import keys as ssh_keys
from gpudock.services.ssh.key_proof import KeyProof, KeyProofRefused, issue_challenge
from tests.support.key_proof import add_with_proof, public_text, sign
from tests.support.sshgw import World, make_key, wait_for

pytestmark = pytest.mark.docker


def _person(world: World, name: str) -> Path:
    world.users[name] = users.create_user(world.platform.ctx, name).user
    world.keys[name] = make_key(world.tmp, name)
    return world.keys[name]


def _web(world: World, owner: str) -> str:
    """OWNER's instance "web", holding a file that says whose it is."""
    instance = world.create_instance(owner, "web")
    world.container_exec(instance.id, f"echo {owner} > /root/whose")
    return instance.id


def _ssh_as_victim(world: World, victim_key: Path) -> tuple[int, bytes]:
    """`ssh -i stranger -i victim web@…`: the unregistered key first, as in the report."""
    done = world.ssh("web", "cat /root/whose", key="stranger", options=("-i", str(victim_key)))
    return done.returncode, done.stdout


def test_a_squatted_key_never_reaches_the_squatters_instance(world: World) -> None:
    vera, sam = _person(world, "vera"), _person(world, "sam")
    ctx = world.platform.ctx
    _web(world, "sam")
    # sam has vera's public key, not her private key: no proof he can make will do
    with pytest.raises(KeyProofRefused):
        ssh_keys.add_key(ctx, world.users["sam"], public_text(vera), None, None)
    challenge = issue_challenge(ctx, world.users["sam"]).text
    with pytest.raises(KeyProofRefused, match="made with the key"):
        proof = KeyProof(challenge, sign(sam, challenge))
        ssh_keys.add_key(ctx, world.users["sam"], public_text(vera), None, proof)
    assert ssh_keys.list_keys(ctx, world.users["sam"]) == []

    refused, output = _ssh_as_victim(world, vera)
    assert (refused, output) == (255, b"")
    add_with_proof(ctx, world.users["vera"], vera)
    _web(world, "vera")
    assert _ssh_as_victim(world, vera) == (0, b"vera\n")


@pytest.fixture
def refuse_unproven(world: World) -> Iterator[None]:
    """The operator ends the grace period (GPUDOCK_SSH_UNVERIFIED_KEYS=refuse)."""
    settings = world.platform.ctx.settings
    settings.ssh_unverified_keys = "refuse"
    try:
        yield
    finally:
        settings.ssh_unverified_keys = "allow"


def _refused(world: World, text: str) -> list[SshSessionModel]:
    with world.platform.ctx.sessions() as session:
        rows = session.scalars(select(SshSessionModel).where(SshSessionModel.outcome == "refused"))
        return [r for r in rows if text in r.reason]


def _squat_from_before_proofs(world: World, squatter: str, key: Path) -> None:
    parsed = ssh_keys.parse_public_key(public_text(key))
    with world.platform.ctx.sessions.begin() as session:
        session.add(
            SshKeyModel(
                id=f"k-{squatter}",
                user_id=world.users[squatter].id,
                name="squat",
                algorithm=parsed.algorithm,
                bits=parsed.bits,
                fingerprint=parsed.fingerprint,
                public_key=parsed.public_key,
                created_at=datetime.now(UTC),
            )
        )


def test_a_squat_from_before_the_upgrade_is_told_refused_and_then_undone(
    world: World, refuse_unproven: None
) -> None:
    uma, _ = _person(world, "uma"), _person(world, "otto")
    _squat_from_before_proofs(world, "otto", uma)
    _web(world, "otto")
    assert _ssh_as_victim(world, uma) == (255, b"")
    wait_for(lambda: _refused(world, "this server refuses unproven keys"), "the audited refusal")
    settings = world.platform.ctx.settings
    settings.ssh_unverified_keys = "allow"  # the grace period: the key works, with a warning
    told = world.ssh("web", "cat /root/whose", key="uma", options=("-tt",))
    assert b"is registered to otto but was never proven" in told.stderr
    assert told.stdout == b"otto\r\n"  # what the grace period allows: hence the warning
    settings.ssh_unverified_keys = "refuse"
    add_with_proof(world.platform.ctx, world.users["uma"], uma)  # uma proves: the squat goes
    assert ssh_keys.list_keys(world.platform.ctx, world.users["otto"]) == []
    assert _ssh_as_victim(world, uma)[0] == 255  # uma has no "web" yet: refused, not otto's
    _web(world, "uma")
    assert _ssh_as_victim(world, uma) == (0, b"uma\n")
