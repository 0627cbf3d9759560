#!/usr/bin/env bash
# Check gpudock's Kubernetes backend against a real cluster (kind, k3s, a cloud one):
# the nodes gpudock would take as hosts, then one instance's pod, claim and
# namespace made, stopped (claim kept), started again and removed, by the
# runtime itself. Needs kubectl and this repo's .venv; makes and removes
# objects labelled gpudock.cluster=k8scheck-<random> only.
#   scripts/k8s-check.sh [KUBECONFIG] [IMAGE]   (IMAGE: one the nodes can pull; default debian:bookworm-slim)
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBECONFIG="${1:-${KUBECONFIG:-$HOME/.kube/config}}"
image="${2:-debian:bookworm-slim}"
kubectl version >/dev/null
echo "==> GPU nodes (nvidia.com/gpu allocatable, GFD labels)"
kubectl get nodes -o custom-columns='NODE:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product,DRIVER:.metadata.labels.nvidia\.com/cuda\.driver\.major'
.venv/bin/python - "$KUBECONFIG" "$image" <<'PY'
import secrets, sys
from pathlib import Path
from gpudock.gpu.kubernetes_nodes import KubernetesNodeSource
from gpudock.runtime.base import ContainerSpec
from gpudock.runtime.kubernetes import KubernetesRuntime

kubeconfig, image = Path(sys.argv[1]), sys.argv[2]
hosts = KubernetesNodeSource.connect(kubeconfig, None).discover()
for host in hosts:
    print(f"host {host.name}: {len(host.gpus)} x {host.gpus[0].model}, driver {host.driver_version or '?'}, CUDA {host.cuda_version or '?'}")
runtime = KubernetesRuntime(kubeconfig, start_timeout_s=600)
info = runtime.engine_info()
print(f"cluster {info.server_version}: {info.cpus} CPUs, {info.memory_bytes // 2**30} GiB allocatable")
cluster = "k8scheck-" + secrets.token_hex(3)
labels = {"gpudock.managed": "true", "gpudock.cluster": cluster, "gpudock.instance": "i-check", "gpudock.user": "check"}
if hosts:
    labels["gpudock.host"] = hosts[0].name
spec = ContainerSpec(
    name=f"gpudock-{cluster}-i-check", hostname="check", image=image, labels=labels,
    env={"NVIDIA_VISIBLE_DEVICES": "void"}, gpu_uuids=(), real_gpus=True, cpus=0.5,
    memory_mb=256, pids_limit=256, volume_name=f"gpudock-{cluster}-i-check-data",
)
try:
    runtime.ensure_volume(spec.volume_name, labels, 1)
    state = runtime.start_container(runtime.create_container(spec).id)
    print(f"pod {state.id}: running={state.running} since {state.started_at}")
    stopped = runtime.stop_container(state.id, 5)
    assert stopped is not None and not stopped.running
    assert [v.name for v in runtime.list_volumes(labels)] == [spec.volume_name], "claim not kept"
    print("stopped: pod gone, claim kept")
    state = runtime.start_container(runtime.create_container(spec).id)
    print(f"started again: running={state.running}")
finally:
    runtime.remove_container(spec.name)
    runtime.remove_volume(spec.volume_name)
    runtime.remove_network(f"gpudock-{cluster}-u-check")
print("ok: the Kubernetes backend works on this cluster")
PY
