#!/usr/bin/env bash
# The whole test suite: installs and starts what it needs, then lint, types,
# layers and every test (real Docker, SQLite and PostgreSQL). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
GPUDOCK_TEST_POSTGRES_URL=$(scripts/postgres.sh)
export GPUDOCK_TEST_POSTGRES_URL

echo "==> lint, format, types, layers"
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
.venv/bin/mypy
.venv/bin/lint-imports

echo "==> tests"
# Two workers (pytest-xdist), each taking whole modules: most of the suite waits on
# Docker, servers and browsers rather than on a core, so two at once nearly halve
# the wall time on a 2-core machine. GPUDOCK_TEST_WORKERS=0 runs in one process.
workers=${GPUDOCK_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist loadfile); fi
.venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@"
