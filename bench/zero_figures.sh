#!/usr/bin/env bash
# Issue 19's figures for ZeRO stages 1, 2 and 3 against DDP: throughput at 2 ranks (alternated
# ROUNDS times so machine noise hits both alike), bytes sent a step a rank, and peak
# memory per rank by category at 1, 2 and 4 ranks, for gpt-tiny and gpt-small (25.4M
# parameters). One JSON line per run; summarise with bench/zero_figures_summary.py.
#   bench/zero_figures.sh [ROUNDS] > zero.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
braid=build/release/braid
lscpu | grep -E "Model name" | sed 's/  */ /g' >&2
json() { sed -n 's/^\[rank 0\] {/{/p'; }
for spec in "gpt-tiny 16 10" "gpt-small 4 3"; do
  set -- $spec
  model=$1 batch=$2 steps=$3
  # Throughput, DDP and stage 1 alternated.
  for r in $(seq "$rounds"); do
    for z in 0 1 2 3; do
      $braid bench train --model "$model" --strategy ddp -n 2 --batch "$batch" --steps "$steps" \
        --warmup 2 --repeats 3 --zero-stage $z --json 2>&1 | json
    done
  done
  # Memory per rank at 1 and 4 ranks (2 ranks: the runs above).
  $braid bench train --model "$model" --batch "$batch" --steps 2 --warmup 1 --repeats 1 --json \
    2>/dev/null
  for z in 0 1 2 3; do
    $braid bench train --model "$model" --strategy ddp -n 4 --batch "$batch" --steps 2 \
      --warmup 1 --repeats 1 --zero-stage $z --json 2>&1 | json
  done
done
