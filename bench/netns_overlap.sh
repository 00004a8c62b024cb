#!/usr/bin/env bash
# DDP across two "hosts": two network namespaces (scripts/netns-cluster.sh) whose links are
# capped by tc tbf (default 1gbit), one rank in each, TCP between them. Prints rank 0's
# `braid bench train --strategy ddp` table: the step, compute alone, communication alone,
# and the step over their sum (overlap hides what it can of the communication).
#   bench/netns_overlap.sh [RATE] [MODEL] [extra bench train flags...]   (needs root)
# e.g. bench/netns_overlap.sh 1gbit mlp --json
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
model=${2:-mlp}
shift 2 || shift $#
export BRAID_NETNS_PREFIX=${BRAID_NETNS_PREFIX:-bov}
net=scripts/netns-cluster.sh
trap '$net down' EXIT
$net up 2 --rate "$rate" >/dev/null
secret=$(openssl rand -hex 32)
logs=$(mktemp -d)
for r in 0 1; do
  $net exec "$r" env BRAID_RANK=$r BRAID_WORLD_SIZE=2 BRAID_LOCAL_RANK=0 \
    BRAID_LOCAL_WORLD_SIZE=1 BRAID_STORE_ADDR=10.77.0.1:29411 BRAID_SECRET="$secret" \
    BRAID_TIMEOUT_S=120 BRAID_TRANSPORT=tcp build/release/braid bench train --model "$model" \
    --strategy ddp --synthetic "$@" > "$logs/rank$r.log" 2>&1 &
done
fail=0
for j in $(jobs -p); do wait "$j" || fail=1; done
cat "$logs/rank0.log"
[ $fail = 0 ] || { echo "rank 1:"; cat "$logs/rank1.log"; }
rm -rf "$logs"
exit $fail
