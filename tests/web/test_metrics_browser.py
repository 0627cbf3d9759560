"""The instance page's curves in Chromium after a CPU-burning process ran in a
real container: the console, the reconciler and the sampler on the real engine,
GPUs from the simulated fleet's model (docs/monitoring.md)."""

from __future__ import annotations

import time
from pathlib import Path

import docker
import pytest
from playwright.sync_api import expect

from gpudock.platform import Platform
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.metrics.sampling import SamplerState, sample_running
from gpudock.services.metrics.store import Sample
from tests.support.platforms import PlatformFactory
from tests.support.web import PASSWORD
from tests.web.browser import chromium, screenshot_dir, serve

pytestmark = pytest.mark.docker
WAIT_MS = 90_000
BUSY_PERCENT = 50.0  # a busy loop keeps one core near 100 %; anything idle is near 0
SAMPLING_DEADLINE_S = 60.0


@pytest.fixture
def real(docker_platform_factory: PlatformFactory) -> Platform:
    # The server's own sampler waits an hour between rounds: the test takes them.
    platform = docker_platform_factory(stop_timeout_s=1, metrics_interval_s=3600)
    users.create_user(platform.ctx, "alice")
    accounts.set_password(platform.ctx, "alice", PASSWORD)
    return platform


def burn_a_core(engine: docker.DockerClient, platform: Platform, instance_id: str) -> None:
    name = containers.container_name(platform.ctx.cluster_id, instance_id)
    # `timeout` ends it even if the fixture's clean-up never runs.
    engine.containers.get(name).exec_run(
        ["timeout", "300", "sh", "-c", "while :; do :; done"], detach=True
    )


def sample_until_busy(platform: Platform, instance_id: str) -> Sample:
    """Sampler rounds until one sees the busy core: the first reading of a
    container has no CPU figure, and the busy loop needs a moment to start."""
    state = SamplerState()
    deadline = time.monotonic() + SAMPLING_DEADLINE_S
    seen: list[Sample] = []
    while time.monotonic() < deadline:
        seen += [s for s in sample_running(platform.ctx, state) if s.instance_id == instance_id]
        if seen and (seen[-1].cpu_percent or 0) >= BUSY_PERCENT:
            return seen[-1]
    raise AssertionError(f"no busy sample within {SAMPLING_DEADLINE_S} s: {seen}")


def test_the_curves_show_a_busy_core_and_its_simulated_gpu(
    real: Platform, engine: docker.DockerClient, tmp_path: Path
) -> None:
    alice = next(u for u in users.list_users(real.ctx) if u.name == "alice")
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="burner")
    instance_id = actions.create_instance(real.ctx, alice, request).id
    with serve(real) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
        page.goto(f"{url}/login?next=/instances/{instance_id}")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        live = page.locator("#instance-live [data-status]").first
        expect(live).to_have_attribute("data-status", "running", timeout=WAIT_MS)
        expect(page.locator("#no-samples")).to_be_visible()

        burn_a_core(engine, real, instance_id)
        busy = sample_until_busy(real, instance_id)
        assert busy.gpu_utilisation_max is not None and busy.gpu_utilisation_max >= BUSY_PERCENT

        page.reload()
        cpu = page.locator('#chart-cpu [data-series="CPU"]')
        gpu = page.locator('#chart-gpu [data-series="GPU 0"]')
        expect(cpu).to_have_attribute("data-latest", f"{busy.cpu_percent:.2f}")
        expect(gpu).to_have_attribute("data-latest", f"{busy.gpu_utilisation_max:.2f}")
        drawn = page.locator("#chart-gpu g.series polyline, #chart-gpu g.series circle")
        expect(drawn.first).to_be_visible()
        page.click('#instance-metrics a[data-window="1w"]')
        expect(page.locator("#instance-metrics")).to_have_attribute("data-window", "1w")
        expect(page.locator('#chart-gpu [data-series="GPU 0"]')).to_have_attribute(
            "data-latest", f"{busy.gpus[0].utilisation_percent:.2f}"
        )
        page.screenshot(path=screenshot_dir(tmp_path) / "instance-metrics.png", full_page=True)
