"""The fake Kubernetes API server speaks the wire protocol: the official
client and Debian's kubectl both work against it, and its failures are the
apiserver's `Status` bodies."""

from __future__ import annotations

import json
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.support.kube_fake import FakeKubeCluster, kubectl
from tests.support.kube_fake.cluster import DEBIAN_KUBECTL

DEADLINE_S = 60.0


@pytest.fixture
def cluster() -> Iterator[FakeKubeCluster]:
    with FakeKubeCluster() as made:
        yield made


@pytest.fixture
def core(cluster: FakeKubeCluster, tmp_path: Path) -> client.CoreV1Api:
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig(tmp_path)))
    return client.CoreV1Api(api_client)


def _namespace(name: str, **labels: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _config_map(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


def test_discovery_and_version_as_the_client_reads_them(
    cluster: FakeKubeCluster, tmp_path: Path
) -> None:
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig(tmp_path)))
    assert client.VersionApi(api_client).get_code().git_version.startswith("v1.30")
    groups = client.ApisApi(api_client).get_api_versions()
    assert [g.name for g in groups.groups] == ["networking.k8s.io"]
    resources = client.CoreV1Api(api_client).get_api_resources()
    by_name = {r.name: r for r in resources.resources}
    assert by_name["pods"].namespaced and not by_name["nodes"].namespaced


def test_failures_are_status_bodies_as_the_apiserver_writes_them(
    cluster: FakeKubeCluster,
) -> None:
    headers = {"Authorization": f"Bearer {cluster.token}"}
    with httpx.Client(base_url=cluster.url, headers=headers) as http:
        assert http.post("/api/v1/namespaces", json=_namespace("t1")).status_code == 201
        again = http.post("/api/v1/namespaces", json=_namespace("t1"))
        missing = http.get("/api/v1/namespaces/t1/pods/nope")
        bad_name = http.post("/api/v1/namespaces/t1/configmaps", json=_config_map("Bad_Name"))
        bad_field = http.post(
            "/api/v1/namespaces/t1/pods",
            json={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "imag": "x"}]}},
        )
        no_namespace = http.post("/api/v1/namespaces/nowhere/configmaps", json=_config_map("a"))
        wrong_token = http.get("/api/v1/namespaces", headers={"Authorization": "Bearer wrong"})
    assert again.status_code == 409
    assert again.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'namespaces "t1" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "t1", "kind": "namespaces"},
        "code": 409,
    }
    assert missing.status_code == 404
    assert missing.json()["message"] == 'pods "nope" not found'
    assert missing.json()["details"] == {"name": "nope", "kind": "pods"}
    assert bad_name.status_code == 422 and bad_name.json()["reason"] == "Invalid"
    assert bad_name.json()["details"]["causes"][0]["field"] == "metadata.name"
    assert bad_field.status_code == 422  # the schema (kubernetes-validate, strict)
    assert "'imag' was unexpected" in bad_field.json()["message"]
    assert no_namespace.status_code == 404
    assert no_namespace.json()["message"] == 'namespaces "nowhere" not found'
    assert wrong_token.status_code == 401 and wrong_token.json()["reason"] == "Unauthorized"


def test_label_and_field_selectors(core: client.CoreV1Api) -> None:
    core.create_namespace(_namespace("t1"))
    for name, tier in (("a", "web"), ("b", "db"), ("c", "web")):
        core.create_namespaced_config_map("t1", _config_map(name, tier=tier, **{"x.io/k": name}))

    def names(**query: str) -> list[str]:
        return [m.metadata.name for m in core.list_namespaced_config_map("t1", **query).items]

    assert names(label_selector="tier=web") == ["a", "c"]
    assert names(label_selector="tier!=web") == ["b"]
    assert names(label_selector="tier in (db,web),x.io/k notin (a)") == ["b", "c"]
    assert names(label_selector="!tier") == []
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b", label_selector="tier") == ["a", "c"]


def test_watch_from_a_resource_version_and_410_gone_when_compacted(
    cluster: FakeKubeCluster, core: client.CoreV1Api
) -> None:
    core.create_namespace(_namespace("t1"))
    core.create_namespaced_config_map("t1", _config_map("before"))
    listed = core.list_namespaced_config_map("t1")
    since = listed.metadata.resource_version
    core.create_namespaced_config_map("t1", _config_map("after"))
    core.patch_namespaced_config_map("after", "t1", {"metadata": {"labels": {"seen": "yes"}}})
    events = [
        (e["type"], e["raw_object"]["metadata"]["name"])
        for e in watch.Watch().stream(
            core.list_namespaced_config_map, "t1", resource_version=since, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "after"), ("MODIFIED", "after")]
    assert all(
        int(m.metadata.resource_version) > int(since)
        for m in core.list_namespaced_config_map("t1", field_selector="metadata.name=after").items
    )
    cluster.store.compact()
    with pytest.raises(ApiException) as gone:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, "t1", resource_version=since, timeout_seconds=1
            )
        )
    assert gone.value.status == 410
    assert "too old resource version" in str(gone.value.reason)


def _line(stream: IO[str]) -> str:
    """The next line kubectl prints, within the deadline."""
    readable, _, _ = select.select([stream], [], [], DEADLINE_S)
    assert readable, "kubectl printed nothing"
    return stream.readline().strip()


def test_kubectl_applies_gets_watches_and_deletes(cluster: FakeKubeCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "cm.json"
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "labels": {"v": "1"}},
    }
    manifest.write_text(json.dumps(body))
    kubectl(cluster, tmp_path, "create", "namespace", "demo")
    kubectl(cluster, tmp_path, "apply", "--validate=false", "-n", "demo", "-f", str(manifest))
    found = json.loads(
        kubectl(cluster, tmp_path, "get", "configmap", "cm", "-n", "demo", "-o", "json")
    )
    assert found["metadata"]["labels"] == {"v": "1"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in found["metadata"]["annotations"]

    env = {"KUBECONFIG": str(cluster.kubeconfig(tmp_path)), "HOME": str(tmp_path), "PATH": "/bin"}
    watcher = subprocess.Popen(
        [str(DEBIAN_KUBECTL), "get", "configmaps", "-n", "demo", "-w", "-o", "name"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        assert _line(watcher.stdout) == "configmap/cm"  # the list
        body["metadata"]["labels"] = {"v": "2"}  # type: ignore[index]
        manifest.write_text(json.dumps(body))
        kubectl(cluster, tmp_path, "apply", "--validate=false", "-n", "demo", "-f", str(manifest))
        assert _line(watcher.stdout) == "configmap/cm"  # the change, watched
    finally:
        watcher.kill()
        watcher.wait(timeout=DEADLINE_S)
    patched = cluster.objects("ConfigMap", "demo")[0]
    assert patched["metadata"]["labels"] == {"v": "2"}  # a strategic merge patch
    assert ("PATCH", "/api/v1/namespaces/demo/configmaps/cm") in [
        (m, p.partition("?")[0]) for m, p in cluster.api.requests
    ]
    kubectl(cluster, tmp_path, "delete", "configmap", "cm", "-n", "demo", "--wait=true")
    assert cluster.objects("ConfigMap", "demo") == []
    names = kubectl(cluster, tmp_path, "get", "namespaces", "-o", "name").split()
    assert names == ["namespace/demo"]
    kubectl(cluster, tmp_path, "delete", "namespace", "demo")  # waits until it has gone
    assert cluster.objects("Namespace") == []
