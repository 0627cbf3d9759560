"""Composition root: database, runtime, GPU source, reconciler — built once.

Importing this module is cheap on purpose: `gpudock server` opens the database
and the GPU source (`open_database`, `default_gpu_source`) and starts listening
before the rest of the server is imported (`api/staged.py`); what
`open_platform` builds is imported when it runs.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpudock.db.engine import make_engine, make_read_sessionmaker, make_sessionmaker, migrate
from gpudock.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from gpudock.api.app import Sidecar
    from gpudock.gpu.base import GpuSource
    from gpudock.reconcile.loop import Reconciler
    from gpudock.runtime.base import Runtime
    from gpudock.runtime.link import HostRuntimes
    from gpudock.services.context import ServiceContext

log = logging.getLogger(__name__)
ADMIN_TOKEN_FILE = "admin.token"  # noqa: S105 (a file name)
SERVER_ID_FILE = "server.id"
_SERVER_ID = re.compile(r"[0-9a-f]{12}")


@dataclass
class Platform:
    ctx: ServiceContext
    reconciler: Reconciler
    admin_token_path: Path | None
    sidecars: list[Sidecar] = field(default_factory=list)

    def start(self) -> None:
        from gpudock.reconcile.garbage import collect_garbage
        from gpudock.services.images import access as image_access

        collect_garbage(self.ctx, at_startup=True)
        image_access.repair_legacy_rows(self.ctx)
        self.reconciler.start()

    def stop(self) -> None:
        """Stop the background passes (the app's lifespan ends with this)."""
        self.reconciler.stop()

    def close(self) -> None:
        self.reconciler.stop()
        self.ctx.sessions.kw["bind"].dispose()


def default_gpu_source(settings: Settings) -> GpuSource:
    if settings.simulate:
        from gpudock.gpu.simulated import SimulatedGpuSource

        return SimulatedGpuSource(settings.simulate)
    if settings.runtime == "kubernetes":
        from gpudock.gpu.kubernetes_nodes import KubernetesNodeSource

        return KubernetesNodeSource.connect(
            settings.kubeconfig, settings.kubernetes_context, settings.kubernetes_gpu_resource
        )
    from gpudock.gpu.nvml import NvmlGpuSource

    return NvmlGpuSource()


def default_runtime(settings: Settings) -> Runtime:
    if settings.runtime == "fake":
        from gpudock.runtime.fake import FakeRuntime

        return FakeRuntime()
    if settings.runtime == "kubernetes":
        from gpudock.runtime.kubernetes import KubernetesRuntime
        from gpudock.runtime.kubernetes.manifests import PodOptions

        return KubernetesRuntime(
            settings.kubeconfig,
            context=settings.kubernetes_context,
            timeout_s=min(settings.runtime_call_timeout_s, 60.0),
            start_timeout_s=settings.kubernetes_start_timeout_s,
            options=PodOptions(
                gpu_resource=settings.kubernetes_gpu_resource,
                storage_class=settings.kubernetes_storage_class,
                image_pull_policy="Never" if settings.image_pull == "never" else "IfNotPresent",
                hami=settings.kubernetes_hami,
                shared_storage=settings.kubernetes_shared_storage,
                home=settings.kubernetes_home,
            ),
            default_disk_gb=settings.default_disk_gb,
            copy_timeout_s=settings.volume_copy_timeout_s,
        )
    from gpudock.runtime.docker import DockerRuntime

    return DockerRuntime(
        settings.docker_host,
        timeout_s=settings.runtime_call_timeout_s,
        pool_size=settings.reconcile_workers + 8,
        volume_root=settings.effective_volume_dir,
        host_firewall=settings.host_firewall,
        copy_timeout_s=settings.volume_copy_timeout_s,
        volume_pool_size=settings.volume_pool_size,
        volume_pool_sizes=(settings.default_disk_gb,),
    )


def open_database(settings: Settings) -> Engine:
    """The data dir made and the database at the newest schema (migrated if not)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = make_engine(settings.effective_database_url)
    migrate(engine)
    return engine


def open_platform(
    settings: Settings,
    *,
    engine: Engine | None = None,
    runtime: Runtime | None = None,
    gpu_source: GpuSource | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Platform:
    """Migrate the database (unless `engine` is one `open_database` made), sync
    the GPU inventory, make sure an admin exists."""
    from gpudock.reconcile.loop import Reconciler
    from gpudock.services.accounts import users
    from gpudock.services.context import ServiceContext, utc_now
    from gpudock.services.fleet import inventory
    from gpudock.services.instances.changes import InstanceChanges

    engine = engine if engine is not None else open_database(settings)
    source = gpu_source or default_gpu_source(settings)
    ctx = ServiceContext(
        settings=settings,
        sessions=make_sessionmaker(engine),
        read_sessions=make_read_sessionmaker(engine),
        runtime=runtime or default_runtime(settings),
        gpu_source=source,
        clock=clock or utc_now,
        lease_owner=server_id(settings.data_dir),
    )
    ctx.memo.get(InstanceChanges).attach(ctx.sessions)  # wakes `--wait`s at a change
    ctx.cluster_id = inventory.ensure_cluster_id(ctx)
    ctx.hosts = _host_runtimes(ctx)
    inventory.sync_inventory(ctx, source.discover())
    inventory.keep_fleet_shape(ctx)
    reconciler = Reconciler(ctx)
    ctx.wake_reconciler = reconciler.wake
    token_path = _write_admin_token(settings.data_dir, users.ensure_admin(ctx))
    return Platform(ctx=ctx, reconciler=reconciler, admin_token_path=token_path)


def _host_runtimes(ctx: ServiceContext) -> HostRuntimes:
    """Every enrolled agent host's runtime, unlinked until its agent dials in: an
    instance on such a host never falls back to this machine's engine."""
    from gpudock.runtime.link import HostRuntimes
    from gpudock.services.agents import hosts as agent_hosts

    settings = ctx.settings
    routed = HostRuntimes(
        ctx.runtime,
        timeout_s=settings.runtime_call_timeout_s,
        copy_timeout_s=settings.volume_copy_timeout_s,
    )
    for host in agent_hosts.list_hosts(ctx):
        routed.know(host.id, host.name)
    return routed


def server_id(data_dir: Path) -> str:
    """This server's lasting id, the owner of its row leases: made once per data
    dir, so a restarted server recognises the leases its previous run left.
    Two servers on one database need two data dirs."""
    path = data_dir / SERVER_ID_FILE
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    if _SERVER_ID.fullmatch(found):
        return found
    made = secrets.token_hex(6)
    path.write_text(made + "\n")
    return made


def _write_admin_token(data_dir: Path, token: str | None) -> Path | None:
    if token is None:
        return None
    path = data_dir / ADMIN_TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    log.info("created the first admin; its API token is in %s", path)  # `server` says it too
    return path
