"""What an agent keeps on its host: its own key, and the server it enrolled with.

    <state dir>/agent_ed25519_key   the agent's SSH host key (0600), its identity
    <state dir>/server.json         the link URL, the server's pinned key, the host name

`server.json` is written once the server has welcomed the agent, so a join
that failed leaves nothing that `gpudock agent run` would mistake for an
enrollment.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from gpudock.errors import InvalidRequest
from gpudock.link import keys

KEY_FILE = "agent_ed25519_key"
SERVER_FILE = "server.json"
_LINK_URL = re.compile(r"ssh://(?P<host>\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.\-]+):(?P<port>[0-9]{1,5})/?")


@dataclass(frozen=True)
class LinkAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"ssh://{self.host}:{self.port}"

    @classmethod
    def parse(cls, url: str) -> LinkAddress:
        match = _LINK_URL.fullmatch(url.strip())
        if match is None or not 0 < int(match["port"]) < 65536:
            raise InvalidRequest(
                f"not a link URL: {url!r}; expected ssh://HOST:PORT as `gpudock hosts add` "
                "prints it",
                field="url",
            )
        return cls(match["host"].strip("[]"), int(match["port"]))


@dataclass(frozen=True)
class Enrollment:
    link: LinkAddress
    server_key: str  # 'ssh-ed25519 AAAA…', pinned
    host_name: str


def agent_key(state_dir: Path) -> asyncssh.SSHKey:
    return keys.ensure_private_key(state_dir / KEY_FILE, "gpudock-agent")


def load_enrollment(state_dir: Path) -> Enrollment:
    path = state_dir / SERVER_FILE
    try:
        data = json.loads(path.read_text())
        return Enrollment(LinkAddress.parse(data["link"]), data["server_key"], data["host_name"])
    except FileNotFoundError as exc:
        raise InvalidRequest(
            f"this agent is not enrolled ({path} is missing): run the join command "
            "`gpudock hosts add NAME` printed on the server"
        ) from exc
    except (ValueError, KeyError) as exc:
        raise InvalidRequest(f"{path} is damaged ({exc}): enroll the host again") from exc


def save_enrollment(state_dir: Path, enrollment: Enrollment) -> None:
    path = state_dir / SERVER_FILE
    data = {
        "link": str(enrollment.link),
        "server_key": enrollment.server_key,
        "host_name": enrollment.host_name,
    }
    write_private_json(path, data)


def write_private_json(path: Path, data: object) -> None:
    """Replace `path` with `data` as JSON (0600), synced first: a reader, or the agent
    after a kill, finds the old file or the new one, never half of one."""
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    partial.replace(path)
