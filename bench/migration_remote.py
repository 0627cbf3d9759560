"""A data volume from one agent host to another vs a plain stream of the same bytes.

Two agent hosts in this process on this machine's engine (`bench.agent_pair`).
Box-a's volume holds MIB of random data.

- moved: `LinkRuntime.copy_volume_to` box-a → box-b (sparse tar, framed and
  hashed, spooled, checked, unpacked: `runtime.transfer`), timed from the call
  to its return.
- baseline, in the same run, over the same two links: `cat` of the same file in
  a helper container on box-a (an exec over its link) piped by this process into
  `cat >` in a helper container on box-b (an exec over its link), timed from the
  first exec to the second's exit.

Each timed leg starts after `sync`, so that neither pays for writing back the
other's data; the order alternates by round (plain first in even rounds).

Usage: .venv/bin/python -m bench.migration_remote [--mib 1024] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import docker
from tests.support.sshgw import wait_for

from bench.agent_pair import agent_pair
from gpudock.runtime.link import LinkRuntime
from gpudock.runtime.transfer import VolumeCopied

IMAGE = "gpudock/base:bookworm"
PIPE = 1 << 18


def _plain(a: LinkRuntime, b: LinkRuntime, sender: str, receiver: str) -> float:
    started = time.perf_counter()
    out = a.open_exec_stream(sender, ["cat", "/v/random.bin"], tty=False, env={})
    into = b.open_exec_stream(receiver, ["sh", "-c", "cat > /v/plain.bin"], tty=False, env={})
    out.sock.setblocking(True)
    into.sock.setblocking(True)
    while data := out.sock.recv(PIPE):
        into.sock.sendall(data)
    into.sock.shutdown(socket.SHUT_WR)
    wait_for(lambda: b.exec_exit_code(into.exec_id) is not None, "the receiving cat", 600)
    return time.perf_counter() - started


def _plain_timed(a: LinkRuntime, b: LinkRuntime, sender: str, receiver: str) -> float:
    os.sync()  # neither leg pays for the other's writeback
    return _plain(a, b, sender, receiver)


def _move_timed(
    a: LinkRuntime, b: LinkRuntime, source: str, target: str
) -> tuple[float, VolumeCopied]:
    os.sync()
    started = time.perf_counter()
    copied = a.copy_volume_to(b, source, target, lambda _: None)
    return time.perf_counter() - started, copied


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    client = docker.from_env()
    with agent_pair() as (engine, a, b):
        helpers = []
        try:
            source, target = "gpudock-bench-from", "gpudock-bench-to"
            for volume in (source, target):
                engine.ensure_volume(volume, {"gpudock.bench": "migration-remote"})
            with (engine.volume_directory(source) / "random.bin").open("wb") as handle:
                for _ in range(args.mib):
                    handle.write(os.urandom(1 << 20))
            for volume in (source, target):
                helpers.append(
                    client.containers.run(
                        IMAGE, ["sleep", "infinity"], detach=True, volumes={volume: {"bind": "/v"}}
                    )
                )
            print(f"load average {os.getloadavg()}; {args.mib} MiB")
            for round_ in range(args.rounds):
                if round_ % 2 == 0:
                    plain = _plain_timed(a, b, helpers[0].id, helpers[1].id)
                moved, copied = _move_timed(a, b, source, target)
                if round_ % 2 == 1:
                    plain = _plain_timed(a, b, helpers[0].id, helpers[1].id)
                print(
                    f"round {round_}: moved {moved:.2f} s ({copied.bytes_total / moved / 2**20:.0f}"
                    f" MiB/s), plain {plain:.2f} s, ratio {moved / plain:.2f}"
                )
        finally:
            for helper in helpers:
                helper.remove(force=True)
            for volume in ("gpudock-bench-from", "gpudock-bench-to"):
                engine.remove_volume(volume)


if __name__ == "__main__":
    main()
