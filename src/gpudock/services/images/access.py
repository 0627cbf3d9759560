"""Who may use which image: every reference a tenant writes is resolved here.

A reference is parsed and normalised (`images.references`), then the engine is
asked which image it names, and the answer is authorised by image id — so an
alias (`docker.io/…`, `library/…`, a digest, a bare or short image id) reaches
exactly what its plain spelling would. A tenant may use:

- the built-in catalog, public registered images and their own private ones;
- any other image the engine has or a registry serves, unless it is another
  tenant's: the id of one of their private images, or an image gpudock
  labelled as theirs (builds, saved and committed system disks).

Names under `gpudock/<namespace>/` and `gpudock-sys/` are never pulled: only the
images table hands them out. Every refusal reads "unknown image", whatever the
reason, so nobody learns which private images exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpudock.db.models import ImageModel, UserModel
from gpudock.errors import InvalidRequest
from gpudock.images import references
from gpudock.images.base_image import BASE_IMAGE
from gpudock.images.catalog import PRIVATE, PUBLIC, SERVICES_IMAGE, builtin_images
from gpudock.runtime.base import LABEL_OWNER, ImageInfo, RegistryUnreachable
from gpudock.services.context import ServiceContext


@dataclass(frozen=True)
class ResolvedImage:
    """An image a tenant may use. `reference` is what gpudock stores and hands
    the engine: the familiar name, or the full image id when the tenant wrote
    an id."""

    reference: str
    image_id: str | None  # None: not on the engine yet (it will be pulled)
    registered: ImageModel | None = None


def parse(text: str, field: str = "image") -> references.ImageRef:
    try:
        return references.parse(text)
    except references.BadReference as exc:
        raise InvalidRequest(str(exc), field=field) from exc


def unknown(text: str, field: str = "image") -> InvalidRequest:
    return InvalidRequest(
        f"unknown image {text[:120]!r}: `gpudock images list` shows the images you can use",
        field=field,
    )


def resolve(
    ctx: ServiceContext, user: UserModel, text: str, *, field: str = "image", pull: bool = True
) -> ResolvedImage:
    """The image `text` names, if `user` may use it; InvalidRequest otherwise.

    `pull=False` (builds: no network) refuses what the engine does not have.
    May ask a registry: call it outside any transaction.
    """
    ref = parse(text, field)
    # Read-only sessions, and the engine asked between them: on SQLite a
    # create's only write transaction is its own (services/instances/actions.py).
    with ctx.reader() as session:
        entries = registered_entries(session, ref)
    if any(not may_see(user, e) for e in entries):
        raise unknown(text, field)
    entry = entries[0] if entries else None
    if ref.reserved and entry is None:
        raise unknown(text, field)
    # As written: the engine resolves a name, then an id prefix, as a create would.
    info = ctx.runtime.image_info(ref.canonical if ref.is_id else text.strip())
    if info is not None:
        with ctx.reader() as session:
            allowed = _allowed(ctx, session, user, info, entry, ref)
        if not allowed:
            raise unknown(text, field)
    if info is None:
        _check_obtainable(ctx, ref, text, field, pull)
        return ResolvedImage(ref.familiar, None, entry)
    return ResolvedImage(_stored_reference(ref, info), info.id, entry)


def _stored_reference(ref: references.ImageRef, info: ImageInfo) -> str:
    if ref.is_id:
        return info.id
    named = {references.parse(tag).canonical for tag in info.tags if _parses(tag)}
    # A short hex string the engine took as an id prefix, not as a name.
    return ref.familiar if ref.digest or ref.canonical in named else info.id


def _parses(tag: str) -> bool:
    try:
        references.parse(tag)
    except references.BadReference:
        return False
    return True


def may_see(user: UserModel | None, entry: ImageModel) -> bool:
    if entry.visibility == PUBLIC:
        return True
    return user is not None and (user.is_admin or entry.owner_id == user.id)


def registered_entries(session: Session, ref: references.ImageRef) -> list[ImageModel]:
    """The images-table rows for this name (any spelling), or for this id."""
    if ref.is_id:
        query = select(ImageModel).where(
            or_(ImageModel.engine_image_id == ref.canonical, ImageModel.id == ref.canonical)
        )
    else:
        spellings = {ref.familiar, ref.canonical, ref.familiar.removesuffix(":latest")}
        query = select(ImageModel).where(ImageModel.reference.in_(spellings))
    return list(session.scalars(query.order_by(ImageModel.created_at)))


def _allowed(
    ctx: ServiceContext,
    session: Session,
    user: UserModel,
    info: ImageInfo,
    entry: ImageModel | None,
    ref: references.ImageRef,
) -> bool:
    if user.is_admin or (entry is not None and entry.engine_image_id == info.id):
        return True
    if _is_builtin(ctx, ref):
        return True
    owner = info.labels.get(LABEL_OWNER)
    if owner in (None, user.id) and info.id not in _private_ids(session, user):
        return True
    # Labelled as someone else's, or one of their private images: only if the
    # same content is also published to this user (e.g. a public build).
    return info.id in _visible_ids(ctx, session, user)


def _is_builtin(ctx: ServiceContext, ref: references.ImageRef) -> bool:
    canonical = {
        references.parse(spec.reference).canonical
        for spec in builtin_images(ctx.settings.default_image)
    }
    return ref.canonical in canonical


def _visible_ids(ctx: ServiceContext, session: Session, user: UserModel) -> set[str]:
    found = set(
        session.scalars(
            select(ImageModel.engine_image_id).where(
                or_(ImageModel.visibility == PUBLIC, ImageModel.owner_id == user.id),
                ImageModel.engine_image_id.is_not(None),
            )
        )
    )
    for spec in builtin_images(ctx.settings.default_image):
        info = ctx.runtime.image_info(spec.reference)
        if info is not None:
            found.add(info.id)
    return {i for i in found if i}


def _private_ids(session: Session, user: UserModel) -> set[str]:
    rows = session.scalars(
        select(ImageModel.engine_image_id).where(
            ImageModel.visibility == PRIVATE,
            ImageModel.owner_id != user.id,
            ImageModel.engine_image_id.is_not(None),
        )
    )
    return {i for i in rows if i}


def repair_legacy_rows(ctx: ServiceContext) -> int:
    """Rows registered before ids were recorded: record them now, and drop manual
    entries that name a reserved namespace (only another tenant's image could be
    there). Returns how many rows changed. Run at start-up."""
    changed = 0
    with ctx.sessions.begin() as session:
        rows = session.scalars(select(ImageModel).where(ImageModel.engine_image_id.is_(None)))
        for row in list(rows):
            try:
                ref = references.parse(row.reference)
            except references.BadReference:
                continue
            if row.origin == "manual" and ref.reserved:
                session.delete(row)
                changed += 1
                continue
            info = ctx.runtime.image_info(ref.familiar)
            if info is not None:
                row.engine_image_id = info.id
                changed += 1
    return changed


# gpudock's own images, built by a command on the host rather than pulled.
BUILT_ON_THE_HOST = {
    references.parse(BASE_IMAGE).canonical: "gpudock images build-base",
    references.parse(SERVICES_IMAGE).canonical: "gpudock images build-services",
}


def never_pulled(text: str) -> bool:
    """An image no registry has: built on the host, a tenant's, a committed system disk."""
    try:
        ref = references.parse(text)
    except references.BadReference:
        return False
    return ref.reserved or ref.canonical in BUILT_ON_THE_HOST


def _check_obtainable(
    ctx: ServiceContext, ref: references.ImageRef, text: str, field: str, pull: bool
) -> None:
    if ref.is_id or ref.reserved:
        raise unknown(text, field)
    built_here = BUILT_ON_THE_HOST.get(ref.canonical)
    if built_here is not None:  # no registry has these: pulling would only fail
        raise InvalidRequest(
            f"image {text[:120]!r} is built on the host, and this one's engine does not have "
            f"it yet: the operator runs `{built_here}` once",
            field=field,
        )
    if not pull:
        raise InvalidRequest(
            f"image {text[:120]!r} is not on the Docker Engine: builds have no network, "
            "so their base images must be there already (create an instance from it once, "
            "or ask the operator to pull it)",
            field=field,
        )
    if ctx.settings.image_pull == "never":
        raise InvalidRequest(
            f"unknown image {text[:120]!r}: it is not on the Docker Engine and pulling is "
            f"disabled (GPUDOCK_IMAGE_PULL=never); use {ctx.settings.default_image!r} "
            "or build the image on the host first",
            field=field,
        )
    try:
        pullable = ctx.runtime.image_pullable(ref.familiar)
    except RegistryUnreachable as exc:
        raise InvalidRequest(exc.message, field=field) from exc
    if not pullable:
        raise InvalidRequest(
            f"unknown image {text[:120]!r}: it is not on the Docker Engine and its registry "
            "does not have it (check the name and tag)",
            field=field,
        )
