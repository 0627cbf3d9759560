#!/usr/bin/env bash
# Install and start what gpudock needs on a Debian machine, as root. Idempotent.
#   scripts/setup.sh            Docker Engine, debootstrap, the Python venv, the base image
#   scripts/setup.sh --tests    the same plus PostgreSQL and the OpenSSH client for the suite
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[ "${1:-}" = "--tests" ] && with_tests=1

packages=(docker.io debootstrap ca-certificates curl openssh-client)  # ssh, ssh-keygen: the demo's key
[ $with_tests = 1 ] && packages+=(postgresql openssh-client rsync)  # SSH gateway tests: rsync
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

if ! docker info >/dev/null 2>&1; then
    echo "==> starting dockerd"
    (setsid dockerd >/var/log/gpudock-dockerd.log 2>&1 &)
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
