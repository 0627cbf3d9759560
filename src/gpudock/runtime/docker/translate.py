"""docker-py's answers and errors in gpudock's terms: pure converters from the
engine's JSON to `runtime.base` types, and the one place where docker-py and
requests exceptions become `gpudock.errors`.

Every collaborator of `DockerRuntime` calls the engine inside `translated()`,
so no docker-py exception leaves `gpudock.runtime.docker`.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import docker.errors
import requests.exceptions
import urllib3.exceptions

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.base import ContainerState, ContainerStats, ImageInfo, ImageNotFound

UNREACHABLE_HINT = "is dockerd running and GPUDOCK_DOCKER_HOST right?"


@contextlib.contextmanager
def translated(action: str) -> Iterator[None]:
    """Raise docker-py's errors as `ImageNotFound`, `RuntimeFailure` (the engine
    answered with an error) or `RuntimeUnavailable` (it could not be reached);
    `action` completes "could not …" in the message."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageNotFound(f"could not {action}: {explain(exc)}") from exc
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"could not {action}: {explain(exc)}") from exc
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise RuntimeUnavailable(
            f"could not {action}: the Docker Engine is unreachable ({exc}); {UNREACHABLE_HINT}"
        ) from exc
    except docker.errors.DockerException as exc:
        raise RuntimeUnavailable(f"could not {action}: {exc}; {UNREACHABLE_HINT}") from exc


def explain(exc: docker.errors.APIError) -> str:
    """The engine's own words for an error, where it gave any."""
    return str(exc.explanation or exc)


# How the engine words a registry it could not talk to (Go's net/http and
# Docker's distribution client), as opposed to one that answered "no such image".
_UNREACHABLE_WORDS = (
    "no such host",
    "dial tcp",
    "i/o timeout",
    "connection refused",
    "connection reset",
    "network is unreachable",
    "tls handshake timeout",
    "client.timeout exceeded",
    "context deadline exceeded",
    "temporary failure in name resolution",
    "server misbehaving",
)


def registry_unreachable(detail: str) -> bool:
    """True if the engine's words say it could not reach the registry at all."""
    lowered = detail.lower()
    return any(words in lowered for words in _UNREACHABLE_WORDS)


def timed_out(exc: BaseException) -> bool:
    """True if a call ended because its read timeout passed, not because the
    engine went away. Over a Unix socket docker-py reports a read timeout as a
    `ConnectionError` wrapping urllib3's `ReadTimeoutError`."""
    if isinstance(exc, requests.exceptions.Timeout):
        return True
    return isinstance(exc, requests.exceptions.ConnectionError) and any(
        isinstance(arg, urllib3.exceptions.TimeoutError) for arg in exc.args
    )


def label_filter(labels: dict[str, str]) -> list[str]:
    """The engine's `label` filter for objects carrying every given label."""
    return [f"{key}={value}" for key, value in labels.items()]


def parse_docker_time(value: str | None) -> datetime | None:
    """Docker's RFC 3339 with nanoseconds; its zero time means 'never'."""
    if not value or value.startswith("0001-01-01"):
        return None
    main, _, rest = value.rstrip("Z").partition(".")
    fraction = "".join(ch for ch in rest if ch.isdigit())[:6].ljust(6, "0")
    parsed = datetime.fromisoformat(f"{main}.{fraction}")
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def state_of(attrs: dict[str, Any]) -> ContainerState:
    """A container's state from the engine's inspect answer."""
    state = attrs.get("State") or {}
    return ContainerState(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        running=bool(state.get("Running")),
        status=str(state.get("Status", "")),
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
        started_at=parse_docker_time(state.get("StartedAt")),
        finished_at=parse_docker_time(state.get("FinishedAt")),
        exit_code=state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
    )


def listed_state_of(summary: dict[str, Any]) -> ContainerState:
    """A container's state from one entry of the engine's container list (no
    times but its creation: the list does not carry them)."""
    names = summary.get("Names")
    created = summary.get("Created")
    return ContainerState(
        id=summary["Id"],
        name=names[0].lstrip("/") if names else summary["Id"],
        running=summary.get("State") == "running",
        status=str(summary.get("State", "")),
        labels=dict(summary.get("Labels") or {}),
        created_at=datetime.fromtimestamp(int(created), UTC) if created else None,
    )


def image_info_of(attrs: dict[str, Any]) -> ImageInfo:
    """An image from the engine's inspect answer."""
    config = attrs.get("Config") or {}
    return ImageInfo(
        id=str(attrs["Id"]),
        tags=tuple(attrs.get("RepoTags") or ()),
        labels=dict(config.get("Labels") or {}),
        size_bytes=int(attrs.get("Size") or 0),
        config=dict(config),
        layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
    )


def stats_of(host_config: dict[str, Any], stats: dict[str, Any]) -> ContainerStats | None:
    """A reading from the engine's stats (cgroup v1 or v2); None for the empty
    reading the engine gives for a container that stopped meanwhile."""
    read_at = parse_docker_time(stats.get("read"))
    if read_at is None:
        return None
    memory = stats.get("memory_stats") or {}
    return ContainerStats(
        cpu_total_ns=int(
            ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage") or 0
        ),
        cpu_limit=_cpu_limit(host_config),
        memory_bytes=_memory_in_use(memory),
        memory_limit_bytes=int(host_config.get("Memory") or 0) or None,
        pids=int((stats.get("pids_stats") or {}).get("current") or 0),
        read_at=read_at,
        block_read_bytes=_block_bytes(stats, "read"),
        block_write_bytes=_block_bytes(stats, "write"),
        net_rx_bytes=_network_bytes(stats, "rx_bytes"),
        net_tx_bytes=_network_bytes(stats, "tx_bytes"),
    )


def _block_bytes(stats: dict[str, Any], op: str) -> int:
    """Bytes read or written on every block device (cgroup v1 says "Read",
    v2 "read"); null on engines that do not count."""
    entries = (stats.get("blkio_stats") or {}).get("io_service_bytes_recursive") or []
    return sum(int(e.get("value") or 0) for e in entries if str(e.get("op", "")).lower() == op)


def _network_bytes(stats: dict[str, Any], key: str) -> int:
    networks = stats.get("networks") or {}
    return sum(int((interface or {}).get(key) or 0) for interface in networks.values())


def _cpu_limit(host_config: dict[str, Any]) -> float | None:
    nano = int(host_config.get("NanoCpus") or 0)
    if nano > 0:
        return nano / 1e9
    quota, period = int(host_config.get("CpuQuota") or 0), int(host_config.get("CpuPeriod") or 0)
    return quota / period if quota > 0 and period > 0 else None


def _memory_in_use(memory: dict[str, Any]) -> int:
    """Usage less the reclaimable page cache, as `docker stats` computes it:
    `total_inactive_file` on cgroup v1, `inactive_file` on v2."""
    usage = int(memory.get("usage") or 0)
    detail = memory.get("stats") or {}
    cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    cache = int(cache or 0)
    return usage - cache if cache < usage else usage


def tar_of(files: dict[str, bytes], mode: int) -> bytes:
    """Files as the tar archive the engine's `put_archive` takes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
