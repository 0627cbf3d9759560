"""Published ports (service URLs): which ports of an instance the server's
proxy serves, who may open them, and the token links that open them.

A service is a name and a port inside one instance; its URL is
`/i/<instance id>/<name>/` on the server, or `<name>-<instance id>.<domain>`
when `GPUDOCK_SERVICE_DOMAIN` is set (service names have no '-', so the
host name splits at its first one). Only the instance's owner and admins get
through, with a console login or a link token; to anyone else a service does
not exist (404), whatever it is.

Link tokens are 256 random bits shown once; the database keeps their SHA-256.
Revoking ends every link of the service (`revoke_links`); unpublishing a
service removes its links with it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.db.models import (
    InstanceModel,
    InstanceServiceModel,
    ServiceLinkModel,
    UserModel,
    UserState,
)
from gpudock.errors import Conflict, InvalidRequest, NotFound, Unauthenticated
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions
from gpudock.services.instances.status import S
from gpudock.settings import Settings

SERVICE_NAME = re.compile(r"^[a-z][a-z0-9]{0,14}$")
URL_PREFIX = "/i/"
LINK_PARAMETER = "gpudock_token"
KIND_HTTP, KIND_JUPYTER, KIND_TENSORBOARD = "http", "jupyter", "tensorboard"
# The kinds gpudock knows by name: the service's name is its kind.
BUILTIN_PORTS = {KIND_JUPYTER: 8888, KIND_TENSORBOARD: 6006}
MAX_SERVICES = 16


@dataclass(frozen=True)
class PublishedService:
    instance_id: str
    instance_name: str
    name: str
    port: int
    kind: str

    def path(self) -> str:
        return service_path(self.instance_id, self.name)


@dataclass(frozen=True)
class ProxyTarget:
    """Where one authorised request goes: the container backing the instance now."""

    instance_id: str
    service: str
    kind: str
    container_id: str
    port: int
    service_token: str | None
    host_id: str | None  # where the container runs (`ServiceContext.runtime_for`)

    @property
    def keeps_prefix(self) -> bool:
        """JupyterLab and TensorBoard are started with the URL's prefix as their
        base; any other server gets the path below it."""
        return self.kind != KIND_HTTP


def service_path(instance_id: str, name: str) -> str:
    return f"{URL_PREFIX}{instance_id}/{name}/"


def service_url(settings: Settings, base_url: str, instance_id: str, name: str) -> str:
    """The service's URL as a browser opens it; `base_url`: how the request that
    asks reached this server (`http://host:8080/`)."""
    if settings.service_domain:
        scheme = base_url.split(":", 1)[0]
        return f"{scheme}://{name}-{instance_id}.{settings.service_domain}/"
    return base_url.rstrip("/") + service_path(instance_id, name)


def url_prefix(settings: Settings, instance_id: str) -> str:
    """What JupyterLab and TensorBoard in the instance put before their paths:
    the path prefix, or nothing when each service has a host name of its own."""
    return "" if settings.service_domain else f"{URL_PREFIX}{instance_id}/"


def check_service(name: str, port: int) -> None:
    if not SERVICE_NAME.match(name):
        raise InvalidRequest(
            f"bad service name {name!r}: use 1-15 lowercase letters and digits, "
            "starting with a letter (it becomes part of the URL)",
            field="name",
        )
    if not 1 <= port <= 65535:
        raise InvalidRequest(f"bad port {port}: use 1-65535", field="port")


def kind_of(name: str, port: int) -> str:
    """`jupyter` on 8888 and `tensorboard` on 6006 are gpudock's own launches."""
    return name if BUILTIN_PORTS.get(name) == port else KIND_HTTP


def add_services(
    session: Session, instance_id: str, services: Iterable[tuple[str, int]], now: datetime
) -> None:
    """Publish ports of an instance being created, in its transaction."""
    for name, port in dict(services).items():
        check_service(name, port)
        session.add(_row(instance_id, name, port, now))


def _row(instance_id: str, name: str, port: int, now: datetime) -> InstanceServiceModel:
    return InstanceServiceModel(
        id="s-" + secrets.token_hex(6),
        instance_id=instance_id,
        name=name,
        port=port,
        kind=kind_of(name, port),
        created_at=now,
    )


def _published(instance: InstanceModel, row: InstanceServiceModel) -> PublishedService:
    return PublishedService(instance.id, instance.name, row.name, row.port, row.kind)


def list_services(ctx: ServiceContext, user: UserModel, ref: str) -> list[PublishedService]:
    instance = actions.get_instance(ctx, user, ref)
    with ctx.reader() as session:
        rows = session.scalars(
            select(InstanceServiceModel)
            .where(InstanceServiceModel.instance_id == instance.id)
            .order_by(InstanceServiceModel.name)
        )
        return [_published(instance, row) for row in rows]


def publish(
    ctx: ServiceContext, user: UserModel, ref: str, port: int, name: str
) -> PublishedService:
    """Serve `port` of the instance as service `name`; publishing the same name
    and port again is a no-op, another port under a taken name a conflict."""
    check_service(name, port)
    instance = actions.get_instance(ctx, user, ref)
    if instance.status == S.DELETED:
        raise NotFound(f"no instance {ref!r}: `gpudock instances list` shows yours")
    try:
        with ctx.sessions.begin() as session:
            rows = list(
                session.scalars(
                    select(InstanceServiceModel).where(
                        InstanceServiceModel.instance_id == instance.id
                    )
                )
            )
            same = next((r for r in rows if r.name == name), None)
            if same is not None and same.port == port:
                return _published(instance, same)
            if same is not None:
                raise Conflict(
                    f"{instance.name} already publishes {name!r} on port {same.port}: "
                    f"`gpudock instances unexpose {instance.name} {name}` first",
                    field="name",
                )
            if len(rows) >= MAX_SERVICES:
                raise Conflict(f"an instance publishes at most {MAX_SERVICES} ports")
            row = _row(instance.id, name, port, ctx.clock())
            session.add(row)
    except IntegrityError as exc:  # a parallel publish of the same name won
        raise Conflict(f"{instance.name} already publishes {name!r}", field="name") from exc
    return _published(instance, row)


def unpublish(ctx: ServiceContext, user: UserModel, ref: str, name: str) -> None:
    """Stop serving the service; its links stop working with it."""
    instance = actions.get_instance(ctx, user, ref)
    with ctx.sessions.begin() as session:
        removed = session.execute(
            delete(InstanceServiceModel).where(
                InstanceServiceModel.instance_id == instance.id,
                InstanceServiceModel.name == name,
            )
        )
        session.execute(
            delete(ServiceLinkModel).where(
                ServiceLinkModel.service_id.not_in(select(InstanceServiceModel.id))
            )
        )
    if not int(getattr(removed, "rowcount", 0) or 0):
        raise _no_service(ref, name)


@dataclass(frozen=True)
class SharedLink:
    url: str  # the service's URL with the token: shown once
    token: str


def share_link(
    ctx: ServiceContext, user: UserModel, ref: str, name: str, base_url: str
) -> SharedLink:
    """A new link to copy (URLs use the instance's id: names are per user)."""
    instance_id = actions.get_instance(ctx, user, ref).id
    token = create_link(ctx, user, instance_id, name)
    url = service_url(ctx.settings, base_url, instance_id, name)
    return SharedLink(url=f"{url}?{LINK_PARAMETER}={token}", token=token)


def _no_service(ref: str, name: str) -> NotFound:
    return NotFound(
        f"no service {name!r} on instance {ref!r}: `gpudock instances services {ref}` lists them"
    )


def _service_row(
    session: Session, instance: InstanceModel, ref: str, name: str
) -> InstanceServiceModel:
    row = session.scalars(
        select(InstanceServiceModel).where(
            InstanceServiceModel.instance_id == instance.id, InstanceServiceModel.name == name
        )
    ).first()
    if row is None:
        raise _no_service(ref, name)
    return row


def create_link(
    ctx: ServiceContext, user: UserModel, ref: str, name: str, *, ttl: timedelta | None = None
) -> str:
    """A new link token for the service (returned once; only its digest is kept),
    valid until revoked, or for `ttl` (the hand-over to a service's own host name)."""
    instance = actions.get_instance(ctx, user, ref)
    token = "gps_" + secrets.token_urlsafe(32)
    with ctx.sessions.begin() as session:
        row = _service_row(session, instance, ref, name)
        session.add(
            ServiceLinkModel(
                id="l-" + secrets.token_hex(6),
                service_id=row.id,
                token_hash=_digest(token),
                created_at=ctx.clock(),
                expires_at=ctx.clock() + ttl if ttl is not None else None,
            )
        )
    return token


def revoke_links(ctx: ServiceContext, user: UserModel, ref: str, name: str) -> int:
    """Revoke every live link of the service; how many there were."""
    instance = actions.get_instance(ctx, user, ref)
    with ctx.sessions.begin() as session:
        row = _service_row(session, instance, ref, name)
        result = session.execute(
            update(ServiceLinkModel)
            .where(ServiceLinkModel.service_id == row.id, ServiceLinkModel.revoked_at.is_(None))
            .values(revoked_at=ctx.clock())
        )
        return int(getattr(result, "rowcount", 0) or 0)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- the proxy's questions ------------------------------------------------
def target_for_user(ctx: ServiceContext, user: UserModel, ref: str, name: str) -> ProxyTarget:
    """The service `name` of instance `ref` (id, or name among the user's) for
    its owner or an admin; `NotFound` for anyone else, as for what does not exist."""
    with ctx.reader() as session:
        visible = [] if user.is_admin else [InstanceModel.user_id == user.id]
        found = session.execute(
            select(InstanceModel, InstanceServiceModel)
            .join(InstanceServiceModel, InstanceServiceModel.instance_id == InstanceModel.id)
            .where(
                *visible,
                InstanceServiceModel.name == name,
                (InstanceModel.id == ref)
                | (
                    (InstanceModel.name == ref)
                    & (InstanceModel.user_id == user.id)
                    & (InstanceModel.status != S.DELETED)
                ),
            )
        ).first()
    if found is None:
        raise _no_service(ref, name)
    return _target(found[0], found[1])


def target_for_link(ctx: ServiceContext, token: str, ref: str, name: str) -> ProxyTarget:
    """The service a link token opens, if it is the one asked for; `Unauthenticated`
    for an unknown or revoked token, or one whose owner is no longer active."""
    if not token.startswith("gps_") or len(token) > 128:
        raise Unauthenticated("this link is not valid: ask the instance's owner for a new one")
    now = ctx.clock()
    with ctx.reader() as session:
        found = session.execute(
            select(InstanceModel, InstanceServiceModel)
            .join(InstanceServiceModel, InstanceServiceModel.instance_id == InstanceModel.id)
            .join(ServiceLinkModel, ServiceLinkModel.service_id == InstanceServiceModel.id)
            .join(UserModel, UserModel.id == InstanceModel.user_id)
            .where(
                ServiceLinkModel.token_hash == _digest(token),
                ServiceLinkModel.revoked_at.is_(None),
                or_(ServiceLinkModel.expires_at.is_(None), ServiceLinkModel.expires_at > now),
                UserModel.state == UserState.ACTIVE,
            )
        ).first()
    if found is None:
        raise Unauthenticated("this link was revoked, expired or never existed: ask for a new one")
    instance, row = found[0], found[1]
    if instance.id != ref or row.name != name:
        raise _no_service(ref, name)
    return _target(instance, row)


def _target(instance: InstanceModel, row: InstanceServiceModel) -> ProxyTarget:
    if instance.status != S.RUNNING or not instance.container_id:
        raise Conflict(
            f"instance {instance.name} is {instance.status.value}: "
            f"`gpudock instances start {instance.name}` first"
        )
    return ProxyTarget(
        instance_id=instance.id,
        service=row.name,
        kind=row.kind,
        container_id=instance.container_id,
        port=row.port,
        service_token=instance.service_token,
        host_id=instance.host_id,
    )
