#!/usr/bin/env bash
# Issue 17's speed figures, Fashion-MNIST cnn at 128 a worker, 300 steps a worker, no
# evaluation (max_steps ends the run inside the first epoch), alternated ROUNDS times:
#   ddp       2-rank DDP (braid launch -n 2), samples/s from rank 0's metrics
#   ps_sync   1 server + 2 workers, sync
#   alone     1 server + 1 worker (its speed alone), and alone_slow the same worker slowed
#   straggler runs, 1 server + 2 workers with worker 1 slowed to about half speed (it sleeps a
#             step's compute time after each step): sync, sync with 1 backup worker, ssp
#             (s = 2) and async
# Throughput of a PS run = the sum of its workers' own rates, each (pushes - 1) x 128 samples
# between its first and last push (ps-server-0.json): the job's rate while every worker runs
# (with a fixed number of steps each, a fast async worker finishes first, and the job's wall
# time would measure the slow one alone). For ddp and ps_sync the chief's samples/s too. Then the exchange alone: braid bench ps beside braid bench allreduce at the
# cnn's size (0.9 MB) and at 25 MB.
#   bench/ps_throughput.sh [ROUNDS] [OUT_DIR] [PARTS]   (parts: main jitter exchange; all)
set -euo pipefail
cd "$(dirname "$0")/.."
braid=$PWD/${BRAID:-build/release/braid}
rounds=${1:-3}
out=${2:-/tmp/braid-ps-throughput}
parts=" ${3:-main jitter exchange} "
mkdir -p "$out"
lscpu | grep -E "Model name" | sed 's/  */ /g'
steps=300
common=(--model cnn --batch 128 --max-steps $steps --threads 1 --log-every 50 --overwrite)
ps_rate() {  # the sum of the workers' own rates: (pushes - 1) x 128 between first and last push
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
print(round(sum((n-1)*128/(b-a) for n,a,b in zip(d['worker_pushes'],d['first_push_seconds'],d['last_push_seconds']) if n>1)))" "$1/ps-server-0.json"
}
chief_rate() {  # mean samples/s of the chief's train records after the first
  python3 -c "
import json,sys
r=[json.loads(l) for l in open(sys.argv[1]+'/metrics.jsonl') if '\"train\"' in l][1:]
print(round(sum(x['samples/s'] for x in r)/len(r)))" "$1"
}
# Worker 1's sleep: one step's compute, measured from a worker alone.
"$braid" launch --servers 1 --workers 1 -- "$braid" train "${common[@]}" --strategy ps \
  --out "$out/calibrate" >/dev/null 2>&1
step_ms=$(python3 -c "
import json
r=[json.loads(l) for l in open('$out/calibrate/metrics.jsonl') if '\"train\"' in l][1:]
print(round(sum(x['step_ms'] for x in r)/len(r), 1))")
echo "one worker's step alone: $step_ms ms; the straggler sleeps that long after each step"
slow="if [ \"\$BRAID_ROLE_INDEX\" = 1 ]; then s=$step_ms; else s=0; fi;"
ps_job() {  # name, workers, extra flags...
  local name=$1 workers=$2
  shift 2
  "$braid" launch --servers 1 --workers "$workers" -- sh -c "$slow exec $braid train ${common[*]} --strategy ps --slow-step-ms \$s $* --out $out/$name" >"$out/$name.log" 2>&1
}
for r in $(seq "$rounds"); do
  [[ $parts == *" main "* ]] || break
  "$braid" launch -n 2 -- "$braid" train "${common[@]}" --out "$out/ddp" >"$out/ddp.log" 2>&1
  echo "round $r ddp            chief $(chief_rate "$out/ddp") samples/s"
  "$braid" launch --servers 1 --workers 2 -- "$braid" train "${common[@]}" --strategy ps \
    --out "$out/ps_sync" >"$out/ps_sync.log" 2>&1
  echo "round $r ps_sync        chief $(chief_rate "$out/ps_sync") samples/s, pushes $(ps_rate "$out/ps_sync")"
  "$braid" launch --servers 1 --workers 1 -- "$braid" train "${common[@]}" --strategy ps \
    --out "$out/alone" >"$out/alone.log" 2>&1
  "$braid" launch --servers 1 --workers 1 -- "$braid" train "${common[@]}" --strategy ps \
    --slow-step-ms "$step_ms" --out "$out/alone_slow" >"$out/alone_slow.log" 2>&1
  echo "round $r alone          $(ps_rate "$out/alone")  alone_slow $(ps_rate "$out/alone_slow")"
  ps_job straggle_sync 2 --ps.mode sync
  ps_job straggle_backup 2 --ps.mode sync --ps.backup-workers 1
  ps_job straggle_ssp 2 --ps.mode ssp --ps.staleness-bound 2
  ps_job straggle_async 2 --ps.mode async
  echo "round $r straggler      sync $(ps_rate "$out/straggle_sync")  sync+backup $(ps_rate "$out/straggle_backup")  ssp $(ps_rate "$out/straggle_ssp")  async $(ps_rate "$out/straggle_async")"
done
# Jitter: both workers sleep a uniform random [0, step) after each step (mean half a step),
# a slowness that comes and goes; their summed speed is twice one such worker's alone.
jitter_ms=$(python3 -c "print($step_ms / 2)")
jit="--slow-step-ms $jitter_ms --slow-step-random"
for r in $(seq "$rounds"); do
  [[ $parts == *" jitter "* ]] || break
  "$braid" launch --servers 1 --workers 1 -- "$braid" train "${common[@]}" --strategy ps $jit \
    --out "$out/alone_jitter" >"$out/alone_jitter.log" 2>&1
  for mode in sync ssp async; do
    "$braid" launch --servers 1 --workers 2 -- "$braid" train "${common[@]}" --strategy ps $jit \
      --ps.mode $mode --ps.staleness-bound 2 --out "$out/jitter_$mode" >"$out/jitter_$mode.log" 2>&1
  done
  echo "round $r jitter         alone x 2 $((2 * $(ps_rate "$out/alone_jitter")))  sync $(ps_rate "$out/jitter_sync")  ssp $(ps_rate "$out/jitter_ssp")  async $(ps_rate "$out/jitter_async")"
done
for floats in 225040 6553600; do
  [[ $parts == *" exchange "* ]] || break
  "$braid" launch --servers 1 --workers 2 -- "$braid" bench ps --floats $floats --iters 100 2>&1 | grep -v "braid I" | tail -1
  "$braid" bench allreduce -n 2 --min $((floats * 4)) --max $((floats * 4)) 2>&1 | tail -1
done
