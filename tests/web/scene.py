"""A console with something on every page, made through the services: priced
models, a top-up and charges on the ledger, instances running, stopped and
waiting in the queue, their events, an SSH key, a refused and a closed SSH
session, an image marked ✗. The zh-CN crawl and the screenshots look at it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpudock.db.models import UserModel
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.images import catalog as image_catalog
from gpudock.services.instances import actions as instances
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.settings import Settings
from tests.support.billing import price, topup
from tests.support.clocks import FakeClock
from tests.support.key_proof import add_with_proof, make_key
from tests.support.web import PASSWORD, make_user

FLEET = "1x4xA100-80GB,1x2xRTX4090-24GB"
# A catalog image whose CUDA needs a newer driver than the simulated hosts have: ✗.
TOO_NEW = "nvidia/cuda:13.0.0-runtime-ubuntu24.04"


@dataclass(frozen=True)
class Scene:
    platform: Platform
    clock: FakeClock
    running: str  # instance ids
    stopped: str
    waiting: str
    names: frozenset[str]  # what the data calls things: not English to translate


def user_named(platform: Platform, name: str) -> UserModel:
    return next(u for u in users.list_users(platform.ctx) if u.name == name)


def _request(model: str | None, count: int, name: str) -> instances.InstanceRequest:
    return instances.InstanceRequest(gpu_model=model, gpu_count=count, name=name)


def furnish(platform: Platform, clock: FakeClock, keys: Path) -> Scene:
    ctx = platform.ctx
    make_user(platform, "alice")
    accounts.set_password(ctx, users.ADMIN_NAME, PASSWORD)
    alice = user_named(platform, "alice")
    price(platform, "A100-80GB", "7.2")
    price(platform, "RTX4090-24GB", "2.5")
    price(platform, None, "0.1", kind="disk")
    topup(platform, alice, "100")
    key = add_with_proof(ctx, alice, make_key(keys, "alice"), "laptop")
    stopped = instances.create_instance(ctx, alice, _request("RTX4090-24GB", 1, "notebook"))
    platform.reconciler.drain()
    clock.advance(60)
    instances.stop_instance(ctx, alice, stopped.id)
    platform.reconciler.drain()
    running = instances.create_instance(ctx, alice, _request("A100-80GB", 2, "train"))
    platform.reconciler.drain()
    waiting = instances.create_instance(ctx, alice, _request("A100-80GB", 4, "big"))
    platform.reconciler.drain()
    _sessions(platform, alice, key.fingerprint, running.id, stopped.id)
    clock.advance(30)
    platform.reconciler.drain()
    names = {"alice", "admin", "laptop", "notebook", "train", "big", "default"}
    for image in image_catalog.list_images(ctx, None):  # product names, as catalogued
        names |= {w.strip("()").lower() for w in image.name.split()}
    return Scene(platform, clock, running.id, stopped.id, waiting.id, frozenset(names))


def _sessions(
    platform: Platform, alice: UserModel, fingerprint: str, running: str, stopped: str
) -> None:
    ctx = platform.ctx
    refused = ssh_sessions.Attempt(
        login=stopped, client_address="198.51.100.7", fingerprint=fingerprint, instance_id=stopped
    )
    instance = instances.get_instance(ctx, alice, stopped)
    ssh_sessions.record_refusal(ctx, refused, ssh_sessions.not_running_message(instance))
    grant = ssh_sessions.authorize(ctx, running, fingerprint)
    opened = ssh_sessions.open_session(ctx, grant, running, "198.51.100.7")
    ssh_sessions.close_session(ctx, opened, 2048, 1_500_000)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    clock = FakeClock()
    settings = Settings(
        data_dir=tmp_path / "data", simulate=FLEET, runtime="fake", image_pull="never"
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    try:
        yield furnish(platform, clock, tmp_path)
    finally:
        platform.close()
