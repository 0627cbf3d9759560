"""Samples through the API, and Prometheus' scrape read by prometheus_client's
own parser (fake runtime, the suite's fleet: 4 × A100-80GB, 2 × RTX4090-24GB)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpudock.api.prometheus import serve_on_own_address
from gpudock.platform import Platform
from tests.api.test_instances_api import API, create
from tests.support.factories import Tenant


def sampled(platform: Platform) -> None:
    platform.reconciler.drain()
    platform.reconciler.make_due("samples")
    platform.reconciler.metrics_tick()


def scrape(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample in the exposition: metric name -> sorted labels -> value."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        found.setdefault(family.name, {})  # a family without samples is still exposed
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[labels] = sample.value
    return found


def test_metrics_needs_an_admin_token(client: TestClient, alice: Tenant) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=alice.headers).status_code == 403


def test_the_scrape_parses_and_counts_the_fleet(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    create(client, alice, name="train", gpu_model="A100-80GB", gpu_count=1)
    create(client, alice, name="waits", gpu_model="A100-80GB", gpu_count=4)  # 3 are free
    sampled(platform)
    response = client.get("/metrics", headers=admin.headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    metrics = scrape(response.text)

    gpus = {dict(k)["use"] + "/" + dict(k)["model"]: v for k, v in metrics["gpudock_gpus"].items()}
    assert gpus == {"free/A100-80GB": 3, "used/A100-80GB": 1, "free/RTX4090-24GB": 2}
    statuses = {dict(k)["status"]: v for k, v in metrics["gpudock_instances"].items()}
    assert (statuses["running"], statuses["pending"], statuses["stopped"]) == (1, 1, 0)
    assert metrics["gpudock_queue_length"] == {(): 1.0}
    assert metrics["gpudock_ssh_sessions"] == {(): 0.0}
    passes = {dict(k)["pass"] for k in metrics["gpudock_reconcile_pass_seconds"]}
    assert {"placement", "samples", "charging"} <= passes
    ((labels, memory),) = metrics["gpudock_instance_memory_bytes"].items()
    assert dict(labels)["owner"] == "alice" and dict(labels)["instance"] == "train"
    assert memory == 64 * 2**20  # the fake engine's default reading
    (gpu_labels,) = metrics["gpudock_instance_gpu_memory_used_mib"]
    assert dict(gpu_labels)["gpu"] == "0" and dict(gpu_labels)["gpu_model"] == "A100-80GB"
    # the sample Grafana dashboard asks only for series the scrape has
    dashboard = (Path(__file__).parents[2] / "deploy/grafana-dashboard.json").read_text()
    asked = set(re.findall(r"gpudock_[a-z_]+", dashboard))
    assert asked and asked <= set(metrics)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_separate_listener_serves_the_same_scrape_without_a_token(
    platform: Platform, client: TestClient, alice: Tenant
) -> None:
    create(client, alice, name="train", gpu_model="A100-80GB", gpu_count=1)
    sampled(platform)
    server = serve_on_own_address(platform.ctx, "127.0.0.1:0")
    try:
        response = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10)
    finally:
        server.shutdown()
        server.server_close()
    assert response.status_code == 200
    assert "train" in {
        dict(k)["instance"] for k in scrape(response.text)["gpudock_instance_memory_bytes"]
    }


def test_instance_metrics_are_the_owners_alone(
    client: TestClient, platform: Platform, alice: Tenant, bob: Tenant
) -> None:
    instance = create(client, alice, name="train", gpu_model="A100-80GB", gpu_count=2)
    sampled(platform)
    url = f"{API}/instances/{instance['id']}/metrics"
    assert client.get(url).status_code == 401
    assert client.get(url, headers=bob.headers).status_code == 404
    assert client.get(f"{API}/metrics/instances", headers=bob.headers).json() == []

    mine = client.get(f"{API}/instances/train/metrics?since=30m", headers=alice.headers)
    assert mine.status_code == 200, mine.text
    (sample,) = mine.json()["samples"]
    assert sample["resolution_s"] == 0 and len(sample["gpus"]) == 2
    (top,) = client.get(f"{API}/metrics/instances", headers=alice.headers).json()
    assert (top["name"], top["gpu_model"]) == ("train", "A100-80GB")


def test_a_bad_since_says_which_forms_it_takes(client: TestClient, alice: Tenant) -> None:
    create(client, alice, name="train", gpu_model="A100-80GB", gpu_count=1)
    response = client.get(f"{API}/instances/train/metrics?since=1y", headers=alice.headers)
    assert response.status_code == 422
    assert "use a number and a unit, m, h, d or w" in response.json()["error"]["message"]
