"""What the CLI prints: Rich tables for people, the API's raw JSON for scripts.

Tables and messages go to stdout; errors, hints and progress go to stderr, so that
`--json` output can always be piped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

NONE = "—"
STATUS_STYLES = {
    "running": "green",
    "stopped": "dim",
    "failed": "bold red",
    "deleted": "dim",
    "pending": "yellow",
    "creating": "yellow",
    "starting": "yellow",
    "stopping": "yellow",
    "deleting": "yellow",
    "migrating": "magenta",
}


def stdout() -> Console:
    return Console(highlight=False)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """The API's JSON as it came, indented; plain text (no Rich markup or wrapping)."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def print_error(message: str, hint: str | None = None) -> None:
    console = stderr()
    console.print(Text.assemble(("error: ", "bold red"), (message, "red")), soft_wrap=True)
    if hint:
        console.print(Text("hint: " + hint, style="yellow"), soft_wrap=True)


def print_note(message: str) -> None:
    """A remark for a person, on stderr, so that it never mixes into piped output."""
    stderr().print(Text(message, style="yellow"), soft_wrap=True)


def print_message(message: str, style: str | None = None) -> None:
    """One message, unwrapped (terminals wrap it; scripts can match it)."""
    stdout().print(Text(message, style=style or ""), soft_wrap=True)


def table(*columns: str, title: str | None = None) -> Table:
    return Table(*columns, title=title, title_justify="left", header_style="bold")


def add_rows(grid: Table, rows: Iterable[Sequence[str | Text]]) -> None:
    for row in rows:
        grid.add_row(*row)


def show(renderable: Table) -> None:
    stdout().print(renderable)


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def text(value: object) -> str:
    """A cell: None and empty strings as an em dash."""
    if value is None or value == "":
        return NONE
    return str(value)


def memory(memory_mb: int) -> str:
    """GPU memory as the vendors print it: 81920 MB → '80 GB'."""
    gib = memory_mb / 1024
    return f"{gib:.0f} GB" if gib >= 10 else f"{gib:.1f} GB"


def gpus(model: str | None, count: int) -> str:
    return f"{count} × {model}" if count else "no GPU"


def when(value: str | None) -> str:
    """An API timestamp in local time, to the second."""
    if not value:
        return NONE
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
