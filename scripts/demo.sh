#!/usr/bin/env bash
# Set up everything and start a demo: a server with a simulated fleet, a demo
# user and a running instance. Run as root on Debian. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

data=${GPUDOCK_DEMO_DIR:-/var/lib/gpudock-demo}
port=${GPUDOCK_DEMO_PORT:-8080}
ssh_port=${GPUDOCK_DEMO_SSH_PORT:-2222}
export GPUDOCK_URL="http://127.0.0.1:$port"
mkdir -p "$data" && chmod 700 "$data"

if ! curl -fsS "$GPUDOCK_URL/readyz" >/dev/null 2>&1; then
    echo "==> starting gpudock server on $GPUDOCK_URL (log: $data/server.log)"
    (setsid .venv/bin/gpudock server --data-dir "$data" --port "$port" --ssh-port "$ssh_port" \
        --simulate 2x8xA100-80GB,1x4xRTX4090-24GB >>"$data/server.log" 2>&1 &)
    for _ in $(seq 1 120); do curl -fsS "$GPUDOCK_URL/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
fi
curl -fsS "$GPUDOCK_URL/readyz" >/dev/null || { tail -30 "$data/server.log"; exit 1; }

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

# SSH: the demo user's key (yours if ~/.ssh has one, else one made for the demo).
key=""
for candidate in ~/.ssh/id_ed25519 ~/.ssh/id_ecdsa ~/.ssh/id_rsa; do
    [ -f "$candidate.pub" ] && { key=$candidate; break; }
done
identity=""
if [ -z "$key" ]; then
    key=$data/demo_ed25519
    [ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -C demo@gpudock -f "$key"
    identity="-i $key "
fi
fingerprint=$(ssh-keygen -lf "$key.pub" | cut -d' ' -f2)
if ! .venv/bin/gpudock keys list --json | grep -q "\"$fingerprint\""; then
    .venv/bin/gpudock keys add "$key.pub" --name demo-key || echo "(could not register $key.pub)"
fi
# shellcheck disable=SC2086  # $identity is empty or "-i PATH"
if .venv/bin/gpudock ssh demo $identity-- true </dev/null >/dev/null 2>&1; then
    host_key=$(curl -fsS -H "Authorization: Bearer $GPUDOCK_TOKEN" "$GPUDOCK_URL/api/v1/ssh" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["host_key_fingerprint"])')
    ssh_lines="  .venv/bin/gpudock ssh demo $identity            # a shell in the instance, host key pinned
  ssh -p $ssh_port ${identity}demo@127.0.0.1     # the same with plain ssh (host key $host_key)"
else
    ssh_lines="  (the SSH gateway did not answer on port $ssh_port; see $data/server.log)"
fi
if [ ! -s "$data/demo.password" ]; then
    python3 -c 'import secrets; print(secrets.token_urlsafe(12))' > "$data/demo.password"
    chmod 600 "$data/demo.password"
    GPUDOCK_TOKEN=$(cat "$data/admin.token") GPUDOCK_NEW_PASSWORD=$(cat "$data/demo.password") \
        .venv/bin/gpudock users set-password demo >/dev/null
fi
cluster=$(docker inspect --format '{{ index .Config.Labels "gpudock.cluster" }}' \
    "$(docker ps -q --filter "label=gpudock.instance=$id" | head -1)")
cat <<MSG

gpudock is running at $GPUDOCK_URL, with a demo user and a running instance "demo".
  export GPUDOCK_URL=$GPUDOCK_URL GPUDOCK_TOKEN=\$(cat $data/demo.token)
  .venv/bin/gpudock instances list
$ssh_lines
  docker exec -it gpudock-$cluster-$id bash      # fallback: straight through Docker
Console: $GPUDOCK_URL/ — user demo, password in $data/demo.password
The admin token is in $data/admin.token. Stop the server with: pkill -f 'gpudock server'
MSG
