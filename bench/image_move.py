"""A committed system disk from one agent host to another: the whole image vs
only the layers the destination lacks (`agent/image_delta.py`).

Two agent hosts in this process on this machine's engine (`bench.agent_pair`).
The image: the base image plus a commit of a container that wrote MIB of random
data, as a move commits a tenant's writable layer.

- whole: `LinkRuntime.copy_image_to` box-a → box-b with nothing left out (what
  every move sent before);
- delta: the same, leaving out the base image's layers, as a move does when the
  destination holds the base image.

Both run in the same rounds, in alternating order. The destination is the same
engine as the source, so its `docker load` finds every layer in its own store
in both legs; the legs differ in what the source hashes and what crosses the
links, which between two real hosts is the network (a real destination loads
the commit's layer in both). Each leg's time is from the call to its return.

Usage: .venv/bin/python -m bench.image_move [--mib 64] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import docker

from bench.agent_pair import agent_pair
from gpudock.images.base_image import BASE_IMAGE
from gpudock.runtime.link import LinkRuntime
from gpudock.runtime.transfer import common_bottom

REPOSITORY = "gpudock-bench/image-move"


def _committed(client: docker.DockerClient, mib: int) -> str:
    container = client.containers.run(BASE_IMAGE, ["sleep", "600"], detach=True)
    try:
        wrote = container.exec_run(["sh", "-c", f"head -c {mib}M /dev/urandom > /root/work.bin"])
        assert wrote.exit_code == 0, wrote.output
        ref = f"{REPOSITORY}:{mib}m"
        container.commit(*ref.split(":"))
        return ref
    finally:
        container.remove(force=True)


def _timed(a: LinkRuntime, b: LinkRuntime, ref: str, omit: list[str]) -> tuple[float, int]:
    os.sync()
    started = time.perf_counter()
    moved = a.copy_image_to(b, ref, omit)
    return time.perf_counter() - started, moved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    client = docker.from_env()
    ref = _committed(client, args.mib)
    try:
        with agent_pair() as (engine, a, b):
            mine, base = engine.image_info(ref), engine.image_info(BASE_IMAGE)
            assert mine is not None and base is not None
            omit = common_bottom(mine.layers, base.layers)
            print(f"load average {os.getloadavg()}; a commit of {args.mib} MiB on {BASE_IMAGE}")
            times: dict[str, list[float]] = {"whole": [], "delta": []}
            for round_ in range(args.rounds):
                order = ("whole", "delta") if round_ % 2 == 0 else ("delta", "whole")
                for leg in order:
                    seconds, moved = _timed(a, b, ref, [] if leg == "whole" else omit)
                    times[leg].append(seconds)
                    print(f"round {round_} {leg}: {moved / 2**20:.1f} MiB in {seconds:.2f} s")
            whole, delta = statistics.median(times["whole"]), statistics.median(times["delta"])
            ratio = delta / whole
            print(f"median whole {whole:.2f} s, delta {delta:.2f} s: delta / whole {ratio:.2f}")
    finally:
        client.images.remove(ref, force=True)


if __name__ == "__main__":
    main()
