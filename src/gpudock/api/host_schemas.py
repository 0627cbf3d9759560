"""Bodies of the enrolled-host endpoints (pydantic only: the CLI parses into them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from gpudock.syntax import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, MAX_LABELS

# Published here, checked by the service (whose messages say what fits, in words).
LABELS_SCHEMA = {
    "type": "object",
    "propertyNames": {"pattern": LABEL_KEY_PATTERN},
    "additionalProperties": {"type": "string", "pattern": LABEL_VALUE_PATTERN},
    "maxProperties": MAX_LABELS,
}
Labels = Annotated[dict[str, str], WithJsonSchema(LABELS_SCHEMA)]


class AgentHostCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=63, examples=["gpu-box-1"])
    labels: Labels | None = Field(
        default=None,
        examples=[{"region": "eu", "zone": "eu-west-1"}],
        description="Labels instances may ask for (host_labels); adding a pending host "
        "again with labels replaces them",
    )


class AgentHostLabelsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    set: Labels = Field(default_factory=dict, description="Labels to set (or change)")
    remove: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list, max_length=MAX_LABELS, description="Label keys to take off"
    )


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
    labels: dict[str, str] = Field(default_factory=dict, description="The operator's labels")
    lost_at: datetime | None = Field(
        default=None,
        description="Since when the host is lost (no heartbeat for GPUDOCK_HOST_LOST_AFTER_S); "
        "null: not lost",
    )


class AgentHostInvitationPublic(BaseModel):
    host: AgentHostPublic
    join_command: str = Field(description="Run it on the host, as root: shown this once")
    expires_at: datetime


class KeptContainerPublic(BaseModel):
    """A container the fence stopped and kept on an agent host: its instance lives
    elsewhere now, or was deleted."""

    instance_id: str
    instance_name: str = Field(description="Empty when the instance is gone from the database")
    owner: str
    container: str
    running: bool
    volumes: list[str] = Field(description="Its old data volume(s) on this host")
    reason: str
