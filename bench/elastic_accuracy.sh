#!/usr/bin/env bash
# Does an elastic job that loses ranks still learn as well? The cnn for EPOCHS epochs on 4
# ranks (global batch 128), once undisturbed and once with KILLS kill -9s of random ranks
# at random moments (each restarted), same seed; prints both test accuracies and the gap.
#   bench/elastic_accuracy.sh [EPOCHS] [KILLS]     (defaults 3, 10)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-3}
kills=${2:-10}
braid=build/release/braid
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(train --model cnn --batch 32 --epochs "$epochs" --seed 7)

$braid launch -n 4 -- $braid "${args[@]}" --out "$out/plain" > "$out/plain.log" 2>&1

$braid launch -n 4 --min-ranks 1 --max-restarts "$kills" -- $braid "${args[@]}" \
  --out "$out/killed" > "$out/killed.log" 2>&1 &
job=$!
# Kill only while it trains with every rank, spread over the run.
sleep 3
for ((k = 0; k < kills; k++)); do
  sleep "$(awk -v s=$RANDOM 'BEGIN { srand(s); print 1 + 2 * rand() }')"
  mapfile -t ranks < <(pgrep -P "$job" -f " train " || true)
  ((${#ranks[@]} == 0)) && break
  kill -9 "${ranks[RANDOM % ${#ranks[@]}]}" 2>/dev/null || true
done
wait "$job"

python3 - "$out" "$epochs" "$kills" <<'PY'
import json, sys
out, epochs, kills = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def last_eval(run):
    evals = [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl") if '"eval"' in l]
    return evals[-1]["accuracy"]
def count(run, text):
    return open(f"{out}/{run}.log").read().count(text)
plain, killed = last_eval("plain"), last_eval("killed")
print(json.dumps({"epochs": epochs, "kills_asked": kills,
                  "kills_recovered": count("killed", "restarting it"),
                  "rounds": count("killed", "braid launch: elastic round"),
                  "accuracy_undisturbed": round(plain, 4), "accuracy_with_kills": round(killed, 4),
                  "gap_points": round(100 * (plain - killed), 2)}))
PY
