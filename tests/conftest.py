"""Shared fixtures: real SQLite and PostgreSQL, the fake or the real runtime."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import psycopg
import pytest
from fastapi.testclient import TestClient

import gpudock.platform
from gpudock.api.app import create_app
from gpudock.db.engine import make_engine, migrate
from gpudock.platform import Platform, open_platform
from gpudock.runtime.base import Runtime
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.fake import FakeRuntime
from gpudock.settings import Settings
from tests.support.databases import PostgresCopies, seed_sqlite
from tests.support.docker import (
    docker_client,
    remove_cluster_objects,
    remove_images_tagged,
    unmount_everything_under,
)
from tests.support.factories import Tenant, make_tenant
from tests.support.platforms import FLEET, POSTGRES_ENV, PlatformFactory, postgres_admin_url  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    # A run stopped by SIGTERM (a timeout, a cancelled job) still tears its
    # fixtures down, so it leaves no containers, mounts or loop devices behind:
    # pytest runs the teardowns it owes when the session ends on an interrupt.
    signal.signal(signal.SIGTERM, _interrupt)


# The slow tier: what starts servers, browsers, fuzzers or netns hosts. Skip it
# while iterating (`scripts/test.sh -m "not slow and not gpu"`); CI runs it all.
_SLOW_MODULE_WORDS = ("browser", "crawl", "fuzz")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.as_posix()
        slow = "/tests/e2e/" in path or item.get_closest_marker("netns") is not None
        if slow or any(word in item.path.stem for word in _SLOW_MODULE_WORDS):
            item.add_marker(pytest.mark.slow)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(autouse=True, scope="session")
def sqlite_from_a_migrated_copy() -> Iterator[None]:
    """A platform opened on a data dir without a database gets a copy of one migrated
    once (`tests.support.databases`) instead of migrating its own from empty."""
    opening = gpudock.platform.open_database

    def open_seeded(settings: Settings) -> Any:
        if not settings.database_url:
            seed_sqlite(settings.data_dir)
        return opening(settings)

    gpudock.platform.open_database = open_seeded
    yield
    gpudock.platform.open_database = opening


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database migrated once per session; each test copies it (fast)."""
    admin = postgres_admin_url()
    name = "gpudock_tmpl_" + uuid.uuid4().hex[:10]
    plain = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin.rpartition("/")
    engine = make_engine(f"{base}/{name}")
    migrate(engine)
    engine.dispose()
    yield name
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_copies(postgres_template: str) -> Iterator[PostgresCopies]:
    copies = PostgresCopies(postgres_admin_url(), postgres_template)
    yield copies
    copies.close()


@pytest.fixture
def postgres_url(postgres_copies: PostgresCopies) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test, dropped afterwards."""
    url = postgres_copies.take()
    yield url
    postgres_copies.give_back(url)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "sqlite":
        return None  # the default: SQLite in the data dir
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def platform_factory(tmp_path: Path) -> Iterator[PlatformFactory]:
    opened: list[Platform] = []

    def make(runtime: Runtime | None = None, **overrides: Any) -> Platform:
        values: dict[str, Any] = {
            "data_dir": tmp_path / f"data{len(opened)}",
            "simulate": FLEET,
            "runtime": "fake",
            "image_pull": "never",
            **overrides,
        }
        platform = open_platform(Settings(**values), runtime=runtime or FakeRuntime())
        opened.append(platform)
        return platform

    yield make
    for platform in opened:
        platform.close()


@pytest.fixture(scope="session")
def engine() -> docker.DockerClient:
    """The suite's Docker Engine, with the base image; fails (never skips) without them."""
    return docker_client()


@pytest.fixture
def docker_platform_factory(
    platform_factory: PlatformFactory, engine: docker.DockerClient, tmp_path: Path
) -> Iterator[PlatformFactory]:
    """Platforms on the real Docker Engine (a `DockerRuntime` unless one is
    given); every container, volume and network of theirs is removed after,
    then the images tagged with a prefix in `remove_images_tagged`."""
    made: list[Platform] = []
    prefixes: set[str] = set()

    def make(
        runtime: Runtime | None = None,
        *,
        remove_images_tagged: tuple[str, ...] = (),
        **overrides: Any,
    ) -> Platform:
        platform = platform_factory(runtime=runtime or DockerRuntime(), **overrides)
        made.append(platform)
        prefixes.update(remove_images_tagged)
        return platform

    yield make
    for platform in made:
        remove_cluster_objects(engine, platform.ctx.cluster_id)
    unmount_everything_under(tmp_path)
    remove_images_tagged(engine, tuple(prefixes))


@pytest.fixture
def real(docker_platform_factory: PlatformFactory) -> Platform:
    """A platform on the real Docker Engine, with the default settings."""
    return docker_platform_factory()


@pytest.fixture
def api(real: Platform) -> TestClient:
    """The API of `real` (the reconciler off: tests drain it)."""
    return TestClient(create_app(real, run_reconciler=False))


@pytest.fixture
def platform(platform_factory: PlatformFactory, database_url: str | None) -> Platform:
    """A platform on the fake runtime, over SQLite and over PostgreSQL."""
    return platform_factory(database_url=database_url)


@pytest.fixture
def client(platform: Platform) -> TestClient:
    # No `with`: the lifespan (and its background reconciler) stays off, so
    # tests drive the reconciler one pass at a time.
    return TestClient(create_app(platform, run_reconciler=False))


@pytest.fixture
def admin(platform: Platform) -> Tenant:
    assert platform.admin_token_path is not None
    token = platform.admin_token_path.read_text().strip()
    return Tenant(name="admin", token=token, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def alice(platform: Platform) -> Tenant:
    return make_tenant(platform, "alice")


@pytest.fixture
def bob(platform: Platform) -> Tenant:
    return make_tenant(platform, "bob")
