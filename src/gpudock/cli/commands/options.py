"""Options that commands across the CLI share, declared once so they read the same."""

from __future__ import annotations

from typing import Annotated

import typer

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]


def parse_pairs(pairs: list[str], option: str) -> dict[str, str]:
    """`KEY=VALUE` strings (of `option`, e.g. '--env') as a dict; a malformed or
    repeated one is a usage error."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=f"'{option}'")
        if key in parsed:
            raise typer.BadParameter(f"{key} is given twice", param_hint=f"'{option}'")
        parsed[key] = value
    return parsed
