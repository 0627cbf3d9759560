"""`gpudock images build-base`'s progress bars, drawn from a real debootstrap log."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from gpudock.cli.base_image_progress import stage_bars
from gpudock.images.base_image.debootstrap import parse_debootstrap_output
from gpudock.images.base_image.progress import ProgressUpdate

SAMPLE = Path(__file__).parents[1] / "images" / "debootstrap_sample.log"


def test_each_stage_gets_a_bar_with_its_final_count() -> None:
    updates = list(parse_debootstrap_output(SAMPLE.read_text().splitlines()))
    updates.append(ProgressUpdate("import", 9, 9, "Imported gpudock/base:bookworm"))
    out = io.StringIO()
    with stage_bars(Console(file=out, width=120, force_terminal=False)) as show:
        for update in updates:
            show(update)
    drawn = out.getvalue()
    for stage, count in (("resolve", 9), ("download", 8), ("configure", 15), ("import", 9)):
        line = next(line for line in drawn.splitlines()[::-1] if line.startswith(stage))
        assert f"{count}/{count}" in line, line
