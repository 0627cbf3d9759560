"""Making the root file system: debootstrap fetches a minimal Debian from a
mirror into a directory, its output parsed into `ProgressUpdate`s as it runs.
Needs root and debootstrap on this machine; no registry."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from gpudock.errors import RuntimeFailure
from gpudock.images.base_image.progress import STAGES, ProgressCallback, ProgressUpdate
from gpudock.images.base_image.rootfs import BASE_PACKAGES, SYSTEM_PATH

DEFAULT_MIRROR = "http://deb.debian.org/debian"
TAIL_LINES = 20  # of debootstrap's output, in the error when it fails
STOP_GRACE_S = (10.0, 5.0)  # after SIGTERM, then after SIGKILL

log = logging.getLogger(__name__)


def find_debootstrap() -> str:
    """The debootstrap binary; `RuntimeFailure` saying what to do where it cannot run."""
    binary = shutil.which("debootstrap")
    if binary is None:
        raise RuntimeFailure(
            "debootstrap is not installed (not found on PATH); it builds the base image. "
            "Install it with `apt-get install debootstrap` and retry."
        )
    if os.geteuid() != 0:
        raise RuntimeFailure(
            "debootstrap needs root to build the base image; rerun as root (e.g. with sudo)."
        )
    return binary


def run_debootstrap(
    binary: str, suite: str, mirror: str, rootfs: Path, notify: ProgressCallback
) -> None:
    """Debootstrap `suite` from `mirror` into `rootfs`, reporting progress; stop
    all of it if interrupted. `RuntimeFailure` with its last lines if it fails."""
    command = [
        binary,
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        suite,
        str(rootfs),
        mirror,
    ]
    env = {**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
    env["PATH"] = f"{env.get('PATH', '')}:{SYSTEM_PATH}".lstrip(":")
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,  # its own process group, so all of it can be stopped
    ) as process:
        try:
            assert process.stdout is not None
            for update in parse_debootstrap_output(_recorded(process.stdout, tail)):
                notify(update)
            code = process.wait()
        except BaseException:
            _stop(process)
            raise
    if code != 0:
        last = "\n".join(tail)
        raise RuntimeFailure(
            f"debootstrap failed (exit status {code}) building {suite} from {mirror}. "
            f"Its last {len(tail)} lines:\n{last}",
            exit_status=code,
            output_tail=list(tail),
        )


def remove_build_dir(directory: Path) -> None:
    """Remove a build directory; unmount what an interrupted debootstrap left
    mounted inside it first (/proc, /sys), and keep it if that fails."""
    umount = shutil.which("umount", path=SYSTEM_PATH) or "umount"
    for point in sorted(_mounts_below(directory), key=len, reverse=True):
        subprocess.run([umount, "--lazy", point], check=False, capture_output=True)
    if still := _mounts_below(directory):
        log.error("not removing %s: still mounted there: %s", directory, ", ".join(still))
        return
    shutil.rmtree(directory, ignore_errors=True)
    if directory.exists():
        log.warning("could not remove all of %s", directory)


def _recorded(stream: IO[str], tail: deque[str]) -> Iterator[str]:
    for line in stream:
        line = line.rstrip("\n")
        tail.append(line)
        yield line


def _stop(process: subprocess.Popen[str]) -> None:
    for sig, grace in zip((signal.SIGTERM, signal.SIGKILL), STOP_GRACE_S, strict=True):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _mounts_below(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
        points = [line.split()[1] for line in mounts if line.strip()]
    decoded = (re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), p) for p in points)
    return [p for p in decoded if p == prefix or p.startswith(prefix + "/")]


# -- the output parser (pure) -----------------------------------------------------------

_STAGE_INDEX = {stage: index for index, stage in enumerate(STAGES)}
_PACKAGE_LINE = re.compile(r"^I: (Retrieving|Validating) (\S+) (\S+)$")
_ITEM_LINE = re.compile(r"^I: (Extracting|Unpacking|Configuring) (\S+)\.\.\.$")
_ITEM_STAGES = {"Extracting": "extract", "Unpacking": "install", "Configuring": "configure"}
_PHASE_PREFIXES = (
    ("I: Chosen extractor", "extract"),
    ("I: Installing core packages", "install"),
    ("I: Unpacking required packages", "install"),
    ("I: Unpacking the base system", "install"),
    ("I: Configuring required packages", "configure"),
    ("I: Configuring the base system", "configure"),
)
_SUCCESS_LINE = "I: Base system installed successfully."
_CLOSING_MESSAGES = {
    "resolve": "Resolved the package set",
    "download": "Downloaded {n} packages",
    "extract": "Extracted {n} packages",
    "install": "Unpacked {n} packages",
    "configure": "Configured {n} packages",
}


def parse_debootstrap_output(lines: Iterable[str]) -> Iterator[ProgressUpdate]:
    """ProgressUpdates for debootstrap's (merged stdout and stderr) output, lazily."""
    parser = _DebootstrapParser()
    for line in lines:
        yield from parser.feed(line)


def _classify(line: str) -> tuple[str | None, bool]:
    """The stage a line belongs to (None: the current one), and whether it ends one item."""
    if line == _SUCCESS_LINE:
        return "configure", False
    for prefix, stage in _PHASE_PREFIXES:
        if line.startswith(prefix):
            return stage, False
    if package := _PACKAGE_LINE.match(line):
        return "download", package[1] == "Validating"
    if item := _ITEM_LINE.match(line):
        return _ITEM_STAGES[item[1]], True
    return None, False


class _DebootstrapParser:
    """Turns debootstrap's output, line by line, into ProgressUpdates."""

    def __init__(self) -> None:
        self.stage = STAGES[0]
        self.done = dict.fromkeys(STAGES, 0)
        self.seen = {STAGES[0]}
        self.closed: set[str] = set()
        self.packages: int | None = None

    def feed(self, raw: str) -> list[ProgressUpdate]:
        line = raw.rstrip()
        if not line:
            return []
        stage, counts = _classify(line)
        if stage is None:
            stage = self.stage
            counts = stage == "resolve" and line.startswith("I: ")
        updates = self._advance(stage)
        self.seen.add(stage)
        if counts:
            self.done[stage] += 1
        updates.append(self._update(stage, line.removeprefix("I: ")))
        if line == _SUCCESS_LINE:
            updates += self._close("install", "configure")
        return updates

    def _advance(self, stage: str) -> list[ProgressUpdate]:
        """Moving on past resolve, download or extract closes them: they do not come back."""
        if _STAGE_INDEX[stage] <= _STAGE_INDEX[self.stage]:
            return []
        self.stage = stage
        behind = STAGES[: min(_STAGE_INDEX[stage], _STAGE_INDEX["install"])]
        return self._close(*behind)

    def _close(self, *stages: str) -> list[ProgressUpdate]:
        updates = []
        for stage in stages:
            if stage in self.closed or stage not in self.seen:
                continue
            self.closed.add(stage)
            if stage == "download":
                self.packages = self.done[stage]
            message = _CLOSING_MESSAGES[stage].format(n=self.done[stage])
            updates.append(self._update(stage, message))
        return updates

    def _update(self, stage: str, message: str) -> ProgressUpdate:
        done = self.done[stage]
        total: int | None = None
        if stage in self.closed:
            total = done
        elif stage in ("install", "configure") and self.packages is not None:
            total = max(self.packages, done)  # estimated from the downloaded package count
        return ProgressUpdate(stage, done, total, message)
