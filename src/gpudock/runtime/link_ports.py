"""Port connections over an agent link, as messages: what the server asks for
when it opens one, and the agent's first answer.

    server                                                agent
      ── session channel, exec "gpudock-port <JSON>"  ──▶   the container must be an
         (`PortRequest`: container, port, scope)            instance's, the scope admitted;
                                                            connect to 127.0.0.1:port in
                                                            its network namespace
      ◀── one JSON line (`PortOpened`: ok, or the error)
      ◀─▶ then the channel's stdin and stdout are the TCP stream, EOF its half-close

A session channel of our own rather than SSH's `direct-tcpip`: the request
carries the instance's scope (its placement generation) next to the
container, which `direct-tcpip`'s host and port strings have no room for.
The ends live in `gpudock.agent.ports` and `gpudock.agentgw.ports`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from gpudock.runtime.calls import InstanceScope

PORT_COMMAND = "gpudock-port "  # a port channel's command: this, then a `PortRequest`


class PortRequest(BaseModel):
    """Which port inside which container a port channel connects to."""

    container_id: str = Field(min_length=1, max_length=128)
    port: int = Field(ge=1, le=65535)
    scope: InstanceScope | None = None


class PortOpened(BaseModel):
    """The agent's first line on a port channel: connected, or why not."""

    ok: bool
    code: str | None = None
    message: str = ""
