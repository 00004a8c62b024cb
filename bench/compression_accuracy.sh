#!/usr/bin/env bash
# Issue 30's accuracy figures: the same recipe under DDP on 2 local ranks with each gradient
# codec: the cnn's test accuracy after EPOCHS epochs of Fashion-MNIST, and gpt-tiny's
# validation loss after STEPS steps of the fortunes corpus. One line each; goals: every
# codec within 0.5 points of uncompressed (cnn), within 0.05 of its validation loss (gpt).
#   [MODELS="cnn gpt-tiny"] [CNN_OPTIMIZER=adam|sgd] [POWERSGD_RANK=4] [START_ITER=10] \
#     [BRAID=build/release/braid] bench/compression_accuracy.sh [EPOCHS=5] [STEPS=600] [OUT_DIR] [CODECS...]
# BRAID: the binary (a copy keeps a long sweep safe from rebuilds).
# CNN_OPTIMIZER=sgd trains the cnn with momentum SGD (lr 0.05, momentum 0.9, cosine), the
# optimizer sign and top-k compression were made for, in place of its Adam recipe: Adam
# divides each float by its own gradient history, which a sign or a top-k selection
# replaces with the codec's (every float of a sign block has the same magnitude).
# topk runs with optimizer momentum 0 (the codec keeps the momentum: DGC), onebit_adam with
# its optimizer; powersgd and onebit_adam start compressing at step 10.
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-5}
steps=${2:-600}
out=${3:-/tmp/braid-compression-accuracy}
shift 3 || shift $#
codecs=("$@")
((${#codecs[@]})) || codecs=(none bf16 fp16 int8 sign topk powersgd adam onebit_adam)
mkdir -p "$out"
lscpu | grep -E "Model name" | sed 's/  */ /g'
last_eval() { python3 -c "
import json,sys
r=[json.loads(l) for l in open(sys.argv[1]+'/metrics.jsonl') if '\"eval\"' in l][-1]
print(' '.join(f'{k} {r[k]:.4f}' for k in ('loss','accuracy') if k in r))" "$1"; }
# Recipes per codec: topk warms up over the first epoch (DGC's warm-up) with its own momentum;
# onebit_adam is Adam at lr 1e-3 (the cnn recipe's SGD rate would throw Adam off) frozen
# after the first epoch, so its row is compared with the `adam` row (codec none, Adam).
braid=${BRAID:-build/release/braid}
cnn_optimizer=${CNN_OPTIMIZER:-adam}
powersgd_rank=${POWERSGD_RANK:-4}
start_iter=${START_ITER:-10}
cnn_recipe() {  # the optimizer flags of the cnn's recipe
  [ "$cnn_optimizer" = sgd ] &&
    echo "--optimizer.name sgd --optimizer.lr 0.05 --optimizer.momentum ${1:-0.9}"
  return 0
}
codec_flags() {  # the flags a codec needs beside --compression.codec
  case "$1" in
    powersgd) echo "$(cnn_recipe) --compression.powersgd-rank $powersgd_rank" ;;
    topk) echo "$(cnn_recipe 0 || true) --compression.topk-warmup-steps 234" \
      "$([ "$cnn_optimizer" = sgd ] || echo --optimizer.momentum 0)" ;;
    onebit_adam) echo "--optimizer.name onebit_adam --optimizer.lr 0.001 --compression.freeze-step 234" ;;
    adam) echo "--optimizer.name adam --optimizer.lr 0.001" ;;
    *) cnn_recipe ;;
  esac
}
codec_name() { [ "$1" = adam ] && echo none || echo "$1"; }
models=${MODELS:-cnn gpt-tiny}  # MODELS=gpt-tiny: the language model only
for c in "${codecs[@]}"; do
  [[ " $models " == *" cnn "* ]] || break
  # shellcheck disable=SC2046
  "$braid" launch -n 2 -- "$braid" train --model cnn --epochs "$epochs" \
    --threads 1 --compression.codec "$(codec_name "$c")" --compression.start-iter "$start_iter" \
    $(codec_flags "$c") \
    --log-every 1000 --out "$out/cnn-$c" --overwrite > "$out/cnn-$c.log" 2>&1 ||
    { echo "cnn $c: failed, see $out/cnn-$c.log"; continue; }
  echo "cnn $c: $(last_eval "$out/cnn-$c")"
done
for c in "${codecs[@]}"; do
  [[ " $models " == *" gpt-tiny "* ]] || break
  flags=$(codec_flags "$c")
  # gpt-tiny's recipe is adamw: top-k without DGC's momentum (Adam keeps its own moments);
  # onebit_adam frozen after 100 of the 600 steps. `adam` is the recipe itself here.
  [ "$c" = topk ] && flags="--compression.topk-momentum 0 --compression.topk-warmup-steps 100"
  [ "$c" = onebit_adam ] && flags="--compression.freeze-step 100"
  [ "$c" = adam ] && continue
  [ "$c" = powersgd ] && flags="--compression.powersgd-rank $powersgd_rank"
  opt=""
  [ "$c" = onebit_adam ] && opt="--optimizer.name onebit_adam"
  # shellcheck disable=SC2086
  "$braid" launch -n 2 -- "$braid" train --model gpt-tiny \
    --epochs 100 --max-steps "$steps" --threads 1 --compression.codec "$c" \
    --compression.start-iter "$start_iter" \
    $flags $opt --log-every 1000 --out "$out/gpt-$c" --overwrite > "$out/gpt-$c.log" 2>&1 ||
    { echo "gpt-tiny $c: failed, see $out/gpt-$c.log"; continue; }
  echo "gpt-tiny $c: $(last_eval "$out/gpt-$c")"
done
