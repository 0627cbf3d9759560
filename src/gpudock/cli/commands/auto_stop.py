"""Auto-stop options: `gpudock instances create --idle-stop 30m …` and
`gpudock instances auto-stop ID …` share their parsing here."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

import typer

from gpudock.api.schemas import InstancePublic
from gpudock.cli import output
from gpudock.cli.client import connect, quoted_path
from gpudock.cli.commands.options import JsonFlag

_DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
DURATION_HELP = "a number and a unit: 90s, 30m, 2h, 1d"

IdleStopOpt = Annotated[
    str | None,
    typer.Option(
        "--idle-stop",
        metavar="DURATION",
        help="Stop after this long with every GPU below --idle-below, no SSH session and "
        "no service-URL use (30m, 2h); you are told 10 minutes before.",
    ),
]
IdleBelowOpt = Annotated[
    float | None,
    typer.Option(
        "--idle-below", metavar="PCT", min=0, max=100, help="Idle GPU utilisation, % (default 5)."
    ),
]
StopAtOpt = Annotated[
    str | None,
    typer.Option(
        "--stop-at",
        metavar="TIME",
        help="Stop at this time, e.g. 2026-12-02T03:00 (local unless a zone is given).",
    ),
]
StopAfterOpt = Annotated[
    str | None,
    typer.Option("--stop-after", metavar="DURATION", help="Stop this long from now (2h, 1d)."),
]
StopOnExitOpt = Annotated[
    bool | None,
    typer.Option(
        "--stop-on-exit/--restart-on-exit",
        help="Stop when the main process exits, instead of restarting it "
        "(default: stop for an instance with --command, restart otherwise).",
        show_default=False,
    ),
]


def seconds_of(text: str, option: str) -> int:
    found = _DURATION.fullmatch(text.strip())
    if not found:
        raise typer.BadParameter(f"use {DURATION_HELP}", param_hint=f"'{option}'")
    return int(found.group(1)) * _UNIT_S[found.group(2)]


def moment_of(text: str, option: str) -> str:
    """An RFC 3339 time; one without a zone is local time, as the CLI prints times."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            "use a date and time: 2026-12-02T03:00, or with a zone 2026-12-02T03:00+08:00",
            param_hint=f"'{option}'",
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.isoformat()


def policy_body(
    idle_stop: str | None,
    idle_below: float | None,
    stop_at: str | None,
    stop_after: str | None,
    stop_on_exit: bool | None,
) -> dict[str, object]:
    """The API's auto_stop object; empty when nothing was asked."""
    if stop_at is not None and stop_after is not None:
        raise typer.BadParameter("give --stop-at or --stop-after, not both")
    body: dict[str, object] = {}
    if idle_stop is not None:
        body["idle_after_s"] = seconds_of(idle_stop, "--idle-stop")
    if idle_below is not None:
        body["idle_below_pct"] = idle_below
    if stop_at is not None:
        body["stop_at"] = moment_of(stop_at, "--stop-at")
    if stop_after is not None:
        body["stop_after_s"] = seconds_of(stop_after, "--stop-after")
    if stop_on_exit is not None:
        body["stop_on_exit"] = stop_on_exit
    return body


def change(
    ref: Annotated[str, typer.Argument(metavar="ID", help="Instance id or name.")],
    idle_stop: IdleStopOpt = None,
    idle_below: IdleBelowOpt = None,
    stop_at: StopAtOpt = None,
    stop_after: StopAfterOpt = None,
    stop_on_exit: StopOnExitOpt = None,
    off: Annotated[bool, typer.Option("--off", help="Remove every auto-stop.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Set when a running instance stops by itself (this replaces its policy)."""
    body = policy_body(idle_stop, idle_below, stop_at, stop_after, stop_on_exit)
    if off and body:
        raise typer.BadParameter("--off removes every auto-stop: give it alone")
    if not off and not body:
        raise typer.BadParameter(
            "say when: --idle-stop, --stop-at, --stop-after, --stop-on-exit (or --off)"
        )
    with connect() as client:
        changed = client.put(quoted_path("instances", ref, "auto-stop"), InstancePublic, body)
    summary = changed.auto_stop.summary if changed.auto_stop else "no auto-stop"
    output.print_answer(changed, json_output, f"{changed.name}: {summary}")


def summary_of(instance: InstancePublic) -> str:
    return instance.auto_stop.summary if instance.auto_stop else "none"
