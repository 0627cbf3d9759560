"""The delivery worker: sends what the outbox holds, retries with backoff.

Run by its own reconciler thread (`gpudock-notifications`), never on a request
or on the placement loop: a webhook that takes its whole timeout delays only
other deliveries. Each delivery is leased (`lock_token` + `lock_expires_at`)
in a short transaction, sent outside any transaction, and its result written
back only while the lease is still ours. A crash after sending and before
writing back sends it again when the lease expires: at least once, and the
receiver de-duplicates on the delivery id (`X-Gpudock-Delivery`).

Backoff: the n-th failure waits `notify_retry_base_s × 2^(n-1)`, at most an
hour; after `notify_max_attempts` the delivery is `failed` for good.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, or_, select, update

from gpudock.db.models import (
    DeliveryState,
    EndpointKind,
    NotificationDeliveryModel,
    NotificationEndpointModel,
    NotificationModel,
    UserModel,
)
from gpudock.services.context import ServiceContext
from gpudock.services.notifications.senders import Outgoing, SendFailed, send_email, send_webhook

log = logging.getLogger(__name__)
BATCH = 50
MAX_BACKOFF_S = 3600.0
D = NotificationDeliveryModel


@dataclass
class DeliveryReport:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0


def backoff_s(ctx: ServiceContext, attempts: int) -> float:
    """The wait after the `attempts`-th failure."""
    return min(ctx.settings.notify_retry_base_s * 2.0 ** (attempts - 1), MAX_BACKOFF_S)


def deliver_due(ctx: ServiceContext) -> DeliveryReport:
    """Send every delivery that is due now (a batch at most), one at a time."""
    now = ctx.clock()
    with ctx.reader() as session:
        due = list(
            session.scalars(
                select(D.id)
                .where(D.state == DeliveryState.PENDING, D.next_attempt_at <= now, _free(now))
                .order_by(D.next_attempt_at, D.id)
                .limit(BATCH)
            )
        )
    report = DeliveryReport()
    for delivery_id in due:
        token = _claim(ctx, delivery_id)
        if token is None:
            continue  # another server's worker has it
        outgoing = _outgoing(ctx, delivery_id)
        try:
            result, ok = _send(ctx, outgoing), True
        except SendFailed as exc:
            result, ok = str(exc), False
        state = _record(ctx, delivery_id, token, ok, result)
        if state == DeliveryState.DELIVERED:
            report.delivered += 1
        elif state == DeliveryState.FAILED:
            report.failed += 1
        elif state == DeliveryState.PENDING:
            report.retrying += 1
    return report


def _free(now: datetime) -> ColumnElement[bool]:
    return or_(D.lock_token.is_(None), D.lock_expires_at < now)


def _claim(ctx: ServiceContext, delivery_id: str) -> str | None:
    token = f"{ctx.lease_owner}.{secrets.token_hex(8)}"
    now = ctx.clock()
    lease = timedelta(seconds=max(60.0, 3 * ctx.settings.notify_timeout_s))
    with ctx.sessions.begin() as session:
        claimed = session.execute(
            update(D)
            .where(D.id == delivery_id, D.state == DeliveryState.PENDING, _free(now))
            .values(lock_token=token, lock_expires_at=now + lease)
            .execution_options(synchronize_session=False)
        )
    return token if claimed.rowcount == 1 else None  # type: ignore[attr-defined]


def _outgoing(ctx: ServiceContext, delivery_id: str) -> Outgoing | None:
    """What to send; None when the endpoint was removed meanwhile."""
    with ctx.reader() as session:
        delivery = session.get(D, delivery_id)
        assert delivery is not None  # rows are never deleted
        note = session.get(NotificationModel, delivery.notification_id)
        endpoint = session.get(NotificationEndpointModel, delivery.endpoint_id)
        user = session.get(UserModel, delivery.user_id)
        assert note is not None and endpoint is not None and user is not None
        if endpoint.removed_at is not None:
            return None
        return _compose(delivery, note, endpoint, user)


def _compose(
    delivery: NotificationDeliveryModel,
    note: NotificationModel,
    endpoint: NotificationEndpointModel,
    user: UserModel,
) -> Outgoing:
    document = {
        "id": delivery.id,
        "notification_id": note.id,
        "kind": note.kind,
        "created_at": note.created_at.isoformat(),
        "user": {"id": user.id, "name": user.name},
        "message": note.message,
        "data": json.loads(note.data),
    }
    text = f"{note.message}\n\nkind: {note.kind}\nat: {note.created_at.isoformat()}\n"
    return Outgoing(
        delivery_id=delivery.id,
        channel=endpoint.kind.value,
        kind=note.kind,
        body=json.dumps(document, sort_keys=True).encode(),
        subject=f"[gpudock] {note.message[:120]}",
        text=text + f"delivery: {delivery.id}\n",
        target=endpoint.target,
        secret=endpoint.secret,
    )


def _send(ctx: ServiceContext, outgoing: Outgoing | None) -> str:
    if outgoing is None:
        raise SendFailed("the endpoint was removed")
    if outgoing.channel == EndpointKind.WEBHOOK:
        return send_webhook(
            outgoing,
            ctx.settings.notify_timeout_s,
            allow_private=ctx.settings.webhook_private_targets,
        )
    return send_email(ctx.settings, outgoing)


def _record(
    ctx: ServiceContext, delivery_id: str, token: str, ok: bool, result: str
) -> DeliveryState | None:
    """Write the attempt back while the lease is ours; None if it was lost."""
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        row = session.get(D, delivery_id, with_for_update=True)
        if row is None or row.lock_token != token:
            return None
        row.attempts += 1
        row.last_attempt_at = now
        row.last_result = result
        row.lock_token = row.lock_expires_at = None
        endpoint = session.get(NotificationEndpointModel, row.endpoint_id)
        removed = endpoint is None or endpoint.removed_at is not None
        if ok:
            row.state, row.delivered_at = DeliveryState.DELIVERED, now
        elif removed or row.attempts >= ctx.settings.notify_max_attempts:
            row.state = DeliveryState.FAILED
        else:
            row.next_attempt_at = now + timedelta(seconds=backoff_s(ctx, row.attempts))
        if not ok:
            log.info("delivery %s failed (attempt %d): %s", delivery_id, row.attempts, result)
        return row.state
