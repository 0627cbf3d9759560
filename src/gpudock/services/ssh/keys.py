"""Users' SSH public keys: validation, fingerprints as OpenSSH prints them, storage.

Accepted: ssh-ed25519, ecdsa-sha2-nistp256/384/521 and ssh-rsa of 2048 bits or
more. A key belongs to one user (its fingerprint is unique), so the key that
authenticates at the SSH gateway names exactly one person; adding one takes a
proof that the user holds its private half (`ssh_key_proof`).
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncssh
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.db.models import SshKeyModel, UserModel
from gpudock.errors import Conflict, InvalidRequest, NotFound
from gpudock.services.context import ServiceContext
from gpudock.services.ssh import key_proof as ssh_key_proof
from gpudock.services.ssh.key_proof import KeyProof

MIN_RSA_BITS = 2048
ECDSA_CURVES = ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")
ACCEPTED = ("ssh-ed25519", *ECDSA_CURVES, "ssh-rsa")
MAX_KEY_TEXT = 16_384
_NAME = re.compile(r"^[\w.@+-][\w .@+-]{0,127}$")
log = logging.getLogger(__name__)
_HOW_TO_MAKE = "make one with `ssh-keygen -t ed25519` and send the .pub file"


@dataclass(frozen=True)
class ParsedKey:
    algorithm: str
    bits: int
    fingerprint: str  # "SHA256:…", as `ssh-keygen -lf` prints it
    public_key: str  # "<algorithm> <base64>"
    comment: str


def parse_public_key(text: str) -> ParsedKey:
    """One OpenSSH public key line; InvalidRequest says what is wrong with it."""
    line = text.strip()
    if "PRIVATE KEY" in line:
        raise InvalidRequest(
            "that is a private key: never share it; send the public key (the .pub file)",
            field="public_key",
        )
    if not line or len(line) > MAX_KEY_TEXT or "\n" in line:
        raise InvalidRequest(
            f"expected one public key line ('ssh-ed25519 AAAA… comment'); {_HOW_TO_MAKE}",
            field="public_key",
        )
    algorithm = line.split()[0]
    if algorithm not in ACCEPTED:
        raise InvalidRequest(
            f"{algorithm[:64]!r} keys are not accepted: use ssh-ed25519, ecdsa-sha2-nistp256/"
            f"384/521 or ssh-rsa with at least {MIN_RSA_BITS} bits; {_HOW_TO_MAKE}",
            field="public_key",
        )
    try:
        key = asyncssh.import_public_key(line)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise InvalidRequest(
            f"malformed {algorithm} public key ({exc}); copy the whole line of the .pub file",
            field="public_key",
        ) from exc
    return _describe(key, algorithm)


def _describe(key: asyncssh.SSHKey, algorithm: str) -> ParsedKey:
    if key.algorithm.decode() != algorithm:
        raise InvalidRequest(
            f"the key data is a {key.algorithm.decode()!r} key, not {algorithm!r}",
            field="public_key",
        )
    bits = _bits(key)
    if algorithm == "ssh-rsa" and bits < MIN_RSA_BITS:
        raise InvalidRequest(
            f"RSA keys need at least {MIN_RSA_BITS} bits, this one has {bits}; {_HOW_TO_MAKE}",
            field="public_key",
        )
    public = key.export_public_key("openssh").decode().split()
    comment = key.get_comment() or ""
    return ParsedKey(
        algorithm=algorithm,
        bits=bits,
        fingerprint=key.get_fingerprint("sha256"),
        public_key=f"{public[0]} {public[1]}",
        comment=comment,
    )


def _bits(key: asyncssh.SSHKey) -> int:
    pyca = key.pyca_key
    if isinstance(pyca, rsa.RSAPublicKey):
        return pyca.key_size
    if isinstance(pyca, ec.EllipticCurvePublicKey):
        return pyca.curve.key_size
    return 256  # ed25519


def add_key(
    ctx: ServiceContext, user: UserModel, text: str, name: str | None, proof: KeyProof | None
) -> SshKeyModel:
    """Register the key once PROOF shows the user holds its private half.

    The proof is checked first, so only the key's holder learns whether it is
    registered already. A key of this user's registered before proofs were
    required is marked proven (and returned); another user's unproven
    registration of it gives way to the proven holder.
    """
    parsed = parse_public_key(text)
    key_name = (name or parsed.comment or parsed.fingerprint[7:19]).strip()[:128]
    if not _NAME.match(key_name):
        raise InvalidRequest(
            f"bad key name {key_name!r}: use up to 128 letters, digits, spaces and ._@+-",
            field="name",
        )
    ssh_key_proof.check(ctx, user, parsed.public_key, proof)
    now = ctx.clock()
    row = SshKeyModel(
        id="k-" + uuid.uuid4().hex[:12],
        user_id=user.id,
        name=key_name,
        algorithm=parsed.algorithm,
        bits=parsed.bits,
        fingerprint=parsed.fingerprint,
        public_key=parsed.public_key,
        created_at=now,
        verified_at=now,
    )
    try:
        with ctx.sessions.begin() as session:
            existing = _claim(session, user, parsed.fingerprint, now)
            if existing is not None:
                return existing
            _check_name_free(session, user, key_name)
            session.add(row)
    except IntegrityError as exc:  # a concurrent add of the same key or name
        raise Conflict(f"the key {parsed.fingerprint} or the name {key_name!r} is taken") from exc
    return row


def _claim(
    session: Session, user: UserModel, fingerprint: str, now: datetime
) -> SshKeyModel | None:
    """The user's own unproven row, now proven; or None once the fingerprint is free."""
    existing = session.scalars(
        select(SshKeyModel).where(SshKeyModel.fingerprint == fingerprint)
    ).first()
    if existing is None:
        return None
    if existing.verified_at is None:
        if existing.user_id == user.id:
            existing.verified_at = now
            return existing
        log.warning(
            "ssh key %s: unproven registration by user %s removed: user %s proved they hold it",
            fingerprint,
            existing.user_id,
            user.id,
        )
        session.delete(existing)
        session.flush()
        return None
    whose = "your account" if existing.user_id == user.id else "another account"
    raise Conflict(
        f"the key {fingerprint} is already registered to {whose}; "
        "a key can belong to one user only",
        field="public_key",
    )


def _check_name_free(session: Session, user: UserModel, name: str) -> None:
    taken = session.scalars(
        select(SshKeyModel.id).where(SshKeyModel.user_id == user.id, SshKeyModel.name == name)
    ).first()
    if taken is not None:
        raise Conflict(f"you already have a key named {name!r}; pass another --name", field="name")


def list_keys(ctx: ServiceContext, user: UserModel) -> list[SshKeyModel]:
    with ctx.reader() as session:
        query = (
            select(SshKeyModel)
            .where(SshKeyModel.user_id == user.id)
            .order_by(SshKeyModel.created_at, SshKeyModel.id)
        )
        return list(session.scalars(query))


def remove_key(ctx: ServiceContext, user: UserModel, ref: str) -> SshKeyModel:
    """By id, name or fingerprint, among the user's own keys; others' → NotFound."""
    with ctx.sessions.begin() as session:
        key = session.scalars(
            select(SshKeyModel).where(
                SshKeyModel.user_id == user.id,
                (SshKeyModel.id == ref)
                | (SshKeyModel.name == ref)
                | (SshKeyModel.fingerprint == ref),
            )
        ).first()
        if key is None:
            raise NotFound(f"no SSH key {ref!r}: `gpudock keys list` shows yours")
        session.delete(key)
    return key


def find_by_fingerprint(ctx: ServiceContext, fingerprint: str) -> tuple[SshKeyModel, UserModel]:
    """The key and its owner; NotFound if no user registered it."""
    with ctx.reader() as session:
        row = session.execute(
            select(SshKeyModel, UserModel)
            .join(UserModel, UserModel.id == SshKeyModel.user_id)
            .where(SshKeyModel.fingerprint == fingerprint)
        ).first()
        if row is None:
            raise NotFound(f"the key {fingerprint} is not registered")
        key, owner = row
        session.expunge_all()
    return key, owner


def mark_used(ctx: ServiceContext, key_id: str) -> None:
    with ctx.sessions.begin() as session:
        session.execute(
            update(SshKeyModel).where(SshKeyModel.id == key_id).values(last_used_at=ctx.clock())
        )
