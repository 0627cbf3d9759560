"""Adding an SSH key proves possession of its private half (services/ssh_key_proof.py).

Every signature here is made by the real ssh-keygen (`-Y sign`), as users make them.
"""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from gpudock.db.models import SshKeyModel
from gpudock.platform import Platform
from gpudock.services.accounts import tokens, users
from gpudock.services.context import utc_now
from gpudock.services.ssh import key_proof as ssh_key_proof
from gpudock.services.ssh import keys as ssh_keys
from tests.support.factories import Tenant
from tests.support.key_proof import make_key, post_with_proof, public_text, sign
from tests.support.platforms import PlatformFactory

API = "/api/v1"


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proof-keys")


@pytest.fixture(scope="module")
def alice_key(key_dir: Path) -> Path:
    return make_key(key_dir, "alice")


@pytest.fixture(scope="module")
def bob_key(key_dir: Path) -> Path:
    return make_key(key_dir, "bob")


def challenge(client: TestClient, tenant: Tenant) -> str:
    issued = client.post(f"{API}/ssh-keys/challenge", headers=tenant.headers)
    assert issued.status_code == 201, issued.text
    text: str = issued.json()["challenge"]
    return text


def post(client: TestClient, tenant: Tenant, key: Path, **proof: str) -> httpx.Response:
    body: dict[str, Any] = {"public_key": public_text(key), **proof}
    response: httpx.Response = client.post(f"{API}/ssh-keys", json=body, headers=tenant.headers)
    return response


def refusal(response: httpx.Response, field: str) -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("key_proof_refused", field), error
    message: str = error["message"]
    return message


def fingerprint(key: Path) -> str:
    return ssh_keys.parse_public_key(public_text(key)).fingerprint


def listed(client: TestClient, tenant: Tenant) -> list[str]:
    keys = client.get(f"{API}/ssh-keys", headers=tenant.headers).json()
    return [k["fingerprint"] for k in keys]


def test_a_key_without_a_proof_is_refused_with_what_to_do(
    client: TestClient, alice: Tenant, alice_key: Path
) -> None:
    for proof in ({}, {"challenge": challenge(client, alice)}, {"signature": "x"}):
        message = refusal(post(client, alice, alice_key, **proof), "signature")
        assert "ssh-keygen -Y sign -n gpudock-key-proof" in message
        assert "POST /api/v1/ssh-keys/challenge" in message and "gpudock keys add" in message
    assert listed(client, alice) == []


def test_the_challenge_is_documented_and_its_one_line_command_works(
    client: TestClient, alice: Tenant, alice_key: Path
) -> None:
    schema = client.get("/openapi.json").json()
    assert "201" in schema["paths"]["/api/v1/ssh-keys/challenge"]["post"]["responses"]
    issued = client.post(f"{API}/ssh-keys/challenge", headers=alice.headers).json()
    assert issued["namespace"] == "gpudock-key-proof"
    command = issued["sign_command"]
    assert f"'{issued['challenge']}'" in command and "-n gpudock-key-proof" in command
    # what the console and the API tell users to run, run as they would
    shell = command.replace("~/.ssh/id_ed25519", str(alice_key))
    signed = subprocess.run(["sh", "-c", shell], capture_output=True, check=True, text=True)
    added = post(client, alice, alice_key, challenge=issued["challenge"], signature=signed.stdout)
    assert added.status_code == 201, added.text
    assert added.json()["verified"] is True


def test_b_cannot_register_as_public_key_without_as_private_key(
    client: TestClient, alice: Tenant, bob: Tenant, alice_key: Path, bob_key: Path
) -> None:
    """The squat: bob has only alice's public key."""
    assert post(client, bob, alice_key).status_code == 422
    # bob signs his own challenge with his own key and sends alice's public key
    own = challenge(client, bob)
    message = refusal(
        post(client, bob, alice_key, challenge=own, signature=sign(bob_key, own)), "signature"
    )
    assert f"made with the key {fingerprint(bob_key)}, not with {fingerprint(alice_key)}" in (
        message
    )
    # bob replays a proof alice made (for her own account)
    hers = challenge(client, alice)
    replayed = post(client, bob, alice_key, challenge=hers, signature=sign(alice_key, hers))
    assert "issued to another account" in refusal(replayed, "challenge")
    assert listed(client, bob) == []
    assert post_with_proof(client, alice_key, headers=alice.headers).status_code == 201
    assert listed(client, alice) == [fingerprint(alice_key)]


def test_an_expired_challenge_is_refused(
    client: TestClient, platform: Platform, alice: Tenant, alice_key: Path
) -> None:
    now = utc_now()
    platform.ctx.clock = lambda: now
    issued = challenge(client, alice)
    signature = sign(alice_key, issued)
    platform.ctx.clock = lambda: now + ssh_key_proof.TTL + timedelta(seconds=1)
    message = refusal(
        post(client, alice, alice_key, challenge=issued, signature=signature), "challenge"
    )
    assert "the challenge expired at" in message and "get a new one" in message
    platform.ctx.clock = lambda: now + ssh_key_proof.TTL - timedelta(seconds=2)
    added = post(client, alice, alice_key, challenge=issued, signature=signature)
    assert added.status_code == 201, added.text


def test_a_signature_for_another_namespace_or_message_is_refused(
    client: TestClient, alice: Tenant, alice_key: Path
) -> None:
    issued = challenge(client, alice)
    as_git = post(
        client, alice, alice_key, challenge=issued, signature=sign(alice_key, issued, "git")
    )
    assert "for the namespace 'git', not 'gpudock-key-proof'" in refusal(as_git, "signature")
    other = challenge(client, alice)  # alice's too, and valid: but not what she signed
    swapped = post(client, alice, alice_key, challenge=other, signature=sign(alice_key, issued))
    assert "does not match the challenge" in refusal(swapped, "signature")
    assert listed(client, alice) == []
    # `echo CHALLENGE | ssh-keygen …` signs a trailing newline: that is the same challenge
    echoed = post(
        client, alice, alice_key, challenge=issued, signature=sign(alice_key, issued + "\n")
    )
    assert echoed.status_code == 201, echoed.text


def test_a_damaged_or_forged_challenge_and_a_damaged_signature_are_refused(
    client: TestClient,
    platform_factory: PlatformFactory,
    alice: Tenant,
    bob: Tenant,
    alice_key: Path,
) -> None:
    issued = challenge(client, alice)
    good = sign(alice_key, issued)
    prefix, user_id, expires, nonce, mac = issued.split(".")
    bob_id = challenge(client, bob).split(".")[1]
    forged = [
        issued[:-3],  # cut short
        f"{prefix}.{user_id}.{int(expires) + 86400}.{nonce}.{mac}",  # a later expiry
        f"{prefix}.{bob_id}.{expires}.{nonce}.{mac}",  # another user
        "gpudock-key-proof.x",
        f"{prefix}.{user_id}.²³.{nonce}.{mac}",  # digits, but not ASCII ones
        f"{prefix}.{user_id}.{expires}.{nonce}.é{mac[1:]}",
    ]
    for text in forged:
        message = refusal(
            post(client, alice, alice_key, challenge=text, signature=good), "challenge"
        )
        assert "not a challenge this server issued" in message, text
    elsewhere = platform_factory()  # another installation: another secret
    owner = users.create_user(elsewhere.ctx, "alice").user
    foreign = ssh_key_proof.issue_challenge(elsewhere.ctx, owner).text
    signed = sign(alice_key, foreign)
    assert "not a challenge" in refusal(
        post(client, alice, alice_key, challenge=foreign, signature=signed), "challenge"
    )
    body = good.splitlines()
    for damaged, says in (
        ("hello", "not an SSH signature: paste everything"),
        ("\n".join([body[0], "!!!", body[-1]]), "base64 is damaged"),
        ("\n".join([body[0], "AAAA", body[-1]]), "not an SSH signature made by"),
    ):
        response = post(client, alice, alice_key, challenge=issued, signature=damaged)
        assert says in refusal(response, "signature")
    assert listed(client, alice) == []


def _legacy_key(platform: Platform, owner_id: str, key: Path) -> SshKeyModel:
    """A key as registered before proofs: verified_at NULL."""
    parsed = ssh_keys.parse_public_key(public_text(key))
    row = SshKeyModel(
        id="k-legacy" + owner_id[:4],
        user_id=owner_id,
        name="old",
        algorithm=parsed.algorithm,
        bits=parsed.bits,
        fingerprint=parsed.fingerprint,
        public_key=parsed.public_key,
        created_at=utc_now(),
    )
    with platform.ctx.sessions.begin() as session:
        session.add(row)
    return row


def _user_id(platform: Platform, tenant: Tenant) -> str:
    return tokens.authenticate(platform.ctx, tenant.token).user.id


def test_an_unproven_key_is_listed_so_and_its_owner_proves_it_in_place(
    client: TestClient, platform: Platform, alice: Tenant, alice_key: Path
) -> None:
    legacy = _legacy_key(platform, _user_id(platform, alice), alice_key)
    [shown] = client.get(f"{API}/ssh-keys", headers=alice.headers).json()
    assert (shown["id"], shown["verified"], shown["verified_at"]) == (legacy.id, False, None)
    proven = post_with_proof(client, alice_key, headers=alice.headers)
    assert proven.status_code == 201, proven.text
    assert (proven.json()["id"], proven.json()["name"]) == (legacy.id, "old")
    [shown] = client.get(f"{API}/ssh-keys", headers=alice.headers).json()
    assert shown["verified"] is True and shown["verified_at"] is not None
    again = post_with_proof(client, alice_key, headers=alice.headers)
    assert again.status_code == 409 and "your account" in again.text


def test_a_squat_from_before_proofs_gives_way_to_the_keys_holder(
    client: TestClient, platform: Platform, alice: Tenant, bob: Tenant, alice_key: Path
) -> None:
    _legacy_key(platform, _user_id(platform, bob), alice_key)  # bob registered alice's key
    assert listed(client, bob) == [fingerprint(alice_key)]
    taken = post_with_proof(client, alice_key, headers=alice.headers)
    assert taken.status_code == 201, taken.text
    assert listed(client, alice) == [fingerprint(alice_key)]
    assert listed(client, bob) == []
