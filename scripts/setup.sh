#!/usr/bin/env bash
# Install and start what gpudock needs on a Debian machine, as root. Idempotent.
#   scripts/setup.sh            Docker Engine, debootstrap, the Python venv, the base image
#   scripts/setup.sh --tests    the same plus PostgreSQL, the OpenSSH client, Chromium and the
#                               services image (JupyterLab, TensorBoard) for the suite
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[ "${1:-}" = "--tests" ] && with_tests=1

packages=(docker.io debootstrap ca-certificates curl openssh-client)  # ssh, ssh-keygen: the demo's key
packages+=(xfsprogs iptables)  # an XFS data root with quotas (system-disk sizes); the host firewall
[ $with_tests = 1 ] && packages+=(postgresql openssh-client rsync btrfs-progs)  # rsync: SSH tests; btrfs: a capped engine
[ $with_tests = 1 ] && packages+=(iproute2 util-linux)  # ip, nsenter: the agent tests' hosts as network namespaces
# The console's browser tests drive Debian's Chromium through Playwright (never `playwright install`).
[ $with_tests = 1 ] && packages+=(chromium fonts-noto-cjk)
python3 -c 'import venv, ensurepip' 2>/dev/null || packages+=(python3-venv)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Debian's kubectl (package kubernetes-client) drives the fake Kubernetes API server
# in tests/support/kube_fake. It is unpacked beside the system rather than installed:
# another package (e.g. a cloud SDK's kubectl) may already own /usr/bin/kubectl.
if [ $with_tests = 1 ] && [ ! -x /opt/debian-kubectl/usr/bin/kubectl ]; then
    echo "==> unpacking Debian's kubernetes-client into /opt/debian-kubectl"
    deb_dir=$(mktemp -d)
    download() { (cd "$deb_dir" && chmod 777 . && apt-get download -q kubernetes-client); }
    download || { apt-get update -q && download; }
    dpkg -x "$deb_dir"/kubernetes-client_*.deb /opt/debian-kubectl
    rm -rf "$deb_dir"
fi

# The engine caps a container's system disk (`--storage-opt size=`) only where its
# storage driver can: overlay2 over XFS mounted with pquota. When this script
# starts dockerd and the kernel has XFS quotas, its data root is such a file
# system in a sparse file; otherwise (GPUDOCK_DOCKER_QUOTA=0, or no XFS quotas,
# as on these CI machines) gpudock's watchdog enforces system-disk sizes.
# (btrfs with quotas also caps, but its cleaner spends seconds of CPU per
# removed container: not a data root for a busy host.)
quota_data_root() {
    local root=/var/lib/gpudock/docker image=/var/lib/gpudock/docker.xfs
    mountpoint -q "$root" && { echo "$root"; return 0; }
    mkdir -p "$root"
    [ -f "$image" ] || { truncate -s "${GPUDOCK_DOCKER_DISK_SIZE:-64G}" "$image" && mkfs.xfs -q "$image" >&2; }
    if ! mount -o loop,pquota "$image" "$root" 2>/dev/null; then
        rm -f "$image"  # this kernel has no XFS quotas
        return 1
    fi
    echo "$root"
}

if ! docker info >/dev/null 2>&1; then
    echo "==> starting dockerd"
    dockerd_args=()
    if [ "${GPUDOCK_DOCKER_QUOTA:-1}" = 1 ]; then
        if root=$(quota_data_root); then
            dockerd_args+=(--data-root "$root")
            echo "==> dockerd's data root is XFS with project quotas: $root"
        else
            echo "==> no XFS quotas in this kernel: system disks are watched, not capped"
        fi
    fi
    (setsid dockerd "${dockerd_args[@]}" >/var/log/gpudock-dockerd.log 2>&1 &)
    for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { tail -20 /var/log/gpudock-dockerd.log; echo "dockerd did not start"; exit 1; }
fi

if [ ! -x .venv/bin/gpudock ] || [ pyproject.toml -nt .venv/.installed ]; then
    echo "==> installing gpudock into .venv"
    [ -d .venv ] || python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[dev]'
    touch .venv/.installed
fi

echo "==> base image"
.venv/bin/gpudock images build-base

if [ $with_tests = 1 ]; then
    # JupyterLab and TensorBoard for the service-URL tests; reused while the base
    # image and the recipe are the same, the wheels cached under ~/.cache/gpudock.
    echo "==> services image"
    .venv/bin/gpudock images build-services
fi
