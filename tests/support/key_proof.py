"""Registering SSH keys as users must: with a proof of possession signed by the real
ssh-keygen (`ssh-keygen -Y sign`), through the service or through the API."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Protocol

import httpx

from gpudock.db.models import SshKeyModel, UserModel
from gpudock.services.context import ServiceContext
from gpudock.services.ssh import key_proof as ssh_key_proof
from gpudock.services.ssh import keys as ssh_keys
from gpudock.services.ssh.key_proof import KeyProof

API = "/api/v1"


class Poster(Protocol):
    """httpx.Client and Starlette's TestClient alike."""

    def post(self, url: str, **kwargs: Any) -> httpx.Response: ...


def make_key(directory: Path, name: str, *args: str) -> Path:
    """A new key pair (ed25519 unless ARGS say otherwise); the private key's path."""
    path = directory / f"id_{name}"
    kind = list(args) or ["-t", "ed25519"]
    subprocess.run(
        ["ssh-keygen", "-q", *kind, "-N", "", "-C", f"{name}@test", "-f", str(path)], check=True
    )
    return path


def public_text(private_key: Path) -> str:
    return private_key.with_name(private_key.name + ".pub").read_text()


def sign(private_key: Path, message: str, namespace: str = ssh_key_proof.NAMESPACE) -> str:
    """The armored SSHSIG that `printf %s MESSAGE | ssh-keygen -Y sign` prints."""
    done = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", namespace, "-f", str(private_key)],
        input=message.encode(),
        capture_output=True,
        check=True,
    )
    return done.stdout.decode()


def add_with_proof(
    ctx: ServiceContext, user: UserModel, private_key: Path, name: str | None = None
) -> SshKeyModel:
    """Through the service: a challenge for USER, signed with PRIVATE_KEY."""
    challenge = ssh_key_proof.issue_challenge(ctx, user).text
    proof = KeyProof(challenge, sign(private_key, challenge))
    return ssh_keys.add_key(ctx, user, public_text(private_key), name, proof)


def post_with_proof(
    client: Poster,
    private_key: Path,
    name: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    prefix: str = API,
) -> httpx.Response:
    """Through the API: POST …/ssh-keys/challenge, sign it, POST …/ssh-keys."""
    extra = {"headers": headers} if headers is not None else {}
    issued = client.post(f"{prefix}/ssh-keys/challenge", **extra)
    assert issued.status_code == 201, issued.text
    challenge = issued.json()["challenge"]
    body = {
        "public_key": public_text(private_key),
        "challenge": challenge,
        "signature": sign(private_key, challenge),
        **({"name": name} if name else {}),
    }
    return client.post(f"{prefix}/ssh-keys", json=body, **extra)
