"""Bodies of the service-URL endpoints (pydantic only: the CLI parses into them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServiceExposeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=15, examples=["app"])
    port: int = Field(ge=1, le=65535, examples=[8000])


class ServicePublic(BaseModel):
    instance_id: str
    name: str
    port: int
    kind: str = Field(description="http | jupyter | tensorboard")
    url: str = Field(description="Opens with a console login; a link adds its token")


class ServiceLinkPublic(BaseModel):
    url: str = Field(description="The service's URL with a new link token: shown once")
    token: str


class ServiceLinksRevokedPublic(BaseModel):
    revoked: int = Field(description="How many live links of the service were revoked")
