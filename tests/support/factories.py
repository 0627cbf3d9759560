"""Test data, made through the same services the API uses."""

from __future__ import annotations

from dataclasses import dataclass

from gpudock.platform import Platform
from gpudock.services.accounts import users


@dataclass(frozen=True)
class Tenant:
    name: str
    token: str
    headers: dict[str, str]


def make_tenant(platform: Platform, name: str, *, admin: bool = False) -> Tenant:
    created = users.create_user(platform.ctx, name, is_admin=admin)
    return Tenant(name, created.token, {"Authorization": f"Bearer {created.token}"})
