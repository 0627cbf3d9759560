"""The link's messages: JSON lines on one SSH session (subsystem `gpudock-link`).

    agent                                   server
      ── hello (version, report, [join]) ──▶   checks the pinned key or redeems the token
      ◀── welcome (host name, heartbeat, lease) or refused (code, message) and closes
      ── heartbeat (report) ─────────────▶   every `heartbeat_s`; answered ack (the
      ◀── ack (lease) ────────────────────    lease renewed), or refused when the host
                                              was removed meanwhile

The lease is how long the agent keeps its tenants running without hearing the
server (`gpudock.agent.fencing`).

Later kinds of traffic (commands, exec streams, port forwards, bulk copies)
get channels of their own on the same connection, so a large copy never
holds a heartbeat back.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

import asyncssh
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

SUBSYSTEM = "gpudock-link"
PROTOCOL_VERSION = 2  # 2: a volume stream ends with its StreamDigest
LINK_USERNAME = "gpudock-server"


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


class Heartbeat(BaseModel):
    type: Literal["heartbeat"] = "heartbeat"
    report: HostReport


class Welcome(BaseModel):
    type: Literal["welcome"] = "welcome"
    host_name: str
    heartbeat_s: float
    lease_s: float | None = None  # None: no lease, the agent never fences


class Ack(BaseModel):
    """The server recorded a heartbeat: the agent's lease runs `lease_s` from now."""

    type: Literal["ack"] = "ack"
    lease_s: float | None = None


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
