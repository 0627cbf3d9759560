#!/usr/bin/env bash
# Start the local PostgreSQL cluster from Debian's package for the test suite and
# print the URL the tests use (GPUDOCK_TEST_POSTGRES_URL). Idempotent.
set -euo pipefail
version=$(ls /etc/postgresql | sort -V | tail -1)
if ! pg_ctlcluster "$version" main status >/dev/null 2>&1; then
    pg_ctlcluster "$version" main start >&2
fi
for _ in $(seq 1 60); do
    su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
    sleep 0.5
done
su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'gpudock'\"" >/dev/null
# A throwaway test cluster: durability off makes CREATE/DROP DATABASE per test cheap.
if [ "$(su postgres -c "psql -qAtc 'show fsync'")" = "on" ]; then
    su postgres -c "psql -qc 'ALTER SYSTEM SET fsync = off' -c 'ALTER SYSTEM SET synchronous_commit = off' -c 'ALTER SYSTEM SET full_page_writes = off'" >/dev/null
    pg_ctlcluster "$version" main restart >&2
    for _ in $(seq 1 60); do
        su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
        sleep 0.5
    done
fi
echo "postgresql+psycopg://postgres:gpudock@127.0.0.1:5432/postgres"
