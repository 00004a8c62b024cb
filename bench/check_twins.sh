#!/usr/bin/env bash
# Issue 32: every JSON model spec in bench/twin_specs has a PyTorch twin
# (bench/spec_twin.py) that loads braid's checkpoint with strict=True and evaluates to the
# same numbers. For each spec: braid trains it 200 steps (batch 64, one thread), `braid eval`
# scores the checkpoint, load_braid_checkpoint.py --spec scores the twin on the same data,
# and both are printed side by side. Image specs ([28, 28, 1]) train and test on
# Fashion-MNIST (all 10000 test images); a byte-level language model spec (input_dtype i32,
# input [128]) on the fortunes corpus (--dataset text, scored on the validation split, loss
# only). Exits 1 if any run or strict load fails, or the losses differ by more than 1e-3
# relative, or the accuracies by more than 0.001 (10 images).
#   bench/check_twins.sh [OUTDIR [SPEC...]]   (run directories and logs, a fresh /tmp dir by
#   default; the specs to check, all of bench/twin_specs by default, graph.json included: a
#   graph spec with a residual add and a concat)
# Adam at 3e-3 rather than braid's default SGD 0.01, under which some of these small
# models are still at chance after 200 steps and the accuracy would compare nothing.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
braid=${BRAID:-build/release/braid}
py=/usr/bin/python3
out=${1:-$(mktemp -d /tmp/braid-twins.XXXXXX)}
shift || true
specs=("$@")
((${#specs[@]})) || specs=(bench/twin_specs/*.json)
mkdir -p "$out"
lscpu | grep -E "Model name" | sed 's/  */ /g'
echo "runs and logs in $out"
printf '%-10s %11s %11s %9s %9s %9s  %s\n' spec braid_loss torch_loss rel_diff braid_acc \
  torch_acc result
status=0
fail() {  # MESSAGE LOG, for the spec $name
  printf '%-10s %s (log: %s)\n' "$name" "$1" "$2"
  status=1
}
for spec in "${specs[@]}"; do
  name=$(basename "$spec" .json)
  dir="$out/$name"
  # A language model (token ids in, input_dtype i32) trains on the fortunes corpus.
  lm=$("$py" -c 'import json, sys
print(json.load(open(sys.argv[1])).get("input_dtype") == "i32")' "$spec")
  data=()
  [[ "$lm" == True ]] && data=(--dataset text --seq-len 128)
  if ! "$braid" train --model "$spec" "${data[@]}" --steps 200 --batch 64 --threads 1 \
    --optimizer adam --lr 0.003 --out "$dir" --overwrite >"$dir.train.log" 2>&1; then
    fail "FAIL: braid train" "$dir.train.log"
    continue
  fi
  if ! "$braid" eval --checkpoint "$dir" >"$dir.eval.log" 2>&1; then
    fail "FAIL: braid eval" "$dir.eval.log"
    continue
  fi
  if ! "$py" bench/load_braid_checkpoint.py "$dir" --spec "$spec" >"$dir.torch.log" 2>&1; then
    fail "FAIL: the twin did not load (strict=True) or run" "$dir.torch.log"
    continue
  fi
  # braid: "test loss 0.4611 accuracy 0.8376 over 10000 samples" or
  #        "validation loss 2.8773 (4.1510 bits/byte) over ..."
  # twin:  "fashion-mnist test: accuracy 83.76% (8376/10000), loss 0.461071" or
  #        "fortunes val: loss 2.877301 over 2013 windows"
  b_loss=$(sed -n 's/^\(test\|validation\) loss \([^ ]*\) .*/\2/p' "$dir.eval.log")
  b_acc=$(sed -n 's/^test loss [^ ]* accuracy \([^ ]*\) .*/\1/p' "$dir.eval.log")
  t_loss=$(sed -n 's/^\(fashion-mnist test: .*, \|fortunes val: \)loss \([^ ]*\).*/\2/p' \
    "$dir.torch.log")
  t_acc=$(sed -n 's/^fashion-mnist test: accuracy [^ ]* (\([0-9]*\/[0-9]*\)).*/\1/p' \
    "$dir.torch.log")
  if [[ -z "$b_loss" || -z "$t_loss" || ("$lm" != True && (-z "$b_acc" || -z "$t_acc")) ]]; then
    fail "FAIL: no loss/accuracy line from braid eval or the twin" "$dir.eval.log, $dir.torch.log"
    continue
  fi
  line=$(awk -v bl="$b_loss" -v ba="${b_acc:--}" -v tl="$t_loss" -v tc="${t_acc:--}" \
    -v n="$name" 'BEGIN {
      d = bl - tl; if (d < 0) d = -d; rel = d / (bl < 0 ? -bl : bl); ok = rel <= 1e-3
      if (ba == "-") { bas = "-"; tas = "-" } else {
        split(tc, f, "/"); ta = f[1] / f[2]; da = ba - ta; if (da < 0) da = -da
        ok = ok && da <= 0.001 + 1e-9; bas = sprintf("%.4f", ba); tas = sprintf("%.4f", ta) }
      printf "%-10s %11s %11s %9.2e %9s %9s  %s\n", n, bl, tl, rel, bas, tas, ok ? "ok" : "FAIL" }')
  echo "$line"
  [[ "$line" == *" ok" ]] || status=1
done
if [[ $status -eq 0 ]]; then echo "all twins match"; else echo "twin check FAILED"; fi
exit $status
