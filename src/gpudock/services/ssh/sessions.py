"""What the SSH gateway asks of the platform: who may reach which instance, the
container that backs an instance now, the exec streams into it, and the audit trail.
The console's browser terminal uses the same exec streams and the same audit trail
(its rows say `origin` web and name no key).

Every function is synchronous and short; the gateway calls them from its
thread pool, never on its event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update

from gpudock.db.models import (
    InstanceModel,
    InstanceStatus,
    SshSessionModel,
    SshSessionOrigin,
    SshSessionOutcome,
    UserModel,
    UserState,
)
from gpudock.errors import Conflict, Forbidden, NotFound
from gpudock.messages import Message
from gpudock.runtime.base import STDERR as STDERR  # re-exported: the gateway
from gpudock.runtime.base import STDOUT as STDOUT  # reaches runtime types through
from gpudock.runtime.base import ExecStream as ExecStream  # services only
from gpudock.runtime.base import Runtime
from gpudock.runtime.base import StreamPeer as StreamPeer
from gpudock.runtime.base import StreamSink as StreamSink
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances
from gpudock.services.ssh import keys as ssh_keys

S = InstanceStatus
MAX_LOGIN = 128
SESSION_MARKER_ENV = "GPUDOCK_SSH_SESSION"
# Signals the root process of one attached exec, found by the marker in its
# environment (exec'd processes have parent pid 0 inside the container).
_SIGNAL_SCRIPT = r"""
for d in /proc/[0-9]*; do
  [ "$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)" = 0 ] || continue
  tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$0=$1" && kill -s "$2" "${d#/proc/}"
done
exit 0
"""


class AccessRefused(Forbidden):
    """The key may not open this login; the message is the audit reason."""

    code = "ssh_access_refused"


class InstanceNotRunning(Conflict):
    code = "instance_not_running"


@dataclass(frozen=True)
class Grant:
    """Who reaches which instance, decided once, at authentication."""

    user_id: str
    user_name: str
    key_id: str
    fingerprint: str
    instance_id: str
    instance_name: str
    key_verified: bool = True


@dataclass(frozen=True)
class Attempt:
    """What is known of a connection before (or without) a grant."""

    login: str
    client_address: str
    fingerprint: str | None = None
    user_id: str | None = None
    instance_id: str | None = None
    origin: SshSessionOrigin = SshSessionOrigin.SSH


@dataclass(frozen=True)
class WebTerminalGrant:
    """A console viewer's terminal on an instance, decided once, when the socket opens."""

    user_id: str
    user_name: str
    instance_id: str
    instance_name: str


# -- authorisation ------------------------------------------------------------------
def authorize(ctx: ServiceContext, login: str, fingerprint: str) -> Grant:
    """Grant the key's owner, if active, the instance named by `login` (an instance
    id, or a name among the owner's instances) if they own it or are an admin."""
    try:
        key, owner = ssh_keys.find_by_fingerprint(ctx, fingerprint)
    except NotFound as exc:
        raise AccessRefused(f"the key {fingerprint} is not registered to any user") from exc
    if owner.state != UserState.ACTIVE:  # deleted users' keys are gone; this is disabled
        raise AccessRefused(
            f"the key belongs to {owner.name}, whose account is {owner.state.value}",
            user_id=owner.id,
        )
    if key.verified_at is None and ctx.settings.ssh_unverified_keys == "refuse":
        raise AccessRefused(
            f"the key {fingerprint} of {owner.name} was never proven to be theirs (it was "
            "registered before keys needed a proof) and this server refuses unproven keys: "
            "its owner proves it with `gpudock keys add PATH`",
            user_id=owner.id,
        )
    instance = _resolve(ctx, owner, login)
    if instance is None:
        raise AccessRefused(f"{owner.name} has no instance {login[:MAX_LOGIN]!r}", user_id=owner.id)
    if instance.user_id != owner.id and not owner.is_admin:
        raise AccessRefused(
            f"the key belongs to {owner.name}, who neither owns instance {instance.id} "
            "nor is an admin",
            user_id=owner.id,
            instance_id=instance.id,
        )
    return Grant(
        user_id=owner.id,
        user_name=owner.name,
        key_id=key.id,
        fingerprint=fingerprint,
        instance_id=instance.id,
        instance_name=instance.name,
        key_verified=key.verified_at is not None,
    )


def _resolve(ctx: ServiceContext, owner: UserModel, login: str) -> InstanceModel | None:
    """By id if the owner may use it, else by name among the owner's live instances."""
    live = InstanceModel.status != S.DELETED
    with ctx.sessions() as session:
        by_id = session.scalars(select(InstanceModel).where(InstanceModel.id == login, live))
        found = by_id.first()
        if found is not None and (found.user_id == owner.id or owner.is_admin):
            return found
        by_name = session.scalars(
            select(InstanceModel).where(
                InstanceModel.name == login, InstanceModel.user_id == owner.id, live
            )
        ).first()
        return by_name or found


def authorize_web_terminal(ctx: ServiceContext, user: UserModel, ref: str) -> WebTerminalGrant:
    """The viewer's terminal on instance `ref` if they own it or are an admin;
    another tenant's instance is NotFound, as on every page."""
    instance = instances.get_instance(ctx, user, ref)
    return WebTerminalGrant(
        user_id=user.id, user_name=user.name, instance_id=instance.id, instance_name=instance.name
    )


# -- the container behind an instance, now ----------------------------------------------
def running_container(ctx: ServiceContext, instance_id: str) -> tuple[Runtime, str]:
    """The runtime of the instance's host and the id of the container that backs
    the instance now; InstanceNotRunning (with what to do about it) when there is none."""
    with ctx.sessions() as session:
        instance = session.get(InstanceModel, instance_id)
    if instance is None or instance.status == S.DELETED:
        raise NotFound(f"instance {instance_id} has been deleted")
    if instance.status == S.RUNNING and instance.container_id:
        return ctx.runtime_for(instance.host_id), instance.container_id
    raise InstanceNotRunning(not_running_message(instance))


def not_running_message(instance: InstanceModel) -> str:
    """What to do, in the console and with the CLI: the SSH client shows it, and so
    does the console's list of refused sessions."""
    name, status = instance.name, Message(instance.status.value)
    if instance.status in (S.STOPPED, S.STOPPING):
        return Message(
            "instance {name} is {status}: start it with Start on its page in the console, "
            "or run `gpudock instances start {name}`",
            name=name,
            status=status,
        )
    if instance.status == S.FAILED:
        return Message(
            "instance {name} failed ({reason}): start it again with Start on its page in "
            "the console, or run `gpudock instances start {name}`",
            name=name,
            reason=instances.current_reason(instance),
        )
    if instance.status == S.DELETING:
        return Message("instance {name} is being deleted", name=name)
    return Message(
        "instance {name} is {status} ({reason}): try again once its page in the console "
        "or `gpudock instances show {name}` says running",
        name=name,
        status=status,
        reason=instances.current_reason(instance),
    )


def open_stream(
    ctx: ServiceContext, instance_id: str, command: list[str], *, tty: bool, env: dict[str, str]
) -> ExecStream:
    runtime, container = running_container(ctx, instance_id)
    return runtime.open_exec_stream(container, command, tty=tty, env=env)


def resize(ctx: ServiceContext, exec_id: str, width: int, height: int) -> None:
    ctx.runtime_for_exec(exec_id).resize_exec(exec_id, width, height)


def exit_code(ctx: ServiceContext, exec_id: str) -> int | None:
    return ctx.runtime_for_exec(exec_id).exec_exit_code(exec_id)


def signal(ctx: ServiceContext, instance_id: str, marker: str, signal_name: str) -> None:
    """Send SIGNAL_NAME to the session whose environment carries `marker`;
    nothing happens if it has ended or the instance no longer runs."""
    try:
        runtime, container = running_container(ctx, instance_id)
    except (NotFound, InstanceNotRunning):
        return
    command = ["sh", "-c", _SIGNAL_SCRIPT, SESSION_MARKER_ENV, marker, signal_name]
    runtime.exec_in_container(container, command)


# -- audit ------------------------------------------------------------------------------
def record_refusal(ctx: ServiceContext, attempt: Attempt, reason: str) -> None:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        session.add(
            SshSessionModel(
                instance_id=attempt.instance_id,
                user_id=attempt.user_id,
                login=attempt.login[:MAX_LOGIN],
                client_address=attempt.client_address[:64],
                key_fingerprint=attempt.fingerprint,
                origin=attempt.origin,
                outcome=SshSessionOutcome.REFUSED,
                reason=reason,
                started_at=now,
                ended_at=now,
                bytes_in=0,
                bytes_out=0,
            )
        )


def open_session(ctx: ServiceContext, grant: Grant, login: str, client_address: str) -> int:
    """Audit an authenticated connection and mark its key used. Not at `authorize`:
    that runs when a client merely offers a public key, which anyone can."""
    ssh_keys.mark_used(ctx, grant.key_id)
    row = SshSessionModel(
        instance_id=grant.instance_id,
        user_id=grant.user_id,
        login=login[:MAX_LOGIN],
        client_address=client_address[:64],
        key_fingerprint=grant.fingerprint,
        outcome=SshSessionOutcome.OPEN,
        reason="",
        started_at=ctx.clock(),
        bytes_in=0,
        bytes_out=0,
    )
    with ctx.sessions.begin() as session:
        session.add(row)
        session.flush()
        return row.id


def open_web_session(ctx: ServiceContext, grant: WebTerminalGrant, client_address: str) -> int:
    """Audit a browser terminal's shell (one row however often its page reconnects)."""
    row = SshSessionModel(
        instance_id=grant.instance_id,
        user_id=grant.user_id,
        login=grant.instance_name[:MAX_LOGIN],
        client_address=client_address[:64],
        key_fingerprint=None,
        origin=SshSessionOrigin.WEB,
        outcome=SshSessionOutcome.OPEN,
        reason="",
        started_at=ctx.clock(),
        bytes_in=0,
        bytes_out=0,
    )
    with ctx.sessions.begin() as session:
        session.add(row)
        session.flush()
        return row.id


def close_session(
    ctx: ServiceContext, session_id: int, bytes_in: int, bytes_out: int, reason: str = ""
) -> None:
    with ctx.sessions.begin() as session:
        session.execute(
            update(SshSessionModel)
            .where(SshSessionModel.id == session_id)
            .values(
                outcome=SshSessionOutcome.CLOSED,
                ended_at=ctx.clock(),
                bytes_in=bytes_in,
                bytes_out=bytes_out,
                reason=reason,
            )
        )


def close_abandoned_sessions(ctx: ServiceContext, origin: SshSessionOrigin | None = None) -> int:
    """Close rows a previous gateway (or console, for `origin` web) left open: it
    was killed. All origins when None. Return how many."""
    open_rows = SshSessionModel.outcome == SshSessionOutcome.OPEN
    condition = open_rows if origin is None else open_rows & (SshSessionModel.origin == origin)
    what = "console" if origin == SshSessionOrigin.WEB else "gateway"
    with ctx.sessions.begin() as session:
        result = session.execute(
            update(SshSessionModel)
            .where(condition)
            .values(
                outcome=SshSessionOutcome.CLOSED,
                ended_at=ctx.clock(),
                reason=f"the {what} stopped before the session ended; byte counts lost",
            )
        )
        return int(getattr(result, "rowcount", 0) or 0)


def list_sessions(
    ctx: ServiceContext, user: UserModel, instance_ref: str, limit: int = 200
) -> list[SshSessionModel]:
    """The instance's sessions and refused attempts, newest first (owner or admin)."""
    instance = instances.get_instance(ctx, user, instance_ref)
    with ctx.sessions() as session:
        query = (
            select(SshSessionModel)
            .where(SshSessionModel.instance_id == instance.id)
            .order_by(SshSessionModel.started_at.desc(), SshSessionModel.id.desc())
            .limit(limit)
        )
        return list(session.scalars(query))
