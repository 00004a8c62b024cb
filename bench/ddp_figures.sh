#!/usr/bin/env bash
# Issue 16's throughput figures, braid against PyTorch 1.13 DDP (gloo) on this machine, in
# alternated rounds (braid, PyTorch, braid, ...) so drift hits both alike:
#   2-rank DDP samples/s for mlp, cnn (batch 128 per rank) and gpt-tiny (batch 32 per rank);
#   one process (the scaling baseline) for mlp and cnn;
#   braid's deterministic mode beside its default.
# One JSON line per measurement into $OUT (default /tmp/ddp_figures.jsonl); summarise with
#   python3 bench/ddp_figures_summary.py $OUT
# Usage: bench/ddp_figures.sh [ROUNDS] (default 3). Needs build/release/braid and
# /usr/bin/python3 with torch (python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=${OUT:-/tmp/ddp_figures.jsonl}
: > "$out"
: > "$out.err"  # every run's stderr, to see why one gave no line
braid=build/release/braid
lscpu | grep -E "Model name" >&2
for ((r = 0; r < rounds; r++)); do
  for model in mlp cnn gpt-tiny; do
    batch=128; [ "$model" = gpt-tiny ] && batch=32
    "$braid" bench train --model "$model" --batch "$batch" --strategy ddp -n 2 --synthetic \
      --json --steps 20 --repeats 5 2>>"$out.err" | sed -n 's/^\[rank 0\] //p' | grep '^{' >> "$out"
    /usr/bin/python3 bench/pytorch_ddp_bench.py --ranks 2 --models "$model" --batch "$batch" \
      2>>"$out.err" | grep '^{' >> "$out"
  done
  for model in mlp cnn; do
    "$braid" bench train --model "$model" --batch 128 --synthetic --json --steps 20 \
      --repeats 5 | grep '^{' >> "$out"
    /usr/bin/python3 bench/pytorch_ddp_bench.py --ranks 1 --models "$model" --batch 128 \
      2>>"$out.err" | grep '^{' >> "$out"
    "$braid" bench train --model "$model" --batch 128 --strategy ddp -n 2 --synthetic \
      --deterministic --json --steps 20 --repeats 5 2>>"$out.err" |
      sed -n 's/^\[rank 0\] //p' | grep '^{' >> "$out"
  done
  echo "round $((r + 1)) of $rounds done" >&2
done
