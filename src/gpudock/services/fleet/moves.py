"""Moving an instance to other GPUs with its id, SSH endpoint and data.

A move off a failed GPU: `request_move` switches a running instance to
'migrating' at the fault's timestamp (its billing interval closes there);
the lifecycle's evacuate step stops the container and releases the GPUs;
the placement pass finds a healthy GPU of the same model (same host first);
the run step commits the writable layer, moves the data volume if the host
changed (`ensure_data_volume`), and starts the new container. The same run
step moves a stopped instance whose host is full when it starts again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session

from gpudock.db.models import (
    DesiredState,
    HostModel,
    InstanceModel,
    InstanceStatus,
    MigrationModel,
)
from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.messages import Message
from gpudock.runtime.base import (
    LABEL_CLUSTER,
    LABEL_COMMIT_OF,
    LABEL_HOST,
    LABEL_INSTANCE,
    LABEL_OWNER,
    ContainerState,
)
from gpudock.runtime.link import LinkRuntime
from gpudock.runtime.transfer import ImageStreams, VolumeCopied, common_bottom
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import move_log as migration_log
from gpudock.services.fleet.inventory import allocated_gpu_ids
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.status import switch_instance_status
from gpudock.services.leases import with_lease

log = logging.getLogger(__name__)
S = InstanceStatus
EVICTED = "evicted"  # the move log's trigger when the platform ended the container
PROGRESS_STEP = 0.1  # report a data move's progress every 10 %
UNSIZED_STEP_BYTES = 64 << 20  # and one of unknown size every 64 MiB or 10 % more, at least


def request_move(
    session: Session,
    instance: InstanceModel,
    reason: str,
    fault_id: int | None,
    at: datetime,
    *,
    trigger: str | None = None,
) -> bool:
    """Ask a running instance to leave its GPUs now. Instances on their way
    up are moved by the run step, which never starts on a GPU that is not
    healthy; stopped ones hold no GPU. True if a move was requested.
    `trigger`: the move log's (default: 'fault' with a fault, else 'drain');
    `EVICTED` keeps the placement off the host it left for a while."""
    if (
        instance.status != S.RUNNING
        or instance.desired_state != DesiredState.RUNNING
        or not instance.placed
    ):
        return False
    session.add(
        MigrationModel(
            instance_id=instance.id,
            fault_id=fault_id,
            reason=reason,
            trigger=trigger or ("fault" if fault_id is not None else "drain"),
            gpu_model=instance.gpu_model,
            from_host_id=instance.host_id,
            from_gpus=",".join(allocated_gpu_ids(session, instance.id)),
            outcome=migration_log.MOVING,
            started_at=at,
        )
    )
    switch_instance_status(
        session, instance, S.MIGRATING, Message("moving: {reason}", reason=reason), at
    )
    return True


def data_volume_on(cluster_id: str, instance: containers.DataVolumeOwner, host: HostModel) -> str:
    """Where the data volume lives on `host`: its first home keeps the
    original name; each later home gets a name of its own, so a move that is
    cut short resumes into the same target."""
    if instance.data_volume is None or instance.data_host_id == host.id:
        return instance.data_volume or containers.volume_name(cluster_id, instance.id)
    return f"{containers.volume_name(cluster_id, instance.id)}-{host.id[:12]}"


def ensure_data_volume(
    ctx: ServiceContext, instance: InstanceModel, host: HostModel, token: str
) -> InstanceModel:
    """Make the instance's data volume exist on `host`, copying it from the
    host that holds it if that is another one. Idempotent and resumable.
    The old copy stays until the old container is gone: the caller removes
    it then (`remove_stale_volume`), or garbage collection does after a crash."""
    target = data_volume_on(ctx.cluster_id, instance, host)
    labels = {**containers.instance_labels(ctx.cluster_id, instance), LABEL_HOST: host.name}
    runtime = containers.runtime_of(ctx, instance, host.id)
    if instance.data_volume is not None and runtime.volumes_reach_every_host():
        target = instance.data_volume  # network storage: the same volume attaches there
    runtime.ensure_volume(target, labels, size_gb=instance.disk_gb)
    if instance.data_volume is None:
        # Its first home: the name is derived from the id, so it is recorded
        # with 'running' (`record_first_home`), one transaction fewer on the way up.
        return instance
    if instance.data_volume is not None and instance.data_volume != target:
        with_lease(
            ctx,
            instance.id,
            token,
            lambda session, row: note_start_move(session, row, row.data_host_id, host, ctx.clock()),
        )
        _copy_data(ctx, instance, target, host, token)
    if instance.data_volume == target and instance.data_host_id == host.id:
        return instance
    source = instance.data_volume

    def mutate(session: Session, row: InstanceModel) -> InstanceModel:
        row.data_volume, row.data_host_id = target, host.id
        return row

    updated = with_lease(ctx, instance.id, token, mutate)
    if source is not None and source != target:
        ctx.crash_point("after_data_move")
    return updated


def record_first_home(instance: InstanceModel, host_id: str, cluster_id: str) -> None:
    """On the row, in the caller's transaction: where the data volume was made."""
    if instance.data_volume is None:
        instance.data_volume = containers.volume_name(cluster_id, instance.id)
        instance.data_host_id = host_id


def remove_stale_volumes(ctx: ServiceContext, instance: InstanceModel) -> None:
    """Once the container is replaced (the old one held the old volume): any
    volume of this instance that is not its data volume now is a copy left
    on the host it moved away from, possibly by a move a crash cut short."""
    labels = {**containers.cluster_labels(ctx.cluster_id), LABEL_INSTANCE: instance.id}
    keep = containers.data_volume_of(ctx.cluster_id, instance)
    runtime = containers.runtime_of(ctx, instance)
    for volume in runtime.list_volumes(labels):
        if volume.name != keep:
            runtime.remove_volume(volume.name)


def carry_writable_layer_across(
    ctx: ServiceContext, instance: InstanceModel, host: HostModel, token: str
) -> InstanceModel:
    """Before a start on another agent host than the one holding the instance's
    container: commit that container's writable layer there and move the image
    to `host` (`docker save`/`load` over both links) unless it has it already."""
    came_from = instance.data_host_id
    if came_from is None or came_from == host.id:
        return instance
    source = containers.runtime_of(ctx, instance, came_from)
    destination = containers.runtime_of(ctx, instance, host.id)
    if not isinstance(source, LinkRuntime) or not isinstance(destination, LinkRuntime):
        return instance  # one engine: the run step commits and replaces in place
    old = source.inspect_container(containers.container_name(ctx.cluster_id, instance.id))
    if old is not None and not _committed_already(source, instance, old):
        ref = source.commit_container(
            old.id,
            containers.system_image_repository(ctx.cluster_id, instance.id),
            f"t{int(ctx.clock().timestamp())}",
            {
                LABEL_OWNER: instance.user_id,
                LABEL_CLUSTER: ctx.cluster_id,
                LABEL_COMMIT_OF: _stopped_run(old),
            },
        )

        def mutate(session: Session, row: InstanceModel) -> InstanceModel:
            row.system_image = ref
            return row

        instance = with_lease(ctx, instance.id, token, mutate)
    if not destination.image_present(instance.system_image):
        _move_image(ctx, instance, (source, destination), host, token)
    return instance


def _stopped_run(container: ContainerState) -> str:
    """The container as it stopped: its writable layer has not changed since."""
    stopped = container.finished_at.isoformat() if container.finished_at else "running"
    return f"{container.id}@{stopped}"


def _committed_already(
    source: LinkRuntime, instance: InstanceModel, container: ContainerState
) -> bool:
    """The instance's system image is the commit of `container` as it stopped (a
    retried move): committing again would only make another copy to move."""
    if container.running or instance.system_image == instance.image:
        return False
    image = source.image_info(instance.system_image)
    return image is not None and image.labels.get(LABEL_COMMIT_OF) == _stopped_run(container)


def _move_image(
    ctx: ServiceContext,
    instance: InstanceModel,
    ends: tuple[LinkRuntime, LinkRuntime],
    host: HostModel,
    token: str,
) -> None:
    """The committed system image to `host`, without the layers of its base image
    that `host` holds already (`runtime.image_delta`: usually all but the commit's
    own); the whole image if the engine there cannot load the shorter archive."""
    source, destination = ends
    mine, held = source.image_info(instance.system_image), destination.image_info(instance.image)
    omit = common_bottom(mine.layers, held.layers) if mine and held else []
    reported = [0]

    def progress(done: int) -> None:
        if _unsized_due(done, reported[0]):
            reported[0] = done
            said = Message(
                "moving the system disk to {host}: {done} so far", host=host.name, done=_size(done)
            )
            _tell(ctx, instance, token, said)

    try:
        moved = source.copy_image_to(destination, instance.system_image, omit, progress)
    except RuntimeUnavailable:
        raise  # a link failed: the step is tried again
    except RuntimeFailure as exc:
        if not omit:
            raise
        log.warning("instance %s: the image without its base layers failed (%s)", instance.id, exc)
        omit = []
        moved = source.copy_image_to(destination, instance.system_image, None, progress)
    said = Message(
        "the system disk moved to {host}: {size} sent; {layers} base layer(s) were there",
        host=host.name,
        size=_size(moved),
        layers=len(omit),
    )
    _tell(ctx, instance, token, said)


def bring_local_image(
    ctx: ServiceContext, instance: InstanceModel, host: HostModel, token: str
) -> None:
    """The instance's image onto `host`, an agent host that lacks it, from this
    server's own engine: for gpudock's images that no registry has (the caller
    says which), which a host would otherwise fail to pull. Once per host: the
    next start there finds it."""
    runtime = containers.runtime_of(ctx, instance, host.id)
    ref = instance.system_image
    local = ctx.runtime
    if not isinstance(runtime, LinkRuntime) or not isinstance(local, ImageStreams):
        return
    if runtime.image_present(ref) or not local.image_present(ref):
        return  # there already, or not here either: the host's own pull says why
    reported = [0]

    def progress(done: int) -> None:
        if _unsized_due(done, reported[0]):
            reported[0] = done
            said = Message(
                "sending image {image} to {host}: {done} so far",
                image=ref,
                host=host.name,
                done=_size(done),
            )
            _tell(ctx, instance, token, said)

    mine = local.image_info(ref)
    held = runtime.held_bottom(mine.layers) if mine is not None else []
    spool = ctx.settings.data_dir / "transfers"
    try:  # without the layers the host holds (a base image it has), where it can
        sent = runtime.receive_image(local, ref, (held, spool) if held else None, progress)
    except RuntimeUnavailable:
        raise  # a link failed: the step is tried again, and resumes
    except RuntimeFailure as exc:
        if not held:
            raise
        log.warning("image %s without %d layers failed on %s (%s)", ref, len(held), host.name, exc)
        held = []
        sent = runtime.receive_image(local, ref, None, progress)
    done = Message(
        "image {image} sent to {host}: {size}; {layers} base layer(s) were there",
        image=ref,
        host=host.name,
        size=_size(sent),
        layers=len(held),
    )
    _tell(ctx, instance, token, done)


def leave_other_engine(ctx: ServiceContext, instance: InstanceModel, came_from: str | None) -> None:
    """After the instance runs on its new host: if it came from another engine
    (an agent host), its container, volumes and committed image there go. An
    old host that cannot be reached now keeps them for garbage collection
    (and its fence) once it is back: the tenant is not held up for it."""
    if came_from is None or came_from == instance.host_id:
        return
    try:
        _remove_from(ctx, instance, came_from)
    except RuntimeFailure as exc:
        log.warning("instance %s: left on host %s for now: %s", instance.id, came_from, exc)


def _remove_from(ctx: ServiceContext, instance: InstanceModel, came_from: str) -> None:
    source = containers.runtime_of(ctx, instance, came_from)
    if ctx.runtime_for(came_from) is ctx.runtime_for(instance.host_id):
        return  # one engine: the run step replaced the container and its volume
    name = containers.container_name(ctx.cluster_id, instance.id)
    old = source.inspect_container(name)
    if old is not None:
        source.remove_container(old.id)
    labels = {**containers.cluster_labels(ctx.cluster_id), LABEL_INSTANCE: instance.id}
    for volume in source.list_volumes(labels):
        source.remove_volume(volume.name)
    if instance.system_image != instance.image:  # the committed layer, now on the new host
        source.remove_image(instance.system_image)


def _copy_data(
    ctx: ServiceContext, instance: InstanceModel, target: str, host: HostModel, token: str
) -> None:
    assert instance.data_volume is not None
    last_fraction, last_bytes = [-1.0], [0]  # what was last reported

    def progress(done: int, total: int | None) -> None:
        if done > 0 and (total is None or done < total):
            ctx.crash_point("mid_data_copy")
        if total is None:  # a plain volume on an agent host: its size is not known ahead
            if not _unsized_due(done, last_bytes[0]):
                return
            message = Message(
                "moving data to {host}: {done} so far", host=host.name, done=_size(done)
            )
        else:
            fraction = done / total if total else 1.0
            if fraction - last_fraction[0] < PROGRESS_STEP and fraction < 1.0:
                return
            last_fraction[0] = fraction
            message = Message(
                "moving data to {host}: {done} of {total}",
                host=host.name,
                done=_size(done),
                total=_size(total),
            )
        last_bytes[0] = done
        _tell(ctx, instance, token, message)

    log.info("instance %s: moving data %s → %s", instance.id, instance.data_volume, target)
    if ctx.runtime_for(instance.data_host_id) is not ctx.runtime_for(host.id):
        moved = _copy_between_hosts(ctx, instance, target, host, progress)
        copied = moved.bytes_total
        if any(moved.resumed_at):  # a try began from what the destination held
            resumed = Message(
                "the data copy to {host} resumed where it stopped: {sent} of {total} sent again",
                host=host.name,
                sent=_size(moved.bytes_sent),
                total=_size(moved.bytes_total),
            )
            _tell(ctx, instance, token, resumed)
    else:
        copied = containers.runtime_of(ctx, instance, host.id).copy_volume(
            instance.data_volume,
            target,
            image=instance.system_image,
            helper_name=f"{containers.container_name(ctx.cluster_id, instance.id)}-move",
            labels=containers.instance_labels(ctx.cluster_id, instance),
            on_progress=progress,
        )
    ctx.crash_point("after_data_copy")

    def record(session: Session, row: InstanceModel) -> None:
        move = migration_log.open_move(session, row.id)
        if move is not None:
            move.bytes_copied = copied

    with_lease(ctx, instance.id, token, record)


def _copy_between_hosts(
    ctx: ServiceContext,
    instance: InstanceModel,
    target: str,
    host: HostModel,
    progress: Callable[[int, int | None], None],
) -> VolumeCopied:
    """Over the two hosts' links (`runtime.transfer`): resumable, so a retry after a
    dropped link or a restarted agent or server carries on from what `host` holds."""
    assert instance.data_volume is not None
    source = containers.runtime_of(ctx, instance, instance.data_host_id)
    destination = containers.runtime_of(ctx, instance, host.id)
    if not isinstance(source, LinkRuntime) or not isinstance(destination, LinkRuntime):
        raise RuntimeFailure(
            f"the data of instance {instance.name} is on another engine than {host.name}'s, "
            "and only agent hosts move data between engines: start it with --stay"
        )
    total = source.volume_used_bytes(instance.data_volume)  # None: a plain volume

    def sized(done: int) -> None:
        progress(done, None if total is None else max(total, done))

    copied = source.copy_volume_to(destination, instance.data_volume, target, sized)
    log.info(
        "instance %s: %d bytes of data moved to %s (%d sent, SHA-256 %s, tries from %s)",
        instance.id,
        copied.bytes_total,
        host.name,
        copied.bytes_sent,
        copied.sha256,
        copied.resumed_at,
    )
    return copied


def _unsized_due(done: int, reported: int) -> bool:
    """Whether progress of unknown size is worth a line: 64 MiB or 10 % more."""
    return done - reported >= max(UNSIZED_STEP_BYTES, reported // 10)


def _tell(ctx: ServiceContext, instance: InstanceModel, token: str, message: str) -> None:
    """A line on the instance's timeline, under its lease."""
    with_lease(ctx, instance.id, token, lambda s, row: _note(s, row, message, ctx.clock()))


def _note(session: Session, instance: InstanceModel, message: str, at: datetime) -> None:
    switch_instance_status(session, instance, instance.status, message, at)


def _size(count: int) -> str:
    if count < 1024**2:
        return f"{count / 1024:.0f} KiB"
    if count < 1024**3:
        return f"{count / 1024**2:.0f} MiB"
    return f"{count / 1024**3:.2f} GiB"


def note_start_move(
    session: Session,
    instance: InstanceModel,
    from_host: str | None,
    to_host: HostModel,
    at: datetime,
) -> None:
    """A stopped instance started on another host (its own was full): keep a
    record, so moves are visible whatever caused them."""
    if migration_log.open_move(session, instance.id) is not None:
        return
    session.add(
        MigrationModel(
            instance_id=instance.id,
            reason=f"started on {to_host.name}: its host had no free {instance.gpu_model}",
            trigger="start",
            gpu_model=instance.gpu_model,
            from_host_id=from_host,
            to_host_id=to_host.id,
            outcome=migration_log.MOVING,
            started_at=at,
        )
    )
