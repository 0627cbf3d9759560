"""The one-time join token: `gdjoin1.<id>.<secret>.<server key fingerprint>`.

As with `kubeadm join --discovery-token-ca-cert-hash`, the token tells the
agent which server key to expect, so the first connection is authenticated
both ways: the agent sends the secret only to a server that proved that key.
The server keeps the SHA-256 of the secret, never the secret.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from gpudock.errors import InvalidRequest

PREFIX = "gdjoin1"
_TOKEN = re.compile(
    rf"{PREFIX}\.(?P<id>[0-9a-f]{{12}})\.(?P<secret>[0-9a-f]{{32}})\.(?P<fp>[0-9a-f]{{64}})"
)


@dataclass(frozen=True)
class JoinToken:
    token_id: str
    secret: str
    server_fingerprint: str

    def __str__(self) -> str:
        return f"{PREFIX}.{self.token_id}.{self.secret}.{self.server_fingerprint}"

    @classmethod
    def new(cls, server_fingerprint: str) -> JoinToken:
        return cls(secrets.token_hex(6), secrets.token_hex(16), server_fingerprint)

    @classmethod
    def parse(cls, text: str) -> JoinToken:
        match = _TOKEN.fullmatch(text.strip())
        if match is None:
            raise InvalidRequest(
                f"not a join token: expected {PREFIX}.<12 hex>.<32 hex>.<64 hex>; copy the "
                "whole command `gpudock hosts add NAME` printed",
                field="token",
            )
        return cls(match["id"], match["secret"], match["fp"])


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
