"""API bodies: `...Request` comes in, `...Public` goes out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from gpudock.api.host_schemas import LABELS_SCHEMA
from gpudock.syntax import DURATION_PATTERN, TOKEN_NAME_PATTERN

# Environment variables a request may set: the service refuses the reserved
# ones with an explanation, so pydantic checks only the shape of the body.
ENV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": 128,
    "propertyNames": {
        "pattern": r"^(?!LD_PRELOAD$|LD_AUDIT$|NVIDIA_|GPUDOCK_)[A-Za-z_][A-Za-z0-9_]{0,127}$"
    },
    "additionalProperties": {"type": "string"},
    "description": "Set in the instance; LD_PRELOAD, LD_AUDIT, NVIDIA_* and GPUDOCK_* are "
    "reserved (gpudock sets them)",
}


SHARE_BOUNDS: dict[str, Any] = {"exclusiveMinimum": 0, "exclusiveMaximum": 1}


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorPublic(BaseModel):
    error: ErrorBody


class UserCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(
        min_length=1,
        max_length=32,
        pattern=r"^[a-z][a-z0-9_-]{0,31}$",
        examples=["alice"],
        description="Lowercase letters, digits, '-' or '_', starting with a letter",
    )
    is_admin: bool = False


def _rfc_3339(value: Any) -> Any:
    """JSON has no datetime: parse text (strict models take no strings), never
    numbers (pydantic alone would read 1.5 as a Unix time)."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"{value[:40]!r} is not an RFC 3339 date and time") from exc
    return value


Timestamp = Annotated[AwareDatetime, BeforeValidator(_rfc_3339)]


class UserPublic(BaseModel):
    id: str
    name: str
    is_admin: bool
    created_at: datetime
    state: str = Field(default="active", description="active, disabled or deleted")
    state_reason: str = ""
    state_changed_at: datetime | None = None


class UserWithTokenPublic(UserPublic):
    token: str = Field(description="Shown once; gpudock keeps only its SHA-256 digest.")


class UserDisableRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str | None = Field(default=None, max_length=500, examples=["left the lab"])


class UserStateChangePublic(BaseModel):
    user: UserPublic
    instances: list[str] = Field(
        description="Instances stopped (disable: GPUs released, containers and data kept)"
    )


class UserDeletionPublic(BaseModel):
    user: UserPublic
    instances: list[str] = Field(
        description="Instances being deleted with their containers and data volumes"
    )
    balance: str = Field(description="The wallet's balance, kept in the ledger as it stands")
    private_images: list[str] = Field(description="Private images kept (admins remove them)")
    retention: str = Field(description="What was deleted and what is kept")


class TokenCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    # The patterns are documented, and checked by the service, whose messages
    # say what is wrong in words rather than as a regular expression.
    name: str = Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"pattern": TOKEN_NAME_PATTERN},
        examples=["laptop"],
        description="Unique among your unrevoked tokens",
    )
    expires_in: (
        Annotated[str, Field(max_length=6, json_schema_extra={"pattern": DURATION_PATTERN})] | None
    ) = Field(
        default=None,
        examples=["90d"],
        description="Expire this long from now: minutes, hours, days or weeks (30m, 12h, 90d, "
        "2w). Give this or expires_at, not both; neither: never expires.",
    )
    expires_at: Timestamp | None = Field(
        default=None, description="Expire at this time (in the future, with its time zone)."
    )


class TokenPublic(BaseModel):
    id: str
    name: str
    state: str = Field(description="active, expired or revoked")
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None = Field(description="To the minute")
    revoked_at: datetime | None
    current: bool = Field(description="The token this request was sent with")


class TokenWithValuePublic(TokenPublic):
    token: str = Field(description="Shown once; gpudock keeps only its SHA-256 digest.")


class GpuModelPublic(BaseModel):
    model: str
    memory_mb: int
    total: int
    free: int
    hosts: int
    max_per_host: int
    price_per_hour: str | None = Field(
        default=None,
        description='Per GPU-hour, a decimal string of currency units ("3.6"); '
        "null when no price is set (free).",
    )
    share_free_milli: int = Field(
        default=0,
        description="Milli-GPU free for shares: on healthy GPUs of this model held by no "
        "whole-GPU instance (1000 = one card)",
    )
    largest_share_milli: int = Field(
        default=0, description="The largest share one GPU of this model can take now (milli-GPU)"
    )


class GpuSharePublic(BaseModel):
    instance_id: str
    milli: int = Field(description="Its share of the card, in milli-GPU")


class GpuPublic(BaseModel):
    uuid: str
    index: int
    model: str
    memory_mb: int
    pci_bus_id: str
    numa_node: int | None
    nvlink_peers: list[str]
    state: str
    state_reason: str = ""
    present: bool
    instance_id: str | None = Field(description="The instance holding it whole, if any")
    shares: list[GpuSharePublic] = Field(default_factory=list, description="Shares it holds")


class HostPublic(BaseModel):
    id: str
    name: str
    cpus: float
    memory_gb: int
    driver_version: str
    cuda_version: str
    simulated: bool
    present: bool
    gpus: list[GpuPublic]


class AutoStopRequest(BaseModel):
    """When an instance stops by itself (GPUs released, data kept). Every field
    left out is off; PUT replaces the whole policy."""

    model_config = ConfigDict(
        extra="forbid",  # not strict: 1800.0 is the integer JSON Schema says it is
        json_schema_extra={"examples": [{"idle_after_s": 1800}, {"stop_after_s": 7200}]},
    )
    idle_after_s: int | None = Field(
        default=None,
        ge=60,
        le=30 * 86_400,
        description="Stop after this many seconds with every GPU below idle_below_pct "
        "and no SSH session or service-URL use; the owner is told 10 minutes before.",
    )
    idle_below_pct: float | None = Field(
        default=None,
        gt=0,
        le=100,
        allow_inf_nan=False,
        description="GPU utilisation (per cent) under which a GPU counts as idle; "
        "default GPUDOCK_IDLE_BELOW_PCT (5)",
    )
    stop_at: Timestamp | None = Field(
        default=None, description="Stop at this time (RFC 3339, with its time zone)."
    )
    stop_after_s: int | None = Field(
        default=None,
        ge=1,
        le=366 * 86_400,
        description="Stop this many seconds from now (stored as stop_at); not with stop_at.",
    )
    stop_on_exit: bool | None = Field(
        default=None,
        description="Stop, instead of restarting, when the container's main process exits; "
        "left out: on for an instance with a command (a job), off otherwise.",
    )


class AutoStopPublic(BaseModel):
    idle_after_s: int | None
    idle_below_pct: float
    stop_at: datetime | None
    stop_on_exit: bool
    idle_warned_at: datetime | None = Field(
        description="When the owner was told an idle stop is near; null: not now"
    )
    summary: str = Field(examples=["stops idle 30 min (GPUs below 5 %)"])


class InstanceCreateRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"name": "train-1", "gpu_model": "A100-80GB", "gpu_count": 1},
                {"name": "cpu-box", "gpu_count": 0},
            ]
        },
    )
    name: str | None = Field(default=None, min_length=1, max_length=63, examples=["train-1"])
    gpu_model: str | None = Field(default=None, max_length=64, examples=["A100-80GB"])
    gpu_count: int = Field(default=1, ge=0, le=16, description="0 = no-GPU mode")
    image: str | None = Field(default=None, max_length=512)
    cpu: float | None = Field(default=None, gt=0, le=1024, allow_inf_nan=False)
    memory_gb: int | None = Field(default=None, ge=1, le=65536)
    disk_gb: int | None = Field(default=None, ge=1, le=1_000_000)
    system_disk_gb: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="The system disk (image + everything outside /root/data); "
        "default GPUDOCK_SYSTEM_DISK_GB (30)",
    )
    env: Annotated[dict[str, str], WithJsonSchema(ENV_SCHEMA)] = Field(
        default_factory=dict, max_length=128
    )
    # The bounds are documented and checked by the service, whose messages say
    # what to ask for instead ("a whole card: gpu_count 1, without gpu_share").
    gpu_share: (
        Annotated[
            float,
            Field(
                allow_inf_nan=False,
                json_schema_extra={"exclusiveMinimum": 0, "exclusiveMaximum": 1},
            ),
        ]
        | None
    ) = Field(
        default=None,
        examples=[0.25],
        description="A share of one GPU, as a fraction of the card (0 < x < 1; rounded up "
        "to the milli-GPU). Give this or gpu_memory_gb, not both; gpu_count is 1.",
    )
    gpu_memory_gb: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        examples=[20],
        description="A share of one GPU, as GB of its memory (less than the card's; the "
        "share is that fraction of the card, rounded up to the milli-GPU).",
    )
    gpu_models: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        max_length=8,
        examples=[["A100-80GB", "H100-80GB"]],
        description="GPU models the instance accepts; gpu_model (default: the first of "
        "these) is preferred. Placement takes the first that has room, and gpu_model in "
        "the answer says which it got.",
    )
    auto_stop: AutoStopRequest | None = Field(
        default=None, description="Stop by itself when idle, at a time, or when it exits"
    )
    services: dict[
        Annotated[str, Field(min_length=1, max_length=15)], Annotated[int, Field(ge=1, le=65535)]
    ] = Field(
        default_factory=dict,
        max_length=16,
        examples=[{"app": 8000}],
        description="Ports to publish as service URLs, by name (besides those the image "
        "publishes itself: jupyter and tensorboard on gpudock/jupyter:bookworm).",
    )
    command: str | None = Field(
        default=None,
        max_length=4096,
        examples=["python /root/data/train.py"],
        description="A job: this shell command line runs as the container's main process "
        "(/bin/sh -c), as the arguments of the image's entry point if it has one; when it "
        "exits the instance stops (data kept) unless auto_stop.stop_on_exit is false.",
    )
    host_labels: Annotated[dict[str, str], WithJsonSchema(LABELS_SCHEMA)] = Field(
        default_factory=dict,
        examples=[{"region": "eu"}],
        description="Labels its host must carry, every one (set by the operator: "
        "`gpudock hosts label`); refused when no host carrying them could hold it",
    )
    on_host_loss: Literal["wait", "elsewhere"] = Field(
        default="wait",
        description="When its host is lost: wait for it (its data lives there; not billed "
        "meanwhile), or restart elsewhere at once with an empty data volume",
    )


class InstanceQueuePublic(BaseModel):
    """Where a waiting instance stands (only on GET /instances/{id})."""

    position: int = Field(description="1: the next to be placed among those that want its GPUs")
    waiting: int = Field(description="How many instances wait for the same GPU models")
    reason: str = Field(description="Why it waits, as the placement pass last saw it")
    estimate: str = Field(
        description='When it may start, or "unknown" when nothing bounds how long '
        "the instances holding its GPUs will run"
    )


class InstancePublic(BaseModel):
    id: str
    name: str
    user_id: str
    status: str
    status_reason: str
    desired_state: str
    gpu_model: str | None
    gpu_count: int
    gpus: list[str]
    host: str | None
    image: str
    cpu: float
    memory_gb: int
    disk_gb: int
    system_disk_gb: int
    container_id: str | None
    created_at: datetime
    updated_at: datetime
    ssh_command: str | None = Field(
        default=None, description="How to reach it through the SSH gateway (None: no gateway)."
    )
    stay_on_host: bool = Field(
        default=False, description="Start waits for its own host instead of moving."
    )
    gpu_models: list[str] = Field(
        default_factory=list,
        description="The GPU models it accepts, gpu_model (the one it got, once placed) first",
    )
    gpu_share: str | None = Field(
        default=None,
        examples=["0.25"],
        description="Its share of one GPU as a decimal fraction; null: whole GPUs",
    )
    gpu_share_milli: int | None = Field(default=None, description="The same in milli-GPU")
    gpu_memory_limit_mb: int | None = Field(
        default=None, description="A placed share's GPU memory limit (its part of the card's)"
    )
    queue: InstanceQueuePublic | None = Field(
        default=None, description="Its place in the wait queue while it waits for GPUs"
    )
    auto_stop: AutoStopPublic | None = Field(
        default=None, description="Its auto-stop policy; null: it runs until stopped"
    )
    command: str | None = Field(
        default=None, description="Its job's shell command line; null: no job (keep-alive)"
    )
    host_labels: dict[str, str] = Field(
        default_factory=dict, description="Labels its host must carry"
    )
    on_host_loss: str = Field(default="wait", description="wait | elsewhere")


class InstanceEventPublic(BaseModel):
    at: datetime
    from_status: str | None
    to_status: str
    message: str


class PasswordSetRequest(BaseModel):
    """A console password: argon2id-hashed, never stored or shown in clear."""

    model_config = ConfigDict(extra="forbid", strict=True)
    password: str = Field(min_length=8, max_length=1024)


# -- SSH keys, sessions and the gateway --


class SshKeyCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    public_key: str = Field(
        min_length=1,
        max_length=16_384,
        description="One OpenSSH public key line (the .pub file): ed25519, ecdsa or rsa ≥ 2048.",
        examples=[
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKXpzYDb6wmbNCeXhjE4NNa2gNK/STmsPH6bX7+PjDa3 "
            "alice@laptop"
        ],
    )
    name: str | None = Field(
        default=None, max_length=128, description="Default: the key's comment."
    )
    challenge: str | None = Field(
        default=None,
        max_length=256,
        description="Required: a challenge from `POST /ssh-keys/challenge` (yours, unexpired).",
    )
    signature: str | None = Field(
        default=None,
        max_length=16_384,
        description="Required: the challenge signed with the key's private half, as "
        "`printf %s CHALLENGE | ssh-keygen -Y sign -n gpudock-key-proof -f KEY` prints it "
        "(-----BEGIN SSH SIGNATURE----- …).",
    )


class SshKeyChallengePublic(BaseModel):
    challenge: str = Field(description="Sign exactly this text (no newline needed).")
    namespace: str = Field(description="The SSHSIG namespace the signature must use.")
    expires_at: datetime
    sign_command: str = Field(
        description="The one line that signs it; replace the key path with yours."
    )


class SshKeyPublic(BaseModel):
    id: str
    name: str
    algorithm: str
    bits: int
    fingerprint: str = Field(description="SHA256:…, as `ssh-keygen -lf` prints it")
    public_key: str
    created_at: datetime
    last_used_at: datetime | None = Field(description="Its last SSH login through the gateway.")
    verified: bool = Field(
        description="Its holder proved possession of the private key. False: registered "
        "before proofs were required; add it again (with a proof) to prove it."
    )
    verified_at: datetime | None


class SshSessionPublic(BaseModel):
    id: int
    outcome: str = Field(description="open, closed, or refused (with the reason)")
    reason: str
    login: str
    user_id: str | None
    client_address: str
    key_fingerprint: str | None = Field(description="None for a browser terminal (origin web)")
    origin: str = Field(
        default="ssh", description="ssh (the gateway) or web (the console's browser terminal)"
    )
    started_at: datetime
    ended_at: datetime | None
    bytes_in: int = Field(description="Client → instance")
    bytes_out: int = Field(description="Instance → client")


class SshEndpointPublic(BaseModel):
    host: str
    port: int
    host_key: str = Field(description="The gateway's host key, for known_hosts")
    host_key_fingerprint: str
