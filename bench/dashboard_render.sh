#!/usr/bin/env bash
# Issue 31's dashboard figure: the first render of a job whose curves hold N points each
# (100,000 by default), in headless Chromium, measured in the page: from navigation to the
# first drawing that holds every record (the page's console line). A real braid serve
# on a fresh database; the job's train records posted through the API in batches, as a
# worker sends them. Prints one line per round.
#   bench/dashboard_render.sh [POINTS=100000] [ROUNDS=3]    (BRAID=build/release/braid)
set -euo pipefail
cd "$(dirname "$0")/.."
points=${1:-100000}
rounds=${2:-3}
braid=${BRAID:-build/release/braid}
dir=$(mktemp -d)
trap 'kill $server 2>/dev/null || true' EXIT
lscpu | grep -E "Model name" | sed 's/  */ /g'
"$braid" serve --data-dir "$dir/data" --port 0 > "$dir/serve.log" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q "listening on" "$dir/serve.log" && break; sleep 0.1; done
url=$(sed -n 's/.*listening on \(http:[^ ]*\) .*/\1/p' "$dir/serve.log")
token=$(cat "$dir/data/admin-token")
auth="Authorization: Bearer $token"
id=$(curl -s -H "$auth" -d '{"config": {"model": "mlp"}, "ranks": 1, "name": "render"}' \
  "$url/api/v1/jobs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
python3 - "$points" > "$dir/batches" <<'EOF'
import json, math, sys
n = int(sys.argv[1])
for lo in range(0, n, 10000):
    events = [{"event": "train", "step": s + 1, "loss": 2 * math.exp(-s / n * 5) + 0.1,
               "samples/s": 10000 + s % 500, "step_ms": 30, "comm_exposed_ms": 2,
               "data_wait_ms": 0.1, "rank": 0}
              for s in range(lo, min(n, lo + 10000))]
    print(json.dumps({"rank": 0, "events": events}))
EOF
while read -r batch; do
  printf '%s' "$batch" > "$dir/batch.json"
  curl -s -o /dev/null -H "$auth" -H "Content-Type: application/json" \
    --data-binary "@$dir/batch.json" "$url/api/v1/jobs/$id/events"
done < "$dir/batches"
# Real time (a virtual time budget would hide the work): Chromium runs the page for 60 s
# and its console line says when the first drawing with every record was done.
for r in $(seq "$rounds"); do
  timeout 60 chromium --headless=new --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$dir/profile" --enable-logging=stderr --window-size=1400,1000 \
    "$url/#token=$token&job=$id" > "$dir/chromium.log" 2>&1 || true
  echo "round $r: $(grep -o 'braid dashboard: first render [0-9]* ms, [0-9]* points[^"]*' \
    "$dir/chromium.log" | head -1 | sed 's/braid dashboard: //')"
done
