"""What an instance becomes on Kubernetes: every manifest passes the
Kubernetes schema (strict), and the pod is sandboxed as the Docker container is."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest

from gpudock.runtime.base import ALLOWED_CAPABILITIES, ContainerSpec
from gpudock.runtime.kubernetes import home, manifests, mig

LABELS = {
    "gpudock.managed": "true",
    "gpudock.cluster": "c0ffee",
    "gpudock.instance": "i-0123456789",
    "gpudock.user": "u1",
    "gpudock.host": "gpu-a",
    "gpudock.gpus": "GPU-1,GPU-2",
    "gpudock.build": "",
}
SPEC = ContainerSpec(
    name="gpudock-c0ffee-i-0123456789",
    hostname="My_Box",
    image="registry.example/team/train:1",
    labels=LABELS,
    env={"NVIDIA_VISIBLE_DEVICES": "GPU-1,GPU-2", "GPUDOCK_GPUS": "GPU-1,GPU-2"},
    gpu_uuids=("GPU-1", "GPU-2"),
    real_gpus=True,
    cpus=7.5,
    memory_mb=65536,
    pids_limit=4096,
    volume_name="gpudock-c0ffee-i-0123456789-data",
    stop_timeout_s=10,
)


def valid(obj: dict[str, object]) -> dict[str, object]:
    kubernetes_validate.validate(obj, "1.30", strict=True)
    return obj


def test_a_gpu_pod_requests_its_gpus_on_the_placed_node_hardened() -> None:
    pod = valid(manifests.pod(SPEC, manifests.PodOptions()))
    spec = pod["spec"]
    container = spec["containers"][0]
    assert spec["nodeName"] == "gpu-a"
    assert spec["restartPolicy"] == "Never" and spec["terminationGracePeriodSeconds"] == 10
    assert spec["automountServiceAccountToken"] is False
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    limits = {"cpu": "7500m", "memory": "65536Mi", "nvidia.com/gpu": "2"}
    assert container["resources"] == {"requests": limits, "limits": limits}
    assert container["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": list(ALLOWED_CAPABILITIES)},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin sets it
    assert container["args"] == ["sleep", "infinity"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == SPEC.volume_name
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16384Mi"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/root/data", "/dev/shm"}
    assert spec["hostname"] != SPEC.hostname and spec["hostname"].startswith("my-box-")


def test_labels_that_cannot_be_label_values_are_kept_as_annotations() -> None:
    pod = manifests.pod(SPEC, manifests.PodOptions())
    meta = pod["metadata"]
    assert meta["namespace"] == "gpudock-c0ffee-u-u1"
    assert "gpudock.gpus" not in meta["labels"]  # commas: not a label value
    assert meta["labels"]["gpudock.instance"] == "i-0123456789"
    assert manifests.gpudock_labels(meta) == LABELS


def test_a_no_gpu_pod_hides_every_gpu_and_a_job_runs_its_command() -> None:
    spec = dataclasses.replace(
        SPEC,
        gpu_uuids=(),
        env={"NVIDIA_VISIBLE_DEVICES": "void"},
        command="python train.py",
    )
    pod = valid(manifests.pod(spec, manifests.PodOptions()))
    container = pod["spec"]["containers"][0]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "tolerations" not in pod["spec"]
    assert container["args"] == ["/bin/sh", "-c", "python train.py"]


def test_claim_namespace_and_isolation_policy_pass_the_schema() -> None:
    options = manifests.PodOptions(storage_class="fast-ssd")
    claim = valid(manifests.claim(SPEC.volume_name, LABELS, 80, options))
    assert claim["spec"]["resources"]["requests"]["storage"] == "80Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["metadata"]["namespace"] == "gpudock-c0ffee-u-u1"
    valid(manifests.namespace("gpudock-c0ffee-u-u1", LABELS))
    policy = valid(manifests.isolation_policy("gpudock-c0ffee-u-u1", LABELS))
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    internet = policy["spec"]["egress"][-1]["to"][0]["ipBlock"]
    assert "169.254.0.0/16" in internet["except"] and "10.0.0.0/8" in internet["except"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("gpudock-c-i-1", "gpudock-c-i-1"), ("Host.Name_1", None), ("x" * 80, None)],
)
def test_names_become_dns_labels(name: str, expected: str | None) -> None:
    made = manifests.kube_name(name)
    assert len(made) <= 63 and manifests._DNS_LABEL.match(made)
    assert made == (expected or made) and (expected is not None or made != name)
    assert manifests.kube_name(name) == made  # stable


def test_state_of_a_pod_and_of_a_stopped_record() -> None:
    pod = manifests.pod(SPEC, manifests.PodOptions())
    pod["metadata"].update(creationTimestamp="2026-01-02T03:04:05Z")
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [{"state": {"running": {"startedAt": "2026-01-02T03:04:09Z"}}}],
    }
    running = manifests.state_of_pod(pod)
    assert running.running and running.id == "gpudock-c0ffee-u-u1/" + SPEC.name
    assert running.started_at is not None and running.started_at.second == 9
    assert running.labels["gpudock.gpus"] == "GPU-1,GPU-2"
    record = manifests.recorded(pod, LABELS)
    record["metadata"]["annotations"][manifests.ANNOTATION_FINISHED] = "2026-01-02T04:00:00Z"
    stopped = manifests.state_of_record(record)
    assert not stopped.running and stopped.status == "exited"
    assert stopped.finished_at is not None and stopped.finished_at.hour == 4


def test_a_share_asks_hami_only_where_it_is_installed() -> None:
    share = dataclasses.replace(SPEC, gpu_uuids=("GPU-1",), share_milli=250, share_memory_mb=20480)
    whole = valid(manifests.pod(share, manifests.PodOptions()))
    assert whole["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpumem" not in whole["spec"]["containers"][0]["resources"]["limits"]
    hami = manifests.PodOptions(hami=True)
    pod = valid(manifests.pod(share, hami))
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpumem"], limits["nvidia.com/gpucores"]) == ("20480", "25")
    record = valid(manifests.recorded(pod, LABELS))
    assert record["data"]["environment"] == (
        'CUDA_DEVICE_MEMORY_LIMIT="20480m"\nCUDA_DEVICE_SM_LIMIT="25"\n'
    )


def test_a_pod_the_cluster_ended_is_a_fault_and_one_that_exited_is_not() -> None:
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}
    assert manifests.fault_of(evicted) == "Evicted: The node was low on memory."
    preempted = {
        "phase": "Failed",
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
        ],
    }
    assert manifests.fault_of(preempted) == "PreemptionByScheduler: PreemptionByScheduler"
    assert manifests.fault_of({"phase": "Failed", "reason": "OutOfnvidia.com/gpu"})
    assert manifests.fault_of({"phase": "Failed"}) is None  # its process exited
    not_now = {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "False"}]}
    assert manifests.fault_of(not_now) is None


def test_a_pod_with_the_home_mounts_its_parts_of_the_claim_after_seeding_it() -> None:
    plain = manifests.pod(SPEC, manifests.PodOptions())
    made = valid(manifests.pod(SPEC, manifests.PodOptions(), with_home=True))
    spec = made["spec"]
    assert isinstance(spec, dict)
    mounts = [(m["mountPath"], m.get("subPath")) for m in spec["containers"][0]["volumeMounts"]]
    assert mounts[:2] == [("/root", "home"), ("/root/data", "data")]  # /root first
    [seed] = spec["initContainers"]
    assert (
        seed["image"] == SPEC.image
        and seed["securityContext"] == (plain["spec"]["containers"][0]["securityContext"])
    )
    assert "nvidia.com/gpu" not in seed["resources"]["limits"]  # seeding needs no GPU
    assert "mv home.new home" in seed["command"][-1]  # whole, or seeded again
    claim = valid(manifests.claim("vol", LABELS, 20, manifests.PodOptions(home=True)))
    assert home.has_home(claim)
    assert not home.has_home(manifests.claim("vol", LABELS, 20, manifests.PodOptions()))


@pytest.mark.parametrize(
    ("milli", "memory_mb", "expected"),
    [
        (125, 10240, "1g.10gb"),  # an eighth: one slice of seven, 10 GB
        (250, 20480, "2g.20gb"),  # a quarter: two slices
        (250, 30000, "3g.40gb"),  # more memory than 2g.20gb has
        (500, 40960, "4g.40gb"),
        (1000, 81920, None),  # nothing free holds a whole card
    ],
)
def test_a_share_takes_the_smallest_mig_profile_that_holds_it(
    milli: int, memory_mb: int, expected: str | None
) -> None:
    allocatable = {
        "cpu": "64",
        "nvidia.com/gpu": "4",
        "nvidia.com/mig-1g.10gb": "3",
        "nvidia.com/mig-1g.10gb+me": "1",
        "nvidia.com/mig-2g.20gb": "1",
        "nvidia.com/mig-3g.40gb": "1",
        "nvidia.com/mig-4g.40gb": "1",
    }
    busy = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "3"}}}]}}
    free = mig.free_slices(allocatable, [])
    chosen = mig.slice_for(free, milli, memory_mb)
    if expected == "1g.10gb":
        assert chosen is not None and chosen.resource == "nvidia.com/mig-1g.10gb"
        # Its three taken by other pods: the media-extension slice is next.
        taken = mig.slice_for(mig.free_slices(allocatable, [busy]), milli, memory_mb)
        assert taken is not None and taken.name == "1g.10gb+me"
    else:
        assert (chosen.name if chosen else None) == expected


def test_a_mig_share_asks_for_its_slice_and_no_whole_gpu() -> None:
    share = dataclasses.replace(SPEC, gpu_uuids=("GPU-1",), share_milli=250, share_memory_mb=20480)
    made = valid(manifests.pod(share, manifests.PodOptions(), mig_slice="nvidia.com/mig-2g.20gb"))
    limits = made["spec"]["containers"][0]["resources"]["limits"]  # type: ignore[index]
    assert limits["nvidia.com/mig-2g.20gb"] == "1" and "nvidia.com/gpu" not in limits
