"""`gpudock keys add|list|remove`: the SSH public keys that open your instances."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from gpudock.api.schemas import SshKeyChallengePublic, SshKeyPublic
from gpudock.cli import output
from gpudock.cli.client import EXIT_USAGE, CliError, connect, quoted_path
from gpudock.cli.commands.listing import show_collection
from gpudock.cli.commands.options import JsonFlag

app = typer.Typer(
    help="Your SSH public keys (for `ssh` into your instances).", no_args_is_help=True
)

DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")
COLUMNS = ("ID", "NAME", "TYPE", "FINGERPRINT", "ADDED", "LAST USED", "PROVEN")
KeyRef = Annotated[str, typer.Argument(metavar="KEY", help="Key id, name or fingerprint.")]
NONE_YET = "No SSH keys; `gpudock keys add` registers ~/.ssh/id_ed25519."


def default_key() -> Path:
    """The first of ~/.ssh/id_ed25519, id_ecdsa, id_rsa whose .pub exists."""
    ssh_dir = Path.home() / ".ssh"
    for name in DEFAULT_KEYS:
        if (ssh_dir / f"{name}.pub").is_file():
            return ssh_dir / name
    raise CliError(
        f"no key given and none of {', '.join(n + '.pub' for n in DEFAULT_KEYS)} in {ssh_dir}",
        exit_code=EXIT_USAGE,
        hint="make one with `ssh-keygen -t ed25519`, then `gpudock keys add`",
    )


def key_files(path: Path) -> tuple[Path, Path]:
    """(the public key file, what ssh-keygen signs with) for PATH or PATH.pub.

    With only the .pub on disk, ssh-keygen signs through ssh-agent, so the .pub
    itself is what it is given.
    """
    if path.suffix == ".pub":
        private = path.with_suffix("")
        return path, private if private.is_file() else path
    public = path.with_name(path.name + ".pub")
    if not public.is_file():
        raise CliError(
            f"no public key {public} beside {path}",
            exit_code=EXIT_USAGE,
            hint=f"write it with `ssh-keygen -y -f {path} > {public}`, then run this again",
        )
    return public, path


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
            hint=f"name the key pair by its private key or its .pub: {path.with_suffix('')}",
        )
    return text.strip()


def sign_challenge(challenge: str, namespace: str, signer: Path) -> str:
    """`ssh-keygen -Y sign` over CHALLENGE: the private key stays with ssh-keygen
    (which asks for its passphrase on the terminal, or uses ssh-agent)."""
    with tempfile.TemporaryDirectory(prefix="gpudock-proof-") as directory:
        message = Path(directory) / "challenge"
        message.write_text(challenge, encoding="ascii")
        argv = ["ssh-keygen", "-Y", "sign", "-n", namespace, "-f", str(signer), str(message)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except FileNotFoundError as exc:
            raise CliError(
                "ssh-keygen is not installed: it signs the proof that you hold the key",
                hint="install OpenSSH's client (Debian: apt-get install openssh-client)",
            ) from exc
        signature = message.with_name("challenge.sig")
        if done.returncode != 0 or not signature.is_file():
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise CliError(
                f"ssh-keygen could not sign with {signer}: {said}",
                hint="a key held only by ssh-agent: pass its .pub (gpudock keys add PATH.pub)",
            )
        return signature.read_text(encoding="ascii")


@app.command("add")
def add(
    path: Annotated[
        Path | None,
        typer.Argument(
            metavar="[PATH]",
            help="The key pair, as for `ssh -i` (PATH and PATH.pub; PATH.pub alone when "
            "ssh-agent holds the key). Default: ~/.ssh/id_ed25519 (or _ecdsa, _rsa).",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="A name; default: the key's comment.")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Register an SSH key (ed25519, ecdsa, or rsa of 2048 bits or more).

    Proves you hold it: ssh-keygen signs a challenge from the server with the
    private key, which never leaves this machine. A key registered before
    proofs were required is proven the same way.
    """
    public, signer = key_files(path or default_key())
    body = {"public_key": read_public_key(public)}
    if name:
        body["name"] = name
    with connect() as client:
        issued = client.post("/ssh-keys/challenge", SshKeyChallengePublic)
        body["challenge"] = issued.challenge
        body["signature"] = sign_challenge(issued.challenge, issued.namespace, signer)
        key = client.post("/ssh-keys", SshKeyPublic, body)
    said = f"Added {key.name} ({key.algorithm}, {key.bits} bits, proven): {key.fingerprint}"
    output.print_answer(key, json_output, said)


@app.command("list")
def list_keys(json_output: JsonFlag = False) -> None:
    """List your SSH keys with their fingerprints (as `ssh-keygen -lf` prints them)."""
    keys = show_collection(
        "/ssh-keys", list[SshKeyPublic], COLUMNS, _row, json_output=json_output, empty=NONE_YET
    )
    if not json_output and not all(k.verified for k in keys):
        output.print_message(
            "Keys marked NO were registered before keys needed a proof; prove each with "
            "`gpudock keys add PATH` (its private key) before the server stops accepting them."
        )


def _row(key: SshKeyPublic) -> list[str]:
    return [
        key.id,
        key.name,
        f"{key.algorithm} {key.bits}",
        key.fingerprint,
        output.when(key.created_at),
        output.when(key.last_used_at),
        "yes" if key.verified else "NO",
    ]


@app.command("remove")
def remove(ref: KeyRef, json_output: JsonFlag = False) -> None:
    """Remove one of your SSH keys; it stops opening new connections at once."""
    with connect() as client:
        key = client.delete(quoted_path("ssh-keys", ref), SshKeyPublic)
    output.print_answer(key, json_output, f"Removed {key.name} ({key.fingerprint})")
