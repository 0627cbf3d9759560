"""Human texts in the language Accept-Language asks for; machine fields never change."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpudock.db.models import InstanceEventModel
from gpudock.platform import Platform
from tests.api.test_instances_api import create
from tests.support.factories import Tenant

API = "/api/v1"
ZH = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}


def test_reasons_and_events_read_in_the_asked_language(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    created = create(client, alice, name="train", gpu_count=1)
    platform.reconciler.drain()
    url = f"{API}/instances/{created['id']}"
    english = client.get(url, headers=alice.headers).json()
    chinese = client.get(url, headers={**alice.headers, **ZH}).json()
    assert english["status"] == chinese["status"] == "running"
    assert english["status_reason"].startswith("running on sim0-a100-80gb (1 × A100-80GB")
    assert chinese["status_reason"].startswith("运行于 sim0-a100-80gb（1 × A100-80GB")
    events = client.get(f"{url}/events", headers={**alice.headers, **ZH}).json()
    assert [e["to_status"] for e in events][:2] == ["pending", "creating"]
    assert events[0]["message"] == "等待调度" and events[1]["message"] == "已调度；正在启动容器"
    with platform.ctx.sessions() as session:  # stored once, as id + parameters
        stored = session.query(InstanceEventModel).filter_by(instance_id=created["id"]).all()
    assert stored[-1].message_msg["id"] == "running on {host} ({gpus})"
    assert stored[-1].message.startswith("running on ")


def test_errors_read_in_the_asked_language_with_the_same_code(
    client: TestClient, alice: Tenant
) -> None:
    url = f"{API}/instances/i-0000000000"
    english = client.get(url, headers=alice.headers).json()["error"]
    chinese = client.get(url, headers={**alice.headers, **ZH}).json()["error"]
    assert english["code"] == chinese["code"] == "not_found"
    assert "the console's Instances page or `gpudock instances list`" in english["message"]
    assert chinese["message"].startswith("没有实例 'i-0000000000'")
    bad = client.post(
        f"{API}/instances",
        json={"gpu_count": 9, "gpu_model": "A100-80GB"},
        headers={**alice.headers, **ZH},
    ).json()["error"]
    assert bad["code"] == "invalid_request" and bad["field"] == "gpu_count"
    assert bad["message"].startswith("GPU 数量 9 超过任何主机所有")
