"""`gpudock keys add|list|remove`: the SSH public keys that open your instances."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from gpudock.cli import output
from gpudock.cli.client import EXIT_USAGE, CliError, connect

app = typer.Typer(
    help="Your SSH public keys (for `ssh` into your instances).", no_args_is_help=True
)

DEFAULT_KEYS = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]


def default_public_key() -> Path:
    """The first of ~/.ssh/id_ed25519.pub, id_ecdsa.pub, id_rsa.pub that exists."""
    ssh_dir = Path.home() / ".ssh"
    for name in DEFAULT_KEYS:
        if (ssh_dir / name).is_file():
            return ssh_dir / name
    raise CliError(
        f"no public key given and none of {', '.join(DEFAULT_KEYS)} in {ssh_dir}",
        exit_code=EXIT_USAGE,
        hint="make one with `ssh-keygen -t ed25519`, then `gpudock keys add`",
    )


def read_public_key(path: Path) -> str:
    """The key line from PATH; a private key is refused here, before anything is sent."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", exit_code=EXIT_USAGE) from exc
    if "PRIVATE KEY" in text:
        raise CliError(
            f"{path} is a private key: it never leaves your machine",
            exit_code=EXIT_USAGE,
            hint=f"pass the public half instead: gpudock keys add {path}.pub",
        )
    return text.strip()


@app.command("add")
def add(
    path: Annotated[
        Path | None,
        typer.Argument(
            metavar="[PATH.pub]", help="Default: ~/.ssh/id_ed25519.pub (or _ecdsa, _rsa)."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="A name; default: the key's comment.")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Register an SSH public key (ed25519, ecdsa, or rsa of 2048 bits or more)."""
    key_path = path or default_public_key()
    body: dict[str, Any] = {"public_key": read_public_key(key_path)}
    if name:
        body["name"] = name
    with connect() as client:
        key = client.post("/ssh-keys", body)
    if json_output:
        output.print_json(key)
        return
    output.print_message(
        f"Added {key['name']} ({key['algorithm']}, {key['bits']} bits): {key['fingerprint']}"
    )


@app.command("list")
def list_keys(json_output: JsonFlag = False) -> None:
    """List your SSH keys with their fingerprints (as `ssh-keygen -lf` prints them)."""
    with connect() as client:
        keys = client.get("/ssh-keys")
    if json_output:
        output.print_json(keys)
        return
    if not keys:
        output.print_message("No SSH keys; `gpudock keys add` registers ~/.ssh/id_ed25519.pub.")
        return
    grid = output.table("ID", "NAME", "TYPE", "FINGERPRINT", "ADDED", "LAST USED")
    output.add_rows(
        grid,
        (
            (
                k["id"],
                k["name"],
                f"{k['algorithm']} {k['bits']}",
                k["fingerprint"],
                output.when(k["created_at"]),
                output.when(k["last_used_at"]),
            )
            for k in keys
        ),
    )
    output.show(grid)


@app.command("remove")
def remove(
    ref: Annotated[str, typer.Argument(metavar="KEY", help="Key id, name or fingerprint.")],
    json_output: JsonFlag = False,
) -> None:
    """Remove one of your SSH keys; it stops opening new connections at once."""
    with connect() as client:
        key = client.delete(f"/ssh-keys/{quote(ref, safe='')}")
    if json_output:
        output.print_json(key)
        return
    output.print_message(f"Removed {key['name']} ({key['fingerprint']})")
