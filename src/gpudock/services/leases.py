"""Row leases: a worker claims an instance with a token and an expiry, does its
slow I/O outside any transaction, and writes back only while it still holds
the token (dstack's pipeline pattern). While it works, a heartbeat extends the
expiry, so a slow step (an image pull, a commit, a volume copy) is never taken
over by a second worker while the first still runs it.

A lease belongs to a process: its token is `<owner>.<nonce>`, the owner being
the server's id (`ServiceContext.lease_owner`, kept in the data dir, so the
same server restarted is the same owner). Several servers may share one
database: a server that dies leaves its leases to expire (`lease_s` after the
last heartbeat), and whichever server tries the row next takes it over; at
start-up a server clears only the leases its own previous life left behind.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import TypeVar

from sqlalchemy import Update, or_, update
from sqlalchemy.orm import Session

from gpudock.db.models import InstanceModel
from gpudock.errors import GpudockError
from gpudock.services.context import ServiceContext

T = TypeVar("T")
log = logging.getLogger(__name__)
MIN_HEARTBEAT_S = 0.05
OWNER_SEPARATOR = "."


class LeaseLost(GpudockError):
    """Another worker took the row over (our lease expired)."""

    code = "lease_lost"


def try_lease(ctx: ServiceContext, instance_id: str) -> str | None:
    """Claim the row; return the token, or None if someone else holds it."""
    token = f"{ctx.lease_owner}{OWNER_SEPARATOR}{secrets.token_hex(8)}"
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        result = session.execute(
            update(InstanceModel)
            .where(
                InstanceModel.id == instance_id,
                or_(
                    InstanceModel.lock_token.is_(None),
                    InstanceModel.lock_expires_at < now,
                ),
            )
            .values(lock_token=token, lock_expires_at=now + timedelta(seconds=ctx.settings.lease_s))
            .execution_options(synchronize_session=False)
        )
    return token if result.rowcount == 1 else None  # type: ignore[attr-defined]


def with_lease(
    ctx: ServiceContext,
    instance_id: str,
    token: str,
    mutate: Callable[[Session, InstanceModel], T],
) -> T:
    """Run `mutate` on the row in one transaction, if we still hold the lease."""
    with ctx.sessions.begin() as session:
        instance = session.get(
            InstanceModel, instance_id, with_for_update=True, populate_existing=True
        )
        if instance is None or instance.lock_token != token:
            raise LeaseLost(f"lost the lease on instance {instance_id}")
        instance.lock_expires_at = ctx.clock() + timedelta(seconds=ctx.settings.lease_s)
        return mutate(session, instance)


def extend(ctx: ServiceContext, instance_id: str, token: str) -> bool:
    """Push the expiry out by `lease_s`; False if the lease is no longer ours."""
    with ctx.sessions.begin() as session:
        result = session.execute(
            update(InstanceModel)
            .where(InstanceModel.id == instance_id, InstanceModel.lock_token == token)
            .values(lock_expires_at=ctx.clock() + timedelta(seconds=ctx.settings.lease_s))
            .execution_options(synchronize_session=False)
        )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


class LeaseHeartbeat:
    """Extends a lease every third of `lease_s` (wall time) for as long as the
    `with` block runs."""

    def __init__(self, ctx: ServiceContext, instance_id: str, token: str) -> None:
        self._ctx, self._instance_id, self._token = ctx, instance_id, token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{instance_id}", daemon=True)
        self.lost = False

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        interval = max(MIN_HEARTBEAT_S, self._ctx.settings.lease_s / 3)
        while not self._stop.wait(interval):
            try:
                if not extend(self._ctx, self._instance_id, self._token):
                    self.lost = True  # the step's next write says LeaseLost
                    return
            except Exception:  # a database hiccup: the next beat tries again
                log.exception("could not extend the lease on %s", self._instance_id)


def release(ctx: ServiceContext, instance_id: str, token: str) -> None:
    with ctx.sessions.begin() as session:
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.id == instance_id, InstanceModel.lock_token == token)
            .values(lock_token=None, lock_expires_at=None)
            .execution_options(synchronize_session=False)
        )


@dataclass(frozen=True)
class Released:
    own: int
    expired: int


def release_at_startup(ctx: ServiceContext) -> Released:
    """Clear the leases this server's previous life left (it is gone: we are
    it) and those that expired; leave every live lease of another server alone."""
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        own = session.execute(
            _cleared().where(InstanceModel.lock_token.startswith(ctx.lease_owner + OWNER_SEPARATOR))
        )
        expired = session.execute(
            _cleared().where(
                InstanceModel.lock_token.is_not(None), InstanceModel.lock_expires_at < now
            )
        )
    return Released(int(own.rowcount), int(expired.rowcount))  # type: ignore[attr-defined]


def _cleared() -> Update:
    return (
        update(InstanceModel)
        .values(lock_token=None, lock_expires_at=None)
        .execution_options(synchronize_session=False)
    )
