#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost, for testing `snakemake --profile profiles/slurm`.
#
#   scripts/slurm_local.sh start    # install slurm-wlm + munge if missing (Debian), configure, start
#   scripts/slurm_local.sh stop     # stop everything start started
#   scripts/slurm_local.sh env      # print `export SLURM_CONF=...` for this cluster
#
# State lives in $CAPGAP_SLURM_DIR (default /tmp/capgap-slurm): slurm.conf, spool, state, logs,
# pid files; /etc/slurm/slurm.conf is linked to it when absent (job steps read that path) and
# unlinked by stop. The node is this machine (all its CPUs, its memory minus 1 GiB); the controller and
# the node daemon listen on 127.0.0.1 only. There is no accounting database (slurmdbd): jobs are
# followed with squeue, which keeps finished jobs for MinJobAge seconds -- the status command the
# SLURM executor plugin documents for clusters without accounting (--slurm-status-command squeue).
# Needs root (the daemons run as root; apt-get installs the packages).
set -euo pipefail
DIR=${CAPGAP_SLURM_DIR:-/tmp/capgap-slurm}
# slurm.conf takes a path up to the first space (and '#' starts a comment there): refuse such a folder
case $DIR in
  *[[:space:]\#]*) echo "slurm_local.sh: CAPGAP_SLURM_DIR '$DIR' holds a space or '#', which slurm.conf cannot hold in a path; choose another folder" >&2; exit 2 ;;
esac
CONF=$DIR/slurm.conf
NODE=$(hostname -s)

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "slurm_local.sh: slurm-wlm and munge are not installed and this is not root (apt-get needs root)" >&2
    exit 2
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >"$DIR/apt.log" 2>&1 \
    || { apt-get update -q >>"$DIR/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >>"$DIR/apt.log" 2>&1; } \
    || { echo "slurm_local.sh: apt-get install slurm-wlm munge failed, see $DIR/apt.log" >&2; exit 2; }
}

write_conf() {
  local mem
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
  cat >"$CONF" <<EOF
ClusterName=capgap-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${CAPGAP_SLURMCTLD_PORT:-6817}
SlurmdPort=${CAPGAP_SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=3600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=capgap Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  mkdir -p "$DIR"
  if [ -f "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
    stop  # a cluster from an earlier start: begin afresh
  fi
  install
  write_conf
  export SLURM_CONF=$CONF
  # job steps (srun inside a batch job) read the default path, whatever the environment says
  if [ ! -e /etc/slurm/slurm.conf ]; then
    mkdir -p /etc/slurm
    ln -s "$CONF" /etc/slurm/slurm.conf
    echo linked >"$DIR/conf.linked"  # stop removes only a link this script made
  fi
  mkdir -p /run/munge
  if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    munged --force
    echo started >"$DIR/munged.started"  # stop only a munged this script started
    for _ in $(seq 1 20); do
      munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
      sleep 0.5
    done
  fi
  slurmctld
  slurmd
  for _ in $(seq 1 60); do
    if sinfo -h -o "%T" 2>/dev/null | grep -qE "^idle"; then
      echo "slurm_local.sh: node $NODE idle; export SLURM_CONF=$CONF"
      return
    fi
    sleep 1
  done
  echo "slurm_local.sh: the node did not become idle in 60 s; logs in $DIR/log" >&2
  stop
  exit 1
}

stop() {
  for d in slurmd slurmctld; do
    if [ -f "$DIR/$d.pid" ]; then
      kill "$(cat "$DIR/$d.pid")" 2>/dev/null || true
      rm -f "$DIR/$d.pid"
    fi
  done
  if [ -f "$DIR/conf.linked" ] && [ -L /etc/slurm/slurm.conf ]; then
    rm -f /etc/slurm/slurm.conf "$DIR/conf.linked"
  fi
  if [ -f "$DIR/munged.started" ] && [ -f /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    rm -f "$DIR/munged.started"
  fi
  echo "slurm_local.sh: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 64 ;;
esac
