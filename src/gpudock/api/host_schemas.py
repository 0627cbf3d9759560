"""Bodies of the enrolled-host endpoints (pydantic only: the CLI parses into them)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class AgentHostCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=63, examples=["gpu-box-1"])


class AgentGpuPublic(BaseModel):
    uuid: str
    index: int
    model: str
    memory_mb: int


class AgentHostPublic(BaseModel):
    name: str
    state: str = Field(description="pending (no agent yet) | active | draining")
    link_state: str = Field(description="none (never connected) | up | down")
    link_changed_at: datetime | None
    link_peer: str = Field(description="The address the agent's link came from")
    last_heartbeat_at: datetime | None
    agent_version: str
    engine_version: str = Field(description="The host's Docker Engine, as its agent reads it")
    driver_version: str
    gpus: list[AgentGpuPublic] = Field(description="As the agent's NVML reports them")
    created_at: datetime
    enrolled_at: datetime | None


class AgentHostInvitationPublic(BaseModel):
    host: AgentHostPublic
    join_command: str = Field(description="Run it on the host, as root: shown this once")
    expires_at: datetime
