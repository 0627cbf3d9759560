"""One SSH connection at the gateway: authentication, then deny by default.

The login name is the instance (its id, or its name among the key owner's
instances). Only public keys are accepted, and only a key registered by the
instance's owner or by an admin. After authentication every request is refused
unless a rule below allows it: sessions (shell, exec, sftp) into that instance,
and direct TCP forwards to ports inside that instance. Refusals are audited
with their reason; so is every authenticated connection, with its byte counts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncssh

from gpudock.errors import GpudockError
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.services.ssh.sessions import AccessRefused, Attempt, Grant
from gpudock.sshgw import forward
from gpudock.sshgw.ports import Gateway
from gpudock.sshgw.session import ExecSession

log = logging.getLogger(__name__)
NO_KEY_REASON = (
    "no accepted public key was offered (password and keyboard-interactive "
    "authentication are refused: public keys only)"
)


class GatewayConnection(asyncssh.SSHServer):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.login = ""
        self.client_address = "unknown"
        self.grant: Grant | None = None
        self.bytes_in = 0  # client → instance
        self.bytes_out = 0  # instance → client
        self._conn: asyncssh.SSHServerConnection | None = None
        self._verdicts: dict[str, Grant | AccessRefused] = {}
        self._last_accepted: Grant | None = None
        self._last_refusal: AccessRefused | None = None
        self._audit_id: asyncio.Task[int | None] | None = None

    # -- connection ----------------------------------------------------------------------
    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        peer = conn.get_extra_info("peername")
        if peer:
            self.client_address = f"{peer[0]}:{peer[1]}"
        self.gateway.register(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.gateway.unregister(self)
        self.gateway.spawn(self._finish())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def peer_and_local(self) -> tuple[str, str]:
        """SSH_CONNECTION's four fields, as sshd sets them."""
        assert self._conn is not None
        peer = self._conn.get_extra_info("peername") or ("0.0.0.0", 0)  # noqa: S104
        local = self._conn.get_extra_info("sockname") or ("0.0.0.0", 0)  # noqa: S104
        return f"{peer[0]} {peer[1]}", f"{local[0]} {local[1]}"

    async def _finish(self) -> None:
        if self._audit_id is not None:
            session_id = await self._audit_id
            if session_id is not None:
                await self.gateway.audit(
                    ssh_sessions.close_session, session_id, self.bytes_in, self.bytes_out
                )
            return
        if self.login:  # a port scan that never spoke SSH leaves no row
            refusal = self._last_refusal
            await self.gateway.audit(
                ssh_sessions.record_refusal,
                self._attempt(refusal),
                refusal.message if refusal else NO_KEY_REASON,
            )

    def _attempt(self, refusal: AccessRefused | None = None) -> Attempt:
        if self.grant is not None:
            return Attempt(
                login=self.login,
                client_address=self.client_address,
                fingerprint=self.grant.fingerprint,
                user_id=self.grant.user_id,
                instance_id=self.grant.instance_id,
            )
        details = refusal.details if refusal else {}
        return Attempt(
            login=self.login,
            client_address=self.client_address,
            fingerprint=details.get("fingerprint"),
            user_id=details.get("user_id"),
            instance_id=details.get("instance_id"),
        )

    def refuse(self, reason: str) -> None:
        """Audit a refused request on an authenticated connection."""
        log.info("ssh %s@%s: refused: %s", self.login, self.client_address, reason)
        self.gateway.spawn(self.gateway.audit(ssh_sessions.record_refusal, self._attempt(), reason))

    # -- authentication ----------------------------------------------------------------------
    def begin_auth(self, username: str) -> bool:
        self.login = username
        refusal = self.gateway.limits.refuse_connection(username, self.client_address)
        if refusal is not None:
            self._hang_up(refusal)
        return True

    def _hang_up(self, refusal: AccessRefused) -> None:
        """Past a rate limit: tell the client why and disconnect; the attempt is
        audited as refused when the connection ends."""
        self._last_refusal = refusal
        if self._conn is not None:
            self._conn.disconnect(asyncssh.DISC_TOO_MANY_CONNECTIONS, refusal.message)

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def host_based_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        fingerprint = key.get_fingerprint("sha256")
        verdict = self._verdicts.get(fingerprint)
        if verdict is None:
            limited = self.gateway.limits.refuse_key(username, self.client_address, fingerprint)
            if limited is not None:
                self._hang_up(limited)
                return False
            verdict = await self._authorize(username, fingerprint)
            self._verdicts[fingerprint] = verdict
        if isinstance(verdict, Grant):
            self._last_accepted = verdict
            return True
        self._last_refusal = verdict
        return False

    async def _authorize(self, username: str, fingerprint: str) -> Grant | AccessRefused:
        try:
            grant: Grant = await self.gateway.call(
                ssh_sessions.authorize, self.gateway.ctx, username, fingerprint
            )
        except AccessRefused as exc:
            exc.details.setdefault("fingerprint", fingerprint)
            return exc
        except GpudockError as exc:
            log.warning("ssh %s: cannot check key %s: %s", username, fingerprint, exc.message)
            return AccessRefused(f"the gateway could not check the key: {exc.message}")
        return grant

    def auth_completed(self) -> None:
        self.grant = self._last_accepted
        if self.grant is None:  # cannot happen: only validated keys complete auth
            self.close()
            return
        log.info(
            "ssh %s@%s: %s (%s) reaches %s",
            self.login,
            self.client_address,
            self.grant.user_name,
            self.grant.fingerprint,
            self.grant.instance_id,
        )
        self._audit_id = self.gateway.spawn(
            self.gateway.audit(
                ssh_sessions.open_session, self.grant, self.login, self.client_address
            )
        )

    # -- what an authenticated client may ask for ---------------------------------------------
    def session_requested(self) -> Any:
        if self.grant is None or self._conn is None:
            return False
        channel = self._conn.create_server_channel()
        return channel, ExecSession(self, channel)

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> Any:
        assert self.grant is not None
        target = forward.target_inside(self.grant, dest_host)
        if target is None:
            reason = (
                f"port forwarding to {dest_host}:{dest_port} refused: the gateway forwards "
                f"only to ports inside instance {self.grant.instance_name} "
                f"(use localhost:{dest_port})"
            )
            self.refuse(reason)
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, reason)
        return forward.open_forward(self, target, dest_port)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        self.refuse(f"remote port forwarding (-R {listen_host}:{listen_port}) refused")
        return False

    def unix_connection_requested(self, dest_path: str) -> bool:
        self.refuse(f"Unix socket forwarding to {dest_path[:200]} refused")
        return False

    def unix_server_requested(self, listen_path: str) -> bool:
        self.refuse(f"remote Unix socket forwarding ({listen_path[:200]}) refused")
        return False

    def tun_requested(self, unit: int | None) -> bool:
        self.refuse("tun forwarding refused")
        return False

    def tap_requested(self, unit: int | None) -> bool:
        self.refuse("tap forwarding refused")
        return False
