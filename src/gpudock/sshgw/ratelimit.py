"""Rate limits at the SSH gateway: connections that begin authentication, per
client address, and public-key attempts, per key fingerprint.

Past a limit the gateway closes the connection; the attempt is audited as a
refused session with the reason (`server.GatewayConnection._finish`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpudock.errors import RateLimited
from gpudock.services.rate_limits import RateGate, address_of
from gpudock.services.ssh.sessions import AccessRefused
from gpudock.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SshGates:
    address: RateGate | None
    key: RateGate | None

    @classmethod
    def from_settings(cls, settings: Settings) -> SshGates:
        if not settings.rate_limits_enabled:
            return cls(address=None, key=None)
        return cls(
            address=RateGate("SSH connections from one address", settings.rate_limit_ssh_address),
            key=RateGate("SSH attempts with one key", settings.rate_limit_ssh_key),
        )

    def refuse_connection(self, login: str, client_address: str) -> AccessRefused | None:
        """Count a connection that begins authentication; the refusal if it is one too many."""
        address = address_of(client_address)
        return self._check(self.address, address, login, client_address)

    def refuse_key(self, login: str, client_address: str, fingerprint: str) -> AccessRefused | None:
        """Count an attempt with this key; the refusal if it is one too many."""
        return self._check(self.key, fingerprint, login, client_address, fingerprint=fingerprint)

    @staticmethod
    def _check(
        gate: RateGate | None, key: str, login: str, client_address: str, **details: str
    ) -> AccessRefused | None:
        """`key` is shown in the refusal: an address or a key fingerprint, no secret."""
        if gate is None:
            return None
        try:
            gate.check(key, key)
        except RateLimited as exc:
            log.warning("ssh %s@%s: refused: %s", login, client_address, exc.message)
            return AccessRefused(f"rate limited: {exc.message}", **details)
        return None
