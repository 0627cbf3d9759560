"""Auto-stop: an instance stops by itself when idle, at a time, or when its
main process exits. Stop means the ordinary stop (`status.request_stop`):
desired state stopped, GPUs released, container and data volume kept, the
compute interval closed when the container stops, so billing ends there.

- **Idle**: every GPU sample below `idle_below_pct`, no SSH session open
  or ended and no use through a service URL (`last_service_use_at`, which
  the proxy writes at most once a minute) for `idle_after_s`. The samples
  come from the metrics store (`services.metrics.gpu_utilisation_since`);
  without recent samples nothing
  is known and nothing stops. The owner is told `GPUDOCK_IDLE_WARNING_S`
  (10 min) before: the stop waits until that long after the warning, so a
  server that was down does not stop without one. Activity after the warning
  clears it.
- **Time**: `stop_at` (a stop "after 2 h" is stored as the time it ends).
- **Exit**: the liveness pass asks `stops_on_exit()` before restarting an
  exited container.

Each stop records its reason (prefixed `auto-stop: `) on the timeline and a
notification (`instance.stopped`, with the cause) in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpudock.db.models import (
    AutoStopModel,
    DesiredState,
    InstanceEventModel,
    InstanceModel,
    InstanceStatus,
    SshSessionModel,
    SshSessionOutcome,
)
from gpudock.errors import InvalidRequest
from gpudock.services.context import ServiceContext
from gpudock.services.instances.job_command import exit_stop_default
from gpudock.services.instances.status import record_instance_note, request_stop
from gpudock.services.metrics import gpu_utilisation_since
from gpudock.services.notifications.outbox import notify

S = InstanceStatus
AUTO_STOP_PREFIX = "auto-stop: "
MIN_IDLE_S = 60
MAX_IDLE_S = 30 * 86_400
MAX_AHEAD_S = 366 * 86_400
STALE_SAMPLES_S = 300.0  # no sample this recent: the sampler is not working, judge nothing
LOOKBACK_SLACK_S = 300.0  # read a little before the window, so its start is covered
SERVICE_USE_EVERY_S = 60.0  # the proxy writes an instance's use at most this often
# A use written this recently counts as in use now: an open WebSocket is written
# again every SERVICE_USE_EVERY_S (plus its ping interval), so it never looks idle.
SERVICE_USE_FRESH_S = 2 * SERVICE_USE_EVERY_S

UtilisationSince = Callable[[Session, str, datetime], list[tuple[datetime, float]]]


@dataclass(frozen=True)
class AutoStopPolicy:
    """What the owner asks; None/False: that kind of stop is off."""

    idle_after_s: int | None = None
    idle_below_pct: float | None = None  # None: the server's default
    stop_at: datetime | None = None
    stop_after_s: int | None = None  # from now; stored as stop_at
    on_exit: bool | None = None  # None: on for a job (an instance with a command)

    @property
    def empty(self) -> bool:
        return (
            self.idle_after_s is None
            and self.stop_at is None
            and not self.stop_after_s
            and (not self.on_exit)
        )


def check_policy(ctx: ServiceContext, policy: AutoStopPolicy, now: datetime) -> AutoStopPolicy:
    """Validate and resolve `stop_after_s` into `stop_at`."""
    if policy.idle_after_s is not None and not MIN_IDLE_S <= policy.idle_after_s <= MAX_IDLE_S:
        raise InvalidRequest(
            f"idle stop after {policy.idle_after_s} s: give between {MIN_IDLE_S} s (1 min) "
            f"and {MAX_IDLE_S // 86_400} days",
            field="idle_after_s",
        )
    if policy.idle_below_pct is not None and not 0 < policy.idle_below_pct <= 100:
        raise InvalidRequest(
            "idle_below_pct is a GPU utilisation in per cent: above 0, at most 100",
            field="idle_below_pct",
        )
    stop_at = policy.stop_at
    if policy.stop_after_s is not None:
        if stop_at is not None:
            raise InvalidRequest("give stop_at or stop_after_s, not both", field="stop_at")
        stop_at = now + timedelta(seconds=policy.stop_after_s)
    if stop_at is not None:
        if stop_at.tzinfo is None:
            raise InvalidRequest("stop_at needs its time zone (e.g. +08:00 or Z)", field="stop_at")
        if not now < stop_at <= now + timedelta(seconds=MAX_AHEAD_S):
            raise InvalidRequest(
                f"stop_at {stop_at.isoformat()} is not within the next year: give a later time "
                "(or stop the instance now)",
                field="stop_at",
            )
    return AutoStopPolicy(
        idle_after_s=policy.idle_after_s,
        idle_below_pct=policy.idle_below_pct,
        stop_at=stop_at,
        on_exit=policy.on_exit,
    )


def write_policy(
    ctx: ServiceContext,
    session: Session,
    instance: InstanceModel,
    policy: AutoStopPolicy,
    now: datetime,
) -> AutoStopModel | None:
    """Replace the instance's policy (a checked one) in the caller's transaction."""
    policy = replace(policy, on_exit=exit_stop_default(policy.on_exit, instance.command))
    row = session.get(AutoStopModel, instance.id, with_for_update=True)
    if policy.empty:
        if row is not None:
            session.delete(row)
        return None
    if row is None:
        row = AutoStopModel(instance_id=instance.id)
        session.add(row)
    row.idle_after_s = policy.idle_after_s
    row.idle_below_pct = (
        policy.idle_below_pct if policy.idle_below_pct is not None else ctx.settings.idle_below_pct
    )
    row.stop_at = policy.stop_at
    row.on_exit = bool(policy.on_exit)
    row.idle_warned_at = None
    row.updated_at = now
    return row


def policies(session: Session, instance_ids: list[str]) -> dict[str, AutoStopModel]:
    rows = session.scalars(select(AutoStopModel).where(AutoStopModel.instance_id.in_(instance_ids)))
    return {row.instance_id: row for row in rows}


def describe(row: AutoStopModel) -> str:
    """One line for timelines and the console: what will stop the instance."""
    parts = []
    if row.idle_after_s is not None:
        parts.append(f"idle {_duration(row.idle_after_s)} (GPUs below {row.idle_below_pct:g} %)")
    if row.stop_at is not None:
        parts.append(f"at {row.stop_at.isoformat(timespec='minutes')}")
    if row.on_exit:
        parts.append("when the main process exits")
    return "stops " + ", ".join(parts) if parts else "no auto-stop"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{round(seconds / 60)} min" if seconds >= 60 else f"{seconds} s"


# -- stopping ------------------------------------------------------------------------
def stop_for(session: Session, instance: InstanceModel, cause: str, why: str, at: datetime) -> bool:
    """The ordinary stop with an auto-stop reason and the owner's notification."""
    reason = f"{AUTO_STOP_PREFIX}stopped: {why}"  # the stop step adds "; data kept"
    if not request_stop(session, instance, reason, at):
        return False
    row = session.get(AutoStopModel, instance.id)
    if row is not None:
        row.idle_warned_at = None
    notify(
        session,
        instance.user_id,
        "instance.stopped",
        f"instance {instance.name} {reason}; data kept",
        at,
        instance=instance,
        data={"cause": cause, "reason": reason},
    )
    return True


def stops_on_exit(session: Session, instance_id: str) -> bool:
    row = session.get(AutoStopModel, instance_id)
    return row is not None and row.on_exit


def stop_exited(
    session: Session, instance: InstanceModel, exit_code: int | None, at: datetime
) -> bool:
    """The main process exited and the policy says stop: `at` is when it exited,
    so the compute interval closes there."""
    code = "" if exit_code is None else f" with code {exit_code}"
    return stop_for(session, instance, "exit", f"the main process exited{code}", at)


@dataclass
class AutoStopReport:
    stopped: list[str]
    warned: list[str]


def auto_stop_pass(
    ctx: ServiceContext, utilisation: UtilisationSince = gpu_utilisation_since
) -> AutoStopReport:
    """Stop what is due and warn what will be. Decided on a read first; a write
    transaction (locking the instance, deciding again) only where something changes,
    so a pass over many idle-watched instances takes no write lock for nothing."""
    now = ctx.clock()
    with ctx.reader() as session:
        rows = session.execute(
            select(InstanceModel, AutoStopModel)
            .join(AutoStopModel, AutoStopModel.instance_id == InstanceModel.id)
            .where(
                InstanceModel.status == S.RUNNING,
                InstanceModel.desired_state == DesiredState.RUNNING,
                (AutoStopModel.stop_at <= now) | AutoStopModel.idle_after_s.is_not(None),
            )
            .order_by(InstanceModel.id)
        ).all()
        todo = [
            instance.id
            for instance, row in rows
            if _action(ctx, session, instance, row, now, utilisation) != "none"
        ]
    report = AutoStopReport([], [])
    for instance_id in todo:
        with ctx.sessions.begin() as session:
            _one(ctx, session, instance_id, now, utilisation, report)
    if report.stopped:
        ctx.wake_reconciler()
    return report


Action = Literal["none", "time", "clear-time", "clear-warning", "warn", "idle"]


def _action(
    ctx: ServiceContext,
    session: Session,
    instance: InstanceModel,
    row: AutoStopModel,
    now: datetime,
    utilisation: UtilisationSince,
) -> Action:
    """What the policy asks of this running instance now (nothing is written)."""
    if row.stop_at is not None and row.stop_at <= now:
        since = _running_since(session, instance.id)
        return "clear-time" if since is not None and since > row.stop_at else "time"
    if row.idle_after_s is None:
        return "none"
    idle_for = idle_seconds(session, instance, row, now, utilisation)
    lead = _lead(ctx, row)
    if idle_for is None or idle_for < row.idle_after_s - lead:
        return "clear-warning" if row.idle_warned_at is not None else "none"
    if row.idle_warned_at is None:
        return "warn"
    warned_long_enough = (now - row.idle_warned_at).total_seconds() >= lead
    return "idle" if idle_for >= row.idle_after_s and warned_long_enough else "none"


def _one(
    ctx: ServiceContext,
    session: Session,
    instance_id: str,
    now: datetime,
    utilisation: UtilisationSince,
    report: AutoStopReport,
) -> None:
    """Decide again under the row locks, and do it."""
    instance = session.get(InstanceModel, instance_id, with_for_update=True)
    row = session.get(AutoStopModel, instance_id, with_for_update=True)
    if instance is None or row is None or instance.status != S.RUNNING:
        return
    if instance.desired_state != DesiredState.RUNNING:
        return
    action = _action(ctx, session, instance, row, now, utilisation)
    when = row.stop_at.isoformat(timespec="minutes") if row.stop_at else ""
    if action == "clear-time":  # it started after its stop time: not this run's
        row.stop_at = None
        note = f"{AUTO_STOP_PREFIX}the stop time {when} passed before this start; cleared"
        record_instance_note(session, instance, note, now)
    elif action == "time":
        if stop_for(session, instance, "time", f"the stop time {when} was reached", now):
            report.stopped.append(instance_id)
    elif action == "clear-warning":
        row.idle_warned_at = None  # busy again (or unknown): a later stretch warns anew
    elif action == "warn":
        idle_for = idle_seconds(session, instance, row, now, utilisation) or 0.0
        _warn(session, instance, row, idle_for, _lead(ctx, row), now)
        report.warned.append(instance_id)
    elif action == "idle":
        idle_for = idle_seconds(session, instance, row, now, utilisation) or 0.0
        why = (
            f"idle for {_duration(idle_for)} (every GPU below {row.idle_below_pct:g} %, "
            "no SSH session or service-URL use)"
        )
        if stop_for(session, instance, "idle", why, now):
            report.stopped.append(instance_id)


def _lead(ctx: ServiceContext, row: AutoStopModel) -> float:
    """How long before an idle stop the owner is told."""
    return float(min(ctx.settings.idle_warning_s, row.idle_after_s or 0))


def _warn(
    session: Session,
    instance: InstanceModel,
    row: AutoStopModel,
    idle_for: float,
    lead: float,
    now: datetime,
) -> None:
    row.idle_warned_at = now
    message = (
        f"{AUTO_STOP_PREFIX}instance {instance.name} has been idle for {_duration(idle_for)}; "
        f"it stops in {_duration(lead)} (data kept) unless a GPU is used above "
        f"{row.idle_below_pct:g} % or someone logs in or opens a service URL"
    )
    record_instance_note(session, instance, message, now)
    notify(
        session,
        instance.user_id,
        "instance.idle_warning",
        message,
        now,
        instance=instance,
        data={"idle_s": int(idle_for), "stops_in_s": int(lead)},
    )


def idle_seconds(
    session: Session,
    instance: InstanceModel,
    row: AutoStopModel,
    now: datetime,
    utilisation: UtilisationSince,
) -> float | None:
    """How long the instance has been idle now; None while it is in use or
    while nothing is known (no recent samples)."""
    assert row.idle_after_s is not None
    if _session_open(session, instance.id) or _service_in_use(instance, now):
        return None
    since = now - timedelta(seconds=row.idle_after_s + LOOKBACK_SLACK_S)
    samples = utilisation(session, instance.id, since)
    if not samples or (now - samples[-1][0]).total_seconds() > STALE_SAMPLES_S:
        return None
    if samples[-1][1] >= row.idle_below_pct:
        return None
    busy = [at for at, value in samples if value >= row.idle_below_pct]
    marks = [samples[0][0], *busy[-1:]]  # before the first sample nothing is known
    for known in (
        _running_since(session, instance.id),
        _last_session_end(session, instance.id),
        instance.last_service_use_at,
    ):
        if known is not None:
            marks.append(known)
    return max(0.0, (now - max(marks)).total_seconds())


def _service_in_use(instance: InstanceModel, now: datetime) -> bool:
    used = instance.last_service_use_at
    return used is not None and (now - used).total_seconds() < SERVICE_USE_FRESH_S


def note_service_use(ctx: ServiceContext, instance_id: str, at: datetime) -> None:
    """The proxy's note that the instance was used through a service URL at `at`
    (never moved backwards: another server may have written a later one)."""
    with ctx.sessions.begin() as session:
        session.execute(
            update(InstanceModel)
            .where(
                InstanceModel.id == instance_id,
                (InstanceModel.last_service_use_at.is_(None))
                | (InstanceModel.last_service_use_at < at),
            )
            .values(last_service_use_at=at)
        )


def _session_open(session: Session, instance_id: str) -> bool:
    found = session.scalar(
        select(SshSessionModel.id)
        .where(
            SshSessionModel.instance_id == instance_id,
            SshSessionModel.outcome == SshSessionOutcome.OPEN,
        )
        .limit(1)
    )
    return found is not None


def _last_session_end(session: Session, instance_id: str) -> datetime | None:
    return session.scalar(
        select(func.max(SshSessionModel.ended_at)).where(
            SshSessionModel.instance_id == instance_id,
            SshSessionModel.outcome == SshSessionOutcome.CLOSED,
        )
    )


def _running_since(session: Session, instance_id: str) -> datetime | None:
    """When it last became running (a stop and start begins a new idle count)."""
    return session.scalar(
        select(func.max(InstanceEventModel.at)).where(
            InstanceEventModel.instance_id == instance_id,
            InstanceEventModel.to_status == S.RUNNING.value,
            InstanceEventModel.from_status != S.RUNNING.value,
        )
    )
