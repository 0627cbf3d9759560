"""Shared fixtures: real SQLite and PostgreSQL, the fake or the real runtime."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from gpudock.platform import Platform

POSTGRES_ENV = "GPUDOCK_TEST_POSTGRES_URL"


FLEET = "1x4xA100-80GB,1x2xRTX4090-24GB"


def postgres_admin_url() -> str:
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.fail(
            f"{POSTGRES_ENV} is not set: the test command (scripts/test.sh) starts a local "
            "PostgreSQL and sets it; run the suite through it"
        )
    return url


PlatformFactory = Callable[..., Platform]
