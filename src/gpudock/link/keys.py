"""Ed25519 keys of both ends of the link, kept in files, and their fingerprints."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import asyncssh

from gpudock.errors import InvalidRequest


def ensure_private_key(path: Path, comment: str) -> asyncssh.SSHKey:
    """Read the key at `path`, generating it (0600, public half beside it) on first use."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return asyncssh.read_private_key(path)  # made concurrently: theirs wins
        with os.fdopen(fd, "wb") as handle:
            handle.write(key.export_private_key("openssh"))
        public = path.with_name(path.name + ".pub")
        public.write_bytes(key.export_public_key("openssh"))
        public.chmod(0o644)
        return key
    return asyncssh.read_private_key(path)


def public_text(key: asyncssh.SSHKey) -> str:
    """'ssh-ed25519 AAAA…' without a comment: the form stored and compared."""
    algorithm, blob, *_ = key.export_public_key("openssh").decode().split()
    return f"{algorithm} {blob}"


def parse_public(text: str) -> asyncssh.SSHKey:
    try:
        return asyncssh.import_public_key(text)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise InvalidRequest(f"not an SSH public key: {exc}") from exc


def fingerprint(key: asyncssh.SSHKey) -> str:
    """SHA-256 of the public key blob, in hex (what a join token carries)."""
    return hashlib.sha256(key.public_data).hexdigest()
