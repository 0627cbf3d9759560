"""`gpudock instances top` and `gpudock instances metrics` against a real
server (fake runtime), whose samples the test takes itself."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest

from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime, FakeUsage
from gpudock.settings import Settings
from tests.support.cli import FLEET, Invoke, LiveServer, serving


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Platform:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("gpudock-data"),
        simulate=FLEET,
        runtime="fake",
        image_pull="never",
    )
    return open_platform(settings, runtime=FakeRuntime())


@pytest.fixture(scope="module")
def live_server(platform: Platform) -> Iterator[LiveServer]:
    with serving(platform) as server:
        yield server


def take_samples(platform: Platform) -> None:
    platform.reconciler.make_due("samples")
    platform.reconciler.metrics_tick()


def test_top_and_metrics_show_the_instances_samples(gpudock: Invoke, platform: Platform) -> None:
    assert "No running instance has a sample yet" in gpudock("instances", "top", "--once").output
    made = gpudock("instances", "create", "--gpu", "A100-80GB", "--count", "2", "--name", "watch",
                   "--wait", "--json")  # fmt: skip
    assert made.exit_code == 0, made.output
    take_samples(platform)
    runtime = platform.ctx.runtime
    assert isinstance(runtime, FakeRuntime)
    runtime.set_usage(json.loads(made.stdout)["container_id"] or "watch", FakeUsage(
        cpu_total_ns=10**12, memory_bytes=2 * 2**30))  # fmt: skip
    take_samples(platform)

    top = gpudock("instances", "top", "--once")
    assert top.exit_code == 0, top.output
    line = next(line for line in top.stdout.splitlines() if "watch" in line)
    assert "2 × A100-80GB" in line and "2.0 GB" in line and "100 % 100 %" in line  # busy: modelled

    as_csv = gpudock("instances", "metrics", "watch", "--since", "1h", "--csv")
    assert as_csv.exit_code == 0, as_csv.output
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(rows) == 2 and rows[0]["cpu_percent"] == "" and rows[1]["memory_bytes"] == str(2**31)
    assert {"gpu0_utilisation_percent", "gpu1_memory_mb"} <= set(rows[0])
    as_json = json.loads(gpudock("instances", "metrics", "watch", "--json").stdout)
    assert as_json["name"] == "watch" and len(as_json["samples"]) == 2
    table = gpudock("instances", "metrics", "watch")
    assert "watch: 2 samples since" in table.stdout


def test_a_bad_since_is_a_clear_error(gpudock: Invoke) -> None:
    result = gpudock("instances", "metrics", "watch", "--since", "1y")
    assert result.exit_code != 0
    assert "use a number and a unit" in result.output
