"""Console fixtures: the app on the fake runtime, users with passwords, logged-in clients."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
from argon2 import PasswordHasher
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users

PASSWORD = "correct horse battery"


CHEAP = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF_FIELD.search(html)
    assert found, "no CSRF field on the page"
    return found.group(1)


@dataclass
class Browser:
    """A TestClient that logged in through the form, as a browser would."""

    client: TestClient
    name: str

    def csrf(self, path: str = "/") -> str:
        return csrf_of(self.client.get(path).text)

    def post(self, path: str, data: dict[str, str] | None = None) -> httpx.Response:
        response: httpx.Response = self.client.post(
            path, data={**(data or {}), "csrf_token": self.csrf()}, follow_redirects=False
        )
        return response


def make_user(platform: Platform, name: str, *, admin: bool = False) -> None:
    users.create_user(platform.ctx, name, is_admin=admin)
    accounts.set_password(platform.ctx, name, PASSWORD)


def log_in(platform: Platform, name: str, password: str = PASSWORD) -> Browser:
    client = TestClient(create_app(platform, run_reconciler=False), base_url="http://127.0.0.1")
    token = csrf_of(client.get("/login").text)
    response = client.post(
        "/login",
        data={"username": name, "password": password, "csrf_token": token, "next_url": "/"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    return Browser(client, name)
