"""`DockerRuntime.run_once` (the validation gate's throwaway checks) against the
real engine: output and exit code, a time limit reported as such, and cluster
labels that let garbage collection remove a check a crash left, never one
that is still running."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import docker
import pytest

from gpudock.errors import GpudockError, RuntimeUnavailable
from gpudock.platform import Platform
from gpudock.reconcile.garbage import GRACE_S, collect_garbage
from gpudock.runtime.base import LABEL_CHECK, LABEL_CLUSTER, LABEL_MANAGED, RuntimeTimeout
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.docker

BASE = "gpudock/base:bookworm"
CHECK_LIMIT_S = 300.0
EVENT_WAIT_S = 60


def cluster_containers(engine: docker.DockerClient, cluster_id: str) -> list[dict[str, object]]:
    found: list[dict[str, object]] = engine.api.containers(
        all=True, filters={"label": f"{LABEL_CLUSTER}={cluster_id}"}
    )
    return found


def test_a_check_runs_its_files_and_reports_exit_code_and_output(
    real: Platform, engine: docker.DockerClient
) -> None:
    script = b"#!/bin/sh\necho from-the-check; echo to-stderr >&2; exit 3\n"
    result = real.ctx.runtime.run_once(
        BASE, ["/opt/check.sh"], {"/opt/check.sh": script}, 60, cluster_id=real.ctx.cluster_id
    )
    assert result.exit_code == 3
    assert b"from-the-check" in result.output and b"to-stderr" in result.output
    assert cluster_containers(engine, real.ctx.cluster_id) == []  # removed after the check


def test_a_check_past_its_time_limit_is_a_timeout_not_an_unreachable_engine(
    real: Platform, engine: docker.DockerClient
) -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeTimeout, match=r"time limit \(1 s\)") as raised:
        real.ctx.runtime.run_once(BASE, ["sleep", "60"], {}, 1, cluster_id=real.ctx.cluster_id)
    assert not isinstance(raised.value, RuntimeUnavailable)
    assert "unreachable" not in raised.value.message
    assert time.monotonic() - started < 30  # stopped at its limit, not after the sleep
    assert cluster_containers(engine, real.ctx.cluster_id) == []


@pytest.fixture
def running_check(real: Platform, engine: docker.DockerClient) -> Iterator[threading.Thread]:
    """A check running in a thread of its own, returned once its container has started."""
    since = datetime.now(UTC)
    outcome: list[object] = []

    def check() -> None:
        try:
            outcome.append(
                real.ctx.runtime.run_once(
                    BASE, ["sleep", "600"], {}, CHECK_LIMIT_S, cluster_id=real.ctx.cluster_id
                )
            )
        except GpudockError as exc:  # its container was removed under it
            outcome.append(exc)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    filters = {
        "type": "container",
        "event": "start",
        "label": f"{LABEL_CLUSTER}={real.ctx.cluster_id}",
    }
    events = engine.api.events(
        since=since, until=int(time.time()) + EVENT_WAIT_S, filters=filters, decode=True
    )
    assert next(iter(events), None) is not None, "the check did not start"
    yield thread
    for container in cluster_containers(engine, real.ctx.cluster_id):
        engine.api.remove_container(container["Id"], force=True)
    thread.join(EVENT_WAIT_S)
    assert outcome, "the check did not end once its container was gone"


def test_garbage_collection_keeps_a_running_check_and_removes_one_past_its_limit(
    real: Platform, engine: docker.DockerClient, running_check: threading.Thread
) -> None:
    [check] = cluster_containers(engine, real.ctx.cluster_id)
    labels = check["Labels"]
    assert isinstance(labels, dict)
    assert labels[LABEL_MANAGED] == "true" and labels[LABEL_CHECK] == f"{CHECK_LIMIT_S:g}"

    assert collect_garbage(real.ctx) == 0
    assert [c["State"] for c in cluster_containers(engine, real.ctx.cluster_id)] == ["running"]

    clock = FakeClock(datetime.now(UTC))  # the server died, and came back much later
    clock.advance(CHECK_LIMIT_S + GRACE_S + 1)
    real.ctx.clock = clock
    assert collect_garbage(real.ctx) == 1
    assert cluster_containers(engine, real.ctx.cluster_id) == []
    running_check.join(EVENT_WAIT_S)
    assert not running_check.is_alive()
