#!/usr/bin/env bash
# A cluster of K "hosts" on this machine: K network namespaces, each with one veth link into
# a bridge that lives in its own namespace, so tests and benchmarks cross a real network
# stack (TCP over veth) without touching the host's interfaces. Needs root (CAP_NET_ADMIN).
#
#   scripts/netns-cluster.sh up K [--rate 1gbit]   create hosts 0..K-1 (10.77.0.1 .. 10.77.0.K);
#                                                  --rate caps each host's egress with tc tbf
#   scripts/netns-cluster.sh exec I CMD ARGS...    run CMD inside host I
#   scripts/netns-cluster.sh addr I                print host I's address
#   scripts/netns-cluster.sh cut I                 take host I's link down (a cut cable)
#   scripts/netns-cluster.sh mend I                bring it back
#   scripts/netns-cluster.sh down                  remove everything this script created
#
# BRAID_NETNS_PREFIX (default "braidh") names the namespaces, so concurrent users do not
# collide.
set -euo pipefail
prefix=${BRAID_NETNS_PREFIX:-braidh}
bridge_ns="${prefix}-net"
subnet=10.77.0

die() { echo "netns-cluster: $*" >&2; exit 2; }
host_ns() { echo "${prefix}$1"; }
addr() { echo "${subnet}.$(($1 + 1))"; }

down() {
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}([0-9]+|-net)$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
}

# ~1 ms of traffic at RATE (tc units: kbit, mbit, gbit, or bit), at least 64 kbit.
burst_for() {
  local rate=$1 n unit kbit
  [[ $rate =~ ^([0-9]+)([kmg]?)bit$ ]] || die "rate '$rate' must look like 100mbit or 1gbit"
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in g) kbit=$((n * 1000000)) ;; m) kbit=$((n * 1000)) ;; k) kbit=$n ;; *) kbit=$((n / 1000)) ;; esac
  echo "$((kbit / 1000 > 64 ? kbit / 1000 : 64))kbit"
}

up() {
  local k=$1 rate=$2
  [[ $k =~ ^[0-9]+$ ]] && ((k >= 1 && k <= 200)) || die "K must be 1..200, got '$k'"
  [ "$(id -u)" -eq 0 ] || die "needs root (ip netns); run as root or skip"
  command -v ip >/dev/null || die "needs iproute2 (apt-get install iproute2)"
  down
  ip netns add "$bridge_ns"
  ip -n "$bridge_ns" link add br0 type bridge
  ip -n "$bridge_ns" link set br0 up
  ip -n "$bridge_ns" link set lo up
  for ((i = 0; i < k; i++)); do
    local ns; ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "${prefix}v$i" netns "$ns" type veth peer name "p$i" netns "$bridge_ns"
    ip -n "$ns" link set "${prefix}v$i" name eth0
    ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$bridge_ns" link set "p$i" master br0
    ip -n "$bridge_ns" link set "p$i" up
    if [ -n "$rate" ]; then
      # Token bucket on the host's egress. The bucket holds ~1 ms at the rate: a smaller one
      # (below a 64 KiB TSO burst) keeps even a raw stream well under the rate.
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$(burst_for "$rate")" \
        latency 50ms
    fi
  done
  echo "netns-cluster: $k hosts up (${prefix}0..${prefix}$((k - 1)), $(addr 0)..$(addr $((k - 1)))${rate:+, egress $rate})"
}

cmd=${1:-}
shift || true
case "$cmd" in
  up)
    k=${1:-}; shift || true
    rate=""
    while (($#)); do
      case "$1" in
        --rate) rate=${2:?--rate needs a value like 1gbit}; shift 2 ;;
        *) die "unknown option '$1' (accepted: --rate RATE)" ;;
      esac
    done
    up "$k" "$rate" ;;
  down) down ;;
  exec)
    i=${1:?exec needs a host index}; shift
    exec ip netns exec "$(host_ns "$i")" "$@" ;;
  addr) addr "${1:?addr needs a host index}" ;;
  cut) ip -n "$(host_ns "${1:?}")" link set eth0 down ;;
  mend) ip -n "$(host_ns "${1:?}")" link set eth0 up ;;
  *) die "usage: netns-cluster.sh up K [--rate R] | exec I CMD... | addr I | cut I | mend I | down" ;;
esac
