"""What a user keeps and reads: webhook endpoints (the secret shown once),
the email address notifications go to, the notification list and the
delivery log. Everything is the user's own: another user's ids are NotFound."""

from __future__ import annotations

import ipaddress
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    EndpointKind,
    NotificationDeliveryModel,
    NotificationEndpointModel,
    NotificationModel,
    UserModel,
)
from gpudock.errors import Conflict, InvalidRequest, NotFound
from gpudock.services.context import ServiceContext
from gpudock.services.notifications.outbox import KINDS
from gpudock.services.notifications.senders import private_target_refusal

MAX_WEBHOOKS = 20
MAX_URL = 2000
_EMAIL = re.compile(r"^[^@\s]{1,64}@[A-Za-z0-9.-]{1,253}$")
E = NotificationEndpointModel


class NoEmail(NotFound):
    code = "no_email"

    def __init__(self) -> None:
        super().__init__(
            "no email address for notifications: set one with `gpudock notifications email ADDRESS`"
        )


@dataclass(frozen=True)
class NewWebhook:
    endpoint: NotificationEndpointModel
    secret: str  # shown once


@dataclass(frozen=True)
class DeliveryView:
    delivery: NotificationDeliveryModel
    kind: str
    message: str
    channel: str
    target: str


def check_kinds(kinds: list[str]) -> str:
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise InvalidRequest(
            f"unknown notification kind {', '.join(unknown)}: use {', '.join(KINDS)}",
            field="kinds",
        )
    return ",".join(dict.fromkeys(kinds))


def _check_url(url: str, *, allow_private: bool) -> None:
    parts = urlsplit(url)
    if len(url) > MAX_URL or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(
            f"bad webhook URL {url[:100]!r}: give an http:// or https:// URL with a host "
            f"(at most {MAX_URL} characters)",
            field="url",
        )
    if parts.username or parts.password:
        raise InvalidRequest(
            "put no credentials in a webhook URL: check the signature instead", field="url"
        )
    if not allow_private:
        _refuse_private_host(parts.hostname or "")


def _refuse_private_host(host: str) -> None:
    """What is known without asking DNS (a name is checked again at each send)."""
    if host == "localhost" or host.endswith(".localhost"):
        raise InvalidRequest(private_target_refusal(host, "loopback"), field="url")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    if not address.is_global:
        raise InvalidRequest(private_target_refusal(host, str(address)), field="url")


def create_webhook(ctx: ServiceContext, user: UserModel, url: str, kinds: list[str]) -> NewWebhook:
    url = url.strip()
    _check_url(url, allow_private=ctx.settings.webhook_private_targets)
    wanted = check_kinds(kinds)
    secret = "whsec_" + secrets.token_urlsafe(32)
    with ctx.sessions.begin() as session:
        count = len(_live(session, user.id, EndpointKind.WEBHOOK))
        if count >= MAX_WEBHOOKS:
            raise Conflict(f"you have {count} webhooks, the most allowed: remove one first")
        endpoint = E(
            id="wh-" + secrets.token_hex(6),
            user_id=user.id,
            kind=EndpointKind.WEBHOOK,
            target=url,
            secret=secret,
            kinds=wanted,
            created_at=ctx.clock(),
        )
        session.add(endpoint)
    return NewWebhook(endpoint, secret)


def _live(session: Session, user_id: str, kind: EndpointKind) -> list[NotificationEndpointModel]:
    return list(
        session.scalars(
            select(E)
            .where(E.user_id == user_id, E.kind == kind, E.removed_at.is_(None))
            .order_by(E.created_at, E.id)
        )
    )


def list_webhooks(ctx: ServiceContext, user: UserModel) -> list[NotificationEndpointModel]:
    with ctx.reader() as session:
        return _live(session, user.id, EndpointKind.WEBHOOK)


def remove_webhook(
    ctx: ServiceContext, user: UserModel, endpoint_id: str
) -> NotificationEndpointModel:
    """Pending deliveries to it fail ('the endpoint was removed'); the log stays."""
    with ctx.sessions.begin() as session:
        endpoint = session.scalars(
            select(E)
            .where(
                E.id == endpoint_id,
                E.user_id == user.id,
                E.kind == EndpointKind.WEBHOOK,
                E.removed_at.is_(None),
            )
            .with_for_update()
        ).first()
        if endpoint is None:
            raise NotFound(f"no webhook {endpoint_id!r}: `gpudock webhooks list` shows yours")
        endpoint.removed_at = ctx.clock()
    return endpoint


def email_endpoint(ctx: ServiceContext, user: UserModel) -> NotificationEndpointModel | None:
    with ctx.reader() as session:
        found = _live(session, user.id, EndpointKind.EMAIL)
        return found[0] if found else None


def set_email(
    ctx: ServiceContext, user: UserModel, address: str, kinds: list[str]
) -> NotificationEndpointModel:
    """One address per user; a new one replaces the old."""
    address = address.strip()
    if not ctx.settings.smtp_host:
        raise Conflict(
            "email notifications are off on this server: the operator sets GPUDOCK_SMTP_HOST "
            "(use a webhook meanwhile)"
        )
    if not _EMAIL.match(address):
        raise InvalidRequest(f"bad email address {address[:100]!r}", field="address")
    wanted = check_kinds(kinds)
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        for old in _live(session, user.id, EndpointKind.EMAIL):
            old.removed_at = now
        endpoint = E(
            id="em-" + secrets.token_hex(6),
            user_id=user.id,
            kind=EndpointKind.EMAIL,
            target=address,
            kinds=wanted,
            created_at=now,
        )
        session.add(endpoint)
    return endpoint


def clear_email(ctx: ServiceContext, user: UserModel) -> NotificationEndpointModel:
    """Stop emailing; NoEmail if no address was set."""
    with ctx.sessions.begin() as session:
        found = _live(session, user.id, EndpointKind.EMAIL)
        if not found:
            raise NoEmail()
        for old in found:
            old.removed_at = ctx.clock()
        return found[0]


def list_notifications(
    ctx: ServiceContext, user: UserModel, *, limit: int = 100, since: datetime | None = None
) -> list[NotificationModel]:
    """The user's own, newest first."""
    with ctx.reader() as session:
        query = select(NotificationModel).where(NotificationModel.user_id == user.id)
        if since is not None:
            query = query.where(NotificationModel.created_at >= since)
        return list(
            session.scalars(
                query.order_by(
                    NotificationModel.created_at.desc(), NotificationModel.id.desc()
                ).limit(limit)
            )
        )


def list_deliveries(
    ctx: ServiceContext, user: UserModel, *, endpoint_id: str | None = None, limit: int = 100
) -> list[DeliveryView]:
    """The delivery log, newest first; of one endpoint of the user's, or all."""
    D = NotificationDeliveryModel
    with ctx.reader() as session:
        if endpoint_id is not None:
            mine = session.scalar(select(E.id).where(E.id == endpoint_id, E.user_id == user.id))
            if mine is None:
                raise NotFound(f"no webhook {endpoint_id!r}: `gpudock webhooks list` shows yours")
        query = (
            select(D, NotificationModel.kind, NotificationModel.message, E.kind, E.target)
            .join(NotificationModel, NotificationModel.id == D.notification_id)
            .join(E, E.id == D.endpoint_id)
            .where(D.user_id == user.id)
        )
        if endpoint_id is not None:
            query = query.where(D.endpoint_id == endpoint_id)
        rows = session.execute(query.order_by(D.created_at.desc(), D.id.desc()).limit(limit))
        return [DeliveryView(row[0], row[1], row[2], row[3].value, row[4]) for row in rows.all()]
