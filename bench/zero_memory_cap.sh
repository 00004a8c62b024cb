#!/usr/bin/env bash
# Issue 19's memory-cap figure: `braid train` of gpt-small on 4 local ranks (3 steps, an
# evaluation and a checkpoint), the whole job in a cgroup (v1 memory controller) whose
# limit is CAP_MB per rank x 4; DDP and each ZeRO stage tried under it. First, with no limit, each configuration's peak (the cgroup's
# max_usage_in_bytes / 4) is printed; then the capped runs say "fits" or how they failed
# (the kernel kills a rank that passes the limit, and `braid launch` names it).
#   sudo bench/zero_memory_cap.sh [CAP_MB_PER_RANK] [MODEL] [BATCH]
set -euo pipefail
cd "$(dirname "$0")/.."
cap_mb=${1:-0}
model=${2:-gpt-small}
batch=${3:-2}
braid=build/release/braid
root=/sys/fs/cgroup/memory
[ -d "$root" ] || { echo "needs the cgroup v1 memory controller at $root" >&2; exit 1; }
group=$root/braid-cap-$$
mkdir "$group"
trap 'rmdir "$group" 2>/dev/null || true' EXIT
run() {  # stage, limit in bytes (0: none) -> prints the peak per rank in MB, or the failure
  local stage=$1 limit=$2
  echo 0 > "$group/memory.max_usage_in_bytes" 2>/dev/null || true
  if [ "$limit" -gt 0 ]; then echo "$limit" > "$group/memory.limit_in_bytes"; else echo -1 > "$group/memory.limit_in_bytes"; fi
  local out rc=0
  local dir
  dir=$(mktemp -d)
  out=$(sh -c "echo \$\$ > $group/cgroup.procs; exec $braid launch -n 4 -- $braid train \
    --model $model --strategy ddp --zero-stage $stage --batch $batch --max-steps 3 \
    --eval-batches 2 --threads 1 --out $dir/run" 2>&1) || rc=$?
  rm -rf "$dir"
  local peak=$(( $(cat "$group/memory.max_usage_in_bytes") / 4 / 1048576 ))
  if [ $rc -eq 0 ]; then
    echo "zero_stage $stage: fits, peak $peak MiB a rank"
  else
    echo "zero_stage $stage: failed (exit $rc): $(echo "$out" | grep -m1 -E 'killed|exited|error' || echo "$out" | tail -1)"
  fi
}
lscpu | grep -E "Model name" | sed 's/  */ /g'
echo "model $model, batch $batch a rank, 4 ranks"
if [ "$cap_mb" -eq 0 ]; then
  for stage in 0 1 2 3; do run $stage 0; done
else
  echo "cap: $cap_mb MiB a rank ($(( cap_mb * 4 )) MiB for the job)"
  for stage in 0 1 2 3; do run $stage $(( cap_mb * 4 * 1048576 )); done
fi
