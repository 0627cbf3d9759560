"""Schemathesis over the whole OpenAPI schema of a real `gpudock server`.

The server is the real one (a child process: uvicorn, SQLite, the SSH gateway on
port 0) with the simulated fleet and the fake runtime, so that a run takes
seconds per phase, not minutes of container starts. Schemathesis runs as its
command line does in CI, with every check it has:

- not_a_server_error               no 5xx, whatever the input
- status_code / content_type / response_headers / response_schema_conformance
                                   every answer is one the schema documents
- negative_data_rejection          input the schema forbids is refused (4xx)
- positive_data_acceptance         input the schema allows is accepted
- ignored_auth                     no token or a wrong one is a 401, everywhere
- use_after_free, ensure_resource_availability   (stateful: create → read → delete)
- unsupported_method, allow_header_conformance, missing_required_header

Every check is on (schemathesis' default; `--checks all` on the command line
would also override the per-operation exceptions). The exceptions, each with
the reason the check cannot apply there, are in `schemathesis.toml` beside
this file; a finding is fixed in the server instead.

Two identities: an admin (every phase: examples, coverage, fuzzing, stateful)
and a plain user. The user's run skips the coverage phase: it enumerates the
same input boundaries as the admin's (validation does not depend on who asks),
and on admin routes the user gets a 403 before any input is read.

Bounded and repeatable: deterministic generation, no example database, one
worker, a fixed number of examples per operation.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from tests.support.factories import make_tenant
from tests.support.platforms import PlatformFactory
from tests.support.server_process import ServerProcess

FLEET = "1x4xA100-80GB,1x2xRTX4090-24GB"
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
CONFIG = Path(__file__).with_name("schemathesis.toml")
ROOT = Path(__file__).resolve().parents[2]
MAX_EXAMPLES = 4
RUN_DEADLINE_S = 150


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {  # the fake runtime; the reconciler at its usual pace (a create wakes it)
        "GPUDOCK_RUNTIME": "fake",
        "GPUDOCK_RECONCILE_INTERVAL_S": "2",
        "GPUDOCK_HEALTH_CHECK_INTERVAL_S": "10",
        # The limiter has its own tests (test_rate_limits.py); at fuzzing speed
        # its 429s would stand in for the answers under test (401 without a token).
        "GPUDOCK_RATE_LIMITS_ENABLED": "false",
    }
    server = ServerProcess(tmp_path_factory.mktemp("fuzz"), FLEET, env=env)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def user_token(server: ServerProcess) -> str:
    with server.client() as admin:
        response = admin.post("/users", json={"name": "fuzzer"})
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token


def schemathesis(server: ServerProcess, token: str, *options: str) -> str:
    """Run it against the server; fail with its report unless every check passed."""
    argv = [
        str(SCHEMATHESIS),
        "--config-file",
        str(CONFIG),
        "--no-color",
        "run",
        f"{server.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--max-examples",
        str(MAX_EXAMPLES),
        *options,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # for the hooks module
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_DEADLINE_S
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, f"schemathesis found problems:\n{report[-20_000:]}"
    selected = re.search(r"Selected:\s+(\d+)/(\d+)", report)
    tested = re.search(r"Tested:\s+(\d+)", report)
    assert selected and tested, report[-5_000:]
    assert selected[1] == selected[2] == tested[1], "every operation is tested"
    return report


def test_fuzz_as_a_user(server: ServerProcess, user_token: str) -> None:
    report = schemathesis(server, user_token, "--phases", "examples,fuzzing,stateful")
    assert _links_covered(report) > 0, _stateful_section(report)


def test_fuzz_as_an_admin(server: ServerProcess) -> None:
    report = schemathesis(server, server.admin_token())
    assert "Coverage (in" in report  # the coverage phase ran, not only the others
    assert _links_covered(report) > 0, _stateful_section(report)


def _links_covered(report: str) -> int:
    """How many API links (create → read → stop → delete …) the stateful phase followed."""
    found = re.search(r"API Links:\s+(\d+) covered", report)
    assert found, report[-5_000:]
    return int(found[1])


def _stateful_section(report: str) -> str:
    return report[report.find("Stateful (in") :][:2_000]


# -- what the fuzzer found, pinned as fast tests (each fixed in the server) ---------


@pytest.fixture
def api(platform_factory: PlatformFactory) -> tuple[TestClient, dict[str, str]]:
    platform = platform_factory()
    return TestClient(create_app(platform, run_reconciler=False)), make_tenant(
        platform, "alice"
    ).headers


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/api/v1/images", "GET, POST"),  # Starlette named only the first route's
        ("PATCH", "/api/v1/images/validate", "POST"),  # not also /images/{image_id}'s DELETE
        ("OPTIONS", "/api/v1/instances/i-0000000000", "DELETE, GET"),
        ("PATCH", "/api/v1/admin/prices", "POST, PUT"),
    ],
)
def test_405_names_every_method_of_the_path(
    api: tuple[TestClient, dict[str, str]], method: str, path: str, allow: str
) -> None:
    client, headers = api
    response = client.request(method, path, headers=headers)
    assert response.status_code == 405
    assert response.headers["Allow"] == allow


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        # a body that is not UTF-8 was a 400 the schema did not document
        ("POST", "/api/v1/instances", b"\xff\xfe{", "body"),
        # JSON booleans were read as integers: false → gpu_count 0
        ("POST", "/api/v1/instances", b'{"gpu_count": false}', "gpu_count"),
        # a number was read as a Unix time where the schema says date-time
        ("GET", "/api/v1/billing/usage?to=0.5", None, "to"),
        # blanks around an amount made it longer than the documented maxLength
        ("PUT", "/api/v1/billing/budget", b'{"monthly": "' + b" " * 40 + b'1"}', "monthly"),
        # names the service would refuse are refused by the schema's pattern
        ("POST", "/api/v1/instances/i-0000000000/save-image", b'{"name": "A B"}', "name"),
        # a compute capability that is not X.Y was stored, and GET /images became a 500
        (
            "POST",
            "/api/v1/images",
            b'{"reference": "gpudock/base:bookworm", "name": "x", "compute_capabilities": [""]}',
            "compute_capabilities.0",
        ),
    ],
)
def test_input_the_schema_forbids_is_refused_with_422(
    api: tuple[TestClient, dict[str, str]],
    method: str,
    path: str,
    body: bytes | None,
    field: str,
) -> None:
    client, headers = api
    headers = {**headers, "Content-Type": "application/json"}
    response = client.request(method, path, headers=headers, content=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["field"] == field
