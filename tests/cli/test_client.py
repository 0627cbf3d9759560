"""The CLI's HTTP client: answers parsed into the server's models, failures as CliError."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest

from gpudock.api.image_schemas import BuildEventPublic
from gpudock.api.schemas import GpuModelPublic, UserPublic
from gpudock.cli import main
from gpudock.cli.client import ApiClient, CliError, NotFoundError, quoted_path

Handler = Callable[[httpx.Request], httpx.Response]
ME = {
    "id": "u-1",
    "name": "alice",
    "is_admin": False,
    "created_at": "2026-12-01T10:00:00Z",
    "state": "active",
    "state_reason": "",
    "state_changed_at": None,
}


def _client(handler: Handler) -> ApiClient:
    return ApiClient("http://gpudock.test", "gpd_x", transport=httpx.MockTransport(handler))


def _answer(status: int, **kwargs: object) -> Handler:
    return lambda _request: httpx.Response(status, **kwargs)


def test_an_answer_is_parsed_into_the_model_named() -> None:
    user = _client(_answer(200, json=ME)).get("/users/me", UserPublic)
    assert isinstance(user, UserPublic)
    assert (user.name, user.created_at.year) == ("alice", 2026)


def test_a_list_is_parsed_into_a_list_of_the_model() -> None:
    model = {"model": "A100-80GB", "memory_mb": 81920, "total": 4, "free": 3}
    answer = [{**model, "hosts": 1, "max_per_host": 4, "price_per_hour": "3.6"}]
    [found] = _client(_answer(200, json=answer)).get("/gpus", list[GpuModelPublic])
    assert (found.model, found.free, found.price_per_hour) == ("A100-80GB", 3, "3.6")


def test_an_answer_that_does_not_fit_its_model_says_where() -> None:
    broken = {key: value for key, value in ME.items() if key != "is_admin"}
    with pytest.raises(CliError) as caught:
        _client(_answer(200, json=broken)).get("/users/me", UserPublic)
    assert caught.value.exit_code == 1
    assert caught.value.message == (
        "the server at http://gpudock.test answered GET /users/me with a body this CLI "
        "cannot read (is_admin: Field required)"
    )
    assert caught.value.hint == "the CLI and the server should be the same gpudock version"


def test_an_answer_that_is_not_json_asks_whether_the_url_is_a_gpudock_server() -> None:
    with pytest.raises(CliError, match="something other than JSON: is that URL a gpudock"):
        _client(_answer(200, text="<html>welcome</html>")).get("/users/me", UserPublic)


def test_an_error_answer_carries_the_servers_message() -> None:
    body = {"error": {"code": "not_found", "message": "no instance 'x'", "field": None}}
    with pytest.raises(NotFoundError) as caught:
        _client(_answer(404, json=body)).get("/instances/x", UserPublic)
    assert caught.value.message == "no instance 'x'"


def test_an_error_answer_of_another_shape_shows_the_status_line() -> None:
    with pytest.raises(CliError) as caught:
        _client(_answer(502, text="upstream down")).get("/users/me", UserPublic)
    assert caught.value.message == "the server answered HTTP 502 Bad Gateway: upstream down"
    assert caught.value.hint == "the server's log says more"


def test_a_stream_yields_each_line_as_its_model() -> None:
    image = {
        "id": "img-1", "reference": "gpudock/alice/x:v1", "name": "x:v1", "description": "",
        "os": "", "python": None, "framework": None, "framework_version": None, "cuda": None,
        "cudnn": None, "min_driver": None, "compute_capabilities": [], "size_bytes": 0,
        "visibility": "private", "origin": "build", "owner_id": "u-1",
    }  # fmt: skip
    lines = [{"log": "Step 1/2 : FROM base"}, {"image": image}]
    body = "".join(json.dumps(line) + "\n" for line in lines)
    client = _client(_answer(200, text=body))
    events = list(client.stream("/images/build", BuildEventPublic, content=b"tar"))
    assert [event.log for event in events] == ["Step 1/2 : FROM base", None]
    assert events[1].image is not None and events[1].image.reference == "gpudock/alice/x:v1"


def test_every_path_segment_is_quoted() -> None:
    assert quoted_path("instances", "a/b c", "events") == "/instances/a%2Fb%20c/events"


def _modules_after(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_the_cli_starts_without_the_server_side() -> None:
    """Every CLI command imports the API's schemas, and with them nothing of the
    server; the placement core (and numpy with it) only when a `gpudock scheduler`
    command runs."""
    loaded = _modules_after(
        "import json, sys\n"
        "from gpudock.cli import main\n"
        "for name in main.COMMANDS:\n"
        "    if name != 'scheduler': main.load_command(name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    assert "gpudock.api.schemas" in loaded and "gpudock.cli.commands.instances" in loaded
    server_side = ("sqlalchemy", "fastapi", "starlette", "uvicorn", "docker", "asyncssh")
    server_side += ("gpudock.services", "gpudock.db", "gpudock.settings", "gpudock.platform")
    server_side += ("gpudock.runtime", "gpudock.scheduler", "numpy")
    heavy = [
        m for m in loaded if m in server_side or m.startswith(tuple(f"{s}." for s in server_side))
    ]
    assert heavy == []


def test_the_command_list_imports_no_command() -> None:
    """`gpudock --help` lists the commands from a table: no command module, no HTTP
    client and no schemas are imported for it."""
    loaded = _modules_after(
        "import json, sys\n"
        "from gpudock.cli.main import app\n"
        "try:\n"
        "    app(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    assert "typer" in loaded
    unneeded = ("httpx", "pydantic", "gpudock.api", "gpudock.cli.client", "gpudock.cli.commands.")
    assert [m for m in loaded if m.startswith(unneeded)] == []


@pytest.mark.parametrize("name", list(main.COMMANDS))
def test_the_listed_summary_is_the_commands_own(name: str) -> None:
    command = main.load_command(name)
    assert command.name == name
    assert main.COMMANDS[name].summary == command.get_short_help_str(limit=500)


@pytest.mark.parametrize(
    ("explicit", "environment", "sent"),
    [
        ("zh-CN", {}, "zh-CN, en;q=0.5"),
        (None, {"LANG": "zh_CN.UTF-8"}, "zh-CN, en;q=0.5"),
        (None, {"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
        (None, {"LC_MESSAGES": "zh_TW"}, "zh-CN, en;q=0.5"),
        (None, {"LANG": "C"}, "en"),
        ("en", {"LANG": "zh_CN.UTF-8"}, "en"),
    ],
)
def test_the_cli_asks_for_the_language_of_lang_or_the_locale(
    monkeypatch: pytest.MonkeyPatch, explicit: str | None, environment: dict[str, str], sent: str
) -> None:
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["accept-language"])
        return httpx.Response(200, json=ME)

    client = ApiClient(
        "http://gpudock.test", "gpd_x", transport=httpx.MockTransport(handler), language=explicit
    )
    client.get("/users/me", UserPublic)
    assert seen == [sent]


def test_a_commands_help_shows_flags_without_a_value() -> None:
    """A flag takes no value, so its help line shows none (Typer 0.29 printed
    `<bool>` after every flag, which reads as `--wait <bool>`)."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(main.app, ["instances", "stop", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    wait_line = next(line for line in result.output.splitlines() if "--wait" in line)
    assert "<" not in wait_line and "Wait until it is done." in wait_line
    assert "[OPTIONS] ID" in result.output
