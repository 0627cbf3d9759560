"""How a user connects to one instance: which of their keys the gateway takes,
and the lines to paste — ssh, scp, rsync, a port forward, VS Code's Remote-SSH
and the ~/.ssh/config entry `gpudock ssh-config` also writes (that command
pins the gateway's host key too; the panel shows its fingerprint to compare).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudock.db.models import InstanceModel, SshKeyModel, UserModel
from gpudock.errors import NotFound
from gpudock.services.context import ServiceContext
from gpudock.services.ssh import endpoint as ssh_endpoint
from gpudock.services.ssh import keys as ssh_keys

# Where ssh-keygen puts a key of each kind by default: the path the lines name.
DEFAULT_KEY_FILES = {
    "ssh-ed25519": "~/.ssh/id_ed25519",
    "ssh-rsa": "~/.ssh/id_rsa",
    "ecdsa-sha2-nistp256": "~/.ssh/id_ecdsa",
    "ecdsa-sha2-nistp384": "~/.ssh/id_ecdsa",
    "ecdsa-sha2-nistp521": "~/.ssh/id_ecdsa",
}
FORWARDED_PORT = 8888  # Jupyter's; any port the instance listens on works the same


@dataclass(frozen=True)
class KeyStatus:
    name: str
    fingerprint: str
    works: bool  # False: registered before proofs, and this server refuses those


@dataclass(frozen=True)
class ConnectLines:
    ssh: str
    scp: str
    rsync: str
    forward: str
    vscode: str
    ssh_config: str


@dataclass(frozen=True)
class ConnectInfo:
    host: str
    port: int
    alias: str  # the Host of the ssh-config entry: the instance's name
    host_key_fingerprint: str
    identity: str  # the private key file the lines name
    keys: list[KeyStatus]
    lines: ConnectLines

    @property
    def usable_keys(self) -> list[KeyStatus]:
        return [k for k in self.keys if k.works]


def connect_info(
    ctx: ServiceContext, viewer: UserModel, instance: InstanceModel
) -> ConnectInfo | None:
    """The panel's contents for `viewer` (the owner, or an admin who may connect
    too), or None when this server runs no SSH gateway."""
    try:
        gateway = ssh_endpoint.endpoint(ctx.settings)
    except NotFound:
        return None
    keys = [_status(ctx, k) for k in ssh_keys.list_keys(ctx, viewer)]
    identity = _identity(ctx, viewer)
    alias = instance.name or instance.id
    return ConnectInfo(
        host=gateway.host,
        port=gateway.port,
        alias=alias,
        host_key_fingerprint=gateway.host_key_fingerprint,
        identity=identity,
        keys=keys,
        lines=_lines(gateway.host, gateway.port, instance.id, alias, identity),
    )


def ssh_line(ctx: ServiceContext, viewer: UserModel, instance_id: str) -> str | None:
    """The panel's ssh line alone (no host key read: the status fragment polls it)."""
    if not ctx.settings.ssh_enabled:
        return None
    host, port = ssh_endpoint.advertised_host(ctx.settings), ctx.settings.ssh_port
    return _lines(host, port, instance_id, instance_id, _identity(ctx, viewer)).ssh


def _identity(ctx: ServiceContext, viewer: UserModel) -> str:
    rows = ssh_keys.list_keys(ctx, viewer)
    first = next((row for row in rows if _status(ctx, row).works), None)
    return DEFAULT_KEY_FILES.get(first.algorithm if first else "", "~/.ssh/id_ed25519")


def _status(ctx: ServiceContext, key: SshKeyModel) -> KeyStatus:
    refused = key.verified_at is None and ctx.settings.ssh_unverified_keys == "refuse"
    return KeyStatus(name=key.name, fingerprint=key.fingerprint, works=not refused)


def _lines(host: str, port: int, login: str, alias: str, identity: str) -> ConnectLines:
    target = f"{login}@{host}"
    ssh_port = "" if port == 22 else f"-p {port} "
    scp_port = "" if port == 22 else f"-P {port} "
    rsync_ssh = f"ssh -i {identity}" + ("" if port == 22 else f" -p {port}")
    config = "\n".join(
        [
            f"Host {alias}",
            f"    HostName {host}",
            f"    Port {port}",
            f"    User {login}",
            f"    IdentityFile {identity}",
            "    IdentitiesOnly yes",
        ]
    )
    return ConnectLines(
        ssh=f"ssh -i {identity} {ssh_port}{target}",
        scp=f"scp -i {identity} {scp_port}./train.py {target}:/root/data/",
        rsync=f'rsync -av -e "{rsync_ssh}" ./project/ {target}:/root/data/project/',
        forward=(
            f"ssh -i {identity} {ssh_port}-N -L {FORWARDED_PORT}:localhost:{FORWARDED_PORT} "
            f"{target}"
        ),
        vscode=f"code --remote ssh-remote+{alias} /root/data",
        ssh_config=config,
    )
