"""Images: catalog, registration, builds, validation, save-as-image."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpudock.api.deps import Context, CurrentUser
from gpudock.api.errors import error_responses
from gpudock.api.image_schemas import (
    ImageCreateRequest,
    ImagePublic,
    SavedImagePublic,
    SaveImageRequest,
    ValidateRequest,
)
from gpudock.api.links import links
from gpudock.api.uploads import receive_upload
from gpudock.images.catalog import ImageSpec
from gpudock.services.images import builds as image_builds
from gpudock.services.images import catalog as images
from gpudock.services.images import validation as image_validation

router = APIRouter(prefix="/images", tags=["images"])
instance_router = APIRouter(prefix="/instances", tags=["instances"])
NDJSON = "application/x-ndjson"
NDJSON_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {NDJSON: {"schema": {"type": "string"}}}, "description": "NDJSON events"}
}
TAR_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The build context: a tar archive (optionally gzip-, bzip2- or xz-"
        "compressed) holding the Dockerfile",
        "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def _public(spec: ImageSpec, runs_on: dict[str, str] | None = None) -> ImagePublic:
    public = ImagePublic.model_validate(spec, from_attributes=True)
    return public.model_copy(update={"runs_on": runs_on}) if runs_on else public


def _ndjson(events: Iterator[dict[str, Any]]) -> StreamingResponse:
    def lines() -> Iterator[bytes]:
        for event in events:
            if isinstance(event.get("image"), ImageSpec):
                event = {"image": _public(event["image"]).model_dump()}
            yield (json.dumps(event) + "\n").encode()

    return StreamingResponse(lines(), media_type=NDJSON)


@router.get("", response_model=list[ImagePublic])
def list_images(
    ctx: Context, user: CurrentUser, gpu: Annotated[str | None, Query(max_length=64)] = None
) -> list[ImagePublic]:
    """Every image you may use, with the GPU models each runs on (`gpu` narrows that)."""
    specs = images.list_images(ctx, user)
    table = images.compatibility_table(ctx, user, specs)
    return [
        _public(s, {m: r for m, r in table[s.reference].items() if gpu in (None, m)}) for s in specs
    ]


@router.post(
    "",
    response_model=ImagePublic,
    status_code=201,
    responses={
        **error_responses(403, 409),
        **links(201, "image_id", "id", {"delete": ("DELETE", "/images/{image_id}")}),
    },
)
def register(ctx: Context, user: CurrentUser, body: ImageCreateRequest) -> ImagePublic:
    return _public(images.register_manual(ctx, user, body.model_dump()))


@router.delete("/{image_id}", response_model=ImagePublic, responses=error_responses(403, 404, 409))
def delete(ctx: Context, user: CurrentUser, image_id: str) -> ImagePublic:
    return _public(images.delete_image(ctx, user, image_id))


@router.post(
    "/build",
    response_class=StreamingResponse,
    responses={**NDJSON_RESPONSE, **error_responses(403, 413)},
    openapi_extra=TAR_BODY,
)
async def build(
    ctx: Context,
    user: CurrentUser,
    request: Request,
    name: Annotated[str, Query(min_length=1, max_length=100)],
    dockerfile: Annotated[str, Query(max_length=256)] = "Dockerfile",
    public: bool = False,
) -> StreamingResponse:
    """Body: the build context as a tar. Streams NDJSON: {"log"}…, then {"image"} or {"error"}."""
    upload = await receive_upload(request, image_builds.context_limit(ctx), "build context")
    events = await run_in_threadpool(
        image_builds.build_from_upload, ctx, user, name, dockerfile, upload, public
    )
    return _ndjson(events)


@router.post(
    "/validate",
    response_class=StreamingResponse,
    responses={**NDJSON_RESPONSE, **error_responses(403)},
)
def validate(ctx: Context, user: CurrentUser, body: ValidateRequest) -> StreamingResponse:
    """Streams NDJSON: {"log"}…, then {"report"}."""
    return _ndjson(image_validation.validate(ctx, user, body.matrix))


@instance_router.post(
    "/{instance_id}/save-image",
    response_model=SavedImagePublic,
    status_code=201,
    responses=error_responses(404, 409),
)
def save_image(
    ctx: Context, user: CurrentUser, instance_id: str, body: SaveImageRequest
) -> SavedImagePublic:
    """Commit the instance's system disk as a private image; the data volume is not included."""
    spec = images.save_instance_image(ctx, user, instance_id, body.name)
    return SavedImagePublic(image=_public(spec), note=images.SYSTEM_DISK_NOTE)
