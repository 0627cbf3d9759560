"""SSH: the caller's public keys, the gateway's address and an instance's session audit."""

from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import Context, CurrentUser
from gpudock.api.errors import error_responses
from gpudock.api.links import links
from gpudock.api.schemas import (
    SshEndpointPublic,
    SshKeyChallengePublic,
    SshKeyCreateRequest,
    SshKeyPublic,
    SshSessionPublic,
)
from gpudock.db.models import SshKeyModel
from gpudock.services.ssh import endpoint as ssh_endpoint
from gpudock.services.ssh import key_proof as ssh_key_proof
from gpudock.services.ssh import keys as ssh_keys
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.services.ssh.key_proof import KeyProof

router = APIRouter(tags=["ssh"])
NOT_FOUND = error_responses(404)


def _key(key: SshKeyModel) -> SshKeyPublic:
    return SshKeyPublic(
        id=key.id,
        name=key.name,
        algorithm=key.algorithm,
        bits=key.bits,
        fingerprint=key.fingerprint,
        public_key=key.public_key,
        created_at=key.created_at,
        last_used_at=key.last_used_at,
        verified=key.verified_at is not None,
        verified_at=key.verified_at,
    )


@router.post(
    "/ssh-keys",
    response_model=SshKeyPublic,
    status_code=201,
    responses={
        **error_responses(409),
        **links(201, "key_ref", "id", {"remove": ("DELETE", "/ssh-keys/{key_ref}")}),
    },
)
def add_key(ctx: Context, user: CurrentUser, body: SshKeyCreateRequest) -> SshKeyPublic:
    """Register a public key, with proof that you hold its private half: sign a
    challenge from `POST /ssh-keys/challenge` with `ssh-keygen -Y sign -n
    gpudock-key-proof` and send both (`gpudock keys add` does it all). A key of
    yours registered before proofs were required is marked proven instead."""
    proof = None
    if body.challenge is not None or body.signature is not None:
        proof = KeyProof(body.challenge or "", body.signature or "")
    return _key(ssh_keys.add_key(ctx, user, body.public_key, body.name, proof))


@router.post(
    "/ssh-keys/challenge",
    response_model=SshKeyChallengePublic,
    status_code=201,
)
def challenge(ctx: Context, user: CurrentUser) -> SshKeyChallengePublic:
    """A challenge to sign with the key you are about to add (valid 15 minutes, for
    you only): `printf %s CHALLENGE | ssh-keygen -Y sign -n gpudock-key-proof -f KEY`."""
    issued = ssh_key_proof.issue_challenge(ctx, user)
    return SshKeyChallengePublic(
        challenge=issued.text,
        namespace=ssh_key_proof.NAMESPACE,
        expires_at=issued.expires_at,
        sign_command=issued.sign_command(),
    )


@router.get("/ssh-keys", response_model=list[SshKeyPublic])
def list_keys(ctx: Context, user: CurrentUser) -> list[SshKeyPublic]:
    return [_key(k) for k in ssh_keys.list_keys(ctx, user)]


@router.delete("/ssh-keys/{key_ref:path}", response_model=SshKeyPublic, responses=NOT_FOUND)
def remove_key(ctx: Context, user: CurrentUser, key_ref: str) -> SshKeyPublic:
    """By id, name or fingerprint (whose base64 may hold '/'), among the caller's own keys."""
    return _key(ssh_keys.remove_key(ctx, user, key_ref))


@router.get("/ssh", response_model=SshEndpointPublic, responses=NOT_FOUND)
def gateway(ctx: Context, _user: CurrentUser) -> SshEndpointPublic:
    """Where the SSH gateway listens, and its host key (404 if the server runs none)."""
    found = ssh_endpoint.endpoint(ctx.settings)
    return SshEndpointPublic.model_validate(found, from_attributes=True)


@router.get(
    "/instances/{instance_id}/sessions",
    response_model=list[SshSessionPublic],
    responses=NOT_FOUND,
)
def sessions(ctx: Context, user: CurrentUser, instance_id: str) -> list[SshSessionPublic]:
    """SSH sessions and refused attempts on the instance, newest first (owner or admin)."""
    found = ssh_sessions.list_sessions(ctx, user, instance_id)
    return [SshSessionPublic.model_validate(s, from_attributes=True) for s in found]
