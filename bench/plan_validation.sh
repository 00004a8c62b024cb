#!/usr/bin/env bash
# Issue 33's validation: `braid plan`'s predicted step time against `braid bench train`'s
# measured one, for every strategy that runs here: 1-4 ranks over shared memory, and two
# hosts (network namespaces, scripts/netns-cluster.sh, one rank each, TCP) whose links are
# capped by tc at 100 Mbit/s, 1 Gbit/s and 10 Gbit/s. Each link is measured first (a
# 2-rank ring allreduce, `braid plan measure-cluster`), the model profiled once, then each
# configuration measured and predicted. One JSON line per configuration and round;
# summarise with bench/plan_validation_summary.py. Needs root for the namespaces.
#   bench/plan_validation.sh [ROUNDS] > plan_validation.jsonl
# MODEL (default gpt-small) and BATCH (samples a rank under DDP, a pipeline's or tensor
# group's batch; default 8) choose the workload; RATES the capped links ("" for shared
# memory only); ONLY, an extended regex, keeps the configurations whose line matches.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
model=${MODEL:-gpt-small}
batch=${BATCH:-8}
rates=${RATES-"100mbit 1gbit 10gbit"}
only=${ONLY:-.}
braid=$PWD/build/release/braid
net=scripts/netns-cluster.sh
export BRAID_NETNS_PREFIX=${BRAID_NETNS_PREFIX:-bpv}
work=$(mktemp -d)
trap '$net down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
lscpu | grep -E "Model name" | sed 's/  */ /g' >&2
cpu=$(lscpu | sed -n 's/^Model name: *//p')
bench_flags=(--model "$model" --synthetic --json --no-split --threads 1)
profile=$work/profile.json

# A configuration as bench train's flags and as plan's description of it.
# name|ranks|bench flags|plan description|global batch
configs_shm=(
  "single|1|--strategy single --batch $batch --steps 2 --warmup 1 --repeats 3|single|$batch"
  "ddp|2|--strategy ddp --batch $batch --steps 2 --warmup 1 --repeats 3|ddp|$((2 * batch))"
  "zero1|2|--strategy ddp --zero-stage 1 --batch $batch --steps 2 --warmup 1 --repeats 3|zero1|$((2 * batch))"
  "zero2|2|--strategy ddp --zero-stage 2 --batch $batch --steps 2 --warmup 1 --repeats 3|zero2|$((2 * batch))"
  "zero3|2|--strategy ddp --zero-stage 3 --batch $batch --steps 2 --warmup 1 --repeats 3|zero3|$((2 * batch))"
  "pipeline gpipe|2|--strategy pipeline --micro-batches 4 --schedule gpipe --batch $batch --steps 2 --warmup 1 --repeats 3|pipeline P=2 M=4 gpipe|$batch"
  "pipeline 1f1b|2|--strategy pipeline --micro-batches 8 --schedule 1f1b --batch $batch --steps 2 --warmup 1 --repeats 3|pipeline P=2 M=8 1f1b|$batch"
  "pipeline interleaved|2|--strategy pipeline --micro-batches 4 --schedule interleaved --chunks 2 --batch $batch --steps 2 --warmup 1 --repeats 3|pipeline P=2 M=4 interleaved v=2|$batch"
  "tensor|2|--strategy tensor --batch $batch --steps 2 --warmup 1 --repeats 3|tensor T=2|$batch"
  "ddp|4|--strategy ddp --batch $batch --steps 2 --warmup 1 --repeats 3|ddp|$((4 * batch))"
  "pipeline 1f1b|4|--strategy pipeline --micro-batches 8 --schedule 1f1b --batch $batch --steps 2 --warmup 1 --repeats 3|pipeline P=4 M=8 1f1b|$batch"
)
configs_net=(
  "ddp|2|--strategy ddp --batch $batch --steps 1 --warmup 1 --repeats 3|ddp|$((2 * batch))"
  "zero1|2|--strategy ddp --zero-stage 1 --batch $batch --steps 1 --warmup 1 --repeats 3|zero1|$((2 * batch))"
  "zero3|2|--strategy ddp --zero-stage 3 --batch $batch --steps 1 --warmup 1 --repeats 3|zero3|$((2 * batch))"
  "pipeline 1f1b|2|--strategy pipeline --micro-batches 8 --schedule 1f1b --batch $batch --steps 1 --warmup 1 --repeats 3|pipeline P=2 M=8 1f1b|$batch"
  "tensor|2|--strategy tensor --batch $batch --steps 1 --warmup 1 --repeats 3|tensor T=2|$batch"
)

# predict CLUSTER RANKS GLOBAL_BATCH DESCRIPTION: the predicted step in ms. (The reader
# takes every line: a reader that stopped early would stop plan with SIGPIPE.)
predict() {
  "$braid" plan --model "$model" --cluster "$1" --ranks "$2" --global-batch "$3" \
    --profile "$profile" --json --all 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys
want=sys.argv[1]
found=[json.loads(l)["step_s"] for l in sys.stdin if json.loads(l)["config"]==want]
if not found: sys.exit("plan: no configuration " + want + " for this model; skipped")
print(found[0]*1e3)' "$4"
}

# emit LINK NAME RANKS MEASURED_JSON PREDICTED_MS DESCRIPTION
emit() {
  /usr/bin/python3 -c 'import json,sys
m=json.loads(sys.argv[4])
print(json.dumps({"link":sys.argv[1],"config":sys.argv[2],"ranks":int(sys.argv[3]),
  "plan_config":sys.argv[6],"measured_ms":m["step_ms"],"predicted_ms":float(sys.argv[5]),
  "model":m["model"],"cpu":sys.argv[7]}))' "$@" "$cpu"
}

# Profile once (its measurement is the plan's input, not part of what is validated).
"$braid" plan measure-cluster --out "$work/shm.json" --ranks-per-host 2 >/dev/null
"$braid" plan --model "$model" --cluster "$work/shm.json" --global-batch "$batch" --ranks 1 \
  --profile "$profile" >/dev/null
"$braid" plan measure-cluster --out "$work/shm4.json" --ranks-per-host 4 >/dev/null
echo "links: shm $(cat "$work/shm.json" | tr -d '\n ')" >&2

run_shm() {
  local spec=$1 name ranks flags desc global cluster out
  IFS='|' read -r name ranks flags desc global <<<"$spec"
  cluster=$work/shm.json
  [ "$ranks" = 4 ] && cluster=$work/shm4.json
  predict "$cluster" "$ranks" "$global" "$desc" >/dev/null || return 0  # not this model's
  # shellcheck disable=SC2086
  if [ "$ranks" = 1 ]; then
    out=$("$braid" bench train "${bench_flags[@]}" $flags 2>/dev/null | grep '^{')
  else
    out=$("$braid" bench train "${bench_flags[@]}" -n "$ranks" --transport shm $flags 2>&1 |
      sed -n 's/^\[rank 0\] {/{/p')
  fi
  local predicted
  predicted=$(predict "$cluster" "$ranks" "$global" "$desc") || return 0  # not this model's
  emit shm "$name" "$ranks" "$out" "$predicted" "$desc"
}

run_net() {
  local rate=$1 spec=$2 name ranks flags desc global secret logs predicted
  IFS='|' read -r name ranks flags desc global <<<"$spec"
  predicted=$(predict "$work/net_$rate.json" 2 "$global" "$desc") || return 0
  secret=$(openssl rand -hex 32)
  logs=$(mktemp -d -p "$work")
  for r in 0 1; do
    # shellcheck disable=SC2086
    $net exec "$r" env BRAID_RANK=$r BRAID_WORLD_SIZE=2 BRAID_LOCAL_RANK=0 \
      BRAID_LOCAL_WORLD_SIZE=1 BRAID_STORE_ADDR=10.77.0.1:29413 BRAID_SECRET="$secret" \
      BRAID_TIMEOUT_S=300 BRAID_TRANSPORT=tcp "$braid" bench train "${bench_flags[@]}" $flags \
      >"$logs/rank$r.log" 2>&1 &
  done
  wait
  emit "$rate" "$name" 2 "$(grep '^{' "$logs/rank0.log" | head -1)" "$predicted" "$desc"
}

measure_net() {
  local rate=$1 secret
  secret=$(openssl rand -hex 32)
  for r in 0 1; do
    $net exec "$r" env BRAID_RANK=$r BRAID_WORLD_SIZE=2 BRAID_LOCAL_RANK=0 \
      BRAID_LOCAL_WORLD_SIZE=1 BRAID_STORE_ADDR=10.77.0.1:29414 BRAID_SECRET="$secret" \
      BRAID_TIMEOUT_S=300 BRAID_TRANSPORT=tcp "$braid" bench allreduce --algorithm ring \
      --min 4K --max 64M --factor 16384 --seconds 1 --json >"$work/inter_$r.jsonl" 2>&1 &
  done
  wait
  "$braid" plan measure-cluster --out "$work/net_$rate.json" --hosts 2 --ranks-per-host 1 \
    --cores-per-host 1 --inter "$work/inter_0.jsonl" >/dev/null
  echo "links: $rate $(tr -d '\n ' <"$work/net_$rate.json")" >&2
}

for round in $(seq "$rounds"); do
  for spec in "${configs_shm[@]}"; do
    if grep -qE "$only" <<<"$spec"; then run_shm "$spec"; fi
  done
  for rate in $rates; do
    $net up 2 --rate "$rate" >/dev/null
    [ "$round" = 1 ] && measure_net "$rate"
    for spec in "${configs_net[@]}"; do
      if grep -qE "$only" <<<"$spec"; then run_net "$rate" "$spec"; fi
    done
    $net down >/dev/null
  done
done
