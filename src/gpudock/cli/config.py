"""Where the CLI finds the server and its token.

Resolution, per value: the environment (`GPUDOCK_URL`, `GPUDOCK_TOKEN`) wins; otherwise
the config file that `gpudock login URL --token T` writes; otherwise the default URL and
no token. The file's token is only sent to the URL it was saved for, so pointing
`GPUDOCK_URL` at another server never leaks it there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "GPUDOCK_URL"
TOKEN_ENV = "GPUDOCK_TOKEN"  # noqa: S105 (the name of a variable)
CONFIG_FILE_MODE = 0o600


class ConfigError(Exception):
    """The config file or a URL cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class Config:
    url: str
    token: str | None
    source: str  # where the token came from: "environment", a file path, or "none"


def config_path() -> Path:
    """`$XDG_CONFIG_HOME/gpudock/config.json`, by default `~/.config/gpudock/config.json`."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "gpudock" / "config.json"


def normalize_url(url: str) -> str:
    """`http(s)://host[:port][/prefix]` without a trailing slash; ConfigError otherwise."""
    cleaned = url.strip().rstrip("/")
    parts = urlsplit(cleaned)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"bad server URL {url!r}: expected e.g. {DEFAULT_URL} or https://gpus.example.com"
        )
    return cleaned


def _read_file(path: Path) -> dict[str, str]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); run `gpudock login URL --token T` to rewrite it"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} should hold a JSON object; run `gpudock login` to rewrite it")
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def load_config() -> Config:
    path = config_path()
    saved = _read_file(path)
    saved_url = normalize_url(saved["url"]) if saved.get("url") else None
    env_url = os.environ.get(URL_ENV)
    url = normalize_url(env_url) if env_url else saved_url or DEFAULT_URL
    env_token = os.environ.get(TOKEN_ENV)
    if env_token:
        return Config(url=url, token=env_token, source="environment")
    if saved.get("token") and saved_url == url:
        return Config(url=url, token=saved["token"], source=str(path))
    return Config(url=url, token=None, source="none")


def save_config(url: str, token: str) -> Path:
    """Write the config file readable by this user only (mode 0600), atomically."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(path.name + ".tmp")
    body = json.dumps({"url": normalize_url(url), "token": token}, indent=2) + "\n"
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, CONFIG_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), CONFIG_FILE_MODE)  # an older file may have other bits
            handle.write(body)
        os.replace(partial, path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from exc
    return path
