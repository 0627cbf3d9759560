"""The `list` commands' one shape: GET a collection, then print it as a table (or,
with --json, as the server's JSON)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text

from gpudock.cli import output
from gpudock.cli.client import Query, connect
from gpudock.cli.output import Item


def show_collection(
    path: str,
    into: type[list[Item]],
    columns: Sequence[str],
    row: Callable[[Item], Sequence[str | Text]],
    *,
    json_output: bool,
    params: Query = None,
    empty: str | None = None,
) -> list[Item]:
    """Print what `GET path` answers, one row per item (`empty` when there is none);
    return the items, for a command that adds a remark below the table."""
    with connect() as client:
        items = client.get(path, into, params=params)
    output.print_listing(items, columns, row, json_output=json_output, empty=empty)
    return items
