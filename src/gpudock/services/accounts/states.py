"""What an admin does to a user: disable, enable, delete.

- **Disabled**: every API token and console session stops working at once
  (tokens and SSH keys are refused while the user is disabled; console
  sessions are ended), the SSH gateway refuses their keys, and their
  instances take the ordinary stop: GPUs released, containers and data
  volumes kept, compute billing ended (a kept disk goes on accruing storage,
  as any stopped instance's does). Enable gives access back; instances stay
  stopped until the user starts them.
- **Deleted**: see `RETENTION`, which the API, the CLI and docs/security.md
  state. The row stays because the ledger, instance records and the SSH audit
  point at it; the ledger is append-only, so nothing is posted or removed.

An admin can neither disable nor delete themselves, nor the last active admin.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from gpudock.db.models import (
    ApiTokenModel,
    DesiredState,
    ImageModel,
    InstanceModel,
    InstanceStatus,
    SshKeyModel,
    UserModel,
    UserPasswordModel,
    UserState,
    WebSessionModel,
)
from gpudock.errors import Conflict, Forbidden, NotFound, Unauthenticated
from gpudock.messages import Message
from gpudock.services.accounts.token_cache import TokenCache
from gpudock.services.billing import postings as ledger
from gpudock.services.context import ServiceContext
from gpudock.services.instances import status as instance_status

MAX_REASON = 500
RETENTION = (
    "Deleted: the user's instances (containers, data volumes and saved system disks, "
    "removed by the reconciler), SSH keys, console password and sessions; their API "
    "tokens are revoked. Kept: the user record, marked deleted (the name stays taken, "
    "so their statements stay addressable by it), instance records and events, the SSH "
    "audit, billing intervals and ledger postings (append-only: the balance stays as it "
    "is, and final charges of the deleted instances are still posted), and private "
    "images, which admins see and remove with `gpudock images remove`."
)


class AccountDisabled(Forbidden):
    code = "account_disabled"


class AccountDeleted(Unauthenticated):
    code = "account_deleted"


@dataclass(frozen=True)
class StateChange:
    user: UserModel
    instances: list[str]  # ids stopped (disable) or deleted (delete)


@dataclass(frozen=True)
class Deletion:
    change: StateChange
    balance: int  # micro-units, as it stands
    private_images: list[str]  # references, kept


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "?"


def check_not_deleted(user: UserModel) -> None:
    if user.state == UserState.DELETED:
        raise AccountDeleted(
            f"user {user.name} was deleted at {_when(user.state_changed_at)}; "
            "its credentials no longer work"
        )


def check_active(user: UserModel) -> None:
    """Raise unless the user may use the platform (API, console, SSH)."""
    check_not_deleted(user)
    if user.state == UserState.DISABLED:
        why = f": {user.state_reason}" if user.state_reason else ""
        raise AccountDisabled(
            f"user {user.name} is disabled since {_when(user.state_changed_at)}{why}; "
            f"its instances are stopped and their data kept. An admin enables it again "
            f"with `gpudock users enable {user.name}`"
        )


def switch_user_state(
    session: Session, user: UserModel, new: UserState, reason: str, at: datetime
) -> None:
    """The only writer of `UserModel.state`. A deleted user stays deleted."""
    if user.state == UserState.DELETED:
        raise NotFound(f"user {user.name} was deleted")
    user.state, user.state_reason, user.state_changed_at = new, reason, at


def _load(session: Session, name: str) -> UserModel:
    """The user, locked, after the active admins' rows (in id order, whoever
    the target): two admins disabling each other at once queue, and the
    second sees the first's change instead of leaving no admin."""
    session.execute(
        select(UserModel.id)
        .where(UserModel.is_admin.is_(True), UserModel.state == UserState.ACTIVE)
        .order_by(UserModel.id)
        .with_for_update()
    )
    user = session.scalars(
        select(UserModel).where(UserModel.name == name).with_for_update()
    ).first()
    if user is None:
        raise NotFound(f"no user {name[:64]!r}: `gpudock users list` shows them")
    if user.state == UserState.DELETED:
        raise NotFound(f"user {name} was deleted at {_when(user.state_changed_at)}")
    return user


def _check_may_change(session: Session, admin: UserModel, user: UserModel, verb: str) -> None:
    if user.id == admin.id:
        raise Conflict(f"you cannot {verb} yourself: another admin can")
    if not user.is_admin or user.state != UserState.ACTIVE:
        return
    others = session.scalar(
        select(func.count())
        .select_from(UserModel)
        .where(
            UserModel.is_admin.is_(True),
            UserModel.state == UserState.ACTIVE,
            UserModel.id != user.id,
        )
    )
    if not others:
        raise Conflict(f"{user.name} is the last active admin: make another admin first")


def _live_instances(session: Session, user: UserModel) -> list[InstanceModel]:
    """Not deleted nor being deleted; locked in id order, as the lifecycle locks."""
    return list(
        session.scalars(
            select(InstanceModel)
            .where(
                InstanceModel.user_id == user.id,
                InstanceModel.status != InstanceStatus.DELETED,
                InstanceModel.desired_state != DesiredState.DELETED,
            )
            .order_by(InstanceModel.id)
            .with_for_update()
        )
    )


def disable_user(
    ctx: ServiceContext, admin: UserModel, name: str, reason: str | None = None
) -> StateChange:
    """Disable (idempotent): access ends now, instances stop through the ordinary path."""
    now = ctx.clock()
    why = (reason or "").strip()[:MAX_REASON]
    note = (
        Message(
            "stopped: user {name} disabled by {admin} ({why})", name=name, admin=admin.name, why=why
        )
        if why
        else Message("stopped: user {name} disabled by {admin}", name=name, admin=admin.name)
    )
    with ctx.sessions.begin() as session:
        user = _load(session, name)
        _check_may_change(session, admin, user, "disable")
        if user.state == UserState.ACTIVE:
            switch_user_state(session, user, UserState.DISABLED, why, now)
        session.execute(delete(WebSessionModel).where(WebSessionModel.user_id == user.id))
        stopped = [
            i.id
            for i in _live_instances(session, user)
            if instance_status.request_stop(
                session, i, Message("{reason}; data kept", reason=note), now
            )
        ]
    ctx.memo.get(TokenCache).forget_all()  # committed: the user's tokens stop at once here
    ctx.wake_reconciler()
    return StateChange(user=user, instances=stopped)


def enable_user(ctx: ServiceContext, admin: UserModel, name: str) -> UserModel:
    """Give a disabled user access back (idempotent); their instances stay stopped."""
    with ctx.sessions.begin() as session:
        user = _load(session, name)
        if user.state != UserState.ACTIVE:
            switch_user_state(session, user, UserState.ACTIVE, "", ctx.clock())
    ctx.memo.get(TokenCache).forget_all()  # committed: the user's tokens work again at once
    return user


def delete_user(ctx: ServiceContext, admin: UserModel, name: str, *, force: bool) -> Deletion:
    """Delete as `RETENTION` says; refused while live instances exist unless `force`."""
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        user = _load(session, name)
        _check_may_change(session, admin, user, "delete")
        live = _live_instances(session, user)
        if live and not force:
            names = ", ".join(i.name for i in live[:5]) + (", …" if len(live) > 5 else "")
            raise Conflict(
                f"{name} has {len(live)} instance(s) ({names}): delete them first, or force "
                f"the deletion (`gpudock users delete {name} --force`, or force=true), "
                "which deletes them and their data too"
            )
        for instance in live:
            instance_status.request_delete(session, instance, f"deleted with user {name}", now)
        _remove_credentials(session, user, now)
        switch_user_state(session, user, UserState.DELETED, f"deleted by {admin.name}", now)
        balance = ledger.balance(session, user.id)
        images = session.scalars(
            select(ImageModel.reference)
            .where(ImageModel.owner_id == user.id)
            .order_by(ImageModel.reference)
        )
        private_images = list(images)
    ctx.memo.get(TokenCache).forget_all()  # committed: the user's tokens stop at once here
    ctx.wake_reconciler()
    change = StateChange(user=user, instances=[i.id for i in live])
    return Deletion(change=change, balance=balance, private_images=private_images)


def _remove_credentials(session: Session, user: UserModel, now: datetime) -> None:
    """Tokens are revoked (kept, so a stale one is answered 'deleted'); SSH keys
    go, freeing their fingerprints; so do the password and console sessions."""
    session.execute(
        update(ApiTokenModel)
        .where(ApiTokenModel.user_id == user.id, ApiTokenModel.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    for model in (SshKeyModel, UserPasswordModel, WebSessionModel):
        session.execute(delete(model).where(model.user_id == user.id))
