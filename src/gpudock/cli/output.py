"""What the CLI prints: Rich tables for people, the API's JSON for scripts.

Tables and messages go to stdout; errors, hints and progress go to stderr, so that
`--json` output can always be piped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

NONE = "—"
Item = TypeVar("Item")
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
    "unreachable": "red",
}


def stdout() -> Console:
    return Console(highlight=False)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def print_json(answer: object) -> None:
    """An answer as the server wrote it (models under their JSON names), indented;
    plain text (no Rich markup or wrapping)."""
    from pydantic_core import to_jsonable_python  # only --json needs it: not at start-up

    body = to_jsonable_python(answer, by_alias=True)
    typer.echo(json.dumps(body, indent=2, ensure_ascii=False))


def print_error(message: str, hint: str | None = None) -> None:
    console = stderr()
    console.print(Text.assemble(("error: ", "bold red"), (message, "red")), soft_wrap=True)
    if hint:
        console.print(Text("hint: " + hint, style="yellow"), soft_wrap=True)


def print_answer(
    answer: object,
    json_output: bool,
    message: str,
    *,
    style: str | None = None,
    note: str | None = None,
) -> None:
    """The answer's JSON with --json; otherwise `message` for a person, and a `note`
    on stderr if there is one."""
    if json_output:
        print_json(answer)
        return
    print_message(message, style)
    if note:
        print_note(note)


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


def print_listing(
    items: Sequence[Item],
    columns: Sequence[str],
    row: Callable[[Item], Sequence[str | Text]],
    *,
    json_output: bool = False,
    answer: object = None,
    empty: str | None = None,
) -> None:
    """With --json, the answer's JSON (the items, unless the `answer` around them is
    given); otherwise `empty` when there is nothing (if given), or a table of one
    row per item."""
    if json_output:
        print_json(items if answer is None else answer)
    elif not items and empty:
        print_message(empty)
    else:
        grid = table(*columns)
        add_rows(grid, (row(item) for item in items))
        show(grid)


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


def when(moment: datetime | None) -> str:
    """An API timestamp in local time, to the second (one without a zone is UTC)."""
    if moment is None:
        return NONE
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
