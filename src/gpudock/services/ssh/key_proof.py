"""Proof that whoever adds an SSH public key holds its private half.

Public keys are public (GitHub serves everyone's), and the gateway names a
user by the key that authenticates. Without a proof, anyone could register
someone else's public key first, and its holder would then log in to the
squatter's instances. So adding a key takes a signature, made with the key,
over a challenge the server issued to this user:

    printf %s 'CHALLENGE' | ssh-keygen -Y sign -n gpudock-key-proof -f ~/.ssh/id_ed25519

That is OpenSSH's SSHSIG format (the one git uses for signed commits); its
namespace keeps a signature made for anything else (a commit, a file) from
counting here. asyncssh checks it (`validate_sshsig`); this module reads the
envelope only to say *why* a signature is refused.

Challenges are stateless: `gpudock-key-proof.<user id>.<expiry>.<nonce>.<mac>`,
the MAC an HMAC-SHA256 under a secret made once per database (table `meta`).
The server keeps no row per challenge, so asking for many costs it nothing. A challenge
may be signed more than once before it expires; that is harmless, because a
proof only ever registers the key that signed it, for the user it was issued to.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncssh
from sqlalchemy.exc import IntegrityError

from gpudock.db.models import MetaModel, UserModel
from gpudock.errors import InvalidRequest
from gpudock.services.context import ServiceContext

NAMESPACE = "gpudock-key-proof"
TTL = timedelta(minutes=15)
SECRET_KEY = "ssh_key_proof_secret"  # noqa: S105 (the name of its row in `meta`)
MAX_SIGNATURE_TEXT = 16_384
_PREFIX = "gpudock-key-proof"
_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_END = "-----END SSH SIGNATURE-----"
_GET_ONE = (
    "`gpudock keys add` does all of this; by hand, get a challenge (POST "
    "/api/v1/ssh-keys/challenge, or the console's SSH keys page) and sign it"
)


class KeyProofRefused(InvalidRequest):
    """The proof of possession is missing or does not hold; the message says which part."""

    code = "key_proof_refused"


@dataclass(frozen=True)
class Challenge:
    text: str
    expires_at: datetime

    def sign_command(self, key_path: str = "~/.ssh/id_ed25519") -> str:
        """The one line that signs it (shell-safe: the text is base64url and dots)."""
        return f"printf %s '{self.text}' | ssh-keygen -Y sign -n {NAMESPACE} -f {key_path}"


@dataclass(frozen=True)
class KeyProof:
    challenge: str
    signature: str  # armored: -----BEGIN SSH SIGNATURE----- …


def issue_challenge(ctx: ServiceContext, user: UserModel) -> Challenge:
    expires = int((ctx.clock() + TTL).timestamp())
    nonce = secrets.token_urlsafe(18)
    body = f"{_PREFIX}.{user.id}.{expires}.{nonce}"
    return Challenge(f"{body}.{_mac(ctx, body)}", datetime.fromtimestamp(expires, UTC))


def check(ctx: ServiceContext, user: UserModel, public_key: str, proof: KeyProof | None) -> None:
    """Raise KeyProofRefused unless PROOF shows that USER holds PUBLIC_KEY's private half.

    PUBLIC_KEY is '<algorithm> <base64>' as `ssh_keys.parse_public_key` returns it.
    """
    if proof is None or not proof.challenge.strip() or not proof.signature.strip():
        raise KeyProofRefused(
            "adding a key needs proof that you hold its private key: a challenge and "
            f"its signature made with `ssh-keygen -Y sign -n {NAMESPACE}`; {_GET_ONE}",
            field="signature",
        )
    challenge = proof.challenge.strip()
    _read_challenge(ctx, user, challenge)
    raw = _dearmor(proof.signature)
    _check_envelope(raw, public_key)
    allowed = f'gpudock namespaces="{NAMESPACE}" {public_key}'.encode()
    # `echo` adds a newline that `printf %s` does not; either way the challenge was signed.
    for message in (challenge.encode(), challenge.encode() + b"\n"):
        if _validates(message, raw, allowed):
            return
    raise KeyProofRefused(
        "the signature does not match the challenge: sign the challenge text exactly as "
        f"given, e.g. `printf %s 'CHALLENGE' | ssh-keygen -Y sign -n {NAMESPACE} -f KEY`",
        field="signature",
    )


def _validates(message: bytes, raw_signature: bytes, allowed: bytes) -> bool:
    # Bytes, never str: asyncssh reads a str argument as a file name.
    try:
        return asyncssh.validate_sshsig(message, raw_signature, "gpudock", allowed)
    except ValueError:  # an unknown hash algorithm or a malformed key inside
        return False


def still_valid(ctx: ServiceContext, user: UserModel, text: str) -> Challenge | None:
    """TEXT as a Challenge if it is one of USER's that has not expired, else None."""
    try:
        return _read_challenge(ctx, user, text.strip())
    except KeyProofRefused:
        return None


def _read_challenge(ctx: ServiceContext, user: UserModel, challenge: str) -> Challenge:
    parts = challenge.split(".")
    body = ".".join(parts[:-1])
    if (
        len(parts) != 5
        or parts[0] != _PREFIX
        or not (parts[2].isascii() and parts[2].isdigit())
        # bytes: compare_digest refuses str with non-ASCII characters
        or not hmac.compare_digest(parts[-1].encode(), _mac(ctx, body).encode())
    ):
        raise KeyProofRefused(
            f"that is not a challenge this server issued (or it was cut short); {_GET_ONE}",
            field="challenge",
        )
    if parts[1] != user.id:
        raise KeyProofRefused(
            f"that challenge was issued to another account: get your own; {_GET_ONE}",
            field="challenge",
        )
    expires = datetime.fromtimestamp(int(parts[2]), UTC)
    if ctx.clock() >= expires:
        raise KeyProofRefused(
            f"the challenge expired at {expires:%Y-%m-%d %H:%M} UTC (they last "
            f"{int(TTL.total_seconds()) // 60} minutes): get a new one and sign it again",
            field="challenge",
        )
    return Challenge(challenge, expires)


def _dearmor(text: str) -> bytes:
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(text) > MAX_SIGNATURE_TEXT or len(lines) < 3 or lines[0] != _BEGIN or lines[-1] != _END:
        raise KeyProofRefused(
            f"that is not an SSH signature: paste everything ssh-keygen printed, from {_BEGIN} "
            f"to {_END}",
            field="signature",
        )
    try:
        return base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyProofRefused(
            "the signature's base64 is damaged: paste it again, whole", field="signature"
        ) from exc


def _check_envelope(raw: bytes, public_key: str) -> None:
    """Say which part is wrong before asyncssh says only yes or no."""
    signer, namespace = _signer_and_namespace(raw)
    if namespace != NAMESPACE.encode():
        shown = namespace.decode(errors="replace")[:64]
        raise KeyProofRefused(
            f"the signature is for the namespace {shown!r}, not {NAMESPACE!r}: "
            f"sign with `ssh-keygen -Y sign -n {NAMESPACE}`",
            field="signature",
        )
    adding = base64.b64decode(public_key.split()[1])
    if signer != adding:
        raise KeyProofRefused(
            f"the signature was made with the key {_fingerprint(signer)}, not with "
            f"{_fingerprint(adding)}, the one you are adding: sign with the private half "
            "of the key you add (ssh-keygen -f PATH, where PATH.pub is that key)",
            field="signature",
        )


def _signer_and_namespace(raw: bytes) -> tuple[bytes, bytes]:
    """SSHSIG: "SSHSIG", uint32 version, string public key, string namespace, …"""
    try:
        if raw[:6] != b"SSHSIG" or struct.unpack(">I", raw[6:10])[0] != 1:
            raise ValueError("not SSHSIG version 1")
        signer, offset = _string(raw, 10)
        namespace, _ = _string(raw, offset)
    except (ValueError, struct.error) as exc:
        raise KeyProofRefused(
            "that is not an SSH signature made by `ssh-keygen -Y sign`", field="signature"
        ) from exc
    return signer, namespace


def _string(raw: bytes, offset: int) -> tuple[bytes, int]:
    (length,) = struct.unpack(">I", raw[offset : offset + 4])
    end = offset + 4 + length
    if end > len(raw):
        raise ValueError("truncated")
    return raw[offset + 4 : end], end


def _fingerprint(blob: bytes) -> str:
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def _mac(ctx: ServiceContext, body: str) -> str:
    digest = hmac.new(_secret(ctx), body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:18]).decode()


def _secret(ctx: ServiceContext) -> bytes:
    """32 random bytes, made once per database, so every server on it agrees."""
    with ctx.sessions() as session:
        row = session.get(MetaModel, SECRET_KEY)
        if row is not None:
            return bytes.fromhex(row.value)
    try:
        with ctx.sessions.begin() as session:
            session.add(MetaModel(key=SECRET_KEY, value=secrets.token_hex(32)))
    except IntegrityError:
        pass  # made concurrently: that one is read below
    with ctx.sessions() as session:
        made = session.get(MetaModel, SECRET_KEY)
        assert made is not None
        return bytes.fromhex(made.value)
