"""Options that commands across the CLI share, declared once so they read the same."""

from __future__ import annotations

from typing import Annotated

import typer

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
