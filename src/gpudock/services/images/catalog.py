"""Images: the catalog a user sees, pre-flight compatibility, registration, save-as-image.

Pre-flight is the promise none of the clouds make: an image that cannot run on
the chosen GPU model's driver or architecture is refused *before* anything is
scheduled, with the reason and what would work instead.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.db.models import (
    ImageModel,
    InstanceModel,
    InstanceStatus,
    UserModel,
)
from gpudock.doctor.bundle import SCRIPT_PATH
from gpudock.doctor.bundle import script as doctor_script
from gpudock.errors import Conflict, Forbidden, InvalidRequest, NotFound, RuntimeFailure
from gpudock.images import compat, references
from gpudock.images.catalog import (
    PRIVATE,
    PUBLIC,
    ImageSpec,
    builtin_images,
    with_presence,
    with_size,
)
from gpudock.messages import Message, joined
from gpudock.runtime.base import LABEL_OWNER, Runtime
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.shape import FleetShape, fleet_shape
from gpudock.services.images import access as image_access

_LOCAL_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[\w][\w.-]{0,127})?$")
SYSTEM_DISK_NOTE = (
    "saved the instance's system disk (its container filesystem); the data volume "
    "(/root/data) is NOT part of the image"
)


def spec_of(row: ImageModel) -> ImageSpec:
    return ImageSpec(
        reference=row.reference,
        name=row.name,
        description=row.description,
        os=row.os,
        python=row.python,
        framework=row.framework,
        framework_version=row.framework_version,
        cuda=row.cuda,
        cudnn=row.cudnn,
        min_driver=row.min_driver,
        compute_capabilities=tuple(json.loads(row.compute_capabilities)),
        size_bytes=row.size_bytes,
        visibility=row.visibility,
        origin=row.origin,
        owner_id=row.owner_id,
        id=row.id,
    )


def _visible(session: Session, user: UserModel | None) -> list[ImageModel]:
    query = select(ImageModel).order_by(ImageModel.created_at)
    if user is None:
        query = query.where(ImageModel.visibility == PUBLIC)
    elif not user.is_admin:
        query = query.where(or_(ImageModel.visibility == PUBLIC, ImageModel.owner_id == user.id))
    return list(session.scalars(query))


def list_images(ctx: ServiceContext, user: UserModel | None) -> list[ImageSpec]:
    """Built-in entries first, then registered ones this user may see; sizes
    filled in from the engine where it has the image."""
    with ctx.reader() as session:
        rows = [spec_of(r) for r in _visible(session, user)]
    found = builtin_images(ctx.settings.default_image) + rows
    return [_sized(ctx, s) for s in found]


def _sized(ctx: ServiceContext, spec: ImageSpec) -> ImageSpec:
    """Whether the engine has the image now (else it is pulled at first use), and
    its size from there where the entry does not record one."""
    return with_presence(spec, ctx.runtime.image_size(spec.reference))


def find_image(ctx: ServiceContext, user: UserModel | None, ref: str) -> ImageSpec | None:
    """The catalog entry for `ref` (any spelling of it, or its id) among what the
    user may see; None if it has none. Another tenant's private entry raises."""
    try:
        parsed = references.parse(ref)
    except references.BadReference:
        return None
    for spec in builtin_images(ctx.settings.default_image):
        if references.same_image_name(spec.reference, parsed.canonical):
            return spec
    with ctx.reader() as session:
        rows = image_access.registered_entries(session, parsed)
        if not rows:
            row = session.get(ImageModel, ref)
            rows = [row] if row is not None else []
        if user is not None and any(not image_access.may_see(user, r) for r in rows):
            raise image_access.unknown(ref)
        return spec_of(rows[0]) if rows else None


# -- compatibility ---------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A GPU model as the fleet has it: capability and the drivers of its hosts."""

    model: str
    cc: str | None
    drivers: dict[str, str]  # host id → driver version


def targets(fleet: FleetShape) -> list[Target]:
    return fleet.derived("image targets", _targets)


def _targets(fleet: FleetShape) -> list[Target]:
    drivers: dict[str, dict[str, str]] = {}
    for host in fleet.hosts:
        for gpu in host.gpus:
            drivers.setdefault(gpu.slot.model, {})[host.id] = host.driver_version
    return [Target(m, compat.compute_capability(m), d) for m, d in sorted(drivers.items())]


def fleet_targets(ctx: ServiceContext) -> list[Target]:
    """The fleet's GPU models with their hosts' drivers, from the server's kept shape."""
    with ctx.reader() as session:
        return targets(fleet_shape(ctx, session))


def runs_on(spec: ImageSpec, target: Target) -> compat.Verdict:
    """OK if at least one host of the model can run it (a fully checked one first,
    then one with parts not checked); else the first reason."""
    verdicts = [spec.verdict(driver, target.cc) for driver in sorted(set(target.drivers.values()))]
    good = sorted((v for v in verdicts if v.ok), key=lambda v: v.state != compat.OK)
    return good[0] if good else (verdicts[0] if verdicts else compat.Verdict())


def runnable_hosts(ctx: ServiceContext, image: str, gpu_model: str | None) -> frozenset[str] | None:
    """Host ids where the image can run on `gpu_model`; None: no constraint."""
    spec = find_image(ctx, None, image)
    if spec is None or gpu_model is None or spec.cuda is None:
        return None
    target = next((t for t in fleet_targets(ctx) if t.model == gpu_model), None)
    if target is None:
        return None
    return frozenset(h for h, d in target.drivers.items() if spec.verdict(d, target.cc).ok)


def preflight(
    ctx: ServiceContext, user: UserModel, image: str, gpu_model: str | None
) -> str | None:
    """Refuse an image that cannot run on `gpu_model` here, naming why and
    what would: compatible images for that model, or models for that image.

    An image whose fit could not be checked (a CUDA toolkit outside the
    compatibility data) is not refused, since it may well run: the note saying
    what was not checked is returned for the instance's timeline."""
    spec = find_image(ctx, user, image)
    if spec is None or gpu_model is None:
        return None
    fleet = fleet_targets(ctx)
    target = next((t for t in fleet if t.model == gpu_model), None)
    if target is None:
        return None  # unknown model: sizing says so
    verdict = runs_on(spec, target)
    if verdict.state == compat.UNKNOWN:
        return Message(
            "image {image} on {model} not checked: {what}",
            image=repr(image),
            model=gpu_model,
            what=joined(verdict.unknowns),
        )
    if verdict.ok:
        return None
    models = [t.model for t in fleet if runs_on(spec, t).state == compat.OK]
    images = [
        s.reference
        for s in list_images(ctx, user)
        if s.reference != image and runs_on(s, target).state == compat.OK and s.cuda is not None
    ]
    raise InvalidRequest(
        Message(
            "image {image} cannot run on {model} here: {reason}. Images that can: {images}. "
            "GPU models that can run {image}: {models}",
            image=repr(image),
            model=gpu_model,
            reason=verdict.reason,
            images=", ".join(images[:6]) or Message("none known"),
            models=", ".join(models) or Message("none in this fleet"),
        ),
        field="image",
        compatible_images=images,
        compatible_gpu_models=models,
    )


def preflight_start(ctx: ServiceContext, user: UserModel, ref: str) -> str | None:
    """Pre-flight for start: the instance's current image on its GPU model."""
    with ctx.reader() as session:
        row = session.scalars(
            select(InstanceModel).where(
                or_(
                    InstanceModel.id == ref,
                    (InstanceModel.name == ref) & (InstanceModel.status != InstanceStatus.DELETED),
                ),
                InstanceModel.user_id == user.id,
            )
        ).first()
        found = (row.image, row.gpu_model) if row is not None else None
    if found is None:
        return None
    image_access.resolve(ctx, user, found[0])  # still one the user may use
    return preflight(ctx, user, found[0], found[1])


# -- registration -----------------------------------------------------------------------


def private_reference(user: UserModel, name: str) -> str:
    """`name[:tag]` in the user's own namespace (derived from the user id)."""
    if not _LOCAL_NAME.match(name) or len(name) > 100:
        raise InvalidRequest(
            f"bad image name {name!r}: lowercase letters, digits, '.', '_', '-', "
            "and an optional ':tag'",
            field="name",
        )
    repository, _, tag = name.partition(":")
    return f"{references.private_repository(user.name, user.id, repository)}:{tag or 'latest'}"


def register(
    ctx: ServiceContext,
    user: UserModel,
    spec: ImageSpec,
    *,
    public: bool = False,
    engine_image_id: str | None = None,
) -> ImageSpec:
    """Add an entry. Public entries need an admin; private ones belong to `user`.
    `engine_image_id` is what the entry grants: access is checked against it."""
    if public and not user.is_admin:
        raise Forbidden("only an admin can publish a public image")
    if any(
        references.same_image_name(b.reference, spec.reference)
        for b in builtin_images(ctx.settings.default_image)
    ):
        raise Conflict(f"{spec.reference} is a built-in catalog entry")
    row = _row_of(ctx, user, spec, public, engine_image_id)
    try:
        with ctx.sessions.begin() as session:
            _replace_own(session, user, spec.reference)
            session.add(row)
    except IntegrityError as exc:
        raise Conflict(f"an image {spec.reference!r} is already registered") from exc
    return spec_of(row)


def _row_of(
    ctx: ServiceContext,
    user: UserModel,
    spec: ImageSpec,
    public: bool,
    engine_image_id: str | None,
) -> ImageModel:
    return ImageModel(
        id="img-" + secrets.token_hex(5),
        reference=spec.reference,
        engine_image_id=engine_image_id,
        name=spec.name,
        description=spec.description,
        os=spec.os,
        python=spec.python,
        framework=spec.framework,
        framework_version=spec.framework_version,
        cuda=spec.cuda,
        cudnn=spec.cudnn,
        min_driver=spec.min_driver,
        compute_capabilities=json.dumps(list(spec.compute_capabilities)),
        size_bytes=spec.size_bytes,
        visibility=PUBLIC if public else PRIVATE,
        origin=spec.origin,
        owner_id=None if public else user.id,
        created_at=ctx.clock(),
    )


def check_name_free(ctx: ServiceContext, user: UserModel, reference: str) -> None:
    """Before building or saving under `reference`: it must not be someone
    else's entry (their image would be retagged underneath them)."""
    with ctx.sessions() as session:
        owner = session.scalar(select(ImageModel.owner_id).where(ImageModel.reference == reference))
        taken = session.scalar(select(ImageModel.id).where(ImageModel.reference == reference))
    if taken is not None and owner != user.id and not user.is_admin:
        raise Conflict(f"the image name {reference!r} is taken: choose another name", field="name")


def _replace_own(session: Session, user: UserModel, reference: str) -> None:
    """A rebuild or re-save under the same name replaces the user's own entry;
    anyone else's entry of that name is a conflict, never replaced."""
    old = session.scalars(select(ImageModel).where(ImageModel.reference == reference)).first()
    if old is not None and (old.owner_id == user.id or user.is_admin):
        session.delete(old)
        session.flush()


def delete_image(ctx: ServiceContext, user: UserModel, image_id: str) -> ImageSpec:
    """Remove the entry. The engine's image goes too only for what gpudock made
    in the owner's own namespace (builds, saves): a hand-made entry only points
    at an image that may be somebody else's, so it never removes one."""
    with ctx.sessions.begin() as session:
        row = session.get(ImageModel, image_id)
        mine = row is not None and (row.owner_id == user.id or user.is_admin)
        if row is None or not (mine or row.visibility == PUBLIC):
            raise NotFound(f"no image {image_id!r}: `gpudock images list` shows yours")
        if not mine:
            raise Forbidden("only an admin can remove a public image")
        spec = spec_of(row)
        made_here = row.origin != "manual" and _in_reserved_namespace(row.reference)
        session.delete(row)
    if made_here:
        ctx.runtime.remove_image(spec.reference)
    return spec


def _in_reserved_namespace(reference: str) -> bool:
    try:
        return references.parse(reference).reserved
    except references.BadReference:
        return False


def derived(base: ImageSpec | None, reference: str, name: str, origin: str) -> ImageSpec:
    """Metadata for an image made from `base` (a build's FROM, a saved instance's image)."""
    if base is None:
        return ImageSpec(reference=reference, name=name, origin=origin)
    return ImageSpec(
        reference=reference,
        name=name,
        description=f"from {base.reference}",
        os=base.os,
        python=base.python,
        framework=base.framework,
        framework_version=base.framework_version,
        cuda=base.cuda,
        cudnn=base.cudnn,
        min_driver=base.min_driver,
        compute_capabilities=base.compute_capabilities,
        origin=origin,
    )


def save_instance_image(ctx: ServiceContext, user: UserModel, ref: str, name: str) -> ImageSpec:
    """Commit the instance's system disk (never its data volume) as a private image."""
    reference = private_reference(user, name)
    check_name_free(ctx, user, reference)
    with ctx.sessions() as session:
        instance = session.scalars(
            select(InstanceModel).where(
                or_(InstanceModel.id == ref, InstanceModel.name == ref),
                *([] if user.is_admin else [InstanceModel.user_id == user.id]),
            )
        ).first()
        if instance is None:
            raise NotFound(f"no instance {ref!r}: `gpudock instances list` shows yours")
        container_id, image, owner = instance.container_id, instance.image, instance.user_id
        # The image is made on the engine of the instance's host, and stays there.
        runtime = ctx.runtime_for(instance.host_id)
    if container_id is None:
        raise Conflict(f"instance {ref} has no container yet; save it once it has run")
    repository, _, tag = reference.rpartition(":")
    runtime.commit_container(container_id, repository, tag, {LABEL_OWNER: owner})
    info = runtime.image_info(reference)
    spec = derived(find_image(ctx, user, image), reference, name, "save")
    spec = with_size(spec, info.size_bytes if info else 0)
    return register(ctx, user, spec, engine_image_id=info.id if info else None)


def install_doctor(runtime: Runtime, container_id: str) -> None:
    """Copy `gpudock-doctor` into a new container (on the instance's host's
    `runtime`). Best effort: an image without /usr/local/bin still runs, just
    without the doctor."""
    with contextlib.suppress(RuntimeFailure):
        runtime.put_file(container_id, SCRIPT_PATH, doctor_script().encode())


def compatibility_table(
    ctx: ServiceContext, user: UserModel, specs: Sequence[ImageSpec]
) -> dict[str, dict[str, str]]:
    """reference → {GPU model → 'ok', 'unknown: <what was not checked>', or the
    reason it cannot run}."""
    fleet = fleet_targets(ctx)
    table: dict[str, dict[str, str]] = {}
    for spec in specs:
        table[spec.reference] = {}
        for target in fleet:
            table[spec.reference][target.model] = runs_on(spec, target).label
    return table


@dataclass(frozen=True)
class ImageHint:
    """Whether an image runs on a GPU model here, and what would instead."""

    image: str
    gpu_model: str | None
    known: bool  # in the catalog (else the engine is asked at create time)
    ok: bool  # not refused; `unchecked` says what, if anything, could not be checked
    reason: str
    unchecked: str
    models: list[str]  # GPU models of this fleet that can run the image
    alternatives: list[str]  # catalog images with CUDA that run on `gpu_model`


def image_hint(
    ctx: ServiceContext, user: UserModel, image: str, gpu_model: str | None, limit: int = 5
) -> ImageHint:
    """The create form's hint: the catalog's verdict for `image` on `gpu_model` (no GPU
    model: no constraint), the fleet's models that can run it, and up to `limit` images
    that can run on the model. An image outside the catalog is `known=False`."""
    specs = list_images(ctx, user)
    table = compatibility_table(ctx, user, specs)
    row = table.get(image)
    verdict = row.get(gpu_model, "ok") if row is not None and gpu_model else "ok"
    unknown = f"{compat.UNKNOWN}: "
    unchecked = verdict.removeprefix(unknown) if verdict.startswith(unknown) else ""
    refused = verdict != "ok" and not unchecked
    alternatives = [
        s.reference
        for s in specs
        if s.reference != image
        and s.cuda is not None
        and table[s.reference].get(gpu_model or "") == "ok"
    ]
    return ImageHint(
        image=image,
        gpu_model=gpu_model,
        known=row is not None,
        ok=not refused,
        reason=verdict if refused else "",
        unchecked="" if refused else unchecked,
        models=[m for m, v in (row or {}).items() if v == "ok"],
        alternatives=alternatives[:limit],
    )


def register_manual(ctx: ServiceContext, user: UserModel, body: dict[str, object]) -> ImageSpec:
    """POST /images: metadata for an image the engine has or can get, under the
    name (normalised) and image id the user may use."""
    public = bool(body.pop("public", False))
    resolved = image_access.resolve(ctx, user, str(body.pop("reference")), field="reference")
    archs = body.pop("compute_capabilities", [])
    fields = {k: v for k, v in body.items() if v is not None}
    spec = ImageSpec(
        **fields,  # type: ignore[arg-type]
        reference=resolved.reference,
        compute_capabilities=tuple(archs),  # type: ignore[arg-type]
        origin="manual",
    )
    size = ctx.runtime.image_size(resolved.reference) or 0
    return register(
        ctx, user, with_size(spec, size), public=public, engine_image_id=resolved.image_id
    )
