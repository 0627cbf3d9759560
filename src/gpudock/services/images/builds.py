"""Builds through the server: a user's Dockerfile and context in, a registered
private image out, the log streamed as it comes.

Every image the Dockerfile names — each stage's FROM, `COPY --from` — is
resolved and authorised for the user (`image_access`) while it is planned
(`images.dockerfile`), before anything runs; the runtime then builds from
image ids only, each step in a sandbox like an instance's, with no network
(so base images must already be on the engine) and a time limit.

Every image gpudock builds carries the doctor as `/usr/local/bin/gpudock-doctor`:
the plan gets one `COPY` at its end, from a file gpudock adds to the context.
"""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpudock.db.models import UserModel
from gpudock.doctor.bundle import SCRIPT_PATH, script
from gpudock.errors import Forbidden, GpudockError, InvalidRequest
from gpudock.images.catalog import ImageSpec, with_size
from gpudock.runtime.base import LABEL_OWNER, BuildJob, BuildLimits
from gpudock.runtime.build import plan as build_plan
from gpudock.runtime.build.context import BuildContext, normalise_archive
from gpudock.services.context import ServiceContext
from gpudock.services.images import access as image_access
from gpudock.services.images import catalog as images
from gpudock.services.notifications import outbox

DOCTOR_FILE = ".gpudock-doctor"
MAX_DOCKERFILE_BYTES = 1 * 2**20


def limits(ctx: ServiceContext) -> BuildLimits:
    settings = ctx.settings
    return BuildLimits(
        cpus=settings.build_cpus,
        memory_mb=settings.build_memory_gb * 1024,
        pids=settings.pids_limit,
        timeout_s=settings.build_timeout_s,
    )


def context_limit(ctx: ServiceContext) -> int:
    return ctx.settings.build_context_max_mb * 2**20


class _Bases:
    """The resolver the planner calls for each image the file names."""

    def __init__(self, ctx: ServiceContext, user: UserModel) -> None:
        self.ctx, self.user = ctx, user
        self.written: dict[str, str] = {}  # image id → the reference as written

    def __call__(self, text: str, line: int) -> build_plan.BaseImage:
        resolved = image_access.resolve(self.ctx, self.user, text, field="dockerfile", pull=False)
        info = self.ctx.runtime.image_info(resolved.image_id or resolved.reference)
        if info is None:
            raise InvalidRequest(f"line {line}: image {text!r} vanished", field="dockerfile")
        self.written.setdefault(info.id, text)
        return build_plan.BaseImage(image_id=info.id, config=info.config)

    def parent(self, plan: build_plan.Plan) -> ImageSpec | None:
        """The catalog entry the final stage starts from (its metadata is inherited)."""
        stage = plan.stages[-1]
        while stage.base_image is None and stage.base_stage is not None:
            stage = plan.stages[stage.base_stage]
        text = self.written.get(stage.base_image or "")
        return images.find_image(self.ctx, self.user, text) if text else None


def plan_build(
    ctx: ServiceContext, user: UserModel, text: str
) -> tuple[build_plan.Plan, ImageSpec | None]:
    """Plan the Dockerfile (plus the doctor's COPY), authorising every image."""
    bases = _Bases(ctx, user)
    try:
        plan = build_plan.plan(text.rstrip("\n") + f"\nCOPY {DOCTOR_FILE} {SCRIPT_PATH}\n", bases)
    except build_plan.DockerfileError as exc:
        raise InvalidRequest(str(exc), field="dockerfile") from exc
    return plan, bases.parent(plan)


def run(
    ctx: ServiceContext,
    user: UserModel,
    plan: build_plan.Plan,
    context_path: Path,
    reference: str,
    labels: dict[str, str],
) -> Iterator[dict[str, Any]]:
    """Yield {'log'} events, then {'image_id'} or {'error'}; removes the context."""
    context = BuildContext(context_path, extra={DOCTOR_FILE: (script().encode(), 0o755)})
    job = BuildJob(
        plan=plan,
        context=context,
        tag=reference,
        labels={**labels, LABEL_OWNER: user.id},
        owner=user.id,
        cluster_id=ctx.cluster_id,
        limits=limits(ctx),
    )
    try:
        for line in ctx.runtime.build_image(job):
            if line.error is not None:
                yield {"error": line.error}
                return
            if line.text is not None:
                yield {"log": line.text}
            if line.image_id is not None:
                yield {"image_id": line.image_id}
    except GpudockError as exc:
        yield {"error": exc.message}
    finally:
        context.close()
        context_path.unlink(missing_ok=True)


def build(
    ctx: ServiceContext,
    user: UserModel,
    name: str,
    text: str,
    context_path: Path,
    *,
    public: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield {'log': line} events, then {'image': ImageSpec} or {'error': message}.

    Validation and access errors raise before the first event (the API can still
    answer them with a status code); build errors arrive as events.
    """
    try:
        reference = images.private_reference(user, name)
        images.check_name_free(ctx, user, reference)
        if public and not user.is_admin:
            raise Forbidden("only an admin can publish a public image")
        plan, parent = plan_build(ctx, user, text)
    except GpudockError:
        context_path.unlink(missing_ok=True)
        raise
    events = run(ctx, user, plan, context_path, reference, {"gpudock.image": name})
    return _registered(ctx, user, name, reference, parent, events, public)


def _registered(
    ctx: ServiceContext,
    user: UserModel,
    name: str,
    reference: str,
    parent: ImageSpec | None,
    events: Iterator[dict[str, Any]],
    public: bool,
) -> Iterator[dict[str, Any]]:
    for event in events:
        if "image_id" not in event:
            if "error" in event:
                _tell_finished(ctx, user, reference, event["error"])
            yield event
            continue
        spec = images.derived(parent, reference, name, "build")
        spec = with_size(spec, ctx.runtime.image_size(reference) or 0)
        try:
            registered = images.register(
                ctx, user, spec, public=public, engine_image_id=event["image_id"]
            )
        except GpudockError as exc:
            _tell_finished(ctx, user, reference, exc.message)
            yield {"error": exc.message}
            continue
        _tell_finished(ctx, user, reference, None)
        yield {"image": registered}


def _tell_finished(ctx: ServiceContext, user: UserModel, reference: str, error: str | None) -> None:
    """The owner's notification (the build streams to one client; this reaches
    the others: a webhook, an email, the console's list)."""
    message = f"image {reference} built" if error is None else f"image {reference} failed: {error}"
    data = {"image": reference, "ok": error is None, "error": error}
    outbox.notify_now(ctx, user.id, "image.build_finished", message, data=data)


def build_from_upload(
    ctx: ServiceContext,
    user: UserModel,
    name: str,
    dockerfile_path: str,
    upload: Path,
    public: bool = False,
) -> Iterator[dict[str, Any]]:
    """`build`, with the Dockerfile read from an uploaded context on disk."""
    try:
        context_path = normalise_archive(upload, context_limit(ctx))
        text = _read_dockerfile(context_path, dockerfile_path)
    except GpudockError:
        upload.unlink(missing_ok=True)
        raise
    return build(ctx, user, name, text, context_path, public=public)


def _read_dockerfile(context_path: Path, dockerfile_path: str) -> str:
    context = BuildContext(context_path)
    try:
        data = context.read(dockerfile_path)
    finally:
        context.close()
    if data is None:
        raise InvalidRequest(
            f"no readable {dockerfile_path!r} in the build context", field="dockerfile"
        )
    if len(data) > MAX_DOCKERFILE_BYTES:
        raise InvalidRequest("the Dockerfile is over 1 MiB", field="dockerfile")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"{dockerfile_path!r} is not UTF-8 text", field="dockerfile") from exc


def empty_context(directory: Path | None = None) -> Path:
    """A context with nothing beside the Dockerfile (console builds, validation)."""
    handle = tempfile.NamedTemporaryFile(dir=directory, suffix=".tar", delete=False)  # noqa: SIM115
    with handle, tarfile.open(fileobj=handle, mode="w:"):
        pass
    return Path(handle.name)
