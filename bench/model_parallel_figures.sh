#!/usr/bin/env bash
# Issue 20's figures on gpt-small (8 blocks, d_model 512): 1-rank throughput, 2-rank tensor
# parallelism's and the 2-stage pipeline's (1F1B, M = 8), alternated ROUNDS times so machine
# noise hits all alike; then the bubble per schedule at P = 2 and M = 4, 8, 16 against
# (P-1)/(M+P-1) (interleaved with 2 chunks a stage: ((P-1)/2)/(M+(P-1)/2)), with each
# stage's peak activation memory (GPipe keeps M micro-batches, 1F1B at most P). One JSON line per run; summarise with
# bench/model_parallel_figures_summary.py.
#   bench/model_parallel_figures.sh [ROUNDS] > model_parallel.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
batch=${BATCH:-16}
braid=build/release/braid
lscpu | grep -E "Model name" | sed 's/  */ /g' >&2
json() { sed -n 's/^\[rank 0\] {/{/p'; }
for r in $(seq "$rounds"); do
  $braid bench train --model gpt-small --batch "$batch" --steps 2 --warmup 1 --repeats 3 \
    --json 2>/dev/null
  $braid bench train --model gpt-small --strategy pipeline -n 2 --batch "$batch" \
    --micro-batches 8 --schedule 1f1b --steps 2 --warmup 2 --repeats 3 --json 2>&1 | json
  $braid bench train --model gpt-small --strategy tensor -n 2 --batch "$batch" --steps 2 \
    --warmup 1 --repeats 3 --json 2>&1 | json
  for schedule in gpipe 1f1b; do
    for m in 4 16; do
      $braid bench train --model gpt-small --strategy pipeline -n 2 --batch "$batch" \
        --micro-batches $m --schedule $schedule --steps 2 --warmup 2 --repeats 3 --json 2>&1 |
        json
    done
  done
  $braid bench train --model gpt-small --strategy pipeline -n 2 --batch "$batch" \
    --micro-batches 8 --schedule gpipe --steps 2 --warmup 2 --repeats 3 --json 2>&1 | json
  for m in 4 8 16; do
    $braid bench train --model gpt-small --strategy pipeline -n 2 --batch "$batch" \
      --micro-batches $m --schedule interleaved --chunks 2 --steps 2 --warmup 2 --repeats 3 \
      --json 2>&1 | json
  done
done
