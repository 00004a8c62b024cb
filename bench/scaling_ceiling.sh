#!/usr/bin/env bash
# What 2-rank scaling this machine allows, beside what DDP gets: in alternated rounds,
#   1 rank alone                              (braid bench train, one process)
#   2 ranks with no communication at all      (--strategy single -n 2: each trains alone,
#                                              the cores and memory shared: the ceiling)
#   2 ranks of DDP                            (--strategy ddp -n 2)
# and prints the medians, the ceiling's scaling and DDP's, per model. Any data-parallel
# implementation on this machine is bounded by the ceiling: when two ranks slow each other
# down with no communication at all, the cause is the hardware (shared memory bandwidth
# and caches), not the exchange.
#   bench/scaling_ceiling.sh [ROUNDS] [MODELS...]     (defaults 5, mlp cnn)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
models=("$@")
((${#models[@]})) || models=(mlp cnn)
braid=build/release/braid
out=$(mktemp)
lscpu | grep -E "Model name" >&2
bench() {  # tag, then flags
  local tag=$1
  shift
  "$braid" bench train --batch 128 --synthetic --json --steps 20 --repeats 5 "$@" 2>/dev/null |
    sed -n 's/^\[rank 0\] //p; /^{/p' | grep '^{' | sed "s/^{/{\"tag\":\"$tag\",/" >> "$out"
}
for ((r = 0; r < rounds; r++)); do
  for m in "${models[@]}"; do
    bench one --model "$m"
    bench alone2 --model "$m" --strategy single -n 2
    bench ddp2 --model "$m" --strategy ddp -n 2
  done
  echo "round $((r + 1)) of $rounds done" >&2
done
python3 - "$out" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows[(r["model"], r["tag"])].append(r["samples_per_s"])
print(f"{'model':6} {'1 rank':>8} {'2 alone':>8} {'ceiling':>8} {'2 ddp':>8} {'ddp scaling':>12} "
      f"{'of ceiling':>10}   (samples/s, medians of {len(next(iter(rows.values())))})")
for m in dict.fromkeys(k[0] for k in rows):
    one, alone, ddp = (statistics.median(rows[(m, t)]) for t in ("one", "alone2", "ddp2"))
    print(f"{m:6} {one:8.0f} {alone:8.0f} {alone / one:8.2f} {ddp:8.0f} {ddp / one:12.2f} "
          f"{ddp / alone:10.2f}")
PY
rm -f "$out"
