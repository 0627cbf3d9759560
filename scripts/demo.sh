#!/usr/bin/env bash
# Set up everything and start a demo: a server with a simulated fleet, a demo
# user and a running instance. Run as root on Debian. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

data=${GPUDOCK_DEMO_DIR:-/var/lib/gpudock-demo}
port=${GPUDOCK_DEMO_PORT:-8080}
export GPUDOCK_URL="http://127.0.0.1:$port"
mkdir -p "$data" && chmod 700 "$data"

if ! curl -fsS "$GPUDOCK_URL/healthz" >/dev/null 2>&1; then
    echo "==> starting gpudock server on $GPUDOCK_URL (log: $data/server.log)"
    (setsid .venv/bin/gpudock server --data-dir "$data" --port "$port" \
        --simulate 2x8xA100-80GB,1x4xRTX4090-24GB >>"$data/server.log" 2>&1 &)
    for _ in $(seq 1 120); do curl -fsS "$GPUDOCK_URL/healthz" >/dev/null 2>&1 && break; sleep 0.5; done
fi
curl -fsS "$GPUDOCK_URL/healthz" >/dev/null || { tail -30 "$data/server.log"; exit 1; }

if [ ! -s "$data/demo.token" ]; then
    GPUDOCK_TOKEN=$(cat "$data/admin.token") .venv/bin/gpudock users create demo --json \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' > "$data/demo.token"
    chmod 600 "$data/demo.token"
fi
export GPUDOCK_TOKEN
GPUDOCK_TOKEN=$(cat "$data/demo.token")
if ! .venv/bin/gpudock instances show demo >/dev/null 2>&1; then
    .venv/bin/gpudock instances create --gpu A100-80GB --count 1 --name demo --wait
fi
.venv/bin/gpudock instances start demo --wait >/dev/null
.venv/bin/gpudock gpus
.venv/bin/gpudock instances show demo
id=$(.venv/bin/gpudock instances show demo --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
cluster=$(docker inspect --format '{{ index .Config.Labels "gpudock.cluster" }}' \
    "$(docker ps -q --filter "label=gpudock.instance=$id" | head -1)")
cat <<MSG

gpudock is running at $GPUDOCK_URL, with a demo user and a running instance "demo".
  export GPUDOCK_URL=$GPUDOCK_URL GPUDOCK_TOKEN=\$(cat $data/demo.token)
  .venv/bin/gpudock instances list
  docker exec -it gpudock-$cluster-$id bash      # a shell inside the instance
The admin token is in $data/admin.token. Stop the server with: pkill -f 'gpudock server'
MSG
