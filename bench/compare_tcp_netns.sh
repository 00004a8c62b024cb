#!/usr/bin/env bash
# braid's TCP transport between two network namespaces against the raw TCP stream between
# the same two namespaces (bench/tcp_stream.py), alternating, ROUNDS times; then the same
# with each host's egress capped by tc tbf at RATE. Needs root and iproute2.
#
#   bench/compare_tcp_netns.sh [ROUNDS=3] [RATE=1gbit] [SIZE=64M]
#
# Prints one JSON line per measurement and a summary: medians, braid busbw / raw stream
# (one direction), braid busbw / raw duplex (streams both ways at once, per direction: the
# traffic an allreduce makes), and braid busbw / the rate. For 2 ranks busbw = bytes / time:
# what each rank sent.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
rate=${2:-1gbit}
size=${3:-64M}
braid=${BRAID:-build/release/braid}
export BRAID_NETNS_PREFIX=${BRAID_NETNS_PREFIX:-braidbench}
net=scripts/netns-cluster.sh
secret=$(openssl rand -hex 32)
trap '$net down' EXIT

raw_stream() {  # GB/s from host 0 to host 1
  $net exec 1 python3 bench/tcp_stream.py serve --bind 10.77.0.2 --port 5201 > /tmp/raw.$$ &
  local server=$!
  sleep 0.5
  $net exec 0 python3 bench/tcp_stream.py send --host 10.77.0.2 --port 5201 --seconds 3 >/dev/null
  wait $server
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["GBps"])' /tmp/raw.$$
}

raw_duplex() {  # GB/s per direction with streams both ways at once (what allreduce does)
  $net exec 1 python3 bench/tcp_stream.py serve --bind 10.77.0.2 --port 5201 > /tmp/rawa.$$ &
  local a=$!
  $net exec 0 python3 bench/tcp_stream.py serve --bind 10.77.0.1 --port 5202 > /tmp/rawb.$$ &
  local b=$!
  sleep 0.5
  $net exec 0 python3 bench/tcp_stream.py send --host 10.77.0.2 --port 5201 --seconds 3 >/dev/null &
  $net exec 1 python3 bench/tcp_stream.py send --host 10.77.0.1 --port 5202 --seconds 3 >/dev/null
  wait
  python3 -c 'import json,sys; print(sum(json.load(open(f))["GBps"] for f in sys.argv[1:]) / 2)' \
    /tmp/rawa.$$ /tmp/rawb.$$
}

braid_allreduce() {  # busbw GB/s of a 2-rank allreduce of $size over TCP, host 0 and 1
  local r
  for r in 1 0; do
    $net exec $r env BRAID_RANK=$r BRAID_WORLD_SIZE=2 BRAID_LOCAL_RANK=0 \
      BRAID_LOCAL_WORLD_SIZE=1 BRAID_STORE_ADDR=10.77.0.1:29400 BRAID_SECRET="$secret" \
      BRAID_TIMEOUT_S=120 BRAID_TRANSPORT=tcp \
      "$braid" bench allreduce --min "$size" --max "$size" --seconds 2 --json > /tmp/braid$r.$$ &
  done
  wait
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["busbw_GBps"])' \
    /tmp/braid0.$$
}

median() { python3 -c 'import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"; }

summary() {  # label raw... -- duplex... -- braid...
  local label=$1; shift
  local raw=() dup=()
  while [ "$1" != -- ]; do raw+=("$1"); shift; done; shift
  while [ "$1" != -- ]; do dup+=("$1"); shift; done; shift
  python3 -c "import sys; r,d,b=map(float,sys.argv[1:]); print(f'$label: raw stream {r:.3f} GB/s, raw duplex {d:.3f} GB/s per direction, braid busbw {b:.3f} GB/s; braid/raw {b/r:.2f}, braid/duplex {b/d:.2f}')" \
    "$(median "${raw[@]}")" "$(median "${dup[@]}")" "$(median "$@")"
}

for limit in "" "$rate"; do
  $net up 2 ${limit:+--rate "$limit"} >/dev/null
  raws=() duplexes=() braids=()
  for ((i = 0; i < rounds; i++)); do
    raws+=("$(raw_stream)")
    duplexes+=("$(raw_duplex)")
    braids+=("$(braid_allreduce)")
    echo "{\"limit\":\"${limit:-none}\",\"round\":$i,\"raw_GBps\":${raws[-1]},\"raw_duplex_GBps\":${duplexes[-1]},\"braid_busbw_GBps\":${braids[-1]}}"
  done
  summary "limit ${limit:-none}, $size, median of $rounds" "${raws[@]}" -- "${duplexes[@]}" -- "${braids[@]}"
  if [ -n "$limit" ]; then
    python3 -c "import sys; b=float(sys.argv[1]); bits=float(sys.argv[2].rstrip('gbit'))*1e9/8/1e9; print(f'braid busbw / limit ({sys.argv[2]} = {bits:.3f} GB/s): {b/bits:.2f}')" \
      "$(median "${braids[@]}")" "$limit"
  fi
  $net down
done
