"""Throwaway check containers (`Runtime.run_once`): the validation gate's smoke tests."""

from __future__ import annotations

import docker

from gpudock.runtime.base import ExecResult
from gpudock.runtime.docker.translate import tar_of, translated


def run_once(
    api: docker.APIClient,
    image: str,
    command: list[str],
    files: dict[str, bytes],
    *,
    timeout_s: float,
) -> ExecResult:
    """Run `command` in a new container of `image` with no network, `files`
    written first (mode 0755); its exit code and output."""
    with translated(f"run a check in {image}"):
        created = api.create_container(
            image,
            command,
            labels={"gpudock.check": "1"},
            host_config=api.create_host_config(network_mode="none"),
        )
        container = str(created["Id"])
        try:
            for path, data in files.items():
                directory, _, name = path.rpartition("/")
                api.put_archive(container, directory or "/", tar_of({name: data}, 0o755))
            api.start(container)
            status = api.wait(container, timeout=timeout_s)
            output = api.logs(container, stdout=True, stderr=True)
        finally:
            api.remove_container(container, force=True)
    return ExecResult(exit_code=int(status.get("StatusCode", 1)), output=bytes(output))
