"""`gpudock`: the Typer app and its entry point.

A command's module (and with it httpx, pydantic and the API's schemas) is
imported only when that command runs: `gpudock --help` lists the commands from
the table below, whose summaries a test keeps equal to the commands' own.

Exit codes: 0 ok, 1 the server or the runtime failed or refused, 2 bad usage.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from gpudock.cli import output

COMMANDS_PACKAGE = "gpudock.cli.commands"


@dataclass(frozen=True)
class LazyCommand:
    module: str  # under gpudock.cli.commands
    attribute: str  # a command function, or a Typer app for a group
    summary: str  # what `gpudock --help` says of it


# In the order `gpudock --help` lists them: plain commands, then groups.
COMMANDS: dict[str, LazyCommand] = {
    "server": LazyCommand(
        "server",
        "serve",
        "Run the gpudock API server and its reconciler (GPUDOCK_* variables configure it).",
    ),
    "login": LazyCommand(
        "users", "login", "Check a token against the server and save both for later commands."
    ),
    "whoami": LazyCommand("users", "whoami", "Show the user the configured token belongs to."),
    "gpus": LazyCommand(
        "gpus",
        "list_gpus",
        "GPU models in the cluster: memory, free of total, hosts, share capacity (GPUs' worth "
        "free for shares, the largest share one GPU takes now), price.",
    ),
    "hosts": LazyCommand(
        "hosts",
        "app",
        "Hosts and their GPUs, with the instance holding each GPU; add|list|label|drain|"
        "remove|kept hosts with agents (admin).",
    ),
    "ssh": LazyCommand(
        "ssh", "ssh", "Open a shell (or run CMD) in an instance through the SSH gateway."
    ),
    "ssh-config": LazyCommand(
        "ssh",
        "ssh_config",
        "Print ~/.ssh/config entries for your instances (append them: >> ~/.ssh/config).",
    ),
    "open": LazyCommand(
        "services",
        "open_service",
        "Print an instance's service URL (JupyterLab…) with a new link token.",
    ),
    "doctor": LazyCommand(
        "doctor", "doctor", "Diagnose driver, GPUs, CUDA and torch; exit 1 when problems are found."
    ),
    "users": LazyCommand("users", "app", "Users: create, list, disable, enable, delete (admin)."),
    "tokens": LazyCommand(
        "tokens", "app", "Your API tokens: named, optionally expiring, revocable."
    ),
    "instances": LazyCommand("instances", "app", "GPU instances (containers with GPUs)."),
    "keys": LazyCommand("keys", "app", "Your SSH public keys (for `ssh` into your instances)."),
    "images": LazyCommand("images", "app", "Container images: catalog, builds, validation."),
    "billing": LazyCommand("billing", "app", "Your balance, ledger and usage."),
    "notifications": LazyCommand(
        "notifications", "app", "What gpudock tells you: the list, email, deliveries, GPU watches."
    ),
    "webhooks": LazyCommand(
        "notifications", "webhooks_app", "Webhooks: signed JSON for each notification."
    ),
    "admin": LazyCommand("billing", "admin_app", "Administration: prices and top-ups (admin)."),
    "env": LazyCommand(
        "doctor", "env_app", "Reproduce this environment, or check a machine meets needs."
    ),
    "agent": LazyCommand(
        "agent", "app", "Run on each GPU host: enroll with a server (join), keep its link (run)."
    ),
    "scheduler": LazyCommand(
        "scheduler", "app", "Run the placement core locally: trace replays and evaluator plug-in."
    ),
}


def load_command(name: str) -> TyperCommand | TyperGroup:
    """The real click command `name` stands for, importing its module now."""
    spec = COMMANDS[name]
    found = getattr(importlib.import_module(f"{COMMANDS_PACKAGE}.{spec.module}"), spec.attribute)
    if name == "admin":
        _attach_health(found)
    if isinstance(found, typer.Typer):
        group = typer.main.get_group(found)
        group.name = name
        return group
    holder = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    holder.command(name)(found)
    command = typer.main.get_command(holder)
    assert isinstance(command, TyperCommand)
    return command


def _attach_health(admin_app: typer.Typer) -> None:
    """`gpudock admin` also holds the GPU-health commands, which live apart from billing."""
    health = importlib.import_module(f"{COMMANDS_PACKAGE}.health")
    if any(info.name == "gpus" for info in admin_app.registered_groups):
        return
    admin_app.add_typer(health.gpus_app, name="gpus")
    admin_app.command("reliability")(health.reliability)


class CliGroup(TyperGroup):
    """Loads each command when it is asked for, and turns every CliError raised
    below it into a red message and its exit code."""

    listing = False  # True while the help text is written: summaries, no imports

    def list_commands(self, ctx: Any) -> list[str]:  # Any: Typer's Context class is private
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> TyperCommand | TyperGroup | None:
        if cmd_name not in COMMANDS:
            return None
        if self.listing:
            summary = COMMANDS[cmd_name].summary
            return TyperCommand(cmd_name, help=summary, short_help=summary)
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False

    def invoke(self, ctx: Any) -> Any:
        from gpudock.cli.failures import CliError

        try:
            return super().invoke(ctx)
        except CliError as exc:
            output.print_error(exc.message, exc.hint)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    name="gpudock",
    cls=CliGroup,
    help="gpudock: GPU containers on your own servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold API tokens
)


@app.callback()
def _commands(
    lang: str | None = typer.Option(
        None,
        "--lang",
        metavar="LANG",
        help="Language of the server's messages: en or zh-CN (default: LC_ALL, LC_MESSAGES "
        "or LANG).",
    ),
) -> None:
    """The commands come from COMMANDS, when they are asked for; --lang is read by
    the API client (`gpudock.cli.client.accept_language`)."""


def main() -> None:
    app()
