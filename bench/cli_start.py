"""CLI start-up: `gpudock --help` against a bare Typer app with two empty commands,
run in turn (A B A B …) so that the ratio holds on a machine whose speed drifts.

Usage: .venv/bin/python -m bench.cli_start [--runs 20]
Prints the median CPU and wall seconds of each and their pairwise median ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BARE_TYPER = """
import typer
app = typer.Typer(add_completion=False)
@app.command()
def hello() -> None:
    \"\"\"Say hello.\"\"\"
@app.command()
def bye() -> None:
    \"\"\"Say bye.\"\"\"
app()
"""


def _run(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the child) of one run."""
    before = os.times()
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    gpudock = [str(Path(sys.executable).with_name("gpudock")), "--help"]
    bare = [sys.executable, "-c", BARE_TYPER, "--help"]
    _run(gpudock), _run(bare)  # warm the page cache
    pairs = [(_run(gpudock), _run(bare)) for _ in range(runs)]
    for label, index in (("wall", 0), ("cpu", 1)):
        ours = statistics.median(a[index] for a, _ in pairs)
        base = statistics.median(b[index] for _, b in pairs)
        ratio = statistics.median(a[index] / b[index] for a, b in pairs if b[index] > 0)
        print(f"{label}: gpudock --help {ours:.3f} s, bare Typer {base:.3f} s, ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
