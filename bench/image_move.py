"""A committed system disk from one agent host to another: the whole image vs
only the layers the destination lacks (`agent/image_delta.py`).

Two agents (hosts box-a and box-b) linked to one server's gateway in this
process, over real TCP on 127.0.0.1, both on this machine's Docker Engine
(`tests.support.agents.LinkRig`). The image: the base image plus a commit of a
container that wrote MIB of random data, as a move commits a tenant's
writable layer.

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
import tempfile
import time
from pathlib import Path

import docker
from tests.support.agents import LinkRig, join_parts
from tests.support.sshgw import wait_for

from gpudock.images.base_image import BASE_IMAGE
from gpudock.platform import open_platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.fake import FakeRuntime
from gpudock.runtime.link import LinkRuntime
from gpudock.runtime.transfer import common_bottom
from gpudock.services.agents import hosts
from gpudock.settings import Settings

REPOSITORY = "gpudock-bench/image-move"


def _runtime(rig: LinkRig, name: str) -> LinkRuntime:
    ctx = rig.platform.ctx
    assert ctx.hosts is not None
    wait_for(lambda: ctx.hosts is not None and ctx.hosts.linked(hosts.get_host(ctx, name).id), name)
    found = ctx.hosts.for_host(hosts.get_host(ctx, name).id)
    assert isinstance(found, LinkRuntime)
    return found


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
    with tempfile.TemporaryDirectory(prefix="gpudock-bench-") as workdir:
        settings = Settings(
            data_dir=Path(workdir) / "data",
            runtime="fake",
            simulate="1x1xA100-80GB",
            image_pull="never",
            agent_link_port=0,
            agent_link_host="127.0.0.1",
        )
        rig = LinkRig(open_platform(settings, runtime=FakeRuntime()), Path(workdir))
        engine = DockerRuntime(host_firewall=False)
        rig.start()
        try:
            for agent, host in (("a", "box-a"), ("b", "box-b")):
                url, token = join_parts(hosts.add_host(rig.platform.ctx, host).join_command)
                rig.join(agent, url, token, runtime=engine)
            a, b = _runtime(rig, "box-a"), _runtime(rig, "box-b")
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
            rig.stop()
            rig.platform.close()
            client.images.remove(ref, force=True)


if __name__ == "__main__":
    main()
