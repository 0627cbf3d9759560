"""A platform on the fake runtime whose clock (and the runtime's) the test moves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpudock.billing.money import parse_amount
from gpudock.db.models import UserModel
from gpudock.runtime.fake import FakeRuntime
from gpudock.services import billing, users
from gpudock.services.platform import Platform, open_platform
from gpudock.settings import Settings

FLEET = "1x4xA100-80GB,1x2xRTX4090-24GB"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MakePlatform = Callable[..., Platform]


@pytest.fixture
def make_platform(tmp_path: Path, clock: FakeClock) -> Iterator[MakePlatform]:
    opened: list[Platform] = []

    def make(database_url: str | None = None, **overrides: Any) -> Platform:
        values: dict[str, Any] = {
            "data_dir": tmp_path / f"data{len(opened)}",
            "simulate": FLEET,
            "runtime": "fake",
            "image_pull": "never",
            "database_url": database_url,
            **overrides,
        }
        platform = open_platform(Settings(**values), runtime=FakeRuntime(clock=clock), clock=clock)
        opened.append(platform)
        return platform

    yield make
    for platform in opened:
        platform.close()


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    """SQLite; tests that need PostgreSQL too ask for `make_platform(database_url)`."""
    return make_platform()


def admin_of(platform: Platform) -> UserModel:
    return next(u for u in users.list_users(platform.ctx) if u.is_admin)


def new_user(platform: Platform, name: str) -> UserModel:
    return users.create_user(platform.ctx, name).user


def price(platform: Platform, model: str | None, amount: str, kind: str = "gpu") -> None:
    billing.set_price(
        platform.ctx, admin_of(platform), kind, model, parse_amount(amount, allow_zero=True)
    )


def topup(platform: Platform, user: UserModel, amount: str, key: str | None = None) -> None:
    billing.topup(platform.ctx, admin_of(platform), user.name, parse_amount(amount), key)
