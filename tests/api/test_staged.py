"""The staged start (`api/staged.py`): live at once, ready once the app is loaded.

A real uvicorn on a free port in a thread, the real app over SQLite; the load
is held back by an event the test releases, so "before it is ready" is a state
the test controls, not a race it hopes to win.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from fastapi import FastAPI

from gpudock.api.app import create_app
from gpudock.api.staged import StagedApp
from gpudock.errors import InvalidRequest
from gpudock.platform import Platform
from tests.support.cli import wait_until_started
from tests.support.platforms import PlatformFactory

DEADLINE_S = 30.0


@contextmanager
def serving(staged: StagedApp) -> Iterator[str]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(staged, log_level="warning", lifespan="on"))
    staged.on_failure = lambda _exc: setattr(server, "should_exit", True)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]})
    thread.start()
    try:
        wait_until_started(server, thread)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=DEADLINE_S)
        listener.close()
    assert not thread.is_alive(), "the server did not shut down"


def held_back(release: threading.Event, load: Callable[[], FastAPI]) -> Callable[[], FastAPI]:
    def load_when_released() -> FastAPI:
        assert release.wait(DEADLINE_S), "the test never released the load"
        return load()

    return load_when_released


def request_in_background(url: str, headers: dict[str, str]) -> tuple[threading.Thread, list]:
    answers: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: answers.append(httpx.get(url, headers=headers, timeout=DEADLINE_S))
    )
    thread.start()
    return thread, answers


def wait_until_waiting(staged: StagedApp, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while staged.waiting < count:
        assert time.monotonic() < deadline, "the request never reached the server"
        time.sleep(0.01)


def admin_headers(platform: Platform) -> dict[str, str]:
    assert platform.admin_token_path is not None
    return {"Authorization": f"Bearer {platform.admin_token_path.read_text().strip()}"}


def test_live_at_once_and_a_request_before_ready_waits_for_the_app(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory()
    release = threading.Event()
    readied: list[float | None] = []  # what `on_ready` saw (the CLI settles the heap there)
    staged = StagedApp(
        held_back(release, lambda: create_app(platform, run_reconciler=False)),
        on_ready=lambda: readied.append(staged.ready_after_s),
    )
    with serving(staged) as url:
        assert httpx.get(url + "/healthz").json() == {"status": "ok"}
        assert readied == []
        loading = httpx.get(url + "/readyz")
        assert (loading.status_code, loading.json()) == (503, {"status": "loading"})
        thread, answers = request_in_background(url + "/api/v1/gpus", admin_headers(platform))
        wait_until_waiting(staged, 1)

        release.set()
        thread.join(DEADLINE_S)
        assert answers[0].status_code == 200
        assert {gpu["model"] for gpu in answers[0].json()} == {"A100-80GB", "RTX4090-24GB"}
        assert httpx.get(url + "/readyz").json() == {"status": "ready"}
        assert staged.ready_after_s is not None and staged.failure is None
        assert readied == [staged.ready_after_s]  # once, when ready


def test_a_failed_load_answers_the_waiting_requests_with_the_reason(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory()
    release = threading.Event()
    failures: list[BaseException] = []

    def fail() -> FastAPI:
        raise InvalidRequest("bad fleet spec part '3xA100'")

    staged = StagedApp(held_back(release, fail))
    with serving(staged) as url:
        staged.on_failure = failures.append  # instead of stopping the server: it is asked below
        thread, answers = request_in_background(url + "/api/v1/gpus", admin_headers(platform))
        wait_until_waiting(staged, 1)
        release.set()
        thread.join(DEADLINE_S)

        assert answers[0].status_code == 503
        error = answers[0].json()["error"]
        assert error["code"] == "server_not_started"
        assert "the server failed to start: bad fleet spec part '3xA100'" in error["message"]
        ready = httpx.get(url + "/readyz")
        assert (ready.status_code, ready.json()["status"]) == (503, "failed")
        assert [str(exc) for exc in failures] == ["bad fleet spec part '3xA100'"]


def test_a_service_hosts_probe_paths_are_not_the_servers(
    platform_factory: PlatformFactory,
) -> None:
    """With a service domain, /healthz on <service>-<instance>.<domain> belongs to
    the instance: it waits for the proxy like any request, it is not answered."""
    platform = platform_factory()
    release = threading.Event()
    load = held_back(release, lambda: create_app(platform, run_reconciler=False))
    staged = StagedApp(load, service_domain="svc.example")
    with serving(staged) as url:
        own = httpx.get(url + "/healthz", headers={"Host": "svc.example"})
        assert own.status_code == 200  # the domain itself is not a service host
        thread, _answers = request_in_background(
            url + "/healthz", {"Host": "jupyter-i-0123456789.svc.example"}
        )
        wait_until_waiting(staged, 1)
        release.set()
        thread.join(DEADLINE_S)
