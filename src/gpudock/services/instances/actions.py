"""Instances: what users ask of them (create, list, start, stop, delete, restart)."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.db.models import (
    AutoStopModel,
    DesiredState,
    GpuAllocationModel,
    GpuDeviceModel,
    GpuShareModel,
    HostLossPolicy,
    HostModel,
    InstanceEventModel,
    InstanceModel,
    UserModel,
    UserState,
)
from gpudock.errors import Conflict, InvalidRequest, NotFound
from gpudock.messages import Message
from gpudock.services.billing import balances as billing
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.shape import fleet_shape
from gpudock.services.images import access as image_access
from gpudock.services.images import catalog as images
from gpudock.services.instances import auto_stop, job_command, labels, published, sizing
from gpudock.services.instances.auto_stop import AutoStopPolicy
from gpudock.services.instances.status import (
    S,
    is_leased,
    record_instance_note,
    request_delete,
    switch_for_request,
    switch_instance_status,
)
from gpudock.services.instances.status import current_reason as current_reason  # the gateway's

_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
RESERVED_ENV_PREFIXES = ("NVIDIA_", "GPUDOCK_")
RESERVED_ENV_NAMES = frozenset({"LD_PRELOAD", "LD_AUDIT"})
RESTART_WAIT_S = 5.0


@dataclass(frozen=True)
class InstanceRequest:
    gpu_model: str | None
    gpu_count: int
    name: str | None = None
    image: str | None = None
    cpu: float | None = None
    memory_gb: int | None = None
    disk_gb: int | None = None
    system_disk_gb: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpu_share: Decimal | None = None  # a fraction of one card …
    gpu_memory_gb: int | None = None  # … or GB of its memory: a share of one GPU
    gpu_models: tuple[str, ...] = ()  # acceptable besides gpu_model
    auto_stop: AutoStopPolicy | None = None
    services: tuple[tuple[str, int], ...] = ()  # ports to publish (name, port)
    command: str | None = None  # a job's shell command line (see job_command)
    host_labels: dict[str, str] = field(default_factory=dict)  # a host must carry them all
    on_host_loss: HostLossPolicy = HostLossPolicy.WAIT


@dataclass(frozen=True)
class _Priced:
    """What the funds check prices: the request's shape once sized."""

    gpu_model: str | None
    gpu_count: int
    gpu_share_milli: int | None


def create_instance(
    ctx: ServiceContext, user: UserModel, request: InstanceRequest
) -> InstanceModel:
    """Validate, then write the instance as pending in one transaction; the
    reconciler places and starts it. Without a gpu_model, the first of
    `gpu_models` is the preferred one."""
    _check_env(request.env)
    command = job_command.check_command(request.command)
    if request.gpu_model is None and request.gpu_models:
        request = replace(request, gpu_model=request.gpu_models[0])
    # May ask a registry: outside any transaction.
    image = image_access.resolve(ctx, user, request.image or ctx.settings.default_image).reference
    unchecked = images.preflight(ctx, user, image, request.gpu_model)  # driver/arch fit
    entry = images.find_image(ctx, user, image)
    services = (*(entry.services if entry else ()), *request.services)
    instance_id = "i-" + secrets.token_hex(5)
    name = request.name or instance_id
    _check_name(name)
    now = ctx.clock()
    policy = auto_stop.check_policy(ctx, request.auto_stop or AutoStopPolicy(), now)
    size = _size(ctx, request)
    try:
        with ctx.sessions.begin() as session:
            _check_name_free(session, user, name)
            priced = _Priced(request.gpu_model, request.gpu_count, size.gpu_share_milli)
            billing.check_funds(session, ctx.settings, user.id, priced, now)
            instance = InstanceModel(
                id=instance_id,
                name=name,
                user_id=user.id,
                gpu_model=request.gpu_model,
                gpu_count=request.gpu_count,
                gpu_share_milli=size.gpu_share_milli,
                gpu_model_choices=",".join(m for m in request.gpu_models if m != request.gpu_model),
                image=image,
                system_image=image,
                cpu=size.cpu,
                memory_gb=size.memory_gb,
                disk_gb=size.disk_gb,
                system_disk_gb=size.system_disk_gb,
                desired_state=DesiredState.RUNNING,
                env=_encode_env(request.env),
                created_at=now,
                updated_at=now,
                queued_at=now,
                placed=False,
                service_token=secrets.token_urlsafe(32),
                command=command,
                host_labels=json.dumps(request.host_labels, sort_keys=True),
                host_loss_policy=request.on_host_loss,
            )
            session.add(instance)
            switch_instance_status(
                session, instance, S.PENDING, Message("waiting for placement"), now
            )
            _set_policy(ctx, session, instance, policy, now)
            published.add_services(session, instance_id, services, now)
            if unchecked:
                record_instance_note(session, instance, unchecked, now)
    except IntegrityError as exc:
        message = Message("you already have an instance named {name}", name=repr(name))
        raise Conflict(message, field="name") from exc
    ctx.wake_reconciler()
    return instance


def _check_env(env: dict[str, str]) -> None:
    for key in env:
        if key in RESERVED_ENV_NAMES or key.startswith(RESERVED_ENV_PREFIXES):
            raise InvalidRequest(
                f"environment variable {key!r} is reserved: gpudock sets LD_PRELOAD, "
                "LD_AUDIT, NVIDIA_* and GPUDOCK_* itself so that an instance cannot "
                "reach GPUs or host hooks it was not given",
                field="env",
            )
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", key):
            raise InvalidRequest(f"bad environment variable name {key!r}", field="env")


def _encode_env(env: dict[str, str]) -> str:
    return json.dumps(env, sort_keys=True)


def _size(ctx: ServiceContext, request: InstanceRequest) -> sizing.Size:
    """The request's sizes, read before the create's transaction: hosts and their
    GPUs are the fleet's configuration (the server's kept copy of it), and on
    SQLite every read inside a write transaction holds the one write lock (a
    create takes exactly one). A host must carry the labels it asks for and be
    able to hold it."""
    with ctx.reader() as session:
        fleet = fleet_shape(ctx, session)
    ceiling = ctx.memo.get(sizing.EngineCpus).ceiling(ctx) if fleet.simulated else None
    with ctx.reader() as session:  # no session open across the engine call above
        models = tuple(m for m in dict.fromkeys((request.gpu_model, *request.gpu_models)) if m)
        labels.check_host_labels(session, request.host_labels, models, request.gpu_count)
        return sizing.resolve_size(fleet, session, ctx.settings, request, ceiling)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise InvalidRequest(
            Message(
                "bad instance name {name}: use 1-63 lowercase letters, digits and '-', "
                "starting and ending with a letter or digit",
                name=repr(name),
            ),
            field="name",
        )


def request_problems(
    ctx: ServiceContext, user: UserModel, request: InstanceRequest
) -> dict[str, str]:
    """Every problem `create_instance` would refuse the request for, by field, found
    in one pass (a form shows each beside its field); empty when none is found.
    Funds are not checked here: `create_instance` does that as it writes."""
    problems: dict[str, str] = {}

    def check(where: str, run: Callable[[], object]) -> None:
        try:
            run()
        except (InvalidRequest, NotFound, Conflict) as exc:
            problems.setdefault(exc.field or where, exc.message)

    with ctx.reader() as session:
        if request.name:
            check("name", lambda: _check_name(request.name or ""))
            if "name" not in problems:
                check("name", lambda: _check_name_free(session, user, request.name or ""))
        sized = replace(request, disk_gb=None)
        fleet = fleet_shape(ctx, session)
        check("gpu_count", lambda: sizing.resolve_size(fleet, session, ctx.settings, sized))
        check("disk_gb", lambda: sizing.check_disk(request.disk_gb, ctx.settings))

    def image_fits() -> None:  # a catalog verdict first: it says more than "cannot pull"
        text = request.image or ctx.settings.default_image
        if "gpu_model" not in problems:
            images.preflight(ctx, user, text, request.gpu_model)
        image_access.resolve(ctx, user, text)

    check("image", image_fits)
    return problems


def _check_name_free(session: Session, user: UserModel, name: str) -> None:
    taken = session.scalar(
        select(InstanceModel.id).where(
            InstanceModel.user_id == user.id,
            InstanceModel.name == name,
            InstanceModel.status != S.DELETED,
        )
    )
    if taken is not None:
        message = Message("you already have an instance named {name}", name=repr(name))
        raise Conflict(message, field="name")


def _visible(user: UserModel) -> list[ColumnElement[bool]]:
    return [] if user.is_admin else [InstanceModel.user_id == user.id]


def list_instances(
    ctx: ServiceContext, user: UserModel, *, include_deleted: bool = False
) -> list[InstanceModel]:
    with ctx.reader() as session:
        query = select(InstanceModel).where(*_visible(user)).order_by(InstanceModel.created_at)
        if not include_deleted:
            query = query.where(InstanceModel.status != S.DELETED)
        return list(session.scalars(query))


def _load(session: Session, user: UserModel, ref: str, *, lock: bool = False) -> InstanceModel:
    """By id, or by name among the user's live instances; another tenant's → NotFound."""
    query = select(InstanceModel).where(
        *_visible(user),
        or_(
            InstanceModel.id == ref,
            (InstanceModel.name == ref)
            & (InstanceModel.user_id == user.id)
            & (InstanceModel.status != S.DELETED),
        ),
    )
    if lock:
        query = query.with_for_update()
    instance = session.scalars(query).first()
    if instance is None:
        raise NotFound(
            Message(
                "no instance {ref}: the console's Instances page or `gpudock instances list` "
                "shows yours",
                ref=repr(ref),
            )
        )
    return instance


def get_instance(ctx: ServiceContext, user: UserModel, ref: str) -> InstanceModel:
    with ctx.reader() as session:
        return _load(session, user, ref)


@dataclass(frozen=True)
class InstanceView:
    instance: InstanceModel
    gpus: list[str]
    host_name: str | None
    share_memory_mb: int | None = None  # a placed share's GPU memory limit
    auto_stop: AutoStopModel | None = None

    @property
    def share_text(self) -> str | None:
        """Its share of one GPU as a decimal fraction ("0.25"); None: whole GPUs."""
        milli = self.instance.gpu_share_milli
        return None if milli is None else sizing.share_text(milli)


def views(ctx: ServiceContext, instances: list[InstanceModel]) -> list[InstanceView]:
    """Instances with their allocated GPUs and host names, in one read transaction."""
    with ctx.reader() as session:
        return _views(ctx, session, instances)


def show_view(ctx: ServiceContext, user: UserModel, ref: str) -> InstanceView:
    """`get_instance` and `view` in one read transaction."""
    with ctx.reader() as session:
        return _views(ctx, session, [_load(session, user, ref)])[0]


def _views(
    ctx: ServiceContext, session: Session, instances: list[InstanceModel]
) -> list[InstanceView]:
    ids = [i.id for i in instances]
    card_mb = dict(
        session.execute(
            select(GpuShareModel.instance_id, GpuDeviceModel.memory_mb)
            .join(GpuDeviceModel, GpuDeviceModel.id == GpuShareModel.gpu_id)
            .where(GpuShareModel.instance_id.in_(ids))
        ).all()
    )
    rows = session.execute(
        select(GpuAllocationModel.instance_id, GpuAllocationModel.gpu_id)
        .where(GpuAllocationModel.instance_id.in_(ids))
        .union_all(
            select(GpuShareModel.instance_id, GpuShareModel.gpu_id).where(
                GpuShareModel.instance_id.in_(ids)
            )
        )
        .order_by("gpu_id")
    ).all()
    host_names = _host_names(ctx, session, {i.host_id for i in instances if i.host_id})
    policies = auto_stop.policies(session, ids)
    gpus: dict[str, list[str]] = {i: [] for i in ids}
    for instance_id, gpu_id in rows:
        gpus[instance_id].append(gpu_id)
    return [
        InstanceView(
            i,
            gpus[i.id],
            host_names.get(i.host_id) if i.host_id else None,
            _share_memory(i, card_mb.get(i.id)),
            policies.get(i.id),
        )
        for i in instances
    ]


def _host_names(ctx: ServiceContext, session: Session, host_ids: set[str]) -> dict[str, str]:
    """From the kept fleet shape; a host no longer present is read by its id."""
    present = fleet_shape(ctx, session).host_names
    names = {host_id: present[host_id] for host_id in host_ids if host_id in present}
    gone = host_ids - names.keys()
    if gone:
        query = select(HostModel.id, HostModel.name).where(HostModel.id.in_(gone))
        names.update((host_id, name) for host_id, name in session.execute(query))
    return names


def _share_memory(instance: InstanceModel, card_mb: int | None) -> int | None:
    if instance.gpu_share_milli is None or card_mb is None:
        return None
    return sizing.share_memory_mb(card_mb, instance.gpu_share_milli)


def view(ctx: ServiceContext, instance: InstanceModel) -> InstanceView:
    return views(ctx, [instance])[0]


def list_events(ctx: ServiceContext, user: UserModel, ref: str) -> list[InstanceEventModel]:
    with ctx.sessions() as session:
        instance = _load(session, user, ref)
        return list(
            session.scalars(
                select(InstanceEventModel)
                .where(InstanceEventModel.instance_id == instance.id)
                .order_by(InstanceEventModel.id)
            )
        )


def _request(
    ctx: ServiceContext,
    user: UserModel,
    ref: str,
    desired: DesiredState,
    verb: str,
    *,
    stay: bool | None = None,
    note: str | None = None,
) -> InstanceModel:
    """Record the desired state; switch status now where no I/O is needed
    and no reconciler holds the row, else leave it to the reconciler. A `note`
    goes on the instance's timeline."""
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        instance = _load(session, user, ref, lock=True)
        if (
            instance.status in (S.DELETING, S.DELETED)
            or instance.desired_state == DesiredState.DELETED
        ):
            raise Conflict(f"instance {instance.id} is being deleted; it cannot {verb}")
        if desired == DesiredState.RUNNING:
            _check_owner_active(session, instance)
        if desired == DesiredState.RUNNING and instance.status in (S.STOPPED, S.FAILED):
            billing.check_funds(session, ctx.settings, instance.user_id, instance, now)
        instance.desired_state = desired
        if stay is not None:
            instance.stay_on_host = stay
        if desired == DesiredState.RUNNING:
            instance.queued_at = (
                now if instance.status in (S.STOPPED, S.FAILED) else instance.queued_at
            )
        if not is_leased(instance, now):
            switch_for_request(session, instance, desired, Message(f"{verb} requested"), now)
        if note:
            record_instance_note(session, instance, note, now)
        instance.updated_at = now
    ctx.wake_reconciler()
    return instance


def _check_owner_active(session: Session, instance: InstanceModel) -> None:
    """Read after the instance's row lock, so a concurrent disable is seen or
    sees this start (and stops it)."""
    owner = session.get(UserModel, instance.user_id)
    if owner is not None and owner.state != UserState.ACTIVE:
        raise Conflict(
            f"instance {instance.id} belongs to {owner.name}, whose account is "
            f"{owner.state.value}: an admin enables it first (`gpudock users enable {owner.name}`)"
        )


def start_instance(
    ctx: ServiceContext, user: UserModel, ref: str, *, stay: bool = False
) -> InstanceModel:
    """Start on the old GPUs if free, else anywhere with the data moved along;
    `stay` waits for a GPU on the instance's own host instead."""
    unchecked = images.preflight_start(ctx, user, ref)  # the image still fits the fleet
    return _request(ctx, user, ref, DesiredState.RUNNING, "start", stay=stay, note=unchecked)


def change_auto_stop(
    ctx: ServiceContext, user: UserModel, ref: str, policy: AutoStopPolicy
) -> InstanceModel:
    """Replace the instance's auto-stop policy (an empty one removes it)."""
    now = ctx.clock()
    policy = auto_stop.check_policy(ctx, policy, now)
    with ctx.sessions.begin() as session:
        instance = _load(session, user, ref, lock=True)
        if instance.status in (S.DELETING, S.DELETED):
            raise Conflict(f"instance {instance.id} is being deleted")
        _set_policy(ctx, session, instance, policy, now, changing=True)
    return instance


def _set_policy(
    ctx: ServiceContext,
    session: Session,
    instance: InstanceModel,
    policy: AutoStopPolicy,
    now: datetime,
    *,
    changing: bool = False,
) -> None:
    """Write it and say so on the timeline (a create without one says nothing)."""
    row = auto_stop.write_policy(ctx, session, instance, policy, now)
    if row is not None or changing:
        text = auto_stop.describe(row) if row is not None else "off"
        record_instance_note(session, instance, f"{auto_stop.AUTO_STOP_PREFIX}{text}", now)


def stop_instance(ctx: ServiceContext, user: UserModel, ref: str) -> InstanceModel:
    return _request(ctx, user, ref, DesiredState.STOPPED, "stop")


def delete_instance(ctx: ServiceContext, user: UserModel, ref: str) -> InstanceModel:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        instance = _load(session, user, ref, lock=True)
        request_delete(session, instance, Message("delete requested"), now)
    ctx.wake_reconciler()
    return instance


def restart_instance(ctx: ServiceContext, user: UserModel, ref: str) -> InstanceModel:
    """Stop the container and start it again on the same GPUs.

    A reconciler may hold the row for a few milliseconds after it reports
    running; wait that out (bounded) rather than fail the user's request.
    """
    deadline = time.monotonic() + RESTART_WAIT_S
    while True:
        now = ctx.clock()
        with ctx.sessions.begin() as session:
            instance = _load(session, user, ref, lock=True)
            if instance.status != S.RUNNING or instance.desired_state != DesiredState.RUNNING:
                raise Conflict(
                    f"instance {instance.id} is {instance.status}; only a running instance "
                    "can restart (use start for a stopped one)"
                )
            if not is_leased(instance, now):
                # Desired state stays 'running': the reconciler stops the
                # container, keeps the GPUs (placed stays true) and starts it.
                switch_instance_status(
                    session, instance, S.STOPPING, Message("restart requested"), now
                )
                break
        if time.monotonic() > deadline:
            raise Conflict(f"instance {instance.id} is busy; try again in a moment")
        time.sleep(0.05)
    ctx.wake_reconciler()
    return instance
