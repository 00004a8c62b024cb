#!/usr/bin/env bash
# Issue 30's throughput figures: gradient compression between two "hosts" (two network
# namespaces from scripts/netns-cluster.sh, one rank in each, each host's egress capped by
# tc tbf at RATE), braid's codecs against braid's uncompressed DDP and against PyTorch 1.13
# DDP over gloo in the same namespaces with PyTorch's own communication hooks.
#
#   [RATES="1gbit 100mbit"] [MODELS="mlp cnn gpt-tiny gpt-small"] [ROUNDS=3] \
#   [CODECS="none bf16 fp16 int8 sign topk powersgd onebit_adam"] [HOOKS="none fp16 powersgd"] \
#   [OUT=/tmp/compression_figures.jsonl] bench/compression_figures.sh
#   python3 bench/compression_figures_summary.py "$OUT"
#
# Per rate: the namespaces come up with that cap; per model, ROUNDS rounds, each one braid
# run per codec (`braid bench train --strategy ddp --synthetic --codec C`) and one PyTorch
# run per hook (bench/pytorch_compression_bench.py --hook H), interleaved (braid none,
# PyTorch none, braid bf16, braid fp16, PyTorch fp16, ..., braid powersgd, PyTorch
# powersgd, ...) and the order rotated by one each round, so drift hits all alike. Every
# measurement is one JSON line, on stdout and appended to $OUT (the first line describes the
# machine and the settings); a run that fails or times out is a line with "status": "error",
# its exit code and the last lines its ranks wrote to stderr, and the sweep goes on.
#
# Same settings on both sides: batch per rank, --warmup untimed steps, --repeats rounds of
# --steps steps (a round is its slowest rank's; the median round is reported), one thread per
# rank (THREADS), powersgd at rank PSGD_RANK (4) from step START_ITER (2, inside the warm-up,
# for braid's powersgd and onebit_adam and PyTorch's PowerSGDState.start_powerSGD_iter),
# min_compression_rate 2, error feedback and warm start on; topk at TOPK_RATIO (0.01).
# PyTorch's powerSGD_hook aborts inside gloo when DDP has more than one bucket (two buckets'
# hooks issue their allreduces in different orders on the two ranks: "op.preamble.length <=
# op.nbytes"), so its runs use --single-bucket: bucket_cap_mb above the model's gradient
# size, and DDP's 1 MB first bucket after the rebuild raised to the same (the JSON says
# "single_bucket": true). PyTorch's none and fp16 keep DDP's default 25 MB buckets; braid keeps
# its default 25 MiB buckets for every codec.
#
# Steps per model (STEPS_<model> overrides "batch steps warmup repeats"): chosen so that one
# measurement of gpt-small at 100 Mbit/s stays short. gpt-small's fp32 gradients are
# 101.7 MB, which a 2-rank ring sends once per step per rank: ~8 s at 100 Mbit/s
# (12.5 MB/s), so gpt-small times 3 rounds of 1 step after 2 warm-up steps (~45 s for
# PyTorch none). braid runs with --no-split (no separate timing of communication alone and
# compute alone), so its runs take as long as PyTorch's.
#   mlp        batch 128, 5 steps x 3 rounds after 3 warm-up   (7.5 MB of gradients)
#   cnn        batch 128, 5 steps x 3 rounds after 3 warm-up   (0.9 MB)
#   gpt-tiny   batch 32,  3 steps x 3 rounds after 3 warm-up   (3.4 MB)
#   gpt-small  batch 4,   1 step  x 3 rounds after 2 warm-up   (101.7 MB)
# samples/s counts every rank's batch (sequences of 128 tokens for the GPTs: braid's
# tokens_per_s / 128 is added as samples_per_s).
#
# Per-run timeout: RUN_TIMEOUT seconds if set, else per model (mlp/cnn 180, gpt-tiny 300,
# gpt-small 420), doubled at or below 100 Mbit/s. Needs root, iproute2, build/release/braid
# and /usr/bin/python3 with torch (python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a rates <<< "${RATES:-1gbit 100mbit}"
read -r -a models <<< "${MODELS:-mlp cnn gpt-tiny gpt-small}"
read -r -a codecs <<< "${CODECS:-none bf16 fp16 int8 sign topk powersgd onebit_adam}"
read -r -a hooks <<< "${HOOKS:-none fp16 powersgd}"
rounds=${ROUNDS:-3}
out=${OUT:-/tmp/compression_figures.jsonl}
threads=${THREADS:-1}
psgd_rank=${PSGD_RANK:-4}
start_iter=${START_ITER:-2}
topk_ratio=${TOPK_RATIO:-0.01}
braid=${BRAID:-build/release/braid}
pytorch=${PYTORCH_PYTHON:-/usr/bin/python3}
export BRAID_NETNS_PREFIX=${BRAID_NETNS_PREFIX:-bcfig}
net=scripts/netns-cluster.sh
port=$((29600 + RANDOM % 2000))  # a fresh store port per run (no TIME_WAIT clashes)

[ "$(id -u)" -eq 0 ] || { echo "compression_figures: needs root (network namespaces)" >&2; exit 2; }
[ -x "$braid" ] || { echo "compression_figures: no $braid (build it first)" >&2; exit 2; }
"$pytorch" -c 'import torch' 2>/dev/null ||
  { echo "compression_figures: $pytorch has no torch (apt-get install python3-torch)" >&2; exit 2; }

model_settings() {  # batch steps warmup repeats
  local var="STEPS_${1//-/_}"
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  case "$1" in
    mlp | cnn) echo "128 5 3 3" ;;
    gpt-tiny) echo "32 3 3 3" ;;
    gpt-small) echo "4 1 2 3" ;;
    *) echo "128 5 3 3" ;;
  esac
}

rate_mbit() {  # 1gbit -> 1000, 100mbit -> 100
  [[ $1 =~ ^([0-9]+)([kmg]?)bit$ ]] || { echo 0; return; }
  case ${BASH_REMATCH[2]} in
    g) echo $((BASH_REMATCH[1] * 1000)) ;; m) echo "${BASH_REMATCH[1]}" ;; *) echo 1 ;;
  esac
}

run_timeout() {  # model rate
  if [ -n "${RUN_TIMEOUT:-}" ]; then echo "$RUN_TIMEOUT"; return; fi
  local t
  case "$1" in gpt-small) t=420 ;; gpt-tiny) t=300 ;; *) t=180 ;; esac
  (($(rate_mbit "$2") <= 100)) && t=$((t * 2))
  echo "$t"
}

tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  $net down 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One rank of a braid run, in host r: exec'd, so the background job's pid is timeout's.
braid_rank() {  # r port timeout model batch steps warmup repeats codec
  local r=$1 p=$2 t=$3 model=$4 batch=$5 steps=$6 warmup=$7 repeats=$8 codec=$9
  exec timeout -k 10 "$t" $net exec "$r" env BRAID_RANK="$r" BRAID_WORLD_SIZE=2 \
    BRAID_LOCAL_RANK=0 BRAID_LOCAL_WORLD_SIZE=1 BRAID_STORE_ADDR="10.77.0.1:$p" \
    BRAID_SECRET="$secret" BRAID_TIMEOUT_S="$t" BRAID_TRANSPORT=tcp \
    "$braid" bench train --model "$model" --strategy ddp --synthetic --json --no-split \
    --batch "$batch" --steps "$steps" --warmup "$warmup" --repeats "$repeats" \
    --threads "$threads" --codec "$codec" --powersgd-rank "$psgd_rank" \
    --topk-ratio "$topk_ratio" --start-iter "$start_iter"
}

pytorch_rank() {  # r port timeout model batch steps warmup repeats hook
  local r=$1 p=$2 t=$3 model=$4 batch=$5 steps=$6 warmup=$7 repeats=$8 hook=$9
  local extra=()
  [ "$hook" = powersgd ] && extra=(--single-bucket)
  exec timeout -k 10 "$t" $net exec "$r" env RANK="$r" WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 \
    MASTER_PORT="$p" GLOO_SOCKET_IFNAME=eth0 "$pytorch" bench/pytorch_compression_bench.py \
    --model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" \
    --repeats "$repeats" --threads "$threads" --hook "$hook" --powersgd-rank "$psgd_rank" \
    --start-iter "$start_iter" --timeout-s "$t" "${extra[@]}"
}

# Runs both ranks of one measurement; when one fails, the other gets 15 s to notice and is
# then stopped. Sets run_rc (0, or the first failing rank's code; 124 = timed out).
run_pair() {  # fn timeout args...
  local fn=$1 t=$2; shift 2
  local r p=$port
  port=$((port + 1))
  pids=()
  for r in 1 0; do
    "$fn" "$r" "$p" "$t" "$@" > "$tmp/rank$r.out" 2> "$tmp/rank$r.err" &
    pids[r]=$!
  done
  local -a rc=()
  local failed_at=0
  run_rc=0
  while ((${#rc[@]} < 2)); do
    for r in 0 1; do
      [ -n "${rc[r]:-}" ] && continue
      if ! kill -0 "${pids[r]}" 2>/dev/null; then
        wait "${pids[r]}" && rc[r]=0 || rc[r]=$?
        if ((rc[r] != 0)) && ((run_rc == 0)); then run_rc=${rc[r]}; failed_at=$SECONDS; fi
      fi
    done
    if ((run_rc != 0 && ${#rc[@]} < 2 && SECONDS - failed_at > 15)); then
      for r in 0 1; do [ -n "${rc[r]:-}" ] || kill -TERM "${pids[r]}" 2>/dev/null || true; done
    fi
    ((${#rc[@]} < 2)) && sleep 0.2
  done
  pids=()
}

# One JSON line from rank 0's stdout (or an error line), tagged with the run's coordinates.
record() {  # rate round model impl variant
  local line
  line=$(python3 - "$tmp" "$run_rc" "$@" <<'EOF'
import json, sys
tmp, rc, rate, rnd, model, impl, variant = sys.argv[1:]
tag = {"rate": rate, "round": int(rnd), "model": model, "impl": impl,
       ("codec" if impl == "braid" else "hook"): variant}
row = None
try:
    for l in open(f"{tmp}/rank0.out"):
        l = l.strip()
        if l.startswith("[rank 0] "):
            l = l[len("[rank 0] "):]
        if l.startswith("{"):
            row = json.loads(l)
except (OSError, ValueError):
    row = None
if int(rc) == 0 and row is not None:
    if "samples_per_s" not in row and "tokens_per_s" in row:
        row["samples_per_s"] = row["tokens_per_s"] / 128  # sequences of 128 tokens
    out = {**tag, "status": "ok", **row, **tag}
else:
    def tail(r):
        try:
            lines = [x.rstrip() for x in open(f"{tmp}/rank{r}.err") if x.strip()]
        except OSError:
            return []
        return lines[-3:]
    err = "timed out" if int(rc) in (124, 137) else f"exit code {rc}"
    if int(rc) == 0:
        err = "no JSON line from rank 0"
    out = {**tag, "status": "error", "rc": int(rc), "error": err,
           "rank0_stderr": tail(0), "rank1_stderr": tail(1)}
print(json.dumps(out))
EOF
)
  echo "$line" | tee -a "$out"
}

secret=$(openssl rand -hex 32)
: > "$out"
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "CPU: $cpu ($(nproc) cores)" >&2
python3 - "$cpu" "$(nproc)" "$("$pytorch" -c 'import torch; print(torch.__version__)')" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$rounds" "$threads" \
  "$psgd_rank" "$start_iter" "$topk_ratio" "${rates[*]}" "${models[*]}" "${codecs[*]}" \
  "${hooks[*]}" <<'EOF' | tee -a "$out"
import json, sys, time
(cpu, cores, torch, commit, rounds, threads, psgd, start, topk,
 rates, models, codecs, hooks) = sys.argv[1:]
print(json.dumps({"type": "machine", "cpu": cpu, "cores": int(cores), "torch": torch,
                  "braid_commit": commit, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "rounds": int(rounds), "threads_per_rank": int(threads),
                  "powersgd_rank": int(psgd), "start_iter": int(start), "topk_ratio": float(topk),
                  "rates": rates.split(), "models": models.split(), "codecs": codecs.split(),
                  "hooks": hooks.split(), "pytorch_powersgd_single_bucket": True}))
EOF

# The interleaved order of one round: braid none, PyTorch none, braid bf16, braid fp16,
# PyTorch fp16, ..., braid powersgd, PyTorch powersgd, the rest of braid's codecs.
order=()
for c in "${codecs[@]}"; do
  order+=("braid:$c")
  for h in "${hooks[@]}"; do [ "$h" = "$c" ] && order+=("pytorch:$h"); done
done
for h in "${hooks[@]}"; do
  [[ " ${order[*]} " == *" pytorch:$h "* ]] || order+=("pytorch:$h")
done

for rate in "${rates[@]}"; do
  $net up 2 --rate "$rate" >&2
  for model in "${models[@]}"; do
    read -r batch steps warmup repeats <<< "$(model_settings "$model")"
    t=$(run_timeout "$model" "$rate")
    for ((i = 0; i < rounds; i++)); do
      n=${#order[@]}
      for ((j = 0; j < n; j++)); do
        item=${order[(i + j) % n]}
        impl=${item%%:*} variant=${item#*:}
        echo "[$rate $model round $((i + 1))/$rounds] $impl $variant" >&2
        if [ "$impl" = braid ]; then
          run_pair braid_rank "$t" "$model" "$batch" "$steps" "$warmup" "$repeats" "$variant"
        else
          run_pair pytorch_rank "$t" "$model" "$batch" "$steps" "$warmup" "$repeats" "$variant"
        fi
        record "$rate" "$i" "$model" "$impl" "$variant"
      done
    done
  done
  $net down
done
echo "results: $out  (summary: python3 bench/compression_figures_summary.py $out)" >&2
