"""API bodies for images."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

ComputeCapability = Annotated[
    str, Field(pattern=r"^[0-9]{1,2}\.[0-9][af]?(\+PTX)?$", examples=["8.6", "12.0+PTX"])
]


class ImageCreateRequest(BaseModel):
    """Register an image the engine has (or can get) with its metadata."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reference: str = Field(
        max_length=512, examples=["pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"]
    )
    name: str = Field(min_length=1, max_length=128)
    description: str = Field(default="", max_length=2000)
    os: str = Field(default="", max_length=64)
    python: str | None = Field(default=None, max_length=16)
    framework: str | None = Field(default=None, max_length=32)
    framework_version: str | None = Field(default=None, max_length=32)
    cuda: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    cudnn: str | None = Field(default=None, max_length=16)
    min_driver: str | None = Field(default=None, pattern=r"^\d+(\.\d+){0,2}$")
    compute_capabilities: list[ComputeCapability] = Field(
        default_factory=list,
        max_length=32,
        description="GPU architectures the image's code is built for, e.g. ['8.0', '9.0']; "
        "'+PTX' marks one shipped as PTX too; [] means no constraint",
    )
    public: bool = Field(default=False, description="Admins only.")


class ImagePublic(BaseModel):
    id: str | None = Field(description="None for built-in catalog entries")
    reference: str
    name: str
    description: str
    os: str
    python: str | None
    framework: str | None
    framework_version: str | None
    cuda: str | None
    cudnn: str | None
    min_driver: str | None
    compute_capabilities: list[str]
    size_bytes: int
    visibility: str
    origin: str
    owner_id: str | None
    on_host: bool | None = Field(
        default=None,
        description="whether the Docker Engine has the image now; if not, it is pulled "
        "from its registry when an instance first needs it (null: not asked)",
    )
    runs_on: dict[str, str] = Field(
        default_factory=dict,
        description="GPU model → 'ok', 'unknown: …' (what could not be checked: gpudock's "
        "compatibility data does not cover it; not refused) or why the image cannot run there",
    )


class SaveImageRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$",
        examples=["my-env:v1"],
        description="Lowercase letters, digits, '.', '_', '-', and an optional ':tag'",
    )


class SavedImagePublic(BaseModel):
    image: ImagePublic
    note: str = Field(description="What was saved: the system disk, never the data volume")


class ValidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    matrix: dict[str, Any] | None = Field(default=None, description="None: the default matrix")


# -- the NDJSON events that builds and validation stream (not in the OpenAPI document) --


class BuildEventPublic(BaseModel):
    """One line of `POST /images/build`: a `log` line, then the `image` or an `error`."""

    log: str | None = None
    error: str | None = None
    image: ImagePublic | None = None


class SmokeCheckPublic(BaseModel):
    check: str
    ok: bool
    detail: str


class CandidateOutcomePublic(BaseModel):
    name: str
    reference: str
    status: str = Field(description="passed, failed, published or held back")
    build_error: str | None
    checks: list[SmokeCheckPublic]
    image_id: str | None
    ok: bool


class ValidationReportPublic(BaseModel):
    run_id: str
    threshold: float
    failure_rate: float
    passed: bool = Field(description="The failure rate stayed within the threshold")
    published: list[str]
    candidates: list[CandidateOutcomePublic]


class ValidationEventPublic(BaseModel):
    """One line of `POST /images/validate`: `log` lines, then the `report`."""

    log: str | None = None
    report: ValidationReportPublic | None = None
