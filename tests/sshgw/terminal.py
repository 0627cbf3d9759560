"""The OpenSSH client on a pseudo-terminal of ours, driven the way a person would."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

DEADLINE_S = 20.0


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Terminal:
    def __init__(self, argv: list[str], rows: int = 24, cols: int = 80) -> None:
        self._master, slave = os.openpty()
        _set_size(slave, rows, cols)
        env = {**os.environ, "TERM": "xterm"}
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.output = b""
        self._seen = 0  # what `expect` has consumed

    def send(self, data: bytes) -> None:
        os.write(self._master, data)

    def expect(self, pattern: bytes, deadline_s: float = DEADLINE_S) -> re.Match[bytes]:
        """Wait until PATTERN (a regex) shows up in output not yet matched."""
        found = self.search(pattern, deadline_s)
        if found is None:
            pytest.fail(f"no {pattern!r} in {deadline_s} s; the terminal shows {self.output!r}")
        return found

    def search(self, pattern: bytes, deadline_s: float) -> re.Match[bytes] | None:
        regex = re.compile(pattern)
        deadline = time.monotonic() + deadline_s
        while True:
            found = regex.search(self.output, self._seen)
            if found:
                self._seen = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._read(left)

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self._master], [], [], min(timeout, 0.5))
        if ready:
            try:
                self.output += os.read(self._master, 65536)
            except OSError:  # the client exited and closed its side
                time.sleep(0.05)

    def resize(self, rows: int, cols: int) -> None:
        _set_size(self._master, rows, cols)
        self.process.send_signal(signal.SIGWINCH)

    def wait(self, deadline_s: float = DEADLINE_S) -> int:
        deadline = time.monotonic() + deadline_s
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail(f"ssh did not exit in {deadline_s} s; it shows {self.output!r}")
            self._read(0.1)
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self._master)
