#!/usr/bin/env bash
# A real Slurm on this host, for tests and for trying `srun` by hand: one node (this machine,
# its CPUs) in one partition, slurmctld and slurmd started from a private config, so nothing
# under /etc/slurm is touched and a system Slurm, if any, is left alone. Needs root and
# Debian's slurm-wlm (apt-get install slurm-wlm; scripts/setup.sh --test-packages does).
#
#   scripts/slurm-local.sh up     write the config, start the daemons, wait for the node idle
#   scripts/slurm-local.sh env    print `export SLURM_CONF=...` for srun, sinfo, scontrol
#   scripts/slurm-local.sh down   stop the daemons this script started, remove its files
#
# Then: eval "$(scripts/slurm-local.sh env)"; srun -n 2 build/release/braid train ...
#
# Authentication is Slurm's auth/none and cred/none plugins (Debian's 22.05 ships them):
# fine for one host where only root runs jobs, and no munged to start. BRAID_SLURM_DIR
# (default /tmp/braid-slurm) holds config, state, logs and pid files; BRAID_SLURM_PORT
# (default 6817) is slurmctld's port and the next one is slurmd's.
set -euo pipefail
dir=${BRAID_SLURM_DIR:-/tmp/braid-slurm}
port=${BRAID_SLURM_PORT:-6817}
conf="$dir/slurm.conf"
node=braidnode
# slurmctld refuses to run unless SlurmctldHost names this host.
host=$(hostname -s)

die() { echo "slurm-local: $*" >&2; exit 2; }

# The pid in `pidfile` if it is still a daemon this script started (a reused pid is not).
our_pid() {
  local pid
  [ -f "$1" ] || return 0
  pid=$(cat "$1")
  if [[ $pid =~ ^[0-9]+$ ]] && grep -qF "$dir" "/proc/$pid/cmdline" 2>/dev/null; then echo "$pid"; fi
}

down() {
  local pids
  pids=$(our_pid "$dir/slurmd.pid"; our_pid "$dir/slurmctld.pid")
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null || true
    for _ in $(seq 100); do
      local alive=""
      for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
      [ -z "$alive" ] && break
      sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
  fi
  # Only what up made, so a BRAID_SLURM_DIR that holds other files keeps them.
  [ -d "$dir" ] || return 0
  rm -rf "$dir/state" "$dir/spool"
  rm -f "$conf" "$dir"/slurmctld.{pid,log} "$dir"/slurmd.{pid,log}
  rmdir "$dir" 2>/dev/null || true
}

write_conf() {
  local cpus
  # At least 2 CPUs, so `srun -n 2` runs on a 1-CPU machine too (config_overrides keeps
  # slurmd from draining a node that declares more than it has).
  cpus=$(nproc)
  ((cpus >= 2)) || cpus=2
  cat >"$conf" <<EOF
ClusterName=braid
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus State=UNKNOWN
PartitionName=braid Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

up() {
  [ "$(id -u)" -eq 0 ] || die "needs root (slurmd runs jobs as their user); run as root or skip"
  for b in slurmctld slurmd sinfo srun; do
    command -v "$b" >/dev/null || die "'$b' not found: apt-get install slurm-wlm (or scripts/setup.sh --test-packages)"
  done
  down
  mkdir -p "$dir/state" "$dir/spool"
  write_conf
  export SLURM_CONF="$conf"
  # -c: no state from an earlier run; -i: ignore state errors. Both daemonize.
  slurmctld -c -i -f "$conf" || die "slurmctld did not start: $(tail -5 "$dir/slurmctld.log" 2>/dev/null)"
  slurmd -f "$conf" -N "$node" || die "slurmd did not start: $(tail -5 "$dir/slurmd.log" 2>/dev/null)"
  local state="" deadline=$((SECONDS + 30))
  # A client retries an unreachable controller for minutes: each look is cut at 2 s.
  while ((SECONDS < deadline)); do
    state=$(timeout 2 sinfo -h -n "$node" -o %t 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2
  done
  if [ "$state" != idle ]; then
    echo "slurm-local: node '$node' is '${state:-unknown}', not idle, after 30 s" >&2
    tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 2>/dev/null || true
    down
    exit 1
  fi
  echo "slurm-local: up (node $node, $(nproc) CPUs, partition braid); eval \"\$($0 env)\" then srun -n 2 ..."
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) die "usage: slurm-local.sh up | env | down" ;;
esac
