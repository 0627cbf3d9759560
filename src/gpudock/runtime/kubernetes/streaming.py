"""A data volume copied between two nodes by streaming it: what a claim on
node-local storage needs, since it can be mounted only on its own node.

One holder pod on each node mounts its claim (the source read-only); the
server runs `tar` in both through pod exec and relays the archive from one
to the other, reporting progress against the source's size (`du`). The
target is emptied first, so a copy cut short starts over; `tar` keeps
owners, modes, times and links. The server carries the bytes, as it does
for agent hosts that cannot reach each other.

A holder that does not run within the start timeout (its node is not Ready,
its claim cannot be mounted there) is a `RuntimeUnavailable` with the
kubelet's words, so the move waits and says why.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import ExecStream
from gpudock.runtime.kubernetes import copies
from gpudock.runtime.kubernetes.exec import PodExecs
from gpudock.runtime.kubernetes.pods import KubePods

CHUNK = 1 << 20
SEND = ["tar", "-C", "/from", "-cf", "-", "."]
RECEIVE = [
    "sh",
    "-c",
    "find /to -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {} + && tar -C /to -xpf -",
]


@dataclass(frozen=True)
class Side:
    claim: str
    node: str


class ClaimStreams:
    def __init__(self, pods: KubePods, execs: PodExecs, copy_timeout_s: float) -> None:
        self._pods, self._execs, self._copy_timeout_s = pods, execs, copy_timeout_s

    def copy(
        self,
        source: Side,
        target: Side,
        *,
        image: str,
        helper_name: str,
        labels: dict[str, str],
        on_progress: Callable[[int, int], None] | None,
    ) -> int:
        """Stream `source` into `target`; the bytes the source holds."""
        sender = copies.holder_pod(
            f"{helper_name}-from", labels, image, source.claim, "/from", source.node
        )
        receiver = copies.holder_pod(
            f"{helper_name}-to", labels, image, target.claim, "/to", target.node
        )
        held: list[tuple[str, str]] = []
        try:
            for manifest in (sender, receiver):
                meta = manifest["metadata"]
                held.append((meta["namespace"], meta["name"]))
                self._pods.hold(manifest, f"the copy of {source.claim} to node {target.node}")
            return self._relay(held[0], held[1], on_progress)
        finally:
            for namespace, name in held:
                self._pods.remove_pod(namespace, name)

    def _relay(
        self,
        sender: tuple[str, str],
        receiver: tuple[str, str],
        on_progress: Callable[[int, int], None] | None,
    ) -> int:
        sized = self._execs.run(*sender, ["du", "-sb", "/from"], b"", 300.0)
        total = int(sized.output.split(b"\t", 1)[0] or 0) if sized.exit_code == 0 else 0
        out = self._execs.open(*sender, SEND, tty=False, env={})
        into = self._execs.open(*receiver, RECEIVE, tty=False, env={})
        deadline = time.monotonic() + self._copy_timeout_s
        done = 0
        try:
            for stream in (out, into):
                stream.sock.setblocking(True)
                stream.sock.settimeout(max(1.0, deadline - time.monotonic()))
            while chunk := out.sock.recv(CHUNK):
                into.sock.sendall(chunk)
                done += len(chunk)
                if on_progress is not None and total:
                    on_progress(min(done, total), total)
            into.sock.shutdown(socket.SHUT_WR)
            _read_all(into)  # to its end: the receiver has unpacked everything
            sent = self._execs.finish(out.exec_id, 30.0)
            received = self._execs.finish(into.exec_id, 30.0)
            said = _read_all(out, errors=True) + _read_all(into, errors=True)
        except TimeoutError as exc:
            raise RuntimeFailure(f"the copy ran past {self._copy_timeout_s:g} s") from exc
        finally:
            for stream in (out, into):
                for sock in (stream.sock, stream.err_sock):
                    with contextlib.suppress(OSError, AttributeError):
                        sock.close()  # type: ignore[union-attr]
        if sent != 0 or received != 0:
            raise RuntimeFailure(
                f"the copy failed (tar exit codes {sent} and {received}): {said[-500:]!r}"
            )
        if on_progress is not None:
            on_progress(total, total)
        return total


def _read_all(stream: ExecStream, *, errors: bool = False) -> bytes:
    """What is left to read on the stream (its stderr with `errors`)."""
    sock = stream.err_sock if errors else stream.sock
    if sock is None:
        return b""
    read = b""
    with contextlib.suppress(OSError):
        sock.setblocking(True)
        sock.settimeout(5.0)
        while chunk := sock.recv(65536):
            read += chunk
    return read
