"""Throwaway check containers (`Runtime.run_once`): the validation gate's smoke tests.

A check container carries the cluster's labels (`gpudock.managed`,
`gpudock.cluster`) and `gpudock.check=<its time limit in seconds>`, so that
garbage collection can tell one still running from one a crash left behind
(`reconcile.garbage`), and it is removed however the check ends.
"""

from __future__ import annotations

import contextlib

import docker
import docker.errors
import requests.exceptions

from gpudock.runtime.base import (
    LABEL_CHECK,
    LABEL_CLUSTER,
    LABEL_MANAGED,
    ExecResult,
    RuntimeTimeout,
)
from gpudock.runtime.docker.translate import tar_of, timed_out, translated


def check_labels(cluster_id: str, timeout_s: float) -> dict[str, str]:
    return {LABEL_MANAGED: "true", LABEL_CLUSTER: cluster_id, LABEL_CHECK: f"{timeout_s:g}"}


def run_once(
    api: docker.APIClient,
    image: str,
    command: list[str],
    files: dict[str, bytes],
    *,
    timeout_s: float,
    cluster_id: str,
) -> ExecResult:
    """Run `command` in a new container of `image` with no network, `files`
    written first (mode 0755); its exit code and output. `RuntimeTimeout` if
    it runs past `timeout_s`."""
    with translated(f"run a check in {image}"):
        created = api.create_container(
            image,
            command,
            labels=check_labels(cluster_id, timeout_s),
            host_config=api.create_host_config(network_mode="none"),
        )
        container = str(created["Id"])
        try:
            for path, data in files.items():
                directory, _, name = path.rpartition("/")
                api.put_archive(container, directory or "/", tar_of({name: data}, 0o755))
            api.start(container)
            status = _wait(api, container, image, timeout_s)
            output = api.logs(container, stdout=True, stderr=True)
        finally:
            with contextlib.suppress(docker.errors.APIError):
                api.remove_container(container, force=True)
    return ExecResult(exit_code=int(status.get("StatusCode", 1)), output=bytes(output))


def _wait(api: docker.APIClient, container: str, image: str, timeout_s: float) -> dict[str, int]:
    try:
        return dict(api.wait(container, timeout=timeout_s))
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        if not timed_out(exc):
            raise
        raise RuntimeTimeout(
            f"the check in {image} ran past its time limit ({timeout_s:g} s) and was stopped"
        ) from exc
