"""Two agent hosts in one process, for the benchmarks of what crosses agent links.

Agents box-a and box-b, both on this machine's Docker Engine, linked over real
TCP on 127.0.0.1 to one server's gateway in this process
(`tests.support.agents.LinkRig`): every link's SSH work shares one Python
process, where on real hosts each end has its own machine.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.agents import LinkRig, join_parts
from tests.support.sshgw import wait_for

from gpudock.platform import open_platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.fake import FakeRuntime
from gpudock.runtime.link import LinkRuntime
from gpudock.services.agents import hosts
from gpudock.settings import Settings


@contextlib.contextmanager
def agent_pair() -> Iterator[tuple[DockerRuntime, LinkRuntime, LinkRuntime]]:
    """The engine both agents drive, and box-a's and box-b's runtimes over their links."""
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
            yield engine, _linked(rig, "box-a"), _linked(rig, "box-b")
        finally:
            rig.stop()
            rig.platform.close()


def _linked(rig: LinkRig, name: str) -> LinkRuntime:
    ctx = rig.platform.ctx
    assert ctx.hosts is not None
    host_id = hosts.get_host(ctx, name).id
    wait_for(lambda: ctx.hosts is not None and ctx.hosts.linked(host_id), f"{name} linked")
    found = ctx.hosts.for_host(host_id)
    assert isinstance(found, LinkRuntime)
    return found
