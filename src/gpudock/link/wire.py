"""The link's messages: JSON lines on one SSH session (subsystem `gpudock-link`).

    agent                                   server
      ── hello (version, report, [join]) ──▶   checks the pinned key or redeems the token
      ◀── welcome (host name, heartbeat, lease) or refused (code, message) and closes
      ── heartbeat (report, health) ─────▶   every `heartbeat_s`, and at once when NVML
      ◀── ack (lease, health_through) ────    reports a fault; answered ack (the lease
                                              renewed, the faults recorded through that
                                              number), or refused when the host was
                                              removed meanwhile

A heartbeat carries the health events the agent journaled and the server has
not acknowledged yet (`gpudock.agent.health`), so an Xid seen while the link
was down reaches the server after the reconnect, and one whose ack was lost is
sent again and recorded once (the server keeps the last number it recorded).

The lease is how long the agent keeps its tenants running without hearing the
server (`gpudock.agent.fencing`).

Later kinds of traffic (commands, exec streams, port forwards, bulk copies)
get channels of their own on the same connection, so a large copy never
holds a heartbeat back.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Literal

import asyncssh
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

SUBSYSTEM = "gpudock-link"
PROTOCOL_VERSION = 2  # 2: a volume stream ends with its StreamDigest
LINK_USERNAME = "gpudock-server"
MAX_HEALTH_RECORDS = 100  # per heartbeat: a backlog goes over several


class LinkClosed(Exception):
    """The other end closed the session, or sent something that is not the protocol."""


class GpuReport(BaseModel):
    """One GPU as NVML shows it; topology fields are empty where the driver does not say."""

    uuid: str
    index: int
    model: str
    memory_mb: int
    pci_bus_id: str = ""
    numa_node: int | None = None
    nvlink_peers: list[str] = Field(default_factory=list)


class HostReport(BaseModel):
    """What an agent sees of its host. `problems`: what it could not read, and why.

    CPUs, memory and the CUDA version are what placement sizes instances by;
    zero (an older agent, or a part it could not read) keeps the server's last
    figures."""

    agent_version: str
    engine_version: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    cpus: float = 0.0
    memory_gb: int = 0
    gpus: list[GpuReport] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)


class JoinRequest(BaseModel):
    token_id: str
    secret: str


class Hello(BaseModel):
    type: Literal["hello"] = "hello"
    protocol: int = PROTOCOL_VERSION
    report: HostReport
    join: JoinRequest | None = None


class HealthRecord(BaseModel):
    """One health event NVML reported on the agent's host, numbered by the agent's
    journal (1, 2, … for the life of its state dir)."""

    seq: int = Field(ge=1)
    gpu_uuid: str = Field(max_length=96)
    kind: str = Field(max_length=32)  # xid, ecc_dbe, remapped_rows_pending, gpu_lost, …
    xid: int | None = None
    message: str = Field(default="", max_length=500)
    seen_at: datetime  # the agent's clock, UTC


class Heartbeat(BaseModel):
    type: Literal["heartbeat"] = "heartbeat"
    report: HostReport
    health: list[HealthRecord] = Field(default_factory=list, max_length=MAX_HEALTH_RECORDS)


class Welcome(BaseModel):
    type: Literal["welcome"] = "welcome"
    host_name: str
    heartbeat_s: float
    lease_s: float | None = None  # None: no lease, the agent never fences


class Ack(BaseModel):
    """The server recorded a heartbeat: the agent's lease runs `lease_s` from now."""

    type: Literal["ack"] = "ack"
    lease_s: float | None = None
    health_through: int = 0  # every health record up to this number is recorded


class Refused(BaseModel):
    """The server will not talk to this agent; `message` says what to do."""

    type: Literal["refused"] = "refused"
    code: str
    message: str


Message = Annotated[Hello | Heartbeat | Welcome | Ack | Refused, Field(discriminator="type")]
_MESSAGE: TypeAdapter[Hello | Heartbeat | Welcome | Ack | Refused] = TypeAdapter(Message)


async def send(writer: asyncssh.SSHWriter[bytes], message: BaseModel) -> None:
    writer.write(message.model_dump_json().encode() + b"\n")
    await writer.drain()


async def receive(
    reader: asyncssh.SSHReader[bytes], timeout_s: float | None = None
) -> Hello | Heartbeat | Welcome | Ack | Refused:
    """The next message; `LinkClosed` at the end of the session or on a bad line."""
    try:
        line = await asyncio.wait_for(reader.readuntil(b"\n"), timeout_s)
    except asyncio.IncompleteReadError as exc:
        raise LinkClosed("the other end closed the link") from exc
    except TimeoutError as exc:
        raise LinkClosed(f"nothing heard on the link for {timeout_s} s") from exc
    except (asyncssh.DisconnectError, asyncssh.ConnectionLost, BrokenPipeError) as exc:
        raise LinkClosed(f"the link was lost: {exc}") from exc
    try:
        return _MESSAGE.validate_json(line)
    except ValidationError as exc:
        raise LinkClosed(f"not a link message: {exc.errors()[0]['msg']}") from exc
