"""Builds through the server: a user's Dockerfile and context in, a registered
private image out, the engine's log streamed as it comes.

Every image gpudock builds carries the doctor as `/usr/local/bin/gpudock-doctor`:
the build context gets the script and the Dockerfile one `COPY` at its end.
Builds have no network (no registry is assumed reachable): base images must
already be on the engine.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from typing import Any

from gpudock.db.models import UserModel
from gpudock.doctor.bundle import SCRIPT_PATH, script
from gpudock.errors import Forbidden, GpudockError, InvalidRequest
from gpudock.images.catalog import ImageSpec, with_size
from gpudock.services import images
from gpudock.services.context import ServiceContext

GENERATED_DOCKERFILE = ".gpudock.Dockerfile"
DOCTOR_FILE = ".gpudock-doctor"
MAX_CONTEXT_BYTES = 512 * 2**20
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)


def base_of(dockerfile: str) -> str | None:
    """The image the final stage starts from (None if it is an earlier stage)."""
    found = _FROM.findall(dockerfile)
    return found[-1] if found else None


def prepare_context(context_tar: bytes, dockerfile: str) -> bytes:
    """The user's context plus the doctor and a Dockerfile that installs it."""
    if len(context_tar) > MAX_CONTEXT_BYTES:
        raise InvalidRequest(f"build context over {MAX_CONTEXT_BYTES // 2**20} MiB")
    if not base_of(dockerfile):
        raise InvalidRequest("the Dockerfile has no FROM line", field="dockerfile")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as target:
        if context_tar:
            try:
                with tarfile.open(fileobj=io.BytesIO(context_tar)) as source:
                    for member in source.getmembers():
                        data = source.extractfile(member) if member.isfile() else None
                        target.addfile(member, data)
            except tarfile.TarError as exc:
                raise InvalidRequest(f"the build context is not a tar archive: {exc}") from exc
        text = dockerfile.rstrip("\n") + f"\nCOPY {DOCTOR_FILE} {SCRIPT_PATH}\n"
        _add(target, GENERATED_DOCKERFILE, text.encode(), 0o644)
        _add(target, DOCTOR_FILE, script().encode(), 0o755)
    return out.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def build(
    ctx: ServiceContext,
    user: UserModel,
    name: str,
    dockerfile: str,
    context_tar: bytes,
    *,
    public: bool = False,
    reference: str | None = None,
    origin: str = "build",
) -> Iterator[dict[str, Any]]:
    """Yield {'log': line} events, then {'image': ImageSpec} or {'error': message}.

    Validation errors raise before the first event, so the API can still
    answer them with a status code; engine errors arrive as events, verbatim.
    """
    ref = reference or images.private_reference(user, name)
    if public and not user.is_admin:
        raise Forbidden("only an admin can publish a public image")
    base = base_of(dockerfile)
    prepared = prepare_context(context_tar, dockerfile)
    # Another tenant's private image is unknown here, even as a FROM.
    parent = images.find_image(ctx, user, base) if base else None
    return _stream(ctx, user, name, ref, parent, prepared, public, origin)


def _stream(
    ctx: ServiceContext,
    user: UserModel,
    name: str,
    ref: str,
    parent: ImageSpec | None,
    prepared: bytes,
    public: bool,
    origin: str,
) -> Iterator[dict[str, Any]]:
    labels = {"gpudock.image": name, "gpudock.user": user.id}
    try:
        for line in ctx.runtime.build_image(prepared, GENERATED_DOCKERFILE, ref, labels):
            if line.error is not None:
                yield {"error": line.error}
                return
            if line.text is not None:
                yield {"log": line.text}
        spec = images.derived(parent, ref, name, origin)
        spec = with_size(spec, ctx.runtime.image_size(ref) or 0)
        yield {"image": images.register(ctx, user, spec, public=public)}
    except GpudockError as exc:
        yield {"error": exc.message}


def build_from_context(
    ctx: ServiceContext,
    user: UserModel,
    name: str,
    dockerfile_path: str,
    context_tar: bytes,
    public: bool = False,
) -> Iterator[dict[str, Any]]:
    """`build`, with the Dockerfile read from the context at `dockerfile_path`."""
    try:
        with tarfile.open(fileobj=io.BytesIO(context_tar)) as tar:
            names = set(tar.getnames())
            wanted = dockerfile_path.removeprefix("./")
            member = tar.extractfile(wanted if wanted in names else f"./{wanted}")
            text = member.read().decode() if member else None
    except (tarfile.TarError, KeyError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            f"no readable {dockerfile_path!r} in the build context ({exc})", field="dockerfile"
        ) from exc
    if text is None:
        raise InvalidRequest(f"{dockerfile_path!r} is not a file", field="dockerfile")
    return build(ctx, user, name, text, context_tar, public=public)
