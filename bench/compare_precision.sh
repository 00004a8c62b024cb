#!/usr/bin/env bash
# Issue 18's speed figures: braid and PyTorch (one thread each) at fp32 and bf16 (braid's
# precision bf16; PyTorch's torch.autocast on CPU), alternated ROUNDS times so machine noise
# hits all alike. One JSON line per run; summarise with bench/compare_precision_summary.py.
#   bench/compare_precision.sh [ROUNDS] > runs.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
lscpu | grep -E "Model name" | sed 's/  */ /g' >&2
lscpu | grep -o -E 'avx512_bf16|avx512f |avx2' | sort -u | tr '\n' ' ' >&2; echo >&2
for r in $(seq "$rounds"); do
  for spec in "mlp 128 40" "cnn 128 30" "gpt-tiny 32 10"; do
    set -- $spec
    for p in fp32 bf16; do
      build/release/braid bench train --model "$1" --batch "$2" --steps "$3" --warmup 3 \
        --precision $p --json
      /usr/bin/python3 bench/pytorch_train_bench.py --model "$1" --batch "$2" --steps "$3" \
        --warmup 3 --precision $p --json
    done
  done
done
