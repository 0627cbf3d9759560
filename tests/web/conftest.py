"""Console fixtures: the app on the fake runtime, users with passwords, logged-in clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from argon2 import PasswordHasher

from gpudock.platform import Platform
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from tests.support.platforms import PlatformFactory
from tests.support.web import CHEAP, CSRF_FIELD, PASSWORD, Browser, csrf_of, log_in, make_user  # noqa: F401


@pytest.fixture(autouse=True)
def cheap_password_hashing() -> Iterator[None]:
    """argon2's production cost is ~1 s a hash on a busy 2-core runner; the format is the same."""
    accounts.configure_hashing(CHEAP)
    yield
    accounts.configure_hashing(PasswordHasher())


@pytest.fixture
def console(platform_factory: PlatformFactory) -> Platform:
    """A platform on SQLite with the fake runtime; alice, bob and the admin have passwords."""
    platform = platform_factory()
    make_user(platform, "alice")
    make_user(platform, "bob")
    accounts.set_password(platform.ctx, users.ADMIN_NAME, PASSWORD)
    return platform
