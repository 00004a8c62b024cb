#!/usr/bin/env bash
# Issue 18's accuracy figures: the same recipe at fp32, bf16 and fp16 (loss scaling), one
# process, one thread: the cnn's test accuracy after EPOCHS epochs of Fashion-MNIST, and
# gpt-tiny's validation loss after 600 steps of the fortunes corpus. Prints one line each.
#   bench/precision_accuracy.sh [EPOCHS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-2}
out=${2:-/tmp/braid-precision-accuracy}
mkdir -p "$out"
lscpu | grep -E "Model name" | sed 's/  */ /g'
last_eval() { python3 -c "
import json,sys
r=[json.loads(l) for l in open(sys.argv[1]+'/metrics.jsonl') if '\"eval\"' in l][-1]
print(' '.join(f'{k} {r[k]:.4f}' for k in ('loss','accuracy') if k in r))" "$1"; }
for p in fp32 bf16 fp16; do
  build/release/braid train --model cnn --epochs "$epochs" --precision $p --threads 1 \
    --log-every 1000 --out "$out/cnn-$p" --overwrite > "$out/cnn-$p.log" 2>&1
  echo "cnn $p: $(last_eval "$out/cnn-$p")"
done
for p in fp32 bf16 fp16; do
  build/release/braid train --model gpt-tiny --max-steps 600 --precision $p --threads 1 \
    --log-every 1000 --out "$out/gpt-$p" --overwrite > "$out/gpt-$p.log" 2>&1
  echo "gpt-tiny $p: $(last_eval "$out/gpt-$p")"
done
